#include "kernel_cache.hpp"

#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/Support/raw_ostream.h>

#include <algorithm>
#include <array>
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
  std::unordered_map<std::string, Entry> entries;  // cache_key: "v|key", "s|key", "vq|key", "sq|key"
  KernelCacheStats stats;
  std::size_t prune_at = 256;  // forget expired entries when the table reaches this size
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed, like the JIT
  return *c;
}

std::atomic<uint64_t> g_module_counter{0};

// The cache's key of a kernel: its own, under the options its code depends on.
std::string cache_key(const KernelSpec& kernel, bool vector_math, Jit::Tier tier) {
  return fmt::format("{}{}|{}", vector_math ? 'v' : 's', tier == Jit::Tier::full ? "" : "q", kernel.key);
}

// Kernels emitted into one module, to be optimised at one tier.
struct Group {
  std::unique_ptr<llvm::Module> module;
  Jit::Tier tier;
  std::vector<std::size_t> kernels;  // indices into get_kernels' list, in the module's order
  std::vector<std::string> entries;  // each kernel's entry function
};

// The tier a fresh compile gives each of the listed kernels: straight-line ones (no
// function with a loop, found by emitting them into `module`) at the quick tier if
// `optimization` asks for it, by its choice or, for `automatic`, by their size
// (CompileOptions::kQuickStraightLine). Fills `module` with every listed kernel, each
// one's functions listed in `made` (for emit_groups to move).
std::vector<Jit::Tier> choose_tiers(llvm::Module& module, const std::vector<KernelSpec>& kernels,
                                    const std::vector<std::size_t>& which, CompileOptions::Optimization optimization,
                                    std::vector<std::vector<llvm::Function*>>& made) {
  std::vector<Jit::Tier> tiers(which.size(), Jit::Tier::full);
  made.assign(which.size(), {});
  std::vector<bool> straight(which.size());
  int64_t straight_size = 0;  // LLVM instructions in straight-line kernels
  for (std::size_t j = 0; j < which.size(); ++j) {
    // A kernel's functions (its entry, its body) are appended to the module: those
    // after the last one before it that are definitions.
    llvm::Module::FunctionListType& functions = module.getFunctionList();
    llvm::Function* last = functions.empty() ? nullptr : &functions.back();
    emit_kernel(module, kernels[which[j]], fmt::format("reel_kernel_{}", j));
    if (optimization == CompileOptions::Optimization::full) continue;
    for (auto it = last != nullptr ? std::next(last->getIterator()) : functions.begin(); it != functions.end(); ++it)
      if (!it->isDeclaration()) made[j].push_back(&*it);
    straight[j] = std::all_of(made[j].begin(), made[j].end(), [](const llvm::Function* f) { return Jit::straight_line(*f); });
    if (straight[j])
      for (const llvm::Function* f : made[j]) straight_size += f->getInstructionCount();
  }
  const bool quick = optimization == CompileOptions::Optimization::quick ||
                     (optimization == CompileOptions::Optimization::automatic &&
                      straight_size > CompileOptions::kQuickStraightLine);
  if (quick)
    for (std::size_t j = 0; j < which.size(); ++j)
      if (straight[j]) tiers[j] = Jit::Tier::quick;
  return tiers;
}

