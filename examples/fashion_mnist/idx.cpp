#include "idx.hpp"

#include <fmt/format.h>
#include <zlib.h>

#include <limits>
#include <memory>
#include <type_traits>

namespace idx {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using Gz = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads exactly n bytes, or throws naming what was being read.
void read_exactly(gzFile f, void* out, std::size_t n, const std::string& path, const char* what) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n, 1u << 30));
    const int got = gzread(f, p, chunk);
    if (got < 0) {
      int err = 0;
      throw reel::Error(fmt::format("idx: {}: cannot read {}: {}", path, what, gzerror(f, &err)));
    }
    if (got == 0) throw reel::Error(fmt::format("idx: {}: the file ends inside the {}", path, what));
    p += got;
    n -= static_cast<std::size_t>(got);
  }
}

}  // namespace

Array read(const std::string& path) {
  Gz f(gzopen(path.c_str(), "rb"));
  if (!f) throw reel::Error(fmt::format("idx: cannot open {}", path));
  unsigned char magic[4];
  read_exactly(f.get(), magic, 4, path, "header");
  if (magic[0] != 0 || magic[1] != 0)
    throw reel::Error(fmt::format("idx: {}: expected an IDX file (magic 00 00 tt nn), got {:02x} {:02x} {:02x} {:02x}",
                                  path, magic[0], magic[1], magic[2], magic[3]));
  if (magic[2] != 0x08)
    throw reel::Error(fmt::format("idx: {}: expected unsigned bytes (type 0x08), got type 0x{:02x}", path, magic[2]));
  if (magic[3] < 1 || magic[3] > 4)
    throw reel::Error(fmt::format("idx: {}: expected 1 to 4 dimensions, got {}", path, magic[3]));
  Array a;
  int64_t total = 1;
  for (int d = 0; d < magic[3]; ++d) {
    unsigned char b[4];
    read_exactly(f.get(), b, 4, path, "dimensions");
    const uint32_t n = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    if (n > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()))
      throw reel::Error(fmt::format("idx: {}: dimension {} is {}, more than 2^31 - 1", path, d + 1, n));
    if (n != 0 && total > (int64_t{1} << 32) / n)
      throw reel::Error(fmt::format("idx: {}: the dimensions make more than 2^32 elements", path));
    total *= n;
    a.dims.push_back(n);
  }
  // Read in chunks, growing as data arrives, so that a header claiming more than the
  // file holds fails at the file's end rather than allocating what it claims.
  constexpr std::size_t kChunk = std::size_t{1} << 24;
  for (std::size_t done = 0; done < static_cast<std::size_t>(total);) {
    const std::size_t n = std::min(kChunk, static_cast<std::size_t>(total) - done);
    a.data.resize(done + n);
    read_exactly(f.get(), a.data.data() + done, n, path, "elements");
    done += n;
  }
  unsigned char extra;
  if (gzread(f.get(), &extra, 1) != 0)
    throw reel::Error(fmt::format("idx: {}: expected {} elements, the file has more bytes", path, total));
  return a;
}

void write(const std::string& path, const Array& a) {
  Gz f(gzopen(path.c_str(), "wb"));
  if (!f) throw reel::Error(fmt::format("idx: cannot write {}", path));
  std::vector<unsigned char> head{0, 0, 0x08, static_cast<unsigned char>(a.dims.size())};
  for (int64_t d : a.dims)
    for (int shift : {24, 16, 8, 0}) head.push_back(static_cast<unsigned char>((d >> shift) & 0xff));
  if (gzwrite(f.get(), head.data(), static_cast<unsigned>(head.size())) != static_cast<int>(head.size()) ||
      (!a.data.empty() &&
       gzwrite(f.get(), a.data.data(), static_cast<unsigned>(a.data.size())) != static_cast<int>(a.data.size())))
    throw reel::Error(fmt::format("idx: cannot write {}", path));
}

