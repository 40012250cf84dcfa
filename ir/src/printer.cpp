// Tape -> text. docs/tape-format.md describes the form; the parser reads it back.
#include <fmt/format.h>

#include "reel/ir/tape.hpp"
#include "text_nesting.hpp"

namespace reel {

namespace {

// Shortest text that reads back as the same value (fmt's default for floats).
std::string number(double v, DType dtype) {
  return dtype == DType::f32 ? fmt::format("{}", static_cast<float>(v)) : fmt::format("{}", v);
}

std::string constant_value(const Tensor& t) {
  if (t.dtype() == DType::i64) {  // exactly, not through double
    const int64_t* p = t.data<int64_t>();
    if (t.rank() == 0) return fmt::format("{}", p[0]);
    return fmt::format("[{}]", fmt::join(p, p + t.numel(), ", "));
  }
  const auto values = t.values();
  if (t.rank() == 0) return number(values[0], t.dtype());
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) s += ", ";
    s += number(values[i], t.dtype());
  }
  return s + "]";
}

}  // namespace

std::string to_string(const Tape& tape) {
  // A body's text is printed by attr_str calling this again: count the nesting.
  thread_local int depth_now = -1;
  struct Nest {
    int& d;
    explicit Nest(int& d_) : d(d_) { ++d; }
    ~Nest() { --d; }
  } nest(depth_now);
  if (depth_now > kMaxTextNesting)
    throw Error(fmt::format("to_string: expected tape attributes (loop and checkpoint bodies) nested at most {} deep, "
                            "got deeper",
                            kMaxTextNesting));
  check_structure("to_string", tape);
  std::string out;
  for (Var v = 1; v <= tape.size(); ++v) {
    const Op& op = tape.op(v);
    const std::string type = type_str(op.type);
    switch (op.kind) {
      case OpKind::input: out += fmt::format("inp %{}::{}\n", v, type); break;
      case OpKind::constant:
        out += fmt::format("%{} = const {}::{}\n", v, constant_value(op.value), type);
        break;
      case OpKind::call: {
        std::vector<std::string> args;
        for (Var a : op.args) args.push_back(fmt::format("%{}", a));
        for (const auto& [name, value] : op.attrs.items())
          args.push_back(fmt::format("{}={}", name, attr_str(value)));
        std::vector<std::string> vars{fmt::format("%{}", v)}, types{type};
        for (Var r = v + 1; r < v + op.results; ++r) {  // its result operations
          vars.push_back(fmt::format("%{}", r));
          types.push_back(type_str(tape.type(r)));
        }
        out += fmt::format("{} = {}({})::{}\n", fmt::join(vars, ", "), op.prim->name, fmt::join(args, ", "),
                           fmt::join(types, ", "));
        break;
      }
      case OpKind::result: break;  // printed with its call
    }
  }
  std::vector<std::string> outs;
  for (Var o : tape.outputs) outs.push_back(fmt::format("%{}", o));
  out += fmt::format("out {}", fmt::join(outs, ", "));
  return out;
}

}  // namespace reel
