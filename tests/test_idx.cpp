// The Fashion-MNIST example's IDX loader, on small files the test writes itself (CI
// does not need the data set): values, scaling, one-hot labels, and a reel::Error for
// every kind of bad file.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "child_process.hpp"
#include "idx.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / fmt::format("reel-idx-{}-{}", ::getpid(), name)).string();
}

void write_raw(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
}

}  // namespace

TEST_CASE("idx: images and labels written and read back") {
  idx::Array im{{2, 2, 3}, {0, 51, 102, 153, 204, 255, 255, 0, 0, 0, 0, 255}};
  idx::Array lab{{2}, {7, 1}};
  const std::string ip = temp_path("images.gz"), lp = temp_path("labels.gz");
  idx::write(ip, im);
  idx::write(lp, lab);
  const idx::Array im2 = idx::read(ip), lab2 = idx::read(lp);
  CHECK(im2.dims == im.dims);
  CHECK(im2.data == im.data);
  const reel::Tensor x = idx::images(im2, reel::DType::f64);
  CHECK(x.shape() == reel::Shape{2, 6});
  CHECK(x.values() == std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1, 1, 0, 0, 0, 0, 1});
  const reel::Tensor y = idx::one_hot(lab2, 10, reel::DType::f64);
  CHECK(y.shape() == reel::Shape{2, 10});
  CHECK(y.values()[7] == 1);
  CHECK(y.values()[11] == 1);
  CHECK(reel::sum(y).item() == 2);
  CHECK(idx::labels(lab2).values() == std::vector<double>{7, 1});
  CHECK_THROWS_WITH_AS(idx::one_hot(lab2, 5), doctest::Contains("label 7 (element 0) is not below 5 classes"), reel::Error);
  CHECK_THROWS_WITH_AS(idx::images(lab2), doctest::Contains("expected images [n, rows, cols]"), reel::Error);
  // An uncompressed file reads the same.
  write_raw(temp_path("plain"), {0, 0, 8, 1, 0, 0, 0, 2, 7, 1});
  CHECK(idx::read(temp_path("plain")).data == lab.data);
  fs::remove(ip);
  fs::remove(lp);
  fs::remove(temp_path("plain"));
}

TEST_CASE("idx: bad files are errors naming the problem") {
  const std::string p = temp_path("bad");
  CHECK_THROWS_WITH_AS(idx::read(temp_path("missing")), doctest::Contains("cannot open"), reel::Error);
  write_raw(p, {0, 0});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("the file ends inside the header"), reel::Error);
  write_raw(p, {1, 2, 8, 1, 0, 0, 0, 1, 0});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("expected an IDX file"), reel::Error);
  write_raw(p, {0, 0, 0x0d, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("expected unsigned bytes (type 0x08), got type 0x0d"), reel::Error);
  write_raw(p, {0, 0, 8, 9});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("expected 1 to 4 dimensions, got 9"), reel::Error);
  write_raw(p, {0, 0, 8, 1, 0, 0});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("the file ends inside the dimensions"), reel::Error);
  write_raw(p, {0, 0, 8, 1, 0, 0, 0, 5, 1, 2});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("the file ends inside the elements"), reel::Error);
  write_raw(p, {0, 0, 8, 1, 0, 0, 0, 1, 1, 2});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("the file has more bytes"), reel::Error);
  write_raw(p, {0, 0, 8, 1, 0x80, 0, 0, 0});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("more than 2^31 - 1"), reel::Error);
  write_raw(p, {0, 0, 8, 3, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff, 0x7f, 0xff, 0xff, 0xff});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("more than 2^32 elements"), reel::Error);
  // A header claiming 2^32 elements in a file of 16 bytes: an error at the end of the
  // data, not an allocation of what it claims.
  write_raw(p, {0, 0, 8, 2, 0, 1, 0, 0, 0, 1, 0, 0, 1, 2, 3, 4});
  CHECK_THROWS_WITH_AS(idx::read(p), doctest::Contains("the file ends inside the elements"), reel::Error);
  CHECK_THROWS_WITH_AS(idx::one_hot(idx::Array{{1}, {0}}, -1), doctest::Contains("expected 1 to 256 classes"),
                       reel::Error);
  fs::remove(p);
}

TEST_CASE("issue 33.5: IDX images with dims not matching the data is an error") {
  // Arrays built by hand: the dims claim more (or fewer) elements than the data holds.
  const idx::Array images{{2, 28, 28}, std::vector<uint8_t>(10, 255)};
  const idx::Array labels{{5}, std::vector<uint8_t>(100000, 1)};
  const idx::Array negative{{-2, 28, -28}, std::vector<uint8_t>(1568)};
  const idx::Array huge{{int64_t{1} << 40, int64_t{1} << 40, 2}, {}};
  // In a child first: what used to read and write out of bounds must not take the suite down.
  const std::string how = reel::test::run_in_child([&] {
    for (const auto& call : std::vector<std::function<void()>>{
             [&] { (void)idx::images(images); }, [&] { (void)idx::image_rows(images, {0, 1}, 0, 2); },
             [&] { (void)idx::labels(labels); }, [&] { (void)idx::one_hot(labels, 10); },
             [&] { (void)idx::images(negative); }, [&] { (void)idx::images(huge); }}) {
      try {
        call();
        _exit(4);  // no error
      } catch (const reel::Error&) {
      }
    }
  });
  REQUIRE(how == "exit 0");
  CHECK_ERROR(idx::images(images), "idx: images: the dimensions [2, 28, 28] make 1568 elements, but the data holds 10 bytes");
  CHECK_ERROR(idx::image_rows(images, {0, 1}, 0, 2), "idx: image_rows: the dimensions [2, 28, 28] make 1568 elements");
  CHECK_ERROR(idx::labels(labels), "idx: labels: the dimensions [5] make 5 elements, but the data holds 100000 bytes");
  CHECK_ERROR(idx::one_hot(labels, 10), "idx: one_hot: the dimensions [5] make 5 elements");
  CHECK_ERROR(idx::images(negative), "idx: images: expected dimensions >= 0 whose product fits in int64, got [-2, 28, -28]");
  CHECK_ERROR(idx::images(huge), "idx: images: expected dimensions >= 0 whose product fits in int64");
  CHECK_ERROR(idx::images(idx::Array{{2, 2}, {1, 2, 3, 4}}), "idx: images: expected images [n, rows, cols], got 2 dimensions");
  // Consistent arrays still read.
  CHECK(idx::images(idx::Array{{1, 1, 2}, {0, 255}}, reel::DType::f64).values() == std::vector<double>{0, 1});
  CHECK(idx::labels(idx::Array{{2}, {3, 4}}).values() == std::vector<double>{3, 4});
}
