#include "reel/tensor.hpp"

#include <cstring>

#include "storage.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <random>

namespace reel {

namespace {

// 64-byte aligned storage, padded to a multiple of 64 bytes, so that vector loads in
// kernels and JIT code line up.
//
// Small blocks: one allocation holds the reference count and the data (this is on the
// path of every compiled call, which allocates its outputs), from the thread's pool of
// small blocks (storage.hpp). Large blocks come from
// and go back to a cache (storage.hpp): fresh pages from the system cost a page fault
// each, about 2 ms for an 8 MB gradient, more than computing it.
std::shared_ptr<void> allocate(std::size_t bytes) {
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = std::max<std::size_t>((bytes + kAlign - 1) / kAlign * kAlign, kAlign);
  if (rounded >= detail::kCachedBlockMin) {
    void* p = detail::take_block(rounded);
    return std::shared_ptr<void>(p, [rounded](void* q) { detail::give_block(q, rounded); });
  }
  std::shared_ptr<unsigned char[]> block;
  try {
    block = rounded + 2 * kAlign <= detail::kSmallBlockMax  // (with room for the reference count)
                ? std::allocate_shared_for_overwrite<unsigned char[]>(detail::SmallBlockAllocator<unsigned char>{},
                                                                      rounded + kAlign)
                : std::make_shared_for_overwrite<unsigned char[]>(rounded + kAlign);
  } catch (const std::bad_alloc&) {
    throw Error(fmt::format("tensor: cannot allocate {} bytes", bytes));
  }
  const auto addr = reinterpret_cast<std::uintptr_t>(block.get());
  void* aligned = block.get() + ((kAlign - addr % kAlign) % kAlign);
  return std::shared_ptr<void>(std::move(block), aligned);
}

void check_shape(const Shape& shape, const char* op) {
  for (int64_t d : shape)
    if (d < 0) throw Error(fmt::format("{}: negative dimension in shape {}", op, shape_str(shape)));
}

template <class Fill>
Tensor make(const Shape& shape, DType dtype, Fill fill) {
  Tensor t(dtype, shape);
  const int64_t n = t.numel();
  if (dtype == DType::f64) {
    double* p = t.mutable_data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = fill(i);
  } else if (dtype == DType::i64) {
    int64_t* p = t.mutable_data<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const double v = fill(i);
      // Exactly representable integers only: 2^63 itself is out of range.
      if (!(v == std::trunc(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0))
        throw Error(fmt::format("tensor: an i64 tensor holds integers, got {} at element {}", v, i));
      p[i] = static_cast<int64_t>(v);
    }
  } else {
    float* p = t.mutable_data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(fill(i));
  }
  return t;
}

}  // namespace

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  check_shape(shape_, "tensor");
  numel_ = reel::numel(shape_, "tensor");
  storage_ = allocate(nbytes());
}

namespace {
// The deleter of memory that is not Reel's own (Tensor::foreign_ marks it):
// borrowed memory (no owner) is never freed; adopted memory is released with its owner.
struct Foreign {
  std::shared_ptr<void> owner;
  void operator()(void*) { owner.reset(); }
};
}  // namespace

Tensor Tensor::borrow(const void* data, DType dtype, Shape shape) {
  Tensor t;
  check_shape(shape, "tensor");
  t.dtype_ = dtype;
  t.numel_ = reel::numel(shape, "tensor");
  t.shape_ = std::move(shape);
  t.storage_ = std::shared_ptr<void>(const_cast<void*>(data), Foreign{});
  t.foreign_ = true;
  return t;
}

bool Tensor::unshared(long holders) const {
  if (storage_ == nullptr || storage_.use_count() != holders || annex_ != nullptr) return false;
  // (use_count's load is relaxed: another thread's last copy, dropped just before, must
  // have finished with the memory before the caller writes it.)
  std::atomic_thread_fence(std::memory_order_acquire);
  return !foreign_;
}

