#include "reel/grad.hpp"
#include "reel/simplegrad.hpp"

#include <fmt/format.h>

namespace reel {

namespace detail {

void check_tangents(const char* op, std::span<const Tensor> args, std::span<const Tensor> tangents) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Tensor& t = tangents[i];
    if (!t.defined() || t.dtype() != args[i].dtype() || t.shape() != args[i].shape())
      throw Error(fmt::format("{}: tangent {} must have its argument's type {}, got {}", op, i + 1,
                              type_str(args[i].dtype(), args[i].shape()),
                              t.defined() ? type_str(t.dtype(), t.shape()) : "undefined"));
  }
}

std::vector<Tensor> jvp_inputs(std::span<const Tensor> args, const std::vector<Tensor>& captured,
                               std::span<const Tensor> tangents, int64_t k) {
  std::vector<Tensor> in(args.begin(), args.end());
  in.insert(in.end(), captured.begin(), captured.end());
  in.insert(in.end(), tangents.begin(), tangents.end());
  for (const Tensor& c : captured) {
    Shape s = c.shape();
    if (k >= 0) s.insert(s.begin(), k);
    in.push_back(zeros(s, c.dtype()));
  }
  return in;
}

}  // namespace detail

TracedTensors trace_tensors(std::span<const Tensor> inputs,
                            const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                            bool lift_captures, bool value_guards) {
  detail::TraceScope scope(lift_captures, value_guards);
  std::vector<Tensor> traced;
  traced.reserve(inputs.size());
  for (const Tensor& t : inputs) traced.push_back(scope.input(t));
  for (const Tensor& t : f(traced)) scope.output(t);
  TracedTensors out;
  out.captured = scope.captured();
  out.tape = scope.finish();
  return out;
}

void check_seed(const Tape& tape, const Tensor& seed) {
  if (tape.outputs.size() != 1)
    throw Error(fmt::format("vjp: expected a function with one output, got {} outputs",
                            tape.outputs.size()));
  const VarType& out = tape.type(tape.outputs[0]);
  if (!seed.defined() || seed.dtype() != out.dtype || seed.shape() != out.shape)
    throw Error(fmt::format("vjp: the seed must have the output's type {}, got {}", type_str(out),
                            seed.defined() ? type_str(seed.dtype(), seed.shape()) : "undefined"));
}

int64_t tangent_count(const char* op, std::span<const Tensor> args, std::span<const Tensor> tangents) {
  if (args.empty() || !tangents[0].defined() || tangents[0].rank() != args[0].rank() + 1) {
    detail::check_tangents(op, args, tangents);
    return -1;
  }
  const int64_t k = tangents[0].shape()[0];
  for (std::size_t i = 0; i < args.size(); ++i) {
    const Tensor& t = tangents[i];
    Shape want = args[i].shape();
    want.insert(want.begin(), k);
    if (!t.defined() || t.dtype() != args[i].dtype() || t.shape() != want)
      throw Error(fmt::format("{}: tangent {} must have its argument's type {} (one direction) or, as tangent 1 has "
                              "{} directions, {}; got {}",
                              op, i + 1, type_str(args[i].dtype(), args[i].shape()), k,
                              type_str(args[i].dtype(), want), t.defined() ? type_str(t.dtype(), t.shape()) : "undefined"));
  }
  return k;
}

Tape own_gradients(const Tape& gradient_tape, std::size_t num_args) {
  if (gradient_tape.outputs.size() == num_args + 1) return gradient_tape;
  std::vector<int> keep(num_args + 1);
  for (std::size_t i = 0; i < keep.size(); ++i) keep[i] = static_cast<int>(i);
  return dce(select_outputs(gradient_tape, keep));
}

std::vector<Tensor> play_gradient(const Tape& gradient_tape, std::vector<Tensor> args, std::span<const Tensor> captured,
                                  std::span<const Tensor> extra) {
  const Tape g = own_gradients(gradient_tape, args.size());
  for (const Tensor& c : captured) args.push_back(detach(c));
  args.insert(args.end(), extra.begin(), extra.end());
  return play(g, args);
}

std::vector<Tensor> play_forward(const Tape& tape, std::span<const Tensor> args, const std::vector<Tensor>& captured,
                                 std::span<const Tensor> tangents, int64_t k) {
  return play(k < 0 ? jvp_tape(tape) : jvp_tape(tape, k), detail::jvp_inputs(args, captured, tangents, k));
}

namespace detail {

CompiledFunction compile_gradient(Tape traced) {
  Tape gradient = grad_tape(traced);  // (verified by grad_tape's reverse pass, and made from it)
  traced = Tape();
  return detail::compile_verified(std::move(gradient), {});
}

}  // namespace detail

}  // namespace reel
