#include "reel/gradient.hpp"

#include <fmt/format.h>

namespace reel {

Grads make_grads(const Params& ps, std::vector<Tensor> grads) {
  if (grads.size() != ps.size())
    throw Error(fmt::format("gradient: expected {} gradients (one per param), got {}", ps.size(), grads.size()));
  Grads g;
  for (Tensor* p : ps) g.vars_.push_back({p, p->raw(), p->shape()});
  g.grads_ = std::move(grads);
  return g;
}

const Tensor& Grads::operator[](const Tensor& t) const {
  for (std::size_t i = 0; i < vars_.size(); ++i)
    if (vars_[i].var == &t) return grads_[i];
  for (std::size_t i = 0; i < vars_.size(); ++i)  // a copy of a listed tensor
    if (t.defined() && vars_[i].storage == t.raw() && vars_[i].shape == t.shape()) return grads_[i];
  throw Error(fmt::format("gradient: {} is not one of the {} Params (a tensor used but not listed is a constant "
                          "and has no gradient)",
                          t.defined() ? "this " + type_str(t.dtype(), t.shape()) + " tensor" : "an undefined tensor",
                          vars_.size()));
}

namespace detail {

ParamsAsInputs::ParamsAsInputs(TraceScope& scope, const Params& ps) : ps_(ps) {
  saved_.reserve(ps.size());
  for (Tensor* p : ps) saved_.push_back(*p);
  try {
    for (Tensor* p : ps) *p = scope.input(*p);
  } catch (...) {
    for (std::size_t i = 0; i < saved_.size(); ++i) ps[i] = saved_[i];
    throw;
  }
}

ParamsAsInputs::~ParamsAsInputs() {
  for (std::size_t i = 0; i < saved_.size(); ++i) ps_[i] = saved_[i];
}

}  // namespace detail

}  // namespace reel
