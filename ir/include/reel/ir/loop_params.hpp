#pragma once
// The operand layouts of the loop primitives, typed: what a call of scan, while_loop,
// revolve, call or checkpoint holds in its attributes (its bodies, counts and options) and how its operands
// split into groups. Each is read from attributes (checked against the number of
// operands, with the primitive's errors) and written to them in one place: the
// primitives' rules, the tracer, the passes, re-rolling, code generation and tools
// build and decode loop calls through these, never through attribute names of their own.
//
//   scan(consts..., carries..., xs...)                       ScanParams
//   while_loop(consts..., carries...)                         WhileParams
//   revolve(consts..., carries..., xs..., bconsts..., bcarries..., bxs...)  RevolveParams
//   call(args...), checkpoint(args...)                       CallParams
//
// The tape text (docs/tape-format.md) is unchanged: the attribute names and the order
// in which they are written are those of the text form.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "reel/ir/attrs.hpp"
#include "reel/ir/tape.hpp"

namespace reel {

struct Primitive;

// Which loop a primitive of Structure::loop runs, from the primitive itself (not from
// which attributes a call holds): scan and while_loop their own forms; call, checkpoint
// and any other loop primitive run their `body` once. `none` for other structures.
enum class LoopForm { none, scan, while_loop, call };
LoopForm loop_form(const Primitive& prim);

// A consecutive group of a call's operands (or of a body's inputs): [first, first + count).
struct OperandGroup {
  std::size_t first = 0, count = 0;
  std::size_t end() const { return first + count; }
};

// How a scan's reverse mode keeps its residuals: all of them (store), every k-th carry
// (every, with checkpoint_arg k; sqrt, k = ceil(sqrt(length))), or Revolve's binomial
// schedule with checkpoint_arg snapshots. In text: the attribute checkpoint, "" (absent),
// "every", "sqrt" or "binomial".
enum class CheckpointPolicy { store, every, sqrt, binomial };
std::string_view policy_name(CheckpointPolicy policy);
// The policy named `name`, or scan's error naming the ones there are.
CheckpointPolicy policy_named(std::string_view name);

// A TapeRef holding `tape`.
TapeRef tape_ref(Tape tape);

// scan: %r... = scan(consts..., carries..., xs...) {body, length, num_consts, num_carry
// [, reverse][, index][, checkpoint[, checkpoint_arg]]}. The body takes [the i64
// counter,] consts, carries, one slice of each xs, and gives the next carries, then one
// slice of each y.
struct ScanParams {
  std::shared_ptr<const Tape> body;
  int64_t length = 0;
  std::size_t C = 0, K = 0, X = 0;  // consts, carries, xs (operands)
  std::size_t Y = 0;                // ys (the body's outputs after the carries; read only)
  bool reverse = false;
  bool has_index = false;  // the attribute index: the body's first input counts index0 + k
  int64_t index0 = 0;
  CheckpointPolicy policy = CheckpointPolicy::store;
  std::optional<int64_t> checkpoint_arg;
  int64_t segment = 0, snapshots = 0;  // (read only) every/sqrt: the segment length; binomial: snapshots

  OperandGroup consts() const { return {0, C}; }
  OperandGroup carries() const { return {C, K}; }
  OperandGroup xs() const { return {C + K, X}; }
  // In the body's inputs.
  std::size_t first_const() const { return has_index ? 1 : 0; }
  std::size_t first_carry() const { return first_const() + C; }
  std::size_t first_x() const { return first_carry() + K; }

  // Checked: counts fitting the `nargs` operands and the body, the counter's range, the
  // checkpoint policy (scan's errors). Types are the type rule's to check.
  static ScanParams read(const Attrs& attrs, std::size_t nargs);
  // The attributes, written over `base` (a call's own, to keep the attributes' order
  // when the loop is rebuilt); reverse=false is written only where base has reverse.
  Attrs attrs(Attrs base = {}) const;
};

// while_loop: %r... = while_loop(consts..., carries...) {cond, body, num_consts[, trips]
// [, max_trips]}. cond and body take consts, carries; cond gives one value of one
// element, body the next carries.
struct WhileParams {
  std::shared_ptr<const Tape> cond, body;
  std::size_t C = 0, K = 0;  // consts, carries (operands)
  bool has_trips = false;    // trips: the trip count of the run that recorded the call
  int64_t trips = 0;
  int64_t max_trips = -1;  // -1: none

  OperandGroup consts() const { return {0, C}; }
  OperandGroup carries() const { return {C, K}; }

  static WhileParams read(const Attrs& attrs, std::size_t nargs);
  Attrs attrs(Attrs base = {}) const;
};

// max_trips >= 0, else while_loop's error; `option` words it for WhileOptions::max_trips
// (where none means no limit). Returns max_trips.
int64_t checked_max_trips(int64_t max_trips, bool option = false);

// A carry leaving a loop body with the type it entered it, else `loop`'s error.
void check_carries(std::string_view loop, std::span<const VarType> entering, std::span<const VarType> leaving);

// revolve: a scan's backward half under binomial checkpointing (ir/src/prims_revolve.cpp).
// Its operands: the scan's consts, carries, xs (forward group), then the backward
// scan's consts, carries, xs (backward group, without the residuals).
struct RevolveParams {
  std::shared_ptr<const Tape> forward, advance, backward;
  int64_t length = 0, snapshots = 0;
  std::size_t C = 0, K = 0, X = 0, Y = 0;  // the forward scan's consts, carries, xs; its ys
  std::size_t R = 0;                        // the forward body's residuals (outputs after the ys)
  std::size_t BC = 0, BK = 0, BX = 0;       // the backward scan's consts, carries, xs
  bool reverse = false, has_index = false;
  int64_t index0 = 0;

  std::size_t counter() const { return has_index ? 1 : 0; }  // the counter input, first if present
  std::size_t nargs() const { return C + K + X + BC + BK + BX; }
  OperandGroup consts() const { return {0, C}; }
  OperandGroup carries() const { return {C, K}; }
  OperandGroup xs() const { return {C + K, X}; }
  OperandGroup backward_consts() const { return {C + K + X, BC}; }
  OperandGroup backward_carries() const { return {C + K + X + BC, BK}; }
  OperandGroup backward_xs() const { return {C + K + X + BC + BK, BX}; }

  static RevolveParams read(const Attrs& attrs, std::size_t nargs);
  Attrs attrs(Attrs base = {}) const;
};

// call and checkpoint: %r... = call(args...) {body}: the body runs once on the arguments.
struct CallParams {
  std::shared_ptr<const Tape> body;

  static CallParams read(const Attrs& attrs);
  Attrs attrs(Attrs base = {}) const;
};

}  // namespace reel
