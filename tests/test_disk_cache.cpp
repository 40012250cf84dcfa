// The persistent code cache: a module compiled once is loaded from disk by a later
// compile (in this process after its code was freed, or in another process), and a
// truncated, corrupt or foreign file is ignored and replaced, never linked. Each
// case uses a directory of its own and sizes no other test uses, so that the
// in-memory kernel cache cannot answer for the disk.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include "test_util.hpp"

using namespace reel;
namespace fs = std::filesystem;

namespace {

// A fresh cache directory for one case; the process's setting is restored after it.
class ScopedCacheDir {
 public:
  explicit ScopedCacheDir(const std::string& name)
      : before_(code_cache_info()),
        dir_(fs::temp_directory_path() / fmt::format("reel-test-cache-{}-{}", ::getpid(), name)) {
    fs::remove_all(dir_);
    set_code_cache_dir(dir_.string());
  }
  ~ScopedCacheDir() {
    set_code_cache_dir(before_.dir.empty() ? "off" : before_.dir);
    set_code_cache_max_bytes(before_.max_bytes);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::vector<fs::path> files() const {
    std::vector<fs::path> out;
    if (fs::exists(dir_))
      for (const auto& e : fs::directory_iterator(dir_)) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
  }
  int64_t bytes() const {
    int64_t total = 0;
    for (const fs::path& p : files()) total += static_cast<int64_t>(fs::file_size(p));
    return total;
  }

 private:
  CodeCacheInfo before_;
  fs::path dir_;
};

// A program of its own per size n: one fused loop with transcendental math.
Tape program(int64_t n) {
  return trace([](const Tensor& x) { return sum(tanh(x) * exp(x * 0.5) + sin(x)); }, zeros({n}));
}

// Compiles the program of size n, checks it against the interpreter, frees it.
void compile_and_check(int64_t n) {
  const Tape t = program(n);
  const Tensor x = randn({n}, 7);
  const CompiledFunction f = compile(t);
  const double want = play(t, {x})[0].item();
  CHECK(f({x})[0].item() == doctest::Approx(want).epsilon(1e-12));
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const fs::path& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(s.data(), static_cast<std::streamsize>(s.size()));
}

// Damages the one entry of program n in some way, then checks that the next compile
// rejects it, compiles, gives right values and leaves an intact entry (which the
// compile after that loads).
void check_damage_is_ignored(int64_t n, const std::function<void(const fs::path&)>& damage) {
  ScopedCacheDir cache(fmt::format("damage-{}", n));
  compile_and_check(n);
  const auto files = cache.files();
  REQUIRE(files.size() == 1);
  const std::string intact = read_file(files[0]);
  damage(files[0]);
  const CodeCacheInfo before = code_cache_info();
  compile_and_check(n);
  const CodeCacheInfo after = code_cache_info();
  CHECK(after.rejected == before.rejected + 1);
  CHECK(after.hits == before.hits);
  CHECK(after.writes == before.writes + 1);
  CHECK(read_file(files[0]) == intact);  // replaced by the same bytes
  compile_and_check(n);
  CHECK(code_cache_info().hits == after.hits + 1);
}

}  // namespace

TEST_CASE("disk cache: a module compiled once is loaded, not compiled, after its code is freed") {
  ScopedCacheDir cache("roundtrip");
  const KernelCacheStats k0 = kernel_cache_stats();
  const CodeCacheInfo c0 = code_cache_info();
  compile_and_check(1001);
  CHECK(code_cache_info().writes == c0.writes + 1);
  CHECK(code_cache_info().misses == c0.misses + 1);
  CHECK(cache.files().size() == 1);
  CHECK(cache.files()[0].extension() == ".reelobj");
  compile_and_check(1001);  // the first one's code is gone: the disk answers
  CHECK(code_cache_info().hits == c0.hits + 1);
  CHECK(kernel_cache_stats().loaded == k0.loaded + 1);
  CHECK(code_cache_info().writes == c0.writes + 1);
  // The gradient too, and with the module still alive the memory cache answers first.
  const Tape g = grad_tape(program(1002));
  const CompiledFunction a = compile(g);
  const int64_t hits = code_cache_info().hits;
  const CompiledFunction b = compile(g);
  CHECK(b.kernels_compiled() == 0);
  CHECK(code_cache_info().hits == hits);
  const Tensor x = randn({1002}, 3);
  test::check_close(a({x})[1], play(g, {x})[1], 1e-12, 1e-13, "gradient from the cache");
}

TEST_CASE("disk cache: other options or another program get other entries") {
  ScopedCacheDir cache("options");
  const Tape t = program(1003);
  { const CompiledFunction f = compile(t); }
  { const CompiledFunction f = compile(t, {.vector_math = false}); }
  CHECK(cache.files().size() == 2);
  compile_and_check(1004);
  CHECK(cache.files().size() == 3);
}

TEST_CASE("disk cache: a truncated file is ignored and replaced") {
  check_damage_is_ignored(1011, [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) / 2); });
  check_damage_is_ignored(1012, [](const fs::path& p) { fs::resize_file(p, 0); });
  check_damage_is_ignored(1013, [](const fs::path& p) { fs::resize_file(p, 20); });  // within the header
  check_damage_is_ignored(1014, [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) - 1); });
}

