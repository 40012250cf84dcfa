#include "reel/tracker.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "reel/ir/builder.hpp"
#include "reel/ops.hpp"
#include "reel/passes.hpp"
#include "reel/play.hpp"

namespace reel {

namespace {

using detail::OpNode;
using detail::TrackedCall;
using detail::TrackNode;

const OpNode* op_node(const Tensor& t) { return dynamic_cast<const OpNode*>(t.track_node().get()); }

Tensor untracked(const Tensor& t) {
  Tensor u = t;
  u.make_plain();
  return u;
}

Error stale(const Tensor& p) {
  return Error(fmt::format("back: a param ({}) was updated in place after y was computed from it; compute y again",
                           type_str(p.dtype(), p.shape())));
}

// The recorded calls y depends on, in an order where each follows its arguments
// (an iterative depth-first walk: recorded chains may be very long), and the params.
struct Recorded {
  std::vector<const TrackedCall*> order;
  std::vector<Tensor> params;  // one tensor per distinct param node, in order of discovery
  // The version of each param's values y was computed from (detail::ParamNode): W.assign
  // on another thread may change it while back runs.
  std::vector<uint64_t> versions;
};

Recorded recorded(const Tensor& y) {
  Recorded r;
  std::unordered_map<const TrackNode*, std::size_t> param_index;
  std::unordered_set<const TrackedCall*> visited;
  auto note_param = [&](const Tensor& t, uint64_t version) {
    const auto [it, is_new] = param_index.try_emplace(t.track_node().get(), r.params.size());
    if (is_new) {
      r.params.push_back(t);
      r.versions.push_back(version);
    } else if (r.versions[it->second] != version) {
      throw stale(t);  // y mixes values read before and after an update
    }
  };
  struct Frame {
    const TrackedCall* call;
    std::size_t next = 0;
  };
  std::vector<Frame> stack;
  // version: the param's version when t was recorded as an argument.
  auto visit = [&](const Tensor& t, uint64_t version) {
    if (t.is_param()) note_param(t, version);
    else if (const OpNode* n = op_node(t); n != nullptr && visited.insert(n->call.get()).second)
      stack.push_back({n->call.get()});
  };
  visit(y, y.is_param() ? detail::stable_version(detail::param_node(y)) : 0);
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next < f.call->args.size()) {
      const std::size_t i = f.next++;
      const Tensor& a = f.call->args[i];
      if (a.is_param() && detail::param_node(a).version.load() != f.call->versions[i]) throw stale(a);
      visit(a, f.call->versions[i]);  // may grow the stack (f is not used after)
      continue;
    }
    r.order.push_back(f.call);
    stack.pop_back();
  }
  return r;
}

// The tape: params as inputs, the calls, y as the output.
Tape recorded_tape(const Recorded& r, const Tensor& y) {
  TapeBuilder b;
  std::unordered_map<const TrackNode*, Var> param_vars;
  for (const Tensor& p : r.params) param_vars[p.track_node().get()] = b.input({p.dtype(), p.shape()});
  std::unordered_map<const TrackedCall*, std::vector<Var>> results;
  auto var_of = [&](const Tensor& t) -> Var {
    if (t.is_param()) return param_vars.at(t.track_node().get());
    if (const OpNode* n = op_node(t)) return results.at(n->call.get()).at(n->index);
    return b.constant(untracked(t));
  };
  for (const TrackedCall* c : r.order) {
    std::vector<Var> args;
    args.reserve(c->args.size());
    for (const Tensor& a : c->args) args.push_back(var_of(a));
    if (c->results == 1) results[c] = {b.call(*c->prim, std::move(args), c->attrs)};
    else results[c] = b.call_results(*c->prim, std::move(args), c->attrs);
  }
  b.set_outputs({var_of(y)});
  return b.finish();
}

// Adds each param's gradient (out[i + 1]) to its grad. (play read the params' memory
// unlocked: an assign meanwhile changes the version, checked below, and what was read is
// not used.) With every param's lock held (taken in one order, by address, so that
// backs on several threads never wait for each other in a cycle): backs on other
// threads add up exactly, and a param assigned while this one read its values (its
// version changed) adds nothing anywhere.
void accumulate(const Recorded& r, const std::vector<Tensor>& out) {
  const std::vector<Tensor>& params = r.params;
  std::vector<std::size_t> by_address(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) by_address[i] = i;
  std::sort(by_address.begin(), by_address.end(), [&](std::size_t a, std::size_t b) {
    return std::less<const TrackNode*>()(params[a].track_node().get(), params[b].track_node().get());
  });
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(params.size());
  for (const std::size_t i : by_address) locks.emplace_back(detail::param_node(params[i]).mutex);
  for (std::size_t i = 0; i < params.size(); ++i)
    if (detail::param_node(params[i]).version.load() != r.versions[i]) throw stale(params[i]);
  std::vector<Tensor> sums;  // all made before any is stored: all params get their sum, or none
  sums.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& grad = detail::param_node(params[i]).grad;
    const Tensor& d = out.at(i + 1);
    sums.push_back(grad.defined() ? untracked(add(grad, d)) : untracked(d));
  }
  for (std::size_t i = 0; i < params.size(); ++i) detail::param_node(params[i]).grad = std::move(sums[i]);
}

void back_impl(const Tensor& y, const Tensor& seed) {
  if (y.dtype() != DType::f32 && y.dtype() != DType::f64)
    throw Error(fmt::format("back: expected a floating-point y, got {} (no gradient flows through integers)",
                            type_str(y.dtype(), y.shape())));
  const Recorded r = recorded(y);
  if (r.params.empty()) throw Error("back: y depends on no param (make them with reel::param)");
  const Tape g = vjp_tape(recorded_tape(r, y));
  std::vector<Tensor> in;
  in.reserve(r.params.size() + 1);
  for (const Tensor& p : r.params) in.push_back(untracked(p));
  in.push_back(untracked(seed));
  accumulate(r, play(g, in));
}

}  // namespace

void back(const Tensor& y) {
  if (!y.defined()) throw Error("back: expected a tensor computed from params, got an undefined tensor");
  if (y.numel() != 1)
    throw Error(fmt::format("back: expected a one-element y (or a seed: back(y, seed)), got {}",
                            type_str(y.dtype(), y.shape())));
  back_impl(y, ones(y.shape(), y.dtype()));
}

void back(const Tensor& y, const Tensor& seed) {
  if (!y.defined()) throw Error("back: expected a tensor computed from params, got an undefined tensor");
  if (!seed.defined() || seed.dtype() != y.dtype() || seed.shape() != y.shape())
    throw Error(fmt::format("back: expected a seed of y's type {}, got {}", type_str(y.dtype(), y.shape()),
                            seed.defined() ? type_str(seed.dtype(), seed.shape()) : "an undefined tensor"));
  back_impl(y, seed);
}

}  // namespace reel
