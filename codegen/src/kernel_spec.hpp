#pragma once
// A generated kernel, described without the tape. Needs no LLVM.
//
// A kernel is one loop nest (a fused elementwise loop with its sums, a reduction, a
// transpose, a gather, pooling windows, a whole scan...): its buffers as numbered
// parameters, and its kind's part (KernelBody, one alternative per kind of
// kernels/table.hpp). Its `key` spells all of that out (operations, dtypes, shapes,
// strides, which values are stored and summed, which parameters are shared by an
// in-place update) and nothing else (no variable numbers, no addresses), so equal keys
// mean interchangeable code, and a process-wide cache compiles each key once.
#include <string>
#include <vector>

#include "kernels/table.hpp"

namespace reel::codegen {

struct KernelSpec {
  std::vector<DType> params;  // the buffers, each distinct memory
  // Each buffer's guaranteed alignment in bytes; empty: 64 for all. A loop body's slices
  // of stacked xs and ys may be less aligned (a power of two dividing the slice's size).
  std::vector<int64_t> align;
  bool empty = false;  // over no elements
  KernelBody body;
  // > 0: a large kernel, run in chunks of this many iterations of its outer loop on the
  // thread pool (ParallelKernelArgs): emitted as a RangeFn, its sums (and a reduction
  // to one number) written as partial results. The outer loop is its kind's
  // (KernelRow::split).
  int64_t chunk = 0;
  std::string key;

  template <class Body>
  const Body& as() const {
    return std::get<Body>(body);
  }
};

// The extent of the loop a kernel's chunks split and the elements one iteration of it
// covers; {0, 0} if the kernel cannot be split.
struct SplitExtent {
  int64_t extent = 0, inner = 0;
};
SplitExtent split_extent(const KernelSpec& kernel);

// The key of a kernel (KernelSpec::key): its kind's, then its chunks.
std::string make_key(const KernelSpec& kernel);

// Coalesces dims: drops size-1 dimensions and merges neighbours that every stride
// vector walks contiguously.
void coalesce(std::vector<int64_t>& dims, std::vector<std::vector<int64_t>>& strides);

// The product of v[from..].
int64_t product(const std::vector<int64_t>& v, std::size_t from = 0);
// Row-major element strides of a shape.
std::vector<int64_t> contiguous(const Shape& shape);
// A list of integers as keys spell it: [1,2,3]; append_ints writes it at the end of `to`
// (a scalar trace makes thousands of keys).
std::string ints(const std::vector<int64_t>& v);
void append_ints(std::string& to, const std::vector<int64_t>& v);

}  // namespace reel::codegen
