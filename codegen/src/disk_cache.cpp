#include "disk_cache.hpp"

#include <fmt/format.h>
#include <llvm/Support/BLAKE3.h>
#include <llvm/Support/xxhash.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

namespace reel::codegen {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'R', 'E', 'E', 'L', 'O', 'B', 'J', '1'};
constexpr std::size_t kHeader = 8 + 8 + 8 + 16;  // magic, two lengths, checksum
constexpr const char* kSuffix = ".reelobj";
constexpr int64_t kDefaultMaxBytes = int64_t{512} << 20;
// Writes between two scans of the directory at most (DiskCache::store).
constexpr int kScanEvery = 32;

llvm::ArrayRef<uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The checksum of everything after the header.
std::array<uint8_t, 16> checksum(std::string_view descriptor, std::string_view object) {
  std::string all;
  all.reserve(descriptor.size() + object.size());
  all.append(descriptor).append(object);
  const llvm::XXH128_hash_t h = llvm::xxh3_128bits(bytes(all));
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), &h.low64, 8);
  std::memcpy(out.data() + 8, &h.high64, 8);
  return out;
}

constexpr int64_t kMaxMegabytes = (int64_t{1} << 40) - 1;  // (so that the bytes fit in 63 bits)

// A warning about the environment, on standard error (each is printed once: the
// environment is read once per process).
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "reel: warning: {}\n", fmt::format(format, std::forward<Args>(args)...));
  std::fflush(stderr);
}

// Why `dir` cannot hold the cache ("" when it can); makes it (private) if missing.
std::string unusable(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);  // a link to a directory is a directory
  if (st.type() == fs::file_type::not_found) {
    fs::create_directories(dir, ec);
    if (ec) return fmt::format("cannot be created ({})", ec.message());
    fs::permissions(dir, fs::perms::owner_all, ec);  // objects are executed: the owner's alone
  } else if (ec) {
    return fmt::format("cannot be examined ({})", ec.message());
  } else if (!fs::is_directory(st)) {
    return "is not a directory";
  }
  if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    return fmt::format("is not a writable directory ({})", std::strerror(errno));
  return "";
}

// REEL_CACHE_DIR (made absolute against the current directory, and made if missing),
// else $XDG_CACHE_HOME/reel, else ~/.cache/reel; "" for off. A REEL_CACHE_DIR that
// cannot hold the cache is reported once and turns the cache off.
std::string env_dir() {
  if (const char* env = std::getenv("REEL_CACHE_DIR"); env != nullptr && *env != '\0') {
    if (std::string_view(env) == "off") return "";
    std::error_code ec;
    const fs::path dir = fs::absolute(env, ec);
    const std::string why = ec ? fmt::format("cannot be made absolute ({})", ec.message()) : unusable(dir);
    if (why.empty()) return dir.string();
    warn("REEL_CACHE_DIR=\"{}\" {}; the persistent code cache is off for this process", env, why);
    return "";
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') return fs::path(xdg) / "reel";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/')
    return fs::path(home) / ".cache" / "reel";
  return "";
}

// REEL_CACHE_MAX_MB: digits only, 0 to kMaxMegabytes; anything else is reported once
// and the default bound is used.
int64_t env_max_bytes() {
  const char* env = std::getenv("REEL_CACHE_MAX_MB");
  if (env == nullptr || *env == '\0') return kDefaultMaxBytes;
  const std::string_view text(env);
  int64_t mb = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mb);
  const bool digits = std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits && ec == std::errc() && end == text.data() + text.size() && mb <= kMaxMegabytes) return mb << 20;
  warn("REEL_CACHE_MAX_MB=\"{}\" is not a whole number of megabytes from 0 to {}; using the default bound, {} MB",
       env, kMaxMegabytes, kDefaultMaxBytes >> 20);
  return kDefaultMaxBytes;
}

// What is at an entry's path, as lstat sees it (a link is not followed).
enum class Entry { none, own_file, other };  // other: a link, FIFO, socket, device,
                                               // directory, or another user's file
Entry entry_at(const std::string& path, struct stat& st) {
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT ? Entry::none : Entry::other;
  return S_ISREG(st.st_mode) && st.st_uid == ::geteuid() ? Entry::own_file : Entry::other;
}

}  // namespace

std::string content_hash(std::string_view text) {
  const auto h = llvm::BLAKE3::hash<16>(bytes(text));
  std::string hex;
  for (uint8_t b : h) hex += fmt::format("{:02x}", b);
  return hex;
}