TEST_CASE("disk cache: a corrupt file is ignored and replaced") {
  // One flipped bit in the machine code: the checksum catches it.
  check_damage_is_ignored(1021, [](const fs::path& p) {
    std::string s = read_file(p);
    s[s.size() - 100] ^= 0x10;
    write_file(p, s);
  });
  // A flipped bit in the header's lengths, or lengths that would overflow.
  check_damage_is_ignored(1022, [](const fs::path& p) {
    std::string s = read_file(p);
    s[9] ^= 0x01;
    write_file(p, s);
  });
  check_damage_is_ignored(1023, [](const fs::path& p) {
    std::string s = read_file(p);
    for (int i = 8; i < 24; ++i) s[static_cast<std::size_t>(i)] = '\xff';
    write_file(p, s);
  });
  // Not a cache file at all.
  check_damage_is_ignored(1024, [](const fs::path& p) { write_file(p, "hello, world\n"); });
}

TEST_CASE("disk cache: a foreign file (another program's entry under this name) is ignored") {
  // An intact entry of program 1032, put where program 1031's entry is: its checksum
  // holds, its descriptor does not match.
  fs::path other;
  std::string other_bytes;
  {
    ScopedCacheDir cache("foreign-source");
    compile_and_check(1032);
    REQUIRE(cache.files().size() == 1);
    other_bytes = read_file(cache.files()[0]);
  }
  check_damage_is_ignored(1031, [&](const fs::path& p) { write_file(p, other_bytes); });
}

TEST_CASE("disk cache: the directory stays under its size bound, least recently used first") {
  ScopedCacheDir cache("bound");
  compile_and_check(1041);
  REQUIRE(cache.files().size() == 1);
  const int64_t one = cache.bytes();
  set_code_cache_max_bytes(3 * one + one / 2);  // room for three entries of this size
  const CodeCacheInfo before = code_cache_info();
  for (int64_t n = 1042; n < 1050; ++n) compile_and_check(n);
  CHECK(cache.bytes() <= 3 * one + one / 2);
  CHECK(code_cache_info().removed > before.removed);
  // The newest entry survived; the oldest did not.
  const int64_t hits = code_cache_info().hits;
  compile_and_check(1049);
  CHECK(code_cache_info().hits == hits + 1);
  compile_and_check(1041);
  CHECK(code_cache_info().hits == hits + 1);
}

TEST_CASE("disk cache: off writes nothing") {
  ScopedCacheDir cache("off");
  set_code_cache_dir("off");
  CHECK(code_cache_info().dir.empty());
  const CodeCacheInfo before = code_cache_info();
  compile_and_check(1051);
  compile_and_check(1051);
  CHECK(cache.files().empty());
  CHECK(code_cache_info().hits == before.hits);
  CHECK(code_cache_info().writes == before.writes);
}

TEST_CASE("disk cache: a directory that cannot be made leaves compiling as it was") {
  ScopedCacheDir cache("unwritable");
  set_code_cache_dir("/proc/reel-cannot-be-here");
  const CodeCacheInfo before = code_cache_info();
  compile_and_check(1061);
  CHECK(code_cache_info().writes == before.writes);
}

