#pragma once
// The primitive table. Each primitive is defined in one place (ir/src/prims_*.cpp)
// with every rule Reel needs: its name and attributes, its shape/dtype rule, its
// eager kernel, its adjoint and tangent written as tape operations, its structure and
// properties, and (elementwise) its element function.
#include <functional>
#include <memory>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "reel/ir/attrs.hpp"
#include "reel/ir/element.hpp"
#include "reel/kernels.hpp"
#include "reel/tensor.hpp"

namespace reel {

using Var = int32_t;  // tape variable, numbered from 1 as printed (%1, %2, ...)
constexpr Var kNoVar = 0;

struct VarType {
  DType dtype = DType::f64;
  Shape shape;
  bool operator==(const VarType&) const = default;
};

std::string type_str(const VarType& t);

class TapeBuilder;
class Tape;

// What the derivative rules of a primitive with tape attributes (a loop) need from the
// passes, which sit above ir/: reverse_mode and forward_mode hand it to every rule
// (AdjointArgs::transforms, TangentArgs::transforms). Each result is cleaned up.
struct Transforms {
  // The vector-Jacobian product of a body with any number of outputs: a tape taking
  // the body's inputs, then one seed per output where seeded[i] (of the output's type),
  // and returning the body's outputs, then the gradient of each input where wanted[i]
  // (zeros where none flows).
  Tape (*vjp)(const Tape& body, std::span<const bool> seeded, std::span<const bool> wanted) = nullptr;
  // The Jacobian-vector product: the body's inputs, then one tangent per input where
  // active[i]; its outputs, then every output's tangent (zeros where none).
  Tape (*jvp)(const Tape& body, std::span<const bool> active) = nullptr;
  // simplify, cse and dce.
  Tape (*cleanup)(const Tape& tape) = nullptr;
  // Batching (vmap): a tape taking the body's inputs, those where batched[i] with a
  // leading batch axis of `size`, and returning every output of the body with a leading
  // batch axis of `size` (an output that depends on no batched input is broadcast).
  Tape (*batch)(const Tape& body, std::span<const bool> batched, int64_t size) = nullptr;
};

// What an adjoint rule sees: the call's arguments and result as variables of the
// gradient tape being built, the incoming adjoint `dout`, and which arguments need
// a gradient. It returns one adjoint per argument (kNoVar where none is needed).
// A primitive with several results sees them all in `outs` and their adjoints in
// `douts` (kNoVar for a result nothing depends on; at least one is not); `out` and
// `dout` are the first of each.
struct AdjointArgs {
  std::span<const Var> args;
  Var out;
  Var dout;
  const Attrs& attrs;
  std::span<const bool> needs;
  std::span<const Var> outs = {}, douts = {};
  const Transforms* transforms = nullptr;
  // A primitive with an adjoint_forward rule: the residuals and state it gave.
  std::span<const Var> residuals = {};
  std::shared_ptr<const void> state = nullptr;
};

// Reverse mode in two halves (loops): in a gradient tape's forward part the call is
// replaced by what adjoint_forward emits, which computes the call's results and also
// the residuals its adjoint rule reads (a loop's per-iteration values, stacked).
struct ForwardArgs {
  std::span<const Var> args;
  const Attrs& attrs;
  std::span<const bool> needs;           // which arguments need a gradient
  std::span<const bool> results_needed;  // which results will get an adjoint
  const Transforms* transforms = nullptr;
};
struct ForwardHalf {
  std::vector<Var> results;    // one per result of the call
  std::vector<Var> residuals;  // handed to the adjoint rule
  std::shared_ptr<const void> state = nullptr;  // likewise (e.g. the derived bodies)
};

// What a forward-mode (tangent) rule sees: the call's arguments and result as
// variables of the tape being built, and each argument's tangent (kNoVar where it is
// zero; at least one is not). It returns each result's tangent (kNoVar if zero).
struct TangentArgs {
  std::span<const Var> args;
  Var out;
  std::span<const Var> tangents;
  const Attrs& attrs;
  std::span<const Var> outs = {};  // several results: all of them (out is the first)
  const Transforms* transforms = nullptr;
  // A rule that computes the call's results again alongside the tangents (a loop running
  // body and tangent together) may put their variables here (as many as results); the
  // tape then reads those, and the original call is left to dead-code elimination.
  std::span<Var> same_outs = {};
};

// What a batching rule (vmap) sees: the call's arguments as variables of the batched
// tape being built. Where batched[i], argument i has the call's argument type with a
// leading batch axis of `size` in front; otherwise it has the call's argument type as
// it is (`types` holds the call's unbatched argument types). At least one argument is
// batched. The rule returns each result of the call with a leading batch axis of `size`
// in front of the result's type: result k of the batched call at batch index j is what
// the call computes on the arguments' slices j (unbatched arguments as they are).
struct BatchArgs {
  std::span<const Var> args;
  std::span<const bool> batched;
  std::span<const VarType> types;
  int64_t size;
  const Attrs& attrs;
  const Transforms* transforms = nullptr;
};

// shape: non-negative integers whose product fits; ints: any integers;
// reals: numbers (integers written without a point are accepted).
// tape: a TapeRef (see attrs.hpp).
// axis / axes: an axis (a list of distinct axes) of the first argument, -rank <= axis <
// rank. They are checked and normalised where a call enters a tape (negative axes
// become axis + rank), so type rules, passes and code generation see only axes in
// [0, rank); an axis out of range is an error naming the value the caller gave.
enum class AttrKind { integer, real, shape, ints, reals, boolean, string, dtype, tape, axis, axes };
// `axis` of a value of type x (of rank r + extra), -r <= axis < r, counted from 0; throws
// reel::Error naming `op`, the axis as given and x's type. The axes attribute kinds
// and the composite operations (softmax, logsumexp, ...) share it.
int64_t normalize_axis(std::string_view op, int64_t axis, const VarType& x, int64_t extra = 0);
// Each of `axes` normalised; an axis given twice (in either spelling) is an error.
Shape normalize_axes(std::string_view op, const Shape& axes, const VarType& x);

struct AttrSpec {
  std::string name;
  AttrKind kind;
  bool optional = false;
};

// What a call computes, structurally. Passes read it (simplify looks through
// broadcasts, the memory plan lets a view share its argument's buffer) and the code
// generator chooses its lowering from it (codegen/src/plan.cpp). Only `elementwise`
// (with an element rule) and `opaque` are open to registered primitives: the others
// name one fixed meaning each, that of the built-in primitive given.
enum class Structure {
  elementwise,  // each element of the result from the same element of each (broadcast) argument
  broadcast,    // broadcast_to: copies with broadcast indexing
  reduction,    // sums into a smaller shape, then scales (sum, mean, sum_to); see Lowering::reduce_target
  contraction,  // matmul, batch_matmul: matrix products (a transpose read only by them is folded in)
  permutation,  // transpose: of a matrix
  view,         // reshape: the same elements in another shape
  gather,       // gather(x, indices, axis): x's elements at i64 indices along axis
  scatter,      // scatter_add(target, indices, values, axis): values added at the indexed positions
                // (or, with Lowering::replaces, written there: index_update)
  check,        // guard(cond, expected): the one element of cond is nonzero iff expected; its result is cond
  loop,         // scan, while_loop, call, checkpoint: runs the tape attribute(s) `body` (and `cond`)
  opaque,       // nothing known: compiled code calls the eager function
};

// The arity of a primitive that takes one or more arguments (concat).
constexpr int kVariadic = -1;

// The results of a rule, one per result of the primitive. Built implicitly from one
// value as from a list, so that a rule of a one-result primitive returns its VarType,
// Tensor or Var as it is, and a rule of a k-result primitive returns a vector of k.
// One result is held in place, without a heap allocation (every operation the
// interpreter runs goes through infer and eager); it converts to a std::vector.
template <class T>
class Results {
 public:
  Results() = default;
  Results(T one) : one_(std::move(one)), size_(1) {}
  Results(std::vector<T> all) : size_(all.size()) {
    if (size_ == 1) one_ = std::move(all[0]);
    else many_ = std::move(all);
  }
  Results(std::initializer_list<T> all) : Results(std::vector<T>(all)) {}

  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return size_ == 1 ? &one_ : many_.data(); }
  const T* data() const { return size_ == 1 ? &one_ : many_.data(); }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  operator std::vector<T>() const& { return std::vector<T>(begin(), end()); }
  operator std::vector<T>() && {
    if (size_ != 1) return std::move(many_);
    std::vector<T> v;
    v.push_back(std::move(one_));
    return v;
  }