DiskCache& DiskCache::get() {
  static DiskCache* cache = new DiskCache();  // never destroyed, like the JIT
  return *cache;
}

DiskCache::DiskCache() = default;

void DiskCache::settle() {
  if (settled_) return;
  settled_ = true;
  if (!dir_set_) dir_ = env_dir();
  if (!max_bytes_set_) max_bytes_ = env_max_bytes();
}

std::string DiskCache::path(const std::string& name) const { return (fs::path(dir_) / (name + kSuffix)).string(); }

std::optional<std::string> DiskCache::load(const std::string& name, std::string_view descriptor) {
  std::lock_guard<std::mutex> lock(mutex_);
  settle();
  if (dir_.empty()) return std::nullopt;
  const std::string p = path(name);
  // Only a regular file of this user is opened: a FIFO would block open (and every
  // compile behind this lock), a device's open may act, a link may point anywhere, and
  // another user's file is never executed. Anything else at the path is rejected and
  // left alone (never removed, and store does not replace it).
  struct stat st {};
  const Entry before = entry_at(p, st);
  if (before == Entry::none) {
    ++stats_.misses;
    return std::nullopt;
  }
  auto leave = [&]() -> std::optional<std::string> {
    ++stats_.rejected;
    ++stats_.misses;
    return std::nullopt;
  };
  if (before == Entry::other) return leave();
  // Without following a link and without blocking, and checked again on the open
  // file: the path may have been swapped since lstat.
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT) return leave();
    ++stats_.misses;  // removed since lstat
    return std::nullopt;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const dev_t dev = st.st_dev;
  const ino_t ino = st.st_ino;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_dev != dev || st.st_ino != ino)
    return leave();
  // A file of ours that is not a whole entry for this descriptor is removed (a fresh
  // compile then writes it anew; an entry too large for a lowered bound is not
  // rewritten).
  auto reject = [&]() -> std::optional<std::string> {
    ++stats_.rejected;
    ++stats_.misses;
    std::error_code ec;
    fs::remove(p, ec);
    return std::nullopt;
  };
  const auto size = static_cast<int64_t>(st.st_size);
  if (size < static_cast<int64_t>(kHeader) || size > max_bytes_ + static_cast<int64_t>(kHeader)) return reject();
  std::string file(static_cast<std::size_t>(size), '\0');
  for (std::size_t done = 0; done < file.size();) {
    const ssize_t n = ::read(fd, file.data() + done, file.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return reject();  // shorter than it said (truncated while read)
    done += static_cast<std::size_t>(n);
  }
  uint64_t descriptor_len = 0, object_len = 0;
  std::memcpy(&descriptor_len, file.data() + 8, 8);
  std::memcpy(&object_len, file.data() + 16, 8);
  const uint64_t rest = static_cast<uint64_t>(size) - kHeader;
  // Lengths checked one at a time, so that a foreign header cannot overflow the sum.
  if (std::memcmp(file.data(), kMagic, 8) != 0 || descriptor_len > rest || object_len != rest - descriptor_len)
    return reject();
  const std::string_view stored_descriptor(file.data() + kHeader, descriptor_len);
  const std::string_view object(file.data() + kHeader + descriptor_len, object_len);
  if (std::memcmp(checksum(stored_descriptor, object).data(), file.data() + 24, 16) != 0) return reject();
  if (stored_descriptor != descriptor) return reject();  // another program under this name
  ++stats_.hits;
  ::futimens(fd, nullptr);  // the file was used: it is the newest for the size bound
  return std::string(object);
}