Tensor Tensor::adopt(std::shared_ptr<void> storage, DType dtype, Shape shape) {
  Tensor t;
  check_shape(shape, "tensor");
  t.dtype_ = dtype;
  t.numel_ = reel::numel(shape, "tensor");
  t.shape_ = std::move(shape);
  if (storage == nullptr && t.numel_ > 0) throw Error("tensor: adopt needs memory for a non-empty tensor");
  // An empty tensor still needs storage to be defined: a shared empty block.
  // (Held through a deleter of its own and marked foreign_: unshared() knows the memory is not Reel's.)
  if (storage != nullptr) {
    void* p = storage.get();
    t.storage_ = std::shared_ptr<void>(p, Foreign{std::move(storage)});
    t.foreign_ = true;
  } else {
    t.storage_ = allocate(0);
  }
  return t;
}

std::vector<double> Tensor::values() const {
  if (!defined()) throw Error("values: the tensor is undefined");
  record_value_read("values");
  std::vector<double> out(static_cast<std::size_t>(numel_));
  // A param's memory is read under its lock: W.assign on another thread writes it.
  std::unique_lock<std::mutex> lock;
  if (is_param()) lock = std::unique_lock<std::mutex>(detail::param_node(*this).mutex);
  if (dtype_ == DType::f64) {
    const double* p = data<double>();
    out.assign(p, p + numel_);
  } else if (dtype_ == DType::i64) {
    const int64_t* p = data<int64_t>();
    for (int64_t i = 0; i < numel_; ++i) out[i] = static_cast<double>(p[i]);
  } else {
    const float* p = data<float>();
    for (int64_t i = 0; i < numel_; ++i) out[i] = p[i];
  }
  return out;
}

double Tensor::item() const {
  if (!defined()) throw Error("item: the tensor is undefined");
  if (numel_ != 1)
    throw Error(fmt::format("item: expected a tensor with one element, got {}",
                            type_str(dtype_, shape_)));
  record_value_read("item");
  return first_value();
}

double Tensor::first_value() const {
  std::unique_lock<std::mutex> lock;  // as values()
  if (is_param()) lock = std::unique_lock<std::mutex>(detail::param_node(*this).mutex);
  if (dtype_ == DType::i64) return static_cast<double>(data<int64_t>()[0]);
  return dtype_ == DType::f64 ? data<double>()[0] : data<float>()[0];
}

Tensor Tensor::reshaped(Shape shape) const {
  check_shape(shape, "reshape");
  if (reel::numel(shape) != numel_)
    throw Error(fmt::format("reshape: cannot reshape {} ({} elements) to {}",
                            type_str(dtype_, shape_), numel_, shape_str(shape)));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.make_plain();
  return t;
}

void Tensor::set_annex(std::vector<TraceTag> tags, std::shared_ptr<detail::TrackNode> track) {
  if (tags.empty() && track == nullptr) annex_.reset();
  else annex_ = std::make_shared<const detail::TensorAnnex>(detail::TensorAnnex{std::move(tags), std::move(track)});
}

void Tensor::add_trace_tag(TraceTag tag) {
  std::vector<TraceTag> tags(trace_tags().begin(), trace_tags().end());
  tags.push_back(tag);
  set_annex(std::move(tags), track_node());
}

void Tensor::clear_trace_tags() {
  if (!trace_tags().empty()) set_annex({}, track_node());
}

const std::shared_ptr<detail::TrackNode>& Tensor::track_node() const {
  static const std::shared_ptr<detail::TrackNode> none;
  return annex_ ? annex_->track : none;
}

void Tensor::set_track_node(std::shared_ptr<detail::TrackNode> node) {
  if (node != track_node()) set_annex({trace_tags().begin(), trace_tags().end()}, std::move(node));
}

bool Tensor::is_param() const { return is_tracked() && annex_->track->param; }

Tensor Tensor::grad() const {
  if (!is_param())
    throw Error(fmt::format("grad: expected a param (made by reel::param), got {} {}",
                            is_tracked() ? "a tensor computed from params" : "a plain tensor",
                            defined() ? type_str(dtype_, shape_) : "(undefined)"));
  detail::ParamNode& node = detail::param_node(*this);
  {
    const std::lock_guard<std::mutex> lock(node.mutex);  // reel::back on another thread may be adding to it
    if (node.grad.defined()) return node.grad;
  }
  Tensor z(dtype_, shape_);
  if (z.nbytes() > 0) std::memset(z.mutable_raw(), 0, z.nbytes());
  return z;
}

