#pragma once
// The kernel table: every kind of step the plan makes and every kind of generated
// kernel, each lowered in one file of this directory (its step, its kernel's spec, its
// planning helpers, its scheduling and its emission), and registered here: a Step or
// KernelBody alternative, and a row in table.cpp. The planner makes typed steps; the
// memory plan, the scheduler (schedule.cpp) and the emitter (emit.cpp) reach a kind only
// through its row. Adding a kind: its files here, its alternative and its row.
// Needs no LLVM.
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "kernels/copy.hpp"
#include "kernels/eager.hpp"
#include "kernels/guard.hpp"
#include "kernels/indexed.hpp"
#include "kernels/loop.hpp"
#include "kernels/loop_call.hpp"
#include "kernels/matmul.hpp"
#include "kernels/place.hpp"
#include "kernels/pool.hpp"
#include "kernels/reduce.hpp"
#include "kernels/scan.hpp"
#include "kernels/transpose.hpp"

namespace reel::codegen {

// The plan's steps (plan.hpp), in their rows' order (kStepRows in table.cpp).
using Step = std::variant<LoopStep, ReduceStep, MatmulStep, TransposeStep, CopyStep, ExternStep, GatherStep, ScatterStep,
                          CheckStep, LoopCallStep, PlaceStep>;
// The generated kernels' kind-specific parts (KernelSpec::body), in their rows' order.
using KernelBody = std::variant<LoopSpec, ReduceSpec, TransposeSpec, IndexedSpec, PoolSpec, ScanSpec>;

struct Plan;
struct KernelSpec;
struct SplitExtent;
struct ParallelKernelArgs;
class Scheduler;      // schedule.hpp
class KernelEmitter;  // kernels/emitter.hpp (LLVM)

// f(var, written) for each variable a step reads (false) or writes (true): a reference
// to the caller's function, valid during the call (no copy, no allocation: the memory
// plan asks every step of a schedule of 100,000).
class AccessFn {
 public:
  template <class F>
    requires(!std::is_same_v<std::remove_cvref_t<F>, AccessFn>)
  AccessFn(F&& f)  // (implicit: callers pass a lambda)
      : object_(const_cast<void*>(static_cast<const void*>(&f))), call_([](void* object, Var v, bool written) {
          (*static_cast<std::remove_reference_t<F>*>(object))(v, written);
        }) {}
  void operator()(Var v, bool written) const { call_(object_, v, written); }

 private:
  void* object_;
  void (*call_)(void* object, Var v, bool written);
};

// Whether a step may run alongside others (no step that may throw), and whether it is
// worth a thread of its own without being cut into chunks or blocks itself.
struct StepCost {
  bool eligible = false;
  bool serial_work = false;
};

// A kind of plan step.
struct StepRow {
  std::size_t index;  // its alternative of Step
  // Appends its steps to the scheduler's program.
  void (*schedule)(Scheduler& s, const Step& step);
  void (*accesses)(const Tape& t, const Plan& p, const Step& step, const AccessFn& f);
  // For concurrent steps (concurrent.hpp); nullptr: never eligible.
  StepCost (*cost)(const Tape& t, const Step& step, int64_t chunk_elements);
  // One line of plan_text (memory_plan.hpp).
  std::string (*text)(const Tape& t, const Plan& p, const Step& step);
  // The workspace slot it uses during itself only, or nullptr for none.
  int (*scratch)(const Step& step);
};
const StepRow& step_row(const Step& step);

// A kind of generated kernel.
struct KernelRow {
  std::size_t index;  // its alternative of KernelBody
  // Everything its code depends on, but KernelSpec::chunk (KernelSpec::key).
  std::string (*key)(const KernelSpec& k);
  // The loop its chunks split (split_extent); nullptr: runs whole.
  SplitExtent (*split)(const KernelSpec& k);
  // A chunked kernel's partial results beyond its loop sums (a reduction to one number).
  void (*partials)(const KernelSpec& k, ParallelKernelArgs& parallel);
  // The kernel's body (KernelEmitter's function is open at its entry).
  void (*emit)(KernelEmitter& e);
  // An eager call (ExternStep) this kind runs as a kernel instead, and its scheduling.
  bool (*claims_call)(const Tape& t, Var v);
  void (*schedule_call)(Scheduler& s, Var v);
  const char* call_text;  // how plan_text describes such a call
};
const KernelRow& kernel_row(const KernelSpec& k);
// The row of the kind that runs this eager call as a kernel, or nullptr.
const KernelRow* kernel_for_call(const Tape& t, Var v);

// A kind's alternative of Step or KernelBody (its row's index).
template <class T, class... Ts>
constexpr std::size_t index_in(const std::variant<Ts...>*) {
  constexpr bool same[] = {std::is_same_v<T, Ts>...};
  for (std::size_t i = 0; i < sizeof...(Ts); ++i)
    if (same[i]) return i;
  return sizeof...(Ts);
}
template <class T>
constexpr std::size_t step_index = index_in<T>(static_cast<const Step*>(nullptr));
template <class T>
constexpr std::size_t kernel_index = index_in<T>(static_cast<const KernelBody*>(nullptr));

// A kernel of this many elements may run alongside others, and is worth a thread of
// its own if it is too small to be cut into chunks (chunk_elements / 2 to 2
// chunk_elements elements).
inline StepCost kernel_cost(int64_t elements, int64_t chunk_elements) {
  return {true, elements >= chunk_elements / 2 && elements < 2 * chunk_elements};
}

// Variables as plan_text lists them: %1, %2.
std::string var_list(const std::vector<Var>& vs);

// The start of every kernel key: kind, parameters' dtypes, a loop's dimensions and
// ranges (none for other kinds), whether it is empty, and the alignments.
std::string key_head(const KernelSpec& k, const char* kind, const std::vector<int64_t>& dims = {},
                     const std::vector<int64_t>& segments = {});

}  // namespace reel::codegen