 private:
  T one_{};
  std::vector<T> many_;
  std::size_t size_ = 0;
};

// Where elements sit, for code generation: element i (a multi-index) of one tensor is
// element offset + strides . i of another, counted in elements of that one's contiguous
// layout. A slice of rows is {start * row stride, the other's strides with the sliced
// axis' times the step}; a concatenation's argument k is placed at its axis' offset.
struct StridedMap {
  int64_t offset = 0;
  std::vector<int64_t> strides;  // one per dimension of the tensor being mapped
};

// A pooling primitive's windows (Primitive::lowering.pool): over [nc, h, w] input planes, output
// [nc, oh, ow], window kh x kw moved by sh, sw over the input padded by ph, pw (padding
// never picked; counted as zeros in a mean). What is computed per window, by argument
// order: max (x -> the first largest element, a NaN first), max_gather (x, v -> v at
// x's max), max_grad (x, dy -> dy added at x's max, into zeros of x's shape), mean
// (x -> the sum / (kh kw)), mean_grad (dy -> dy / (kh kw) added at each element of
// the window, into zeros of [nc, h, w]); each in the eager kernel's order.
struct PoolWindow {
  enum class Mode { max, max_gather, max_grad, mean, mean_grad };
  Mode mode = Mode::max;
  int64_t nc = 0, h = 0, w = 0, oh = 0, ow = 0, kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
};