Tensor& Tensor::assign(const Tensor& values) {
  if (!is_param())
    throw Error(fmt::format("assign: expected a param (made by reel::param), got {}",
                            is_tracked() ? "a tensor computed from params" : "a plain tensor"));
  if (!values.defined() || values.dtype() != dtype_ || values.shape() != shape_)
    throw Error(fmt::format("assign: expected values of the param's type {}, got {}", type_str(dtype_, shape_),
                            values.defined() ? type_str(values.dtype(), values.shape()) : "an undefined tensor"));
  if (detail::in_foreign_trace(*this) || detail::in_foreign_trace(values))
    throw Error(fmt::format("assign: the param or the values belong to {}", detail::kForeignTrace));
  if (detail::in_active_trace(*this) || detail::in_active_trace(values))
    throw Error("assign: a param cannot be assigned while it or the values are traced (assign outside the traced "
                "function)");
  // A sequence-locked write (see detail::ParamNode): readers on other threads see the
  // version odd, or changed, and do not use what they read meanwhile.
  detail::ParamNode& node = detail::param_node(*this);
  Tensor src = values;
  if (values.is_param() && values.track_node() != track_node()) {  // another param's memory, read under its lock
    src = Tensor(dtype_, shape_);
    const std::lock_guard<std::mutex> lock(detail::param_node(values).mutex);
    if (nbytes() > 0) std::memcpy(src.mutable_raw(), values.raw(), nbytes());
  }
  const std::lock_guard<std::mutex> lock(node.mutex);
  node.version.fetch_add(1);
  if (src.raw() != raw() && nbytes() > 0) std::memcpy(storage_.get(), src.raw(), nbytes());
  node.version.fetch_add(1);
  return *this;
}

void Tensor::zero_grad() {
  if (!is_param())
    throw Error(fmt::format("zero_grad: expected a param (made by reel::param), got {}",
                            is_tracked() ? "a tensor computed from params" : "a plain tensor"));
  detail::ParamNode& node = detail::param_node(*this);
  const std::lock_guard<std::mutex> lock(node.mutex);
  node.grad = Tensor();
}

Tensor tensor(const std::vector<double>& values) {
  return tensor(values, Shape{static_cast<int64_t>(values.size())});
}

Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  check_shape(shape, "tensor");
  if (numel(shape) != static_cast<int64_t>(values.size()))
    throw Error(fmt::format("tensor: shape {} needs {} values, got {}", shape_str(shape),
                            numel(shape), values.size()));
  return make(shape, dtype, [&](int64_t i) { return values[i]; });
}

Tensor scalar(double value, DType dtype) { return full({}, value, dtype); }
Tensor zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor full(const Shape& shape, double value, DType dtype) {
  return make(shape, dtype, [&](int64_t) { return value; });
}

namespace {
void expect_float(const char* op, DType dtype) {
  if (!is_float(dtype)) throw Error(fmt::format("{}: expected dtype f32 or f64, got {}", op, dtype_name(dtype)));
}
}  // namespace

Tensor arange(int64_t n, DType dtype) {
  if (n < 0) throw Error(fmt::format("arange: expected a length >= 0, got {}", n));
  return make({n}, dtype, [](int64_t i) { return static_cast<double>(i); });
}

Tensor randn(const Shape& shape, uint64_t seed, DType dtype) {
  expect_float("randn", dtype);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  return make(shape, dtype, [&](int64_t) { return dist(gen); });
}

Tensor rand(const Shape& shape, uint64_t seed, DType dtype) {
  expect_float("rand", dtype);
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  return make(shape, dtype, [&](int64_t) { return dist(gen); });
}