// The listed kernels in a module per tier: `tiers` given (one per listed kernel), or
// chosen as a fresh compile would (choose_tiers). choose_tiers emits every kernel into
// one module; the tier with more kernels keeps that module, and the other tier's
// kernels are erased from it and emitted again into their own (a scalar gradient's
// thousands of straight-line kernels are then emitted once). A quick-tier kernel's body
// is merged into its entry function (merge_body).
std::array<Group, 2> emit_groups(llvm::LLVMContext& context, const std::vector<KernelSpec>& kernels,
                                 const std::vector<std::size_t>& which, CompileOptions::Optimization optimization,
                                 std::optional<std::vector<Jit::Tier>> tiers = std::nullopt) {
  auto& jit = Jit::get();
  std::array<Group, 2> groups{Group{new_module(context, "reel_kernels", jit.data_layout(), jit.triple()),
                                    Jit::Tier::full, {}, {}},
                              Group{new_module(context, "reel_kernels_quick", jit.data_layout(), jit.triple()),
                                    Jit::Tier::quick, {}, {}}};
  Group& full = groups[0];
  Group& quick = groups[1];
  auto name = [](std::size_t j) { return fmt::format("reel_kernel_{}", j); };
  std::vector<bool> emitted(which.size(), false);  // kernel j is in its group's module already
  if (!tiers) {
    std::vector<std::vector<llvm::Function*>> made;
    tiers = choose_tiers(*full.module, kernels, which, optimization, made);
    const auto quick_count = std::count(tiers->begin(), tiers->end(), Jit::Tier::quick);
    const Jit::Tier keeps = 2 * quick_count > static_cast<std::ptrdiff_t>(which.size()) ? Jit::Tier::quick
                                                                                          : Jit::Tier::full;
    if (keeps == Jit::Tier::quick) {  // the emitted module becomes the quick tier's
      std::swap(full.module, quick.module);
      full.module->setModuleIdentifier("reel_kernels");
      full.module->setSourceFileName("reel_kernels");
      quick.module->setModuleIdentifier("reel_kernels_quick");
      quick.module->setSourceFileName("reel_kernels_quick");
    }
    for (std::size_t j = 0; j < which.size(); ++j) {
      if ((*tiers)[j] == keeps) {
        emitted[j] = true;
        continue;
      }
      for (llvm::Function* f : made[j]) f->replaceAllUsesWith(llvm::PoisonValue::get(f->getType()));
      for (llvm::Function* f : made[j]) f->eraseFromParent();
    }
  }
  for (std::size_t j = 0; j < which.size(); ++j) {
    Group& g = (*tiers)[j] == Jit::Tier::full ? full : quick;
    g.kernels.push_back(which[j]);
    g.entries.push_back(name(j));
    if (!emitted[j]) emit_kernel(*g.module, kernels[which[j]], name(j));
    if (&g == &quick) merge_body(*g.module->getFunction(name(j)));
  }
  return groups;
}

// Optimises, compiles and adds a group's module (or finds its code in the JIT or on
// disk), and enters its kernels in `out` and the cache.
void add_group(Group& g, const std::vector<KernelSpec>& kernels, bool vector_math, std::vector<KernelCode>& out) {
  Cache& c = cache();
  auto& jit = Jit::get();
  verify_module(*g.module);
  // Named by content: the same kernels give the same module, object file and symbols
  // in every process, which is what the disk cache keys on. A kernel's key spells out
  // its code (kernel_spec.hpp), given the sources that emit it, whose hash is part of
  // jit.descriptor(): the module's content is its kernels' keys, in order. (Printing
  // the module as IR text to hash it took a sixth of a cold compile of a 10^5-operation
  // scalar gradient.)
  std::string keys;
  for (std::size_t i : g.kernels) keys.append(kernels[i].key).push_back('\n');
  const std::string descriptor =
      fmt::format("{}; tier {}; {} kernels, keys {}", jit.descriptor(vector_math),
                  g.tier == Jit::Tier::full ? "full" : "quick", g.kernels.size(), content_hash(keys));
  const std::string id = content_hash(descriptor);
  const std::size_t count = g.kernels.size();
  std::vector<std::string> names;
  for (std::size_t j = 0; j < count; ++j) {
    names.push_back(fmt::format("reel_{}_{}", id, j));
    g.module->getFunction(g.entries[j])->setName(names.back());
  }
  DiskCache& disk = DiskCache::get();
  std::optional<Jit::Added> added = jit.live_object(id);  // kernels of other keys with this very code
  const bool shared = added.has_value();
  if (!added)
    if (std::optional<std::string> object = disk.load(id, descriptor)) try {
        added = jit.add_object(*object, id, names);
        c.stats.loaded += static_cast<int64_t>(count);
      } catch (const Error&) {  // intact but unlinkable: compile it anew (and replace it)
        disk.reject(id);
      }
  if (!added) {
    jit.optimize(*g.module, vector_math, g.tier);
    const std::string object = jit.emit_object(*g.module, g.tier);
    added = jit.add_object(object, id, names);
    disk.store(id, descriptor, object);  // once it has linked
  }
  for (std::size_t j = 0; j < count; ++j) {
    const std::size_t i = g.kernels[j];
    const auto fn = reinterpret_cast<StepFn>(added->addresses[j]);
    out[i] = {fn, added->handle, g.tier == Jit::Tier::quick};
    c.entries[cache_key(kernels[i], vector_math, g.tier)] = {fn, added->handle};
  }
  if (!shared) {  // (a shared object was neither built nor loaded)
    c.stats.compiled += static_cast<int64_t>(count);
    c.stats.modules += 1;
  }
}

}  // namespace

