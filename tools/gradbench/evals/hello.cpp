// GradBench's hello: square and double a number (the protocol's smoke test).
#include <memory>

#include "evals.hpp"

namespace gradbench::evals {

namespace {

// A maker that applies `op` to the input number.
template <class Op>
Maker on_number(Op op) {
  return [op](const json& input) {
    const double x = input.get<double>();
    auto out = std::make_shared<double>();
    return Prepared{[=] { *out = op(x); }, [=] { return json(*out); }};
  };
}

}  // namespace

Functions hello_functions() {
  return {{"square", on_number([](double x) { return x * x; })}, {"double", on_number([](double x) { return 2 * x; })}};
}

}  // namespace gradbench::evals