namespace detail {
namespace {
std::atomic<const TraceHooks*> g_trace_hooks{nullptr};
}
const char* const kForeignTrace =
    "a trace running on another thread; a traced tensor must be used on the thread tracing it (another thread's "
    "operations, branches and reads are not recorded: the tape would take their results for constants)";
void set_trace_hooks(const TraceHooks* hooks) { g_trace_hooks.store(hooks); }
namespace {
// The hooks for a tensor with trace tags (null before any trace started).
const TraceHooks* hooks_for(const Tensor& t) { return t.trace_tags().empty() ? nullptr : g_trace_hooks.load(); }
}  // namespace
bool in_foreign_trace(const Tensor& t, bool* value_guards) {
  const TraceHooks* h = hooks_for(t);
  return h != nullptr && h->in_foreign_trace(t, value_guards);
}
bool in_active_trace(const Tensor& t) {
  const TraceHooks* h = hooks_for(t);
  return h != nullptr && h->in_active_trace(t);
}
uint64_t stable_version(const ParamNode& node) {
  const uint64_t v = node.version.load();
  if ((v & 1) == 0) return v;
  // An assign is writing the memory, holding the lock: wait for it to finish.
  const std::lock_guard<std::mutex> lock(node.mutex);
  return node.version.load();
}

bool check_unrecorded_args_tagged(std::span<const Tensor* const> args, Unrecorded code) {
  const bool compiled = code == Unrecorded::compiled;
  const auto which = [&](std::size_t i) {  // names argument i as the caller's messages do
    return compiled ? fmt::format("compiled function: argument {}", i + 1)
                    : fmt::format("jit: tensor {} of the arguments", i + 1);
  };
  bool traced = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Tensor& t = *args[i];
    if (!t.trace_tags().empty()) {
      if (in_foreign_trace(t)) throw Error(fmt::format("{} belongs to {}", which(i), kForeignTrace));
      if (in_active_trace(t)) {
        if (compiled)
          throw Error(fmt::format("{} is being traced, and native code cannot be recorded on a tape; inside a "
                                  "traced function call reel::play(f.tape(), args) instead",
                                  which(i)));
        traced = true;  // recorded on the enclosing trace, which handles params
        continue;
      }
    }
    if (t.is_tracked())
      throw Error(fmt::format("{} is a param or computed from one, and {} code does not record operations for "
                              "reel::back; pass reel::detach(x) (its values), or call the function itself",
                              which(i), compiled ? "compiled" : "cached"));
  }
  return traced;
}
}  // namespace detail

void Tensor::record_value_read(const char* op) const {
  if (const detail::TraceHooks* h = detail::hooks_for(*this)) h->record_value_read(*this, op);
}

Tensor::operator bool() const {
  if (!defined()) throw Error("bool: the tensor is undefined");
  if (numel_ != 1)
    throw Error(fmt::format("bool: expected a tensor with one element, got {} (reduce it first, e.g. with sum or max)",
                            type_str(dtype_, shape_)));
  const double v = first_value();  // not item(): the branch is guarded, not the value
  const bool truth = v != 0.0;     // NaN is true, as in C++
  if (const detail::TraceHooks* h = detail::hooks_for(*this)) h->record_guard(*this, truth);
  return truth;
}


double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape())
    throw Error(fmt::format("max_abs_diff: shapes {} and {} differ", shape_str(a.shape()),
                            shape_str(b.shape())));
  const auto va = a.values(), vb = b.values();
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double d = std::abs(va[i] - vb[i]);
    if (std::isnan(d)) return d;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace reel

#include "reel/format.hpp"

namespace reel {

std::string to_string(const Tensor& t) {
  if (!t.defined()) return "undefined";
  const auto v = t.values();
  const std::string type = type_str(t.dtype(), t.shape());
  if (t.rank() == 0) return fmt::format("{} {}", type, v[0]);
  constexpr std::size_t kShown = 10;  // long tensors print their first values
  if (v.size() <= kShown) return fmt::format("{} [{}]", type, fmt::join(v, ", "));
  return fmt::format("{} [{}, ...]", type,
                     fmt::join(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(kShown), ", "));
}

}  // namespace reel