std::vector<KernelCode> get_kernels(const std::vector<KernelSpec>& kernels, const CompileOptions& options,
                                    int& compiled) {
  Cache& c = cache();
  std::vector<KernelCode> out(kernels.size());
  std::vector<std::size_t> missing;
  // A kernel compiled at the full tier serves any request; one compiled at the quick
  // tier serves the requests that allow it.
  std::vector<Jit::Tier> tiers{Jit::Tier::full};
  if (options.optimization != CompileOptions::Optimization::full) tiers.push_back(Jit::Tier::quick);
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    bool found = false;
    for (Jit::Tier tier : tiers) {
      auto it = c.entries.find(cache_key(kernels[i], options.vector_math, tier));
      if (it == c.entries.end()) continue;
      if (auto code = it->second.code.lock(); code.use_count() > 0) {  // (the handle's pointer is null)
        out[i] = {it->second.fn, std::move(code), tier == Jit::Tier::quick};
        ++c.stats.hits;
        found = true;
        break;
      }
    }
    if (!found) missing.push_back(i);
  }
  compiled = static_cast<int>(missing.size());
  if (missing.empty()) return out;

  llvm::LLVMContext context;
  for (Group& g : emit_groups(context, kernels, missing, options.optimization))
    if (!g.kernels.empty()) add_group(g, kernels, options.vector_math, out);
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

KernelsIr kernels_ir(const std::vector<KernelSpec>& kernels, const CompileOptions& options,
                     const std::vector<bool>& quick) {
  auto& jit = Jit::get();
  llvm::LLVMContext context;
  std::vector<std::size_t> all(kernels.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::optional<std::vector<Jit::Tier>> tiers;
  if (!quick.empty() && quick.size() != kernels.size())
    throw Error(fmt::format("compile: internal error: {} kernels but {} tiers", kernels.size(), quick.size()));
  if (!quick.empty()) {
    tiers.emplace();
    for (bool q : quick) tiers->push_back(q ? Jit::Tier::quick : Jit::Tier::full);
  }
  std::array<Group, 2> groups = emit_groups(context, kernels, all, options.optimization, tiers);
  auto print = [&] {
    std::string s;
    llvm::raw_string_ostream os(s);
    for (const Group& g : groups) {
      if (g.kernels.empty()) continue;
      os << "; ---- " << (g.tier == Jit::Tier::full ? "full" : "quick") << " tier\n";
      for (std::size_t j = 0; j < g.kernels.size(); ++j)
        os << "; " << g.entries[j] << ": kernel " << g.kernels[j] << ": " << kernels[g.kernels[j]].key << "\n";
      g.module->print(os, nullptr);
    }
    return os.str();
  };
  KernelsIr ir;
  for (Group& g : groups) verify_module(*g.module);
  ir.before = print();
  for (Group& g : groups) jit.optimize(*g.module, options.vector_math, g.tier);
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