void DiskCache::store(const std::string& name, std::string_view descriptor, std::string_view object) {
  std::lock_guard<std::mutex> lock(mutex_);
  settle();
  if (dir_.empty()) return;
  const int64_t total = static_cast<int64_t>(kHeader + descriptor.size() + object.size());
  if (total > max_bytes_) return;  // would be removed at once
  std::error_code ec;
  if (!fs::exists(dir_, ec)) {
    fs::create_directories(dir_, ec);
    if (ec) return;
    fs::permissions(dir_, fs::perms::owner_all, ec);  // objects are executed: the owner's alone
  }
  const std::string final_path = path(name);
  // Something that is not a file of ours at the entry's path (load rejected it) is
  // left in place: the cache replaces only what it wrote.
  struct stat st {};
  if (entry_at(final_path, st) == Entry::other) return;
  // A temporary name of its own (mkstemp: created exclusively, so never an existing
  // file, FIFO or link), renamed into place.
  std::string temp = final_path + ".tmp.XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);  // not inherited by a child another thread starts
  if (fd < 0) return;
  std::string file(kHeader, '\0');
  const uint64_t dl = descriptor.size(), ol = object.size();
  std::memcpy(file.data(), kMagic, 8);
  std::memcpy(file.data() + 8, &dl, 8);
  std::memcpy(file.data() + 16, &ol, 8);
  const auto sum = checksum(descriptor, object);
  std::memcpy(file.data() + 24, sum.data(), 16);
  file.append(descriptor).append(object);
  bool ok = true;
  for (std::size_t done = 0; ok && done < file.size();) {
    const ssize_t n = ::write(fd, file.data() + done, file.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    fs::remove(temp, ec);
    return;
  }
  // Another process may be writing the same entry: each writes a temporary file of
  // its own and the last rename wins, with a whole file either way.
  fs::rename(temp, final_path, ec);
  if (ec) {
    fs::remove(temp, ec);
    return;
  }
  ++stats_.writes;
  // The directory is scanned (lstat of every entry: 130 ms at 35,000 entries, more than
  // compiling a small function) at this process's first write, whenever what it holds
  // may pass the bound by what was written since, and every kScanEvery writes (other
  // processes write into it too).
  stats_.bytes += static_cast<int64_t>(file.size());
  if (!scanned_ || stats_.bytes > max_bytes_ || ++unscanned_writes_ >= kScanEvery) bound_size();
}

void DiskCache::reject(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  settle();
  if (dir_.empty()) return;
  // (The file load just read: a regular file of ours, unless swapped since.)
  struct stat st {};
  std::error_code ec;
  if (entry_at(path(name), st) == Entry::own_file) fs::remove(path(name), ec);
  ++stats_.rejected;
}

void DiskCache::bound_size() {
  scanned_ = true;
  unscanned_writes_ = 0;
  struct File {
    fs::path path;
    int64_t time;  // ns since the epoch
    int64_t size;
  };
  std::vector<File> files;
  int64_t total = 0;
  std::error_code ec;
  auto ns = [](const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; };
  timespec now_ts{};
  ::clock_gettime(CLOCK_REALTIME, &now_ts);
  const int64_t now = ns(now_ts);
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string file = p.filename().string();
    // Only regular files of this user count and are removed (lstat: nothing is
    // opened or followed); whatever else is in the directory is left alone.
    struct stat st {};
    if (entry_at(p.string(), st) != Entry::own_file) continue;
    const auto size = static_cast<int64_t>(st.st_size);
    if (file.find(std::string(kSuffix) + ".tmp.") != std::string::npos) {
      total += size;  // (counted towards the bound while they last)
      // A temporary file left by a process that died while writing it.
      std::error_code e2;
      if (now - ns(st.st_mtim) > int64_t{3600} * 1'000'000'000) fs::remove(p, e2);
      continue;
    }
    if (!file.ends_with(kSuffix)) continue;
    files.push_back({p, ns(st.st_mtim), size});
    total += size;
  }
  stats_.bytes = total;
  if (total <= max_bytes_) return;
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.time < b.time; });
  // Down to three quarters of the bound, so that the next writes do not each scan.
  for (const File& f : files) {
    if (total <= max_bytes_ / 4 * 3) break;
    std::error_code e2;
    if (fs::remove(f.path, e2)) {
      total -= f.size;
      ++stats_.removed;
    }
  }
  stats_.bytes = total;
}

void DiskCache::set_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(mutex_);
  dir_set_ = true;  // REEL_CACHE_DIR is not looked at (nor reported) any more
  std::error_code ec;
  dir_ = dir.empty() || dir == "off" ? "" : fs::absolute(dir, ec).string();
  if (ec) dir_ = dir;
  stats_.bytes = 0;
  scanned_ = false;
}

void DiskCache::set_max_bytes(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_bytes_set_ = true;
  settle();
  max_bytes_ = std::max<int64_t>(0, bytes);
  if (!dir_.empty()) bound_size();
}

CodeCacheInfo DiskCache::info() {
  std::lock_guard<std::mutex> lock(mutex_);
  settle();
  CodeCacheInfo i = stats_;
  i.dir = dir_;
  i.max_bytes = max_bytes_;
  return i;
}

}  // namespace reel::codegen

namespace reel {

CodeCacheInfo code_cache_info() { return codegen::DiskCache::get().info(); }
void set_code_cache_dir(const std::string& dir) { codegen::DiskCache::get().set_dir(dir); }
void set_code_cache_max_bytes(int64_t bytes) { codegen::DiskCache::get().set_max_bytes(bytes); }

}  // namespace reel
