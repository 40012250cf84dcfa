// reel.jit(f) and reel.jit_grad(f) (reel.simplegrad(f)): the C++ cache engine
// (reel::JitCore) keyed by Python arguments as the C++ one is by C++ ones; a hit runs
// with the GIL released.
#include <fmt/format.h>

#include <limits>
#include <utility>

#include "common.hpp"
#include "transforms.hpp"

namespace reel::py_bind {

namespace {

// JitCore's looks and adds run with the GIL released.
struct WithoutGil {
  template <class Fn>
  decltype(auto) operator()(Fn&& fn) const {
    ReleaseGil release;
    return std::forward<Fn>(fn)();
  }
};

// Through the cache (JitCore::call), as the C++ cached functions, except that a call
// made while another thread traces f runs f uncached instead of waiting: that thread
// may be waiting for this one (f calling itself on a thread it joins), which would never
// end (CachedCall::waits).
class PyJit {
 public:
  PyJit(py::object f, JitOptions options, bool grad)
      : f_(std::move(f)), grad_(grad), core_(std::make_shared<JitCore>(options, grad ? "simplegrad" : "jit")) {
    if (!PyCallable_Check(f_.ptr()))
      throw Error(fmt::format("{}: expected a function, got {}", what(), shown(f_)));
  }

  py::object call(const py::args& args) const {
    CacheKey key;
    std::vector<Tensor> tensors;
    tensors.reserve(args.size());
    append_args_key(key, args, tensors, what());
    std::vector<const Tensor*> ptrs(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) ptrs[i] = &tensors[i];
    return grad_ ? call_grad(args, key, tensors, ptrs) : call_jit(args, key, ptrs);
  }

  CacheInfo info() const { return core_->info(); }

 private:
  const char* what() const { return grad_ ? "simplegrad" : "jit"; }

  // A miss of reel.jit: f traced; its result's tensors are the path's outputs, and the
  // result with a placeholder for each is the structure its hits are rebuilt from.
  py::object call_jit(const py::args& args, const CacheKey& key, std::span<const Tensor* const> ptrs) const {
    PyTrace t;  // a miss's
    std::shared_ptr<py::object> structure;
    const auto rebuilt = [](const py::object& like, std::span<const Tensor> outs) {
      std::size_t next = 0;
      return rebuild(like, outs, next, false);
    };
    CachedCall call{
        .hit = [&](const JitCore::Hit& hit) {
          return rebuilt(*static_cast<const py::object*>(hit.structure), hit.outputs);
        },
        .uncached = [&] { return f_(*args); },
        .describe = [&] { return describe_all(args); },
        .trace =
            [&] {
              t = trace_py(f_, args, false, /*value_guards=*/true, what(), /*plain_results=*/true);
              structure = hold(rebuilt(t.result, std::vector<Tensor>(t.outputs.size(), scalar(0.0))));
              return NewPath{std::move(t.tape), structure};
            },
        .traced =
            [&] {
              for (Tensor& o : t.outputs) o.clear_trace_tags();
              return rebuilt(*structure, t.outputs);
            },
        .unlocked = WithoutGil{},
        .waits = false};
    return core_->call([&] { return key.view(); }, ptrs, {}, call);
  }

  py::object call_grad(const py::args& args, const CacheKey& key, const std::vector<Tensor>& tensors,
                       std::span<const Tensor* const> ptrs) const {
    std::vector<Tensor> outs(tensors.size() + 1);
    CachedCall call{
        .hit = [&](const JitCore::Hit&) -> py::object { return value_and_grads(args, outs); },
        .uncached = [&] { return traced_grad(args); },
        .describe = [&] { return describe_all(args); },
        .trace =
            [&] {
              Tape g = grad_tape(trace_py(f_, args, false, /*value_guards=*/true, what()).tape);
              return NewPath{std::move(g), nullptr, outs};
            },
        .traced = [&]() -> py::object { return value_and_grads(args, outs); },
        .unlocked = WithoutGil{},
        .waits = false};
    return core_->call([&] { return key.view(); }, ptrs, outs, call);
  }

  // Inside another trace: the gradient tape played, recorded on that trace.
  py::object traced_grad(const py::args& args) const {
    PyTrace t = trace_py(f_, args, false, false, what());
    return value_and_grads(args, play(grad_tape(t.tape), t.inputs));
  }

  py::object f_;
  bool grad_;
  std::shared_ptr<JitCore> core_;
};

}  // namespace
}  // namespace reel::py_bind

REEL_INITIALISED_CASTER(reel::py_bind::PyJit)

namespace reel::py_bind {
namespace {

// The options as reel.jit and reel.simplegrad(f) take them (`op`), each count an
// integer from 1 to the most its C++ field holds.
JitOptions jit_options(const char* op, py::handle compile_after, py::handle max_entries, py::handle max_paths,
                       bool vector_math, bool reuse_memory, const std::string& optimization) {
  const auto count = [op](py::handle h, const char* what, int64_t most) {
    const int64_t v = to_int(h, op, what);
    if (v < 1 || v > most) throw Error(fmt::format("{}: expected {} from 1 to {}, got {}", op, what, most, v));
    return v;
  };
  JitOptions o;
  o.compile_after = static_cast<int>(count(compile_after, "compile_after", std::numeric_limits<int>::max()));
  o.max_entries = static_cast<std::size_t>(count(max_entries, "max_entries", INT64_MAX));
  o.max_paths = static_cast<std::size_t>(count(max_paths, "max_paths", INT64_MAX));
  o.compile = compile_options(op, vector_math, reuse_memory, optimization);
  return o;
}

}  // namespace

void bind_jit(py::module_& m) {
  py::class_<CacheInfo> info(m, "CacheInfo");
  for (const auto& [name, count] : {std::pair{"hits", &CacheInfo::hits}, {"misses", &CacheInfo::misses},
                                    {"entries", &CacheInfo::entries}, {"compilations", &CacheInfo::compilations},
                                    {"evictions", &CacheInfo::evictions}})
    info.def_readonly(name, count);
  info.def_readonly("compile_seconds", &CacheInfo::compile_seconds)
      .def("__repr__", [](const CacheInfo& c) {
        return fmt::format("CacheInfo(hits={}, misses={}, entries={}, compilations={}, compile_seconds={:.3g}, "
                           "evictions={})",
                           c.hits, c.misses, c.entries, c.compilations, c.compile_seconds, c.evictions);
      });
  py::class_<PyJit>(m, "JitFunction", "A cached function (reel.jit, reel.jit_grad / reel.simplegrad).")
      .def("__call__", &PyJit::call)
      .def("cache_info", &PyJit::info);
  m.def(
      "_jit",
      [](py::object f, bool grad, py::handle compile_after, py::handle max_entries, py::handle max_paths,
         bool vector_math, bool reuse_memory, const std::string& optimization) {
        const char* op = grad ? "simplegrad" : "jit";
        return PyJit(std::move(f),
                     jit_options(op, compile_after, max_entries, max_paths, vector_math, reuse_memory, optimization),
                     grad);
      },
      py::arg("f"), py::arg("grad"), py::arg("compile_after") = 2, py::arg("max_entries") = 256,
      py::arg("max_paths") = 8, py::arg("vector_math") = true, py::arg("reuse_memory") = true,
      py::arg("optimization") = "automatic");
}

}  // namespace reel::py_bind
