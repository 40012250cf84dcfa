// reel::vmap's untemplated half: checking the batch, and running the batched tape.
#include "reel/vmap.hpp"

#include <fmt/format.h>

#include <memory>

#include "reel/ops.hpp"
#include "reel/track.hpp"
#include "reel/ir/body_tape.hpp"

namespace reel {

namespace {

std::string axis_str(const Axis& a) { return a.axis ? std::to_string(*a.axis) : std::string("none"); }

// The batch axis moved to `to` (both in [0, rank)).
Tensor move_axis(const Tensor& t, int64_t from, int64_t to) {
  if (from == to) return t;
  std::vector<int64_t> perm;
  const int64_t rank = static_cast<int64_t>(t.shape().size());
  for (int64_t i = 0; i < rank; ++i)
    if (i != from) perm.push_back(i);
  perm.insert(perm.begin() + to, from);
  return permute(t, perm);
}

// The value of t alone: not recorded by any trace, not tracked for reel::back.
Tensor plain(const Tensor& t) {
  Tensor d = detach(t);
  d.clear_trace_tags();
  return d;
}

}  // namespace

Axis Axes::at(std::size_t i, std::size_t n, const char* what) const {
  if (all) return *all;
  if (each.size() != n)
    throw Error(fmt::format("vmap: expected {} {} (one per {}), got {}", n, what,
                            std::string_view(what) == "in_axes" ? "argument" : "output tensor", each.size()));
  return each[i];
}

namespace detail {

void VmapInputs::add(const Tensor& t, std::optional<int64_t> axis, std::size_t argument) {
  if (!t.defined()) throw Error(fmt::format("vmap: argument {} holds an undefined tensor", argument + 1));
  leaves.push_back(t);
  if (!axis) {
    axes.emplace_back();
    return;
  }
  const int64_t rank = static_cast<int64_t>(t.shape().size());
  if (*axis < -rank || *axis >= rank)
    throw Error(fmt::format("vmap: in_axes {} of argument {} is out of range for {} (expected {} <= axis < {})",
                            *axis, argument + 1, type_str({t.dtype(), t.shape()}), -rank, rank));
  const int64_t a = *axis < 0 ? *axis + rank : *axis;
  const int64_t s = t.shape()[static_cast<std::size_t>(a)];
  if (size >= 0 && s != size)
    throw Error(fmt::format("vmap: expected every batched argument to have the batch size {} along its batch axis, "
                            "got {} (argument {}, {}, axis {})",
                            size, s, argument + 1, type_str({t.dtype(), t.shape()}), a));
  size = s;
  axes.push_back(a);
}

void VmapInputs::finish() {
  if (size < 0)
    throw Error("vmap: expected at least one batched argument (in_axes are all none, or no argument holds tensors)");
  // f is traced on a batch element: with none, its values (and so its loops' trip
  // counts, its guards) would be made up.
  if (size == 0)
    throw Error("vmap: expected a batch of at least one element (f is traced on the first), got a batch of size 0; "
                "reel::vmap_tape batches a tape for any size");
  for (std::size_t i = 0; i < leaves.size(); ++i) {
    const Tensor& t = leaves[i];
    if (!axes[i]) {
      examples.push_back(t);
      fronts.push_back(t);
      continue;
    }
    const Tensor front = move_axis(t, *axes[i], 0);
    fronts.push_back(front);
    examples.push_back(index(plain(front), 0));
  }
}

std::vector<Tensor> run_vmap(const Tape& body, const VmapInputs& in, const std::vector<Tensor>& captured,
                             const Axes& out_axes) {
  const std::size_t inputs = in.leaves.size() + captured.size();
  Flags flags(inputs);
  for (std::size_t i = 0; i < inputs; ++i) flags[i] = i < in.leaves.size() && in.axes[i].has_value();
  const Tape batched = vmap_tape(body, flags, in.size);
  std::vector<Tensor> args = in.fronts;
  args.insert(args.end(), captured.begin(), captured.end());
  std::vector<Tensor> out = play(batched, args);
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Axis a = out_axes.at(i, out.size(), "out_axes");
    if (!a.axis)
      throw Error(fmt::format("vmap: out_axes {} is none, expected an axis: every output is batched", i + 1));
    const int64_t rank = static_cast<int64_t>(out[i].shape().size());
    if (*a.axis < -rank || *a.axis >= rank)
      throw Error(fmt::format("vmap: out_axes {} for output {} of type {} is out of range (expected {} <= axis < {})",
                              axis_str(a), i + 1, type_str({out[i].dtype(), out[i].shape()}), -rank, rank));
    out[i] = move_axis(out[i], 0, *a.axis < 0 ? *a.axis + rank : *a.axis);
  }
  return out;
}

}  // namespace detail

}  // namespace reel
