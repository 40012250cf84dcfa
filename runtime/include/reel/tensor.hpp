#pragma once
// reel::Tensor: a dense, row-major, contiguous f32 or f64 array of any rank.
// Tensors share their storage when copied; every operation makes a new tensor, so a
// tensor's values never change once made.
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "reel/dtype.hpp"
#include "reel/error.hpp"
#include "reel/shape.hpp"

namespace reel {

// While a function is traced, tensors carry tags saying which tape variable they are
// in which active trace. The runtime only stores them; the tracer gives them meaning.
struct TraceTag {
  uint64_t trace_id;
  int32_t var;
};

namespace detail {
struct TrackNode;
// What a tensor carries for the tracer and for Tracker: its trace tags and its track
// node (see TrackNode below). A plain tensor has none (a null annex: one pointer). An
// annex is never changed once made: changing a tensor's tags or node gives it a new
// one, so copies of a tensor, on any thread, share it safely.
struct TensorAnnex {
  std::vector<TraceTag> tags;
  std::shared_ptr<TrackNode> track;
};
}  // namespace detail

class Tensor {
 public:
  Tensor() = default;  // undefined: no dtype, no storage
  Tensor(DType dtype, Shape shape);  // uninitialised storage
  // A tensor over memory it does not own, which must outlive it and every copy (used
  // to hand compiled code's buffers to an eager function).
  static Tensor borrow(const void* data, DType dtype, Shape shape);
  // A tensor over memory that `storage` keeps alive (an aliasing shared_ptr: its
  // pointer is the first element, its owner anything): NumPy arrays seen as tensors
  // without a copy. The memory must not change while the tensor is used.
  static Tensor adopt(std::shared_ptr<void> storage, DType dtype, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  int64_t numel() const { return numel_; }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel_) * dtype_size(dtype_); }

  // A row-major copy converted to double, and the one value of a tensor with
  // numel() == 1. Read while tracing for a cache (reel::jit, reel::simplegrad(f)), a
  // value becomes a guard on that exact value, so the cached code never runs on a
  // value it was not traced with.
  std::vector<double> values() const;
  double item() const;
  // The truth of a one-element tensor (nonzero, NaN included, is true), so that
  // `if (reel::sum(x) > 0.0)` is ordinary C++. While the tensor is traced, the branch
  // taken is recorded on the tape as a guard (see reel::guard): a tape holds one path,
  // and running it where the condition goes the other way is an error, not a silent
  // wrong branch.
  explicit operator bool() const;

  template <class T> const T* data() const { return static_cast<const T*>(storage_.get()); }
  template <class T> T* mutable_data() { return static_cast<T*>(storage_.get()); }
  const void* raw() const { return storage_.get(); }
  void* mutable_raw() { return storage_.get(); }
  // Whether this tensor is the only one holding its memory, and that memory is Reel's
  // own (not borrowed or adopted) and the tensor plain (not a param, not traced): then
  // nothing else can see its values, and a call that writes results into tensors the
  // caller kept (CompiledFunction::run, a cached derivative's `into`) may overwrite it
  // in place instead of allocating a new one.
  bool unshared() const { return unshared(1); }
  // The same where exactly `holders` tensors hold the memory, this one and holders - 1
  // others the caller accounts for (a result struct's copies of one of its own tensors).
  bool unshared(long holders) const;
  // Whether both hold the same memory through the same owner (copies of one tensor, or
  // views of it made by reshaped).
  bool same_storage(const Tensor& other) const {
    return !storage_.owner_before(other.storage_) && !other.storage_.owner_before(storage_);
  }

  // Same storage seen with another shape of equal numel. Not an operation: while
  // tracing, use reel::reshape, which is recorded on the tape.
  Tensor reshaped(Shape shape) const;

  std::span<const TraceTag> trace_tags() const {
    return annex_ ? std::span<const TraceTag>(annex_->tags) : std::span<const TraceTag>();
  }
  void add_trace_tag(TraceTag tag);
  void clear_trace_tags();

  // Tracker's tracked parameters (reel::param, reel::back; see reel/track.hpp). A
  // param's gradient accumulated by reel::back (zeros before the first), and clearing
  // it; both are a reel::Error for a tensor that is not a param. Copies of a param are
  // the same param. All of these may run on several threads at once (ParamNode below).
  Tensor grad() const;
  void zero_grad();
  bool is_param() const;
  // Writes `values` (the param's dtype and shape) into a param's own memory, which
  // every copy of the param shares, and records nothing: Tracker's W.data .= values,
  // for training updates (W.assign(W - lr * W.grad())). The param keeps its identity
  // and gradient; reel::back of a y computed before is then an error. A reel::Error
  // for a tensor that is not a param, other types, or while either is traced.
  Tensor& assign(const Tensor& values);
  // A param, or computed from one outside any trace: its operations are recorded
  // for reel::back. The node is the tracer's; the runtime only stores it.
  bool is_tracked() const { return annex_ && annex_->track; }
  const std::shared_ptr<detail::TrackNode>& track_node() const;
  void set_track_node(std::shared_ptr<detail::TrackNode> node);
  // Drops the trace tags and the track node: the same tensor, plain.
  void make_plain() { annex_.reset(); }