// How code generation lowers a call of a built-in primitive, beyond its structure:
// what only the code generator reads (and simplify, which compares strided moves).
// Every member is optional; a registered primitive leaves them empty (elementwise with
// an element rule, or opaque), so they sit apart from the rules users write.
struct Lowering {
  // reduction: the input is combined with reduce_op (sum, product, maximum, minimum)
  // into a shape that broadcasts to the input's shape and has the result's elements in
  // the same order (keep-dims form), then scaled.
  kernels::ReduceOp reduce_op = kernels::ReduceOp::sum;
  std::function<Shape(const VarType& input, const Attrs&)> reduce_target{};
  std::function<double(const VarType& input, const Attrs&)> reduce_scale{};
  // reduction: the result is not the combined value but the i64 position (row-major
  // among the reduced elements) of the first element reduce_op (max or min) picks, a
  // NaN winning over every number (argmax, argmin).
  bool reduce_index = false;
  // scatter: the values replace the indexed elements instead of being added to them; the
  // indices must then be distinct (checked, as the eager function checks them).
  bool replaces = false;
  // Strided movement (optional; read by code generation, for f32 and f64 values): the
  // result is argument 0's elements at strided_read(argument 0's type, attrs) (a slice):
  // compiled code reads them in the loop that uses them, without a copy of its own.
  std::function<StridedMap(const VarType& arg, const Attrs&)> strided_read{};
  // Or the result is its arguments placed in it, no element twice (concat, covering
  // every element; unslice, the rest zeros): strided_place gives, per argument, where its
  // elements go in the result. Compiled code zeroes the result if the arguments have
  // fewer elements, then copies each argument into place in a generated loop.
  std::function<std::vector<StridedMap>(std::span<const VarType> args, const Attrs&)> strided_place{};
  // Pooling (optional; read by code generation, for f32 and f64): compiled code runs the
  // windows in a generated loop instead of calling the eager function.
  std::function<PoolWindow(std::span<const VarType> args, const Attrs&)> pool{};
  // The eager function writing into results the caller made (optional; built-ins only:
  // compiled code passes views of its workspace, so the results are neither allocated
  // nor copied; the results' memory never overlaps an argument's, and its old contents
  // are garbage to be overwritten), with `scratch`: scratch_bytes(argument types, attrs)
  // bytes of workspace, 64-byte aligned, for the call's own use (nullptr without
  // scratch_bytes). The convolutions have both: their im2col columns go there.
  std::function<void(std::span<const Tensor> args, const Attrs&, std::span<Tensor> results, void* scratch)>
      eager_into{};
  std::function<int64_t(std::span<const VarType> args, const Attrs&)> scratch_bytes{};
};

