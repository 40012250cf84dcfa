#pragma once
// The scratch memory of compiled calls. Internal to codegen/.
//
// Each thread keeps growing, 64-byte-aligned buffers, reused across calls: one per
// nesting depth, since a call may run an eager function (an external step) that calls
// another compiled function on the same thread, which must not write over (or
// reallocate) the outer call's workspace.
#include <cstdint>

namespace reel::codegen {

// Holds this thread's workspace at the current depth for one call. A call that needs
// no workspace touches nothing; one that cannot nest another call (no external step)
// does not deepen the stack.
class WorkspaceLease {
 public:
  WorkspaceLease(int64_t bytes, bool may_nest) {
    if (bytes != 0) acquire(bytes, may_nest);
  }
  ~WorkspaceLease() {
    if (deepened_) release();
  }
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  void* data() const { return data_; }

 private:
  void acquire(int64_t bytes, bool may_nest);  // throws reel::Error if out of memory
  void release();
  bool deepened_ = false;  // this call deepened the stack
  void* data_ = nullptr;
};

}  // namespace reel::codegen
