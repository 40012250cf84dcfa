#pragma once
// reel::detail::thread_object<T>(): this thread's T, made on its first use, or null once
// the thread's objects are destroyed: a call from a destructor that runs after them (a
// static object destroyed at exit) must not touch a destroyed thread_local. For the
// per-thread scratch and memos of hot paths (a cached function's last hit, the tensors
// it keeps for numbers given again and again).
namespace reel::detail {

template <class T>
struct ThreadObject {
  static inline thread_local constinit bool live = false;  // between construction and destruction
  static inline thread_local constinit bool made = false;  // construction started on this thread
  struct Holder {
    T value{};
    Holder() { live = true; }
    ~Holder() { live = false; }
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;
  };
  static inline thread_local Holder holder;
};

template <class T>
T* thread_object() {
  using O = ThreadObject<T>;
  if (!O::live) {
    if (O::made) return nullptr;  // destroyed (or being made: a reentrant first use)
    O::made = true;
  }
  return &O::holder.value;
}

}  // namespace reel::detail