struct Primitive {
  // (Fields in this order since before the one rule form: designated initialisers
  // written against it keep compiling.)
  std::string name{};
  int arity = 1;  // or kVariadic
  std::vector<AttrSpec> attrs{};
  // The type of each result; throws reel::Error naming the primitive and the bad types.
  std::function<Results<VarType>(std::span<const VarType>, const Attrs&)> infer{};
  // Each result, computed from tensors.
  std::function<Results<Tensor>(std::span<const Tensor>, const Attrs&)> eager{};
  std::function<std::vector<Var>(TapeBuilder&, const AdjointArgs&)> adjoint{};
  // Argument dtypes: floating point (f32, f64) only, unless `any_dtype` (operations
  // that move elements of any dtype: reshape, broadcast_to, transpose, ...); the
  // arguments listed in `index_args` must be i64 (gather's indices). infer_call
  // checks this before the type rule runs. No gradient flows through i64 values.
  bool any_dtype = false;
  std::vector<int> index_args{};
  // Several results (like JAX's multiple_results): infer, eager and tangent give one
  // value per result, and the adjoint rule sees every result's adjoint
  // (AdjointArgs::douts). kVariadic: as many results as the type rule gives, at least
  // one (a loop: one per output of its body); a call's count is Op::results. On a tape such a call defines consecutive variables,
  // `%3, %4 = f(%1)::t3, t4`. Compiled code calls its eager function. Where a rule
  // runs, a count other than `results` is an error naming the primitive.
  int results = 1;
  // Deprecated spellings of infer, eager and tangent for a primitive with several
  // results, still accepted: register_primitive moves each into its one form (giving
  // both for one rule is an error). Nothing reads them after registration.
  std::function<std::vector<VarType>(std::span<const VarType>, const Attrs&)> infer_results{};
  std::function<std::vector<Tensor>(std::span<const Tensor>, const Attrs&)> eager_results{};
  std::function<std::vector<Var>(TapeBuilder&, const TangentArgs&)> tangent_results{};
  // Forward mode: each result's tangent (kNoVar for zero). A primitive marked `linear`
  // (in its one argument) needs none: its tangent is the primitive itself applied to
  // the argument's tangent.
  std::function<Results<Var>(TapeBuilder&, const TangentArgs&)> tangent{};
  bool linear = false;
  Structure structure = Structure::elementwise;
  // f(a, b) == f(b, a) for two arguments (CSE merges the two orders).
  bool commutative = false;
  // Exact identity elements, as IEEE values (simplify drops the operand): f(a, e) == a
  // for every a when right_identity is e, and f(e, b) == b with left_identity. Sign
  // matters: a + (-0) is a, a + (+0) is not (for a = -0).
  std::optional<double> left_identity{}, right_identity{};
  // f(f(a)) == a (simplify drops the pair).
  bool involution = false;
  // A check whose failure is observable (a guard): dead-code elimination keeps it
  // although nothing reads its result.
  bool effect = false;
  // Equal calls give equal results (CSE merges them). A user's primitive that draws
  // random numbers or reads outside state sets this to false.
  bool pure = true;
  // elementwise: the element function as data, recorded from the same generic
  // function as the eager kernel (see reel/ir/element.hpp). Without one, an
  // elementwise primitive is compiled as `opaque`.
  std::function<ElementProgram(const Attrs&)> element{};
  // Reverse mode in two halves (see ForwardArgs); optional.
  std::function<ForwardHalf(TapeBuilder&, const ForwardArgs&)> adjoint_forward{};
  // Batching (vmap, the `batch` pass); optional. Without one, an elementwise primitive
  // is batched by aligning its batched arguments' batch axis in front of the broadcast
  // shape; any other primitive by a `scan` over the batch (one call per batch element).
  std::function<Results<Var>(TapeBuilder&, const BatchArgs&)> batch{};
  // Sums (optional; read by the reverse pass, where a variable's adjoint is the sum of the
  // terms its readers' rules gave): given every term, some of them calls of this
  // primitive, the terms to add instead, with the same sum (unslice and place: the
  // gradients of disjoint slices of one tensor become one `place`, not zeros and an add
  // per slice).
  std::function<std::vector<Var>(TapeBuilder&, std::vector<Var> terms)> combine_terms{};
  // The eager function where the call is recorded (optional; loops): where a trace
  // records the call, or Tracker records it for reel::back, this runs instead of `eager`,
  // computes the same results and may set attributes that only a run can tell, which
  // the recorded call then holds (while_loop: `trips`, this run's trip count, which
  // reverse mode needs; a loop batched by vmap gets the largest of its batch there).
  std::function<Results<Tensor>(std::span<const Tensor>, Attrs&)> eager_recorded{};
  // Code generation's view of a built-in primitive (see Lowering).
  Lowering lowering{};

