#include "kernel_cache.hpp"

#include <fmt/format.h>
#include <llvm/Support/raw_ostream.h>

#include <atomic>
#include <optional>
#include <unordered_map>

#include "disk_cache.hpp"
#include "emit.hpp"
#include "jit.hpp"
#include "reel/compile.hpp"

namespace reel::codegen {

namespace {

struct Entry {
  StepFn fn;
  std::weak_ptr<void> code;
};

struct Cache {
  std::unordered_map<std::string, Entry> entries;  // "v|key" or "s|key" (vector math or not)
  KernelCacheStats stats;
  std::size_t prune_at = 256;  // forget expired entries when the table reaches this size
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed, like the JIT
  return *c;
}

std::atomic<uint64_t> g_module_counter{0};

}  // namespace

std::vector<KernelCode> get_kernels(const std::vector<KernelSpec>& kernels, bool vector_math,
                                    int& compiled) {
  Cache& c = cache();
  std::vector<KernelCode> out(kernels.size());
  std::vector<std::size_t> missing;
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    keys.push_back((vector_math ? "v|" : "s|") + kernels[i].key);
    auto it = c.entries.find(keys.back());
    if (it != c.entries.end())
      if (auto code = it->second.code.lock(); code.use_count() > 0) {  // (the handle's pointer is null)
        out[i] = {it->second.fn, std::move(code)};
        ++c.stats.hits;
        continue;
      }
    missing.push_back(i);
  }
  compiled = static_cast<int>(missing.size());
  if (missing.empty()) return out;

  auto& jit = Jit::get();
  llvm::LLVMContext context;
  auto module = new_module(context, "reel_kernels", jit.data_layout(), jit.triple());
  for (std::size_t j = 0; j < missing.size(); ++j) emit_kernel(*module, kernels[missing[j]], fmt::format("reel_kernel_{}", j));
  verify_module(*module);
  // Named by content: the same kernels give the same module, object file and symbols
  // in every process, which is what the disk cache keys on.
  std::string ir;
  {
    llvm::raw_string_ostream os(ir);
    module->print(os, nullptr);
  }
  const std::string descriptor = fmt::format("{}; ir {} bytes {}", jit.descriptor(vector_math), ir.size(), content_hash(ir));
  const std::string id = content_hash(descriptor);
  std::vector<std::string> names;
  for (std::size_t j = 0; j < missing.size(); ++j) {
    names.push_back(fmt::format("reel_{}_{}", id, j));
    module->getFunction(fmt::format("reel_kernel_{}", j))->setName(names.back());
  }
  DiskCache& disk = DiskCache::get();
  std::optional<Jit::Added> added = jit.live_object(id);  // kernels of other keys with this very code
  const bool shared = added.has_value();
  if (!added)
    if (std::optional<std::string> object = disk.load(id, descriptor)) try {
        added = jit.add_object(*object, id, names);
        c.stats.loaded += compiled;
      } catch (const Error&) {  // intact but unlinkable: compile it anew (and replace it)
        disk.reject(id);
      }
  if (!added) {
    jit.optimize(*module, vector_math);
    const std::string object = jit.emit_object(*module);
    added = jit.add_object(object, id, names);
    disk.store(id, descriptor, object);  // once it has linked
  }
  for (std::size_t j = 0; j < missing.size(); ++j) {
    const std::size_t i = missing[j];
    const auto fn = reinterpret_cast<StepFn>(added->addresses[j]);
    out[i] = {fn, added->handle};
    c.entries[std::move(keys[i])] = {fn, added->handle};
  }
  if (!shared) {  // (a shared object was neither built nor loaded)
    c.stats.compiled += compiled;
    c.stats.modules += 1;
  }
  // Forget entries whose code is gone, so the table does not grow without bound.
  if (c.entries.size() >= c.prune_at) {
    std::erase_if(c.entries, [](const auto& e) { return e.second.code.expired(); });
    c.prune_at = std::max<std::size_t>(256, 2 * c.entries.size());
  }
  return out;
}

DriverCode make_driver(const std::vector<BoundStep>& calls) {
  auto& jit = Jit::get();
  auto context = std::make_unique<llvm::LLVMContext>();
  const uint64_t id = g_module_counter++;
  auto module = new_module(*context, fmt::format("reel_driver_{}", id), jit.data_layout(), jit.triple());
  const std::string name = fmt::format("reel_driver_{}", id);
  emit_driver(*module, calls, name);
  verify_module(*module);
  auto added = jit.add(std::move(module), std::move(context), {name});
  return {reinterpret_cast<DriverFn>(added.addresses[0]), added.handle};
}

KernelsIr kernels_ir(const std::vector<KernelSpec>& kernels, bool vector_math) {
  auto& jit = Jit::get();
  llvm::LLVMContext context;
  auto module = new_module(context, "reel_kernels", jit.data_layout(), jit.triple());
  for (std::size_t i = 0; i < kernels.size(); ++i) emit_kernel(*module, kernels[i], fmt::format("reel_kernel_{}", i));
  verify_module(*module);
  auto print = [&] {
    std::string s;
    llvm::raw_string_ostream os(s);
    for (std::size_t i = 0; i < kernels.size(); ++i) os << "; kernel " << i << ": " << kernels[i].key << "\n";
    module->print(os, nullptr);
    return os.str();
  };
  KernelsIr ir;
  ir.before = print();
  jit.optimize(*module, vector_math);
  ir.after = print();
  return ir;
}

}  // namespace reel::codegen

namespace reel {

KernelCacheStats kernel_cache_stats() {
  auto& jit = codegen::Jit::get();
  std::lock_guard<std::recursive_mutex> lock(jit.mutex());
  KernelCacheStats s = codegen::cache().stats;
  s.cached = 0;
  for (const auto& [key, e] : codegen::cache().entries) s.cached += e.code.expired() ? 0 : 1;
  return s;
}

}  // namespace reel