namespace {

// Compiles program n in another thread; a compile that blocks on the entry fails the
// test instead of hanging the suite: after the guard the FIFO at `fifo` (if any) is
// opened for writing, which releases a reader blocked in open.
void compile_and_check_unblocked(int64_t n, const fs::path& fifo) {
  auto done = std::async(std::launch::async, [n] { compile_and_check(n); });
  if (done.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
    FAIL_CHECK("the compile blocked on the cache entry at " << fifo.string());
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  done.get();
}

}  // namespace

TEST_CASE("disk cache: a FIFO, directory or link at an entry's path is rejected, left alone, never blocked on") {
  for (const std::string kind : {"fifo", "directory", "link"}) {
    CAPTURE(kind);
    const int64_t n = kind == "fifo" ? 1071 : kind == "directory" ? 1072 : 1073;
    ScopedCacheDir cache("odd-" + kind);
    compile_and_check(n);
    REQUIRE(cache.files().size() == 1);
    const fs::path entry = cache.files()[0];
    fs::remove(entry);
    fs::path target;  // the link's: an intact entry of this very program
    if (kind == "fifo") {
      REQUIRE(::mkfifo(entry.c_str(), 0600) == 0);
    } else if (kind == "directory") {
      fs::create_directory(entry);
    } else {
      compile_and_check(n);  // writes the entry again; moved aside and linked to
      target = entry.string() + ".target";
      fs::rename(entry, target);
      fs::create_symlink(target, entry);
    }
    const CodeCacheInfo before = code_cache_info();
    compile_and_check_unblocked(n, entry);
    const CodeCacheInfo after = code_cache_info();
    CHECK(after.rejected == before.rejected + 1);
    CHECK(after.hits == before.hits);
    CHECK(after.writes == before.writes);  // not replaced by a fresh entry
    // Still there, of the same kind (never removed or written over).
    const fs::file_status st = fs::symlink_status(entry);
    if (kind == "fifo") CHECK(fs::is_fifo(st));
    if (kind == "directory") CHECK(fs::is_directory(st));
    if (kind == "link") CHECK(fs::is_symlink(st));
    // Scanning the directory for the size bound neither blocks on it nor removes it.
    set_code_cache_max_bytes(1);
    CHECK(fs::symlink_status(entry).type() == st.type());
    if (kind == "link") CHECK(fs::exists(target));
  }
}

TEST_CASE("disk cache: the size bound's scan leaves what is not a regular file of this user alone") {
  ScopedCacheDir cache("scan");
  compile_and_check(1081);
  REQUIRE(cache.files().size() == 1);
  const fs::path dir = cache.files()[0].parent_path();
  // A FIFO named as an entry, and one named as a temporary file a dead writer left
  // (older than an hour): neither is opened, counted or removed.
  const fs::path fifo = dir / "0123.reelobj", temp = dir / "4567.reelobj.tmp.abcdef";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  REQUIRE(::mkfifo(temp.c_str(), 0600) == 0);
  fs::last_write_time(temp, fs::file_time_type::clock::now() - std::chrono::hours(2));
  set_code_cache_max_bytes(1);  // scans: everything of ours is over the bound
  CHECK(fs::is_fifo(fs::symlink_status(fifo)));
  CHECK(fs::is_fifo(fs::symlink_status(temp)));
  CHECK(cache.files().size() == 2);  // the real entry is gone (over the bound): the FIFOs stay
  CHECK(code_cache_info().bytes == 0);
}

TEST_CASE("disk cache: code made at the quick tier leaves later full-tier code as it was") {
  // LLVM turns FastISel on for good in a target machine it generates code with at
  // CodeGenOptLevel::None: the quick tier has a machine of its own, or every full-tier
  // compile after it would be made (and stored) with the fast instruction selector.
  // (This compares code made before and after a quick compile, so it catches that in a
  // process of its own, as ctest runs each case; Jit::emit_object also checks it.)
  const Tape loop =
      trace([](const Tensor& v) { return sum(exp(v) * tanh(v * 2.0 + 1.0)); }, zeros({4099}));
  auto object = [&](const std::string& name) {
    ScopedCacheDir dir(name);
    { const CompiledFunction f = compile(loop, {.optimization = CompileOptions::Optimization::full}); }
    const std::vector<fs::path> files = dir.files();
    REQUIRE(files.size() == 1);
    return read_file(files[0]);
  };
  const std::string before = object("tier-before");
  {
    ScopedCacheDir dir("tier-quick");
    const Tape chain = test::scalar_chain(200, test::sine);
    const CompiledFunction quick = compile(chain, {.optimization = CompileOptions::Optimization::quick});
    CHECK(quick.llvm_ir().find("; ---- quick tier") != std::string::npos);
  }
  CHECK(object("tier-after") == before);
}
