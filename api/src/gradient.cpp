#include "reel/gradient.hpp"

#include <fmt/format.h>

namespace reel {

void Params::push_back(Tensor& t) {
  for (std::size_t i = 0; i < vars_.size(); ++i)
    if (vars_[i] == &t) throw Error(fmt::format("Params: a variable is listed twice (entries {} and {})", i + 1, vars_.size() + 1));
  vars_.push_back(&t);
}

Grads make_grads(const Params& ps, std::vector<Tensor> grads) {
  if (grads.size() != ps.size())
    throw Error(fmt::format("gradient: expected {} gradients (one per param), got {}", ps.size(), grads.size()));
  Grads g;
  for (Tensor* p : ps) g.vars_.push_back({p, *p});
  g.grads_ = std::move(grads);
  return g;
}

const Tensor& Grads::operator[](const Tensor& t) const {
  for (std::size_t i = 0; i < vars_.size(); ++i)
    if (vars_[i].var == &t) return grads_[i];
  // A copy of a listed tensor: the same memory and shape, and only one such entry.
  std::size_t found = vars_.size(), matches = 0;
  for (std::size_t i = 0; i < vars_.size(); ++i)
    if (t.defined() && vars_[i].value.raw() == t.raw() && vars_[i].value.shape() == t.shape() &&
        vars_[i].value.nbytes() > 0)
      found = i, ++matches;
  if (matches == 1) return grads_[found];
  if (matches > 1)
    throw Error(fmt::format("gradient: this tensor shares its memory with {} of the Params; look it up by the "
                            "variable listed",
                            matches));
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
    for (Tensor* p : ps) {
      scope.forbid_untraced_copies(*p,
                                   "f used a copy of a Params tensor (captured by value, or put in a struct before "
                                   "the call), which would get no gradient; capture the variables by reference ([&])");
      *p = scope.input(*p);
    }
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
