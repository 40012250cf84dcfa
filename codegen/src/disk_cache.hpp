#pragma once
// The persistent code cache: optimised kernel modules kept on disk as object files, so
// a new process with the same programs skips LLVM's optimiser and code generator.
// Internal to codegen/; configured through reel::set_code_cache_dir (reel/compile.hpp)
// or REEL_CACHE_DIR.
//
// One file per module, named by a hash of its descriptor (what was compiled and for
// what: Reel's version, LLVM's version, the host CPU and its features, the options
// and a hash of the module's IR). A file holds a header (magic, lengths, a checksum
// of the rest), the descriptor, and the object. A file whose size, checksum or
// descriptor does not match is ignored and replaced; files are written to a
// temporary name and renamed into place (atomic on POSIX), so readers never see half
// a file; the directory is kept under a size bound by removing the least recently
// used files. Only regular files of this user are opened, removed or replaced: a
// FIFO, link, device, directory or another user's file at an entry's path is
// rejected and left alone, and nothing the cache does blocks on one.
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "reel/compile.hpp"

namespace reel::codegen {

class DiskCache {
 public:
  static DiskCache& get();  // configured from the environment on first use (settle)

  // The object stored under `name` for `descriptor`, or nothing (no file, or a file
  // that is not a whole, intact entry for this descriptor: counted as rejected).
  std::optional<std::string> load(const std::string& name, std::string_view descriptor);
  // Stores an object; failures (a read-only directory, a full disk) are ignored.
  void store(const std::string& name, std::string_view descriptor, std::string_view object);
  // An entry that loaded but could not be linked: remove it and count it rejected.
  void reject(const std::string& name);

  void set_dir(const std::string& dir);  // "off" (or "") disables
  void set_max_bytes(int64_t bytes);
  CodeCacheInfo info();

 private:
  DiskCache();
  std::string path(const std::string& name) const;
  void bound_size();  // with mutex_ held
  // With mutex_ held: on first use, the settings not set by set_dir / set_max_bytes
  // come from the environment (a bad value is reported on stderr, once).
  void settle();

  std::mutex mutex_;
  bool settled_ = false, dir_set_ = false, max_bytes_set_ = false;
  std::string dir_;  // empty: off
  int64_t max_bytes_ = 0;
  CodeCacheInfo stats_;
  // Whether the directory was scanned since it was set (stats_.bytes: what it held then,
  // plus this process's writes since), and the writes since the last scan.
  bool scanned_ = false;
  int unscanned_writes_ = 0;
};

// Hex digits of a BLAKE3 hash of `text` (16 bytes: 32 digits).
std::string content_hash(std::string_view text);

}  // namespace reel::codegen
