#include "disk_cache.hpp"

#include <fmt/format.h>
#include <llvm/Support/BLAKE3.h>
#include <llvm/Support/xxhash.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace reel::codegen {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'R', 'E', 'E', 'L', 'O', 'B', 'J', '1'};
constexpr std::size_t kHeader = 8 + 8 + 8 + 16;  // magic, two lengths, checksum
constexpr const char* kSuffix = ".reelobj";
constexpr int64_t kDefaultMaxBytes = int64_t{512} << 20;

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

std::string default_dir() {
  const char* env = std::getenv("REEL_CACHE_DIR");
  if (env != nullptr && *env != '\0') return std::string(env) == "off" ? "" : env;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg == '/') return fs::path(xdg) / "reel";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/')
    return fs::path(home) / ".cache" / "reel";
  return "";
}

int64_t default_max_bytes() {
  if (const char* env = std::getenv("REEL_CACHE_MAX_MB"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long long mb = std::strtoll(env, &end, 10);
    if (end != env && *end == '\0' && mb >= 0 && mb < (int64_t{1} << 40)) return mb << 20;
  }
  return kDefaultMaxBytes;
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

DiskCache::DiskCache() : dir_(default_dir()), max_bytes_(default_max_bytes()) {}

std::string DiskCache::path(const std::string& name) const { return (fs::path(dir_) / (name + kSuffix)).string(); }

std::optional<std::string> DiskCache::load(const std::string& name, std::string_view descriptor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (dir_.empty()) return std::nullopt;
  const std::string p = path(name);
  // Opened without following a symbolic link, and checked on the open file: a file
  // another user owns is never executed (nor removed).
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    ++stats_.misses;
    return std::nullopt;
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ++stats_.rejected;
    ++stats_.misses;
    return std::nullopt;
  }
  // A file that is not a whole entry for this descriptor is removed (a fresh compile
  // then writes it anew; an entry too large for a lowered bound is not rewritten).
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
  std::error_code ec;  // the file was used: it is the newest for the size bound
  fs::last_write_time(p, fs::file_time_type::clock::now(), ec);
  return std::string(object);
}

void DiskCache::store(const std::string& name, std::string_view descriptor, std::string_view object) {
  std::lock_guard<std::mutex> lock(mutex_);
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
  // A temporary name of its own (mkstemp: created exclusively), renamed into place.
  std::string temp = final_path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(temp.data());
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
  // Every write scans the directory (cheap next to the compile that made the entry):
  // other processes write into it too.
  bound_size();
}

void DiskCache::reject(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove(path(name), ec);
  ++stats_.rejected;
}

void DiskCache::bound_size() {
  struct File {
    fs::path path;
    fs::file_time_type time;
    int64_t size;
  };
  std::vector<File> files;
  int64_t total = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (auto it = fs::directory_iterator(dir_, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string file = p.filename().string();
    std::error_code e2;
    const auto time = fs::last_write_time(p, e2);
    if (e2) continue;
    if (file.find(std::string(kSuffix) + ".tmp.") != std::string::npos) {
      // (Counted towards the bound while they last.)
      const auto size = fs::file_size(p, e2);
      if (!e2) total += static_cast<int64_t>(size);
      // A temporary file left by a process that died while writing it.
      if (now - time > std::chrono::hours(1)) fs::remove(p, e2);
      continue;
    }
    if (!file.ends_with(kSuffix)) continue;
    const auto size = static_cast<int64_t>(fs::file_size(p, e2));
    if (e2) continue;
    files.push_back({p, time, size});
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
  dir_ = dir == "off" ? "" : dir;
  stats_.bytes = 0;
}

void DiskCache::set_max_bytes(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  max_bytes_ = std::max<int64_t>(0, bytes);
  if (!dir_.empty()) bound_size();
}

CodeCacheInfo DiskCache::info() {
  std::lock_guard<std::mutex> lock(mutex_);
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