  bool is_index_arg(std::size_t i) const {
    for (int a : index_args)
      if (static_cast<std::size_t>(a) == i) return true;
    return false;
  }
};

// Looks a primitive up by name; throws reel::Error for an unknown name.
const Primitive& primitive(std::string_view name);
const Primitive* find_primitive(std::string_view name);
std::vector<const Primitive*> all_primitives();
// Where a rule of p has run: unless it gave one value per result, throws reel::Error
// "<rule> of '<p>' gave <given> values, expected <results> (one per result)".
void check_result_count(const Primitive& p, std::string_view rule, std::size_t given);
// Whether p is one of Reel's own primitives (not registered at run time).
bool is_builtin(const Primitive& p);

// Adds a primitive to the registry (thread-safe) and returns it; tapes refer to it by
// name in text and by this address in memory. Throws reel::Error, naming the
// primitive and the rule, if the name is taken or not an identifier, or the type rule
// or the eager function is missing, or a rule is given in both its forms (infer and
// the deprecated infer_results, ...). Reel's own primitives pass the same checks when
// the registry is built. An elementwise primitive without an element rule
// is `opaque`: compiled code calls its eager function. Derivative rules are
// optional here; reverse and forward mode say so, naming the primitive, when one they
// need is missing. reel::define_primitive (tracer/) builds one from functions on
// tensors.
const Primitive& register_primitive(Primitive p);
// register_primitive's checks of p as registered (its older spellings moved into the
// one form, an elementwise primitive without an element rule made opaque), without
// registering it; `builtin` also accepts the structures of Reel's own primitives.
void check_primitive(const Primitive& p, bool builtin = false);

// A batching that works for every primitive: scan(unbatched args as consts, batched
// args as xs) {one call}, whose ys are the results stacked over the batch (one call per
// batch element): the batch pass's fallback for a primitive without a batching rule,
// and a rule's for the cases it has no better form for (ir/src/prims_scan.cpp).
Results<Var> batch_by_scan(TapeBuilder& b, const Primitive& p, const BatchArgs& a);

}  // namespace reel
