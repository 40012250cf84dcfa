#pragma once
// Trees of tensors (JAX's tree_util): any argument or result structure flattened into
// its tensors (the leaves) and a description of the rest (a TreeDef), and rebuilt from
// new leaves:
//
//   auto [leaves, def] = reel::tree_flatten(m);      // m: a Linear, a vector of them, a tuple, ...
//   for (Tensor& t : leaves) t = 2.0 * t;
//   Linear m2 = reel::tree_unflatten(def, leaves);   // m's structure, the new tensors
//
// A tree is any value reel/fields.hpp walks: a Tensor, a struct listed with
// REEL_FIELDS, std::vector, std::array, std::pair, std::tuple, std::optional and
// std::map<std::string, T> of them. Leaves come in walk order (the order of the field
// paths of reel::named_tensors). What is not a tensor is structure, not a leaf (JAX's
// auxiliary data): containers' sizes, which optionals are set, map keys, and plain
// values (numbers, enums, strings), which the rebuilt value carries as flattened. A type
// the walk cannot see into is a compile-time error naming REEL_FIELDS.
//
// This is the one walk over arguments, results and gradients: tracing makes a tree's
// leaves the tape's inputs and outputs (reel::trace), reel::jit rebuilds its results
// from a cached path's outputs with the TreeDef of the traced result, and a struct
// argument's gradient is the argument rebuilt with its gradients as leaves
// (reel::gradient, reel::simplegrad).
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "reel/error.hpp"
#include "reel/fields.hpp"

namespace reel {

namespace detail {

// Whether T is a tree of tensors (something f may return to be traced).
template <class T>
constexpr bool is_tree() {
  return may_hold_tensors<T>();
}

template <class T>
std::size_t count_leaves(const T& x) {
  std::size_t n = 0;
  for_each_unread_tensor(x, [&](const Tensor&) { ++n; });
  return n;
}

[[noreturn]] inline void throw_leaf_count(const char* op, std::size_t expected, std::size_t given) {
  throw Error(std::string(op) + ": expected " + std::to_string(expected) + " tensors for the structure, got " +
              std::to_string(given));
}

// `like` with its tensors replaced by leaves[next], leaves[next + 1], ... in walk
// order; `next` ends past the last one used. Throws reel::Error naming `op` when the
// leaves run out.
template <class T>
T refill(const T& like, std::span<const Tensor> leaves, std::size_t& next, const char* op) {
  static_assert(is_tree<T>(), "reel: a tree holds tensors (a Tensor, a struct listed with REEL_FIELDS, containers)");
  T out = like;
  const std::size_t first = next;
  for_each_unread_tensor(out, [&](Tensor& t) {
    if (next >= leaves.size()) throw_leaf_count(op, count_leaves(like), leaves.size() - first);
    t = leaves[next++];
  });
  return out;
}

}  // namespace detail

// The structure of a tree of type T: everything but its tensors.
template <class T>
class TreeDef {
 public:
  // like's structure; its tensors are not kept (the skeleton holds undefined ones).
  explicit TreeDef(const T& like) : skeleton_(like) {
    detail::for_each_unread_tensor(skeleton_, [&](Tensor& t) { t = Tensor(), ++num_leaves_; });
  }
  std::size_t num_leaves() const { return num_leaves_; }
  // The tree with these leaves, in walk order: a reel::Error naming tree_unflatten
  // unless there are exactly num_leaves() of them.
  T unflatten(std::span<const Tensor> leaves) const {
    if (leaves.size() != num_leaves_) detail::throw_leaf_count("tree_unflatten", num_leaves_, leaves.size());
    std::size_t next = 0;
    return detail::refill(skeleton_, leaves, next, "tree_unflatten");
  }

 private:
  T skeleton_;
  std::size_t num_leaves_ = 0;
};

// x's tensors in walk order (tensors_of under JAX's name).
template <class T>
std::vector<Tensor> tree_leaves(const T& x) {
  static_assert(detail::is_tree<T>(), "reel::tree_leaves: x holds no tensors");
  return tensors_of(x);
}

// x's leaves and its structure: tree_unflatten(def, leaves) gives x back.
template <class T>
std::pair<std::vector<Tensor>, TreeDef<T>> tree_flatten(const T& x) {
  return {tree_leaves(x), TreeDef<T>(x)};
}

template <class T>
T tree_unflatten(const TreeDef<T>& def, std::span<const Tensor> leaves) {
  return def.unflatten(leaves);
}

}  // namespace reel
