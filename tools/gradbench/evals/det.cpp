// GradBench's det: the determinant by expansion by minors, and its gradient (the cofactors).
#include "evals.hpp"

#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace gradbench::evals {

namespace {

// The determinant by expansion by minors along the first row, recursively, with each
// minor computed once: the minors of the bottom k rows are indexed by their column
// subsets S, and det_k(S) = sum over j in S, at position t, of (-1)^t a[l-k][j]
// det_{k-1}(S \ {j}). The same sum as the recursion (l * 2^(l-1) products instead of
// l!), and its gradient, the cofactors, by reverse mode through the gathers.
Tensor det(const Tensor& A, int64_t ell) {
  const Tensor M = reel::reshape(A, {ell, ell});
  // Subsets of {0..l-1} of each size, as bit masks, in increasing order; their positions.
  std::vector<std::vector<uint32_t>> subsets(static_cast<std::size_t>(ell + 1));
  for (uint32_t mask = 0; mask < (1u << ell); ++mask)
    subsets[static_cast<std::size_t>(std::popcount(mask))].push_back(mask);
  std::vector<std::map<uint32_t, int64_t>> position(static_cast<std::size_t>(ell + 1));
  for (std::size_t k = 0; k <= static_cast<std::size_t>(ell); ++k)
    for (std::size_t i = 0; i < subsets[k].size(); ++i) position[k][subsets[k][i]] = static_cast<int64_t>(i);
  Tensor minors = reel::index(M, ell - 1);  // the bottom row's 1x1 minors, by column
  for (int64_t k = 2; k <= ell; ++k) {
    const auto& level = subsets[static_cast<std::size_t>(k)];
    const auto n = static_cast<int64_t>(level.size());
    std::vector<int64_t> cols, prev;
    std::vector<double> signs;
    for (uint32_t S : level) {
      int64_t t = 0;
      for (int64_t j = 0; j < ell; ++j)
        if (S & (1u << j)) {
          cols.push_back(j);
          prev.push_back(position[static_cast<std::size_t>(k - 1)].at(S & ~(1u << j)));
          signs.push_back(t % 2 == 0 ? 1.0 : -1.0);
          ++t;
        }
    }
    auto indices = [&](const std::vector<int64_t>& v) {
      Tensor t(reel::DType::i64, {n, k});
      std::copy(v.begin(), v.end(), t.mutable_data<int64_t>());
      return t;
    };
    const Tensor row = reel::index(M, ell - k);
    minors = reel::sum(reel::tensor(signs, {n, k}) * reel::take(row, indices(cols)) * reel::take(minors, indices(prev)), 1);
  }
  return reel::index(minors, 0);
}

}  // namespace

// ell, then A (ell x ell values).
TensorAndCount det_input(const json& input) {
  const int64_t ell = integer(input, "det", "ell", 1, 20, " (the largest matrix this tool takes)");
  Tensor A = input_tensor(input, "A");
  if (A.numel() != ell * ell) throw reel::Error(fmt::format("det: expected A with {} values, got {}", ell * ell, A.numel()));
  return {A, ell};
}

Functions det_functions() { return primal_and_gradient(det_input, det, scalar_json, det); }

}  // namespace gradbench::evals
