#pragma once
// The IDX file format of (Fashion-)MNIST, gzipped or not: magic (two zero bytes, the
// element type, the number of dimensions), the dimensions as big-endian 32-bit
// integers, then the elements. Only unsigned bytes (type 0x08), which is what the data
// sets use. Read through zlib, which reads plain files too.
#include <reel/reel.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace idx {

struct Array {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // row-major
};

// Throws reel::Error naming the file and what is wrong with it (missing, bad magic,
// another element type, too many or too large dimensions, truncated, trailing bytes).
Array read(const std::string& path);
// Writes `a` gzipped (for tests and tools).
void write(const std::string& path, const Array& a);

// Images [n, rows, cols] as an [n, rows * cols] tensor scaled to [0, 1].
reel::Tensor images(const Array& a, reel::DType dtype = reel::DType::f32);
// The images `which[from]`, ..., `which[from + count - 1]` alone, the same values (a
// batch, gathered from the bytes: the training set stays 47 MB of bytes, not 188 MB of f32).
reel::Tensor image_rows(const Array& a, const std::vector<int64_t>& which, std::size_t from, int64_t count,
                        reel::DType dtype = reel::DType::f32);
// Labels [n] (values below `classes`) as one-hot rows [n, classes], and as i64 [n].
reel::Tensor one_hot(const Array& a, int64_t classes, reel::DType dtype = reel::DType::f32);
reel::Tensor labels(const Array& a);

}  // namespace idx
