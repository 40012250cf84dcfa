#pragma once
// The costs of caching: cached functions (reel::simplegrad(f), reel::jit), the kernel
// and persistent code caches (cold, in memory, from disk in a fresh process), and
// Tracker's param/back over many steps. Each prints its own lines.
#include <string>

namespace bench {

// Cached functions: a hit over the bare compiled call, a guard, a dynamic program
// called with random loop counts, a signature's first call, memory over many signatures.
void cache_table(bool quick);

// The MLP gradient's compile: cold, from the in-memory kernel cache, and from the disk
// cache in a fresh process (`self` --compile-probe DIR, five pairs).
void disk_cache_rows(const std::string& self);

// --compile-probe DIR: compiles the MLP gradient of (d) with the persistent code cache
// in DIR and prints its times on one line, for disk_cache_rows in the parent.
int compile_probe(const std::string& dir);

// Training steps of a small regression with Tracker's param/back and in-place updates.
void tracker_rows(bool quick);

}  // namespace bench