 private:
  std::shared_ptr<void> storage_;
  DType dtype_ = DType::f64;
  bool foreign_ = false;  // storage_ is borrowed or adopted memory, not Reel's own
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<const detail::TensorAnnex> annex_;  // tags and track node; null for a plain tensor
  double first_value() const;  // element 0 as a double, recording nothing
  void record_value_read(const char* op) const;  // a guard, while traced for a cache
  void set_annex(std::vector<TraceTag> tags, std::shared_ptr<detail::TrackNode> track);
};

// Creation.
Tensor tensor(const std::vector<double>& values);  // 1-D f64
Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f64);
Tensor scalar(double value, DType dtype = DType::f64);  // 0-d
Tensor zeros(const Shape& shape, DType dtype = DType::f64);
Tensor ones(const Shape& shape, DType dtype = DType::f64);
Tensor full(const Shape& shape, double value, DType dtype = DType::f64);
Tensor randn(const Shape& shape, uint64_t seed, DType dtype = DType::f64);  // N(0, 1)
// [0, 1, ..., n-1], i64 by default (indices).
Tensor arange(int64_t n, DType dtype = DType::i64);
Tensor rand(const Shape& shape, uint64_t seed, DType dtype = DType::f64);   // U[0, 1)

// Tensor storage of 256 KiB and more is recycled through a cache that keeps up to
// 256 MiB of freed blocks, because fresh memory costs a page fault per 4 KiB when
// first touched. This returns the cached blocks to the system.
void release_cached_memory();

namespace detail {
// What a tracked tensor refers to: a param's node (ParamNode); the tracer derives the
// nodes of recorded operations from it.
struct TrackNode {
  virtual ~TrackNode() = default;
  bool param = false;
};

// A param's node, which its copies share, on every thread that uses them.
struct ParamNode : TrackNode {
  ParamNode() { param = true; }
  // Held while reel::back adds to `grad` (so that backs on several threads add up
  // exactly), while grad() and zero_grad() read or clear it, and while assign()
  // writes the param's memory (one writer at a time).
  mutable std::mutex mutex;
  Tensor grad;  // undefined until the first reel::back reaches the param
  // A sequence lock on the param's memory: even while its values are stable, odd
  // while assign() writes them, 2 more after each assign. A reader (an operation, a
  // value read, reel::back) takes stable_version() before it reads and compares
  // after: a change means an assign overlapped its read.
  std::atomic<uint64_t> version{0};
};

// The param's version once no assign() is writing its memory (waits for one that is).
uint64_t stable_version(const ParamNode& node);
// The node of a tensor for which is_param() is true.
inline ParamNode& param_node(const Tensor& t) { return static_cast<ParamNode&>(*t.track_node()); }

// What the tracer tells the runtime about traces, so that code below the tracer
// (Tensor's bool, item and values; compiled functions) can ask without depending on it.
// The tracer installs its table when its first trace starts: before that, no tensor is
// traced. Each is called only for a tensor with trace tags.
struct TraceHooks {
  // Whether the tensor belongs to a trace active on this thread.
  bool (*in_active_trace)(const Tensor& t);
  // Whether it belongs to a trace still running on another thread (traces are per
  // thread: an operation there is not recorded, so the trace would take its result
  // for a constant); with value_guards, whether such a trace guards the values read
  // from its tensors (a cached function's).
  bool (*in_foreign_trace)(const Tensor& t, bool* value_guards);
  // Records a guard for a traced tensor converted to bool.
  void (*record_guard)(const Tensor& t, bool value);
  // Records a guard on the values of a traced tensor read with item() or values()
  // (only traces made for a cache, such as reel::jit's, use it); `op` is "item" or
  // "values".
  void (*record_value_read)(const Tensor& t, const char* op);
};
// Installs the table, which must outlive every use (a static one).
void set_trace_hooks(const TraceHooks* hooks);
// The hooks' answers, false for an untagged tensor or before any trace started.
bool in_active_trace(const Tensor& t);
bool in_foreign_trace(const Tensor& t, bool* value_guards = nullptr);
// The rest of the error for such a tensor, after "<op>: argument 1 belongs to ".
extern const char* const kForeignTrace;

// Code that runs without recording its operations: a CompiledFunction (native code)
// and a cached function (reel::jit, reel::simplegrad(f)), which runs compiled tapes.
enum class Unrecorded { compiled, cached };
// The one check of such code's arguments. Refused: a tensor of a trace running on
// another thread; a param or a tensor computed from one (reel::back would miss the
// operations); and, by compiled code, a tensor traced on this thread (native code
// cannot be recorded on a tape). Cached code takes a traced tensor (not checked for
// params: the enclosing trace handles them) and gets true back: it then calls the
// function itself, which the enclosing trace records.
bool check_unrecorded_args_tagged(std::span<const Tensor* const> args, Unrecorded code);
inline bool check_unrecorded_args(std::span<const Tensor* const> args, Unrecorded code) {
  for (const Tensor* a : args)  // (plain tensors, the usual case, checked inline)
    if (!a->trace_tags().empty() || a->is_tracked()) return check_unrecorded_args_tagged(args, code);
  return false;
}
}  // namespace detail

// Largest |a - b| over elements; shapes must match.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace reel