namespace {
// An Array built by hand may say one thing in dims and hold another in data: every
// reader of its elements checks first that the dims (each >= 0, at most `rank` of them)
// multiply to the number of bytes held, or throws naming `op`.
void check_array(const char* op, const Array& a, std::size_t rank, const char* expected) {
  if (a.dims.size() != rank)
    throw reel::Error(fmt::format("idx: {}: expected {}, got {} dimensions", op, expected, a.dims.size()));
  int64_t total = 1;
  for (int64_t d : a.dims)
    if (d < 0 || (d != 0 && total > std::numeric_limits<int64_t>::max() / d))
      throw reel::Error(fmt::format("idx: {}: expected dimensions >= 0 whose product fits in int64, got [{}]", op,
                                    fmt::join(a.dims, ", ")));
    else total *= d;
  if (static_cast<uint64_t>(total) != a.data.size())
    throw reel::Error(fmt::format("idx: {}: the dimensions [{}] make {} elements, but the data holds {} bytes", op,
                                  fmt::join(a.dims, ", "), total, a.data.size()));
}

// Rows row(0), ..., row(count - 1) of images `a`, scaled to [0, 1], written straight into
// the tensor (a vector of doubles first held 376 MB for the 47 million training pixels).
template <class Row>
reel::Tensor scaled_rows(const char* op, const Array& a, int64_t count, reel::DType dtype, Row row) {
  check_array(op, a, 3, "images [n, rows, cols]");
  const int64_t pixels = a.dims[1] * a.dims[2];
  reel::Tensor t(dtype, {count, pixels});
  auto fill = [&](auto* out) {
    using T = std::remove_pointer_t<decltype(out)>;
    for (int64_t r = 0; r < count; ++r) {
      const int64_t i = row(r);
      if (i < 0 || i >= a.dims[0])
        throw reel::Error(fmt::format("idx: image {} of {} asked for", i, a.dims[0]));
      const uint8_t* in = a.data.data() + i * pixels;
      for (int64_t p = 0; p < pixels; ++p) out[r * pixels + p] = static_cast<T>(in[p] / 255.0);
    }
  };
  if (dtype == reel::DType::f32) fill(t.mutable_data<float>());
  else if (dtype == reel::DType::f64) fill(t.mutable_data<double>());
  else throw reel::Error(fmt::format("idx: images are f32 or f64, not {}", reel::dtype_name(dtype)));
  return t;
}
}  // namespace

reel::Tensor images(const Array& a, reel::DType dtype) {
  return scaled_rows("images", a, a.dims.size() == 3 ? a.dims[0] : 0, dtype, [](int64_t r) { return r; });
}

reel::Tensor image_rows(const Array& a, const std::vector<int64_t>& which, std::size_t from, int64_t count,
                        reel::DType dtype) {
  if (count < 0 || from + static_cast<std::size_t>(count) > which.size())
    throw reel::Error(fmt::format("idx: {} images from {} of a list of {}", count, from, which.size()));
  return scaled_rows("image_rows", a, count, dtype, [&](int64_t r) { return which[from + static_cast<std::size_t>(r)]; });
}

reel::Tensor labels(const Array& a) {
  check_array("labels", a, 1, "labels [n]");
  reel::Tensor t(reel::DType::i64, {a.dims[0]});
  for (std::size_t i = 0; i < a.data.size(); ++i) t.mutable_data<int64_t>()[i] = a.data[i];
  return t;
}

reel::Tensor one_hot(const Array& a, int64_t classes, reel::DType dtype) {
  if (classes < 1 || classes > 256) throw reel::Error(fmt::format("idx: expected 1 to 256 classes, got {}", classes));
  check_array("one_hot", a, 1, "labels [n]");
  std::vector<double> v(a.data.size() * static_cast<std::size_t>(classes), 0.0);
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    if (a.data[i] >= classes)
      throw reel::Error(fmt::format("idx: label {} (element {}) is not below {} classes", a.data[i], i, classes));
    v[i * static_cast<std::size_t>(classes) + a.data[i]] = 1.0;
  }
  return reel::tensor(v, {a.dims[0], classes}, dtype);
}

}  // namespace idx
