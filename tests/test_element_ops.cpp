// Every operation of the element machine, walked from its one list
// (runtime/include/reel/element_ops.def) without naming any: recorded as an element
// program, its value by the interpreter (eval_element on NumMath) equals NumMath's
// method exactly, and compiled code (the code generator's translation of the program)
// agrees with both on ordinary and special values (±0, ±inf, NaN, ties), in f64 and f32.
// A new operation is covered here by its line in the list.
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "reel/elementwise.hpp"
#include "reel/ir/element.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

// One operation of the list: its name and operands, how to record it (values from
// inputs 0, 1, 2; `p` its constant), and NumMath's method called directly.
struct VocabOp {
  const char* name;
  ElemOp op;
  ElemOperands operands;
  ElementProgram (*record)(double p);
  double (*f64)(double a, double b, double c, double p);
  float (*f32)(float a, float b, float c, double p);
};

ElementRecorder::Value input_or_none(ElementRecorder& r, int i, ElemOperands operands) {
  return i < operands.values ? r.input(i) : -1;
}

#define REEL_NUMMATH(T, name, operands)                                                                \
  []([[maybe_unused]] T a, [[maybe_unused]] T b, [[maybe_unused]] T c, [[maybe_unused]] double p) { \
    return NumMath<T>{}.name(REEL_ELEM_ARGS_##operands);                                             \
  }
const VocabOp kVocabulary[] = {
#define REEL_ELEM_OP(name, operands, eval, lowering, symbol)                                   \
  {#name, ElemOp::name, elem_operands::operands,                                               \
   []([[maybe_unused]] double p) {                                                             \
     ElementRecorder r;                                                                        \
     [[maybe_unused]] const auto a = input_or_none(r, 0, elem_operands::operands);             \
     [[maybe_unused]] const auto b = input_or_none(r, 1, elem_operands::operands);             \
     [[maybe_unused]] const auto c = input_or_none(r, 2, elem_operands::operands);             \
     return r.finish(r.name(REEL_ELEM_ARGS_##operands));                                       \
   },                                                                                          \
   REEL_NUMMATH(double, name, operands), REEL_NUMMATH(float, name, operands)},
#include "reel/element_ops.def"
};
#undef REEL_NUMMATH

// A primitive whose element rule is `program` and whose eager function is the
// interpreter running it on NumMath: so the interpreter and compiled code run it.
const Primitive& program_primitive(const std::string& name, const ElementProgram& program, int arity) {
  if (const Primitive* p = find_primitive(name)) return *p;
  Primitive p;
  p.name = name;
  p.arity = arity;
  p.infer = [](std::span<const VarType> in, const Attrs&) { return in[0]; };
  p.eager = [program, arity](std::span<const Tensor> in, const Attrs&) {
    auto f = [&](const auto& e, auto... x) { return eval_element(program, e, {x...}); };
    if (arity == 1) return kernels::map_unary(in[0], f);
    if (arity == 2) return kernels::map_binary(in[0], in[1], f);
    return kernels::map_ternary(in[0], in[1], in[2], f);
  };
  p.element = [program](const Attrs&) { return program; };
  return register_primitive(p);
}

// The same value, bit for bit up to the NaN payload.
bool same(double x, double y) {
  return (std::isnan(x) && std::isnan(y)) || (x == y && std::signbit(x) == std::signbit(y));
}

// Compiled code may differ from libm in the last bits (vector math), nowhere else.
void check_compiled(double want, double got) {
  CAPTURE(want);
  CAPTURE(got);
  CHECK(std::isnan(want) == std::isnan(got));
  if (std::isinf(want) || want == 0) CHECK(same(want, got));
  else if (!std::isnan(want)) CHECK(std::abs(want - got) <= 1e-6 * std::abs(want));
}

std::vector<double> constants_for(const VocabOp& op) {
  if (!op.operands.constant) return {0.0};
  if (op.operands.values == 0) return {1.5, -0.0, std::numeric_limits<double>::infinity()};
  return {1.0, 2.0, 3.0, -1.0, 0.5, 2.5, -2.0};  // pow: the code generator's special cases and others
}

}  // namespace

TEST_CASE("every element operation: interpreter, NumMath and compiled code agree") {
  static_assert(std::size(kVocabulary) + 1 == kElemOpCount);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> values{0.0, -0.0, 1.0, -1.0, 0.5, -2.5, inf, -inf, nan, 1e-300, 0.25, 7.0, -0.75, 100.0, 3.0};
  const int64_t n = static_cast<int64_t>(values.size());
  std::set<std::string> names{elem_op_name(ElemOp::input)};
  for (const VocabOp& op : kVocabulary) {
    const std::string name = op.name;
    CAPTURE(name);
    CHECK(std::string(elem_op_name(op.op)) == op.name);
    CHECK(names.insert(op.name).second);
    CHECK(elem_op_operands(op.op).values == op.operands.values);
    CHECK(elem_op_operands(op.op).constant == op.operands.constant);
    const int arity = std::max(op.operands.values, 1);
    const std::vector<double> constants = constants_for(op);
    for (std::size_t k = 0; k < constants.size(); ++k) {
      const double p = constants[k];
      CAPTURE(p);
      const ElementProgram program = op.record(p);
      check_element_program(program, arity, op.name);
      CHECK(program.str().find(std::string("= ") + op.name) != std::string::npos);
      const Primitive& prim = program_primitive(fmt::format("vocab_{}_{}", op.name, k), program, arity);
      for (DType dtype : {DType::f64, DType::f32}) {
        const std::string dtype_text(dtype_name(dtype));
        CAPTURE(dtype_text);
        // Argument i is the values rotated by 3i, with a tie across them in the last element.
        std::vector<std::vector<double>> args(3, values);
        std::vector<Tensor> tensors;
        TapeBuilder b;
        std::vector<Var> in;
        for (int i = 0; i < arity; ++i) {
          std::rotate(args[i].begin(), args[i].begin() + 3 * i, args[i].end());
          args[i].back() = 3.0;
          tensors.push_back(tensor(args[i], {n}, dtype));
          in.push_back(b.input({dtype, {n}}));
        }
        b.set_outputs({b.call(prim, in)});
        const Tape t = b.finish();
        const std::vector<double> interpreted = play(t, tensors)[0].values(), compiled = compile(t)(tensors)[0].values();
        for (int64_t j = 0; j < n; ++j) {
          CAPTURE(j);
          const double x = args[0][j], y = args[1][j], z = args[2][j];
          const double direct = dtype == DType::f64
                                    ? op.f64(x, y, z, p)
                                    : op.f32(static_cast<float>(x), static_cast<float>(y), static_cast<float>(z), p);
          CHECK(same(interpreted[j], direct));
          check_compiled(direct, compiled[j]);
        }
      }
    }
  }
}
