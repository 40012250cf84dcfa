// reel.jit(f) and reel.jit_grad(f) (reel.simplegrad(f)): the C++ cache
// (reel::detail::JitCore) keyed by Python arguments as the C++ one is by C++ ones; a
// hit runs with the GIL released.
#include <fmt/format.h>

#include <limits>

#include "common.hpp"
#include "transforms.hpp"

namespace reel::py_bind {

namespace {

class PyJit {
 public:
  PyJit(py::object f, JitOptions options, bool grad)
      : f_(std::move(f)), grad_(grad), core_(detail::make_core(options, grad ? "simplegrad" : "jit")) {
    if (!PyCallable_Check(f_.ptr()))
      throw Error(fmt::format("{}: expected a function, got {}", what(), shown(f_)));
  }

  py::object call(const py::args& args) const {
    detail::KeyBuffer key;
    std::vector<Tensor> tensors;
    tensors.reserve(args.size());
    append_args_key(key, args, tensors, what());
    std::vector<const Tensor*> ptrs(tensors.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) ptrs[i] = &tensors[i];
    // Inside another trace: no cache; f runs as it is, recorded on that trace.
    if (detail::any_traced(ptrs)) return uncached(args);
    return grad_ ? call_grad(args, key, tensors, ptrs) : call_jit(args, key, ptrs);
  }

  CacheInfo info() const { return detail::info_of(*core_); }

 private:
  const char* what() const { return grad_ ? "simplegrad" : "jit"; }

  // f run as it is, without the cache: the value (and gradients) a miss gives.
  py::object uncached(const py::args& args) const { return grad_ ? traced_grad(args) : f_(*args); }

  py::object call_jit(const py::args& args, const detail::KeyBuffer& key,
                      const std::vector<const Tensor*>& ptrs) const {
    detail::CallLooks looks;
    std::optional<detail::JitCore::Hit> hit;
    {
      ReleaseGil release;
      hit = core_->run(key.view(), ptrs, looks.look());
    }
    if (!hit) {
      // A miss traces holding the miss lock. While another thread holds it (tracing or
      // compiling f), this call runs f uncached instead of waiting: that thread may be
      // waiting for this one (f calling itself on a thread it joins), which would never
      // end.
      const auto lock = core_->try_miss_lock();
      if (!lock.owns_lock()) return uncached(args);
      std::vector<std::string> parts = describe_all(args);
      {
        ReleaseGil release;
        hit = core_->run(key.view(), ptrs, looks.look({}, &parts));
      }
      if (!hit) return trace_jit(args, key, std::move(parts));
    }
    std::size_t next = 0;
    return rebuild(*static_cast<const py::object*>(hit->structure.get()), hit->outputs, next, false);
  }

  // A miss of reel.jit: f traced; its result's tensors are the path's outputs, and the
  // result with a placeholder for each is the structure its hits are rebuilt from.
  py::object trace_jit(const py::args& args, const detail::KeyBuffer& key, std::vector<std::string> parts) const {
    detail::TraceScope scope(false, /*value_guards=*/true);
    std::vector<Tensor> inputs;
    flatten(args, inputs, what());
    for (Tensor& t : inputs) t = scope.input(t);
    std::size_t next = 0;
    py::tuple wrapped = rebuild(args, inputs, next, false);
    py::object result = f_(*wrapped);
    std::vector<Tensor> outs;
    flatten(result, outs, what());
    for (const Tensor& t : outs) scope.output(t);
    const std::vector<Tensor> placeholders(outs.size(), scalar(0.0));
    next = 0;
    auto structure = hold(rebuild(result, placeholders, next, false));
    Tape tape = scope.finish();
    {
      ReleaseGil release;  // compile_after 1 compiles here
      core_->add(key.view(), std::move(parts), std::move(tape), structure);
    }
    for (Tensor& t : outs) t.clear_trace_tags();
    next = 0;
    return rebuild(*structure, outs, next, false);
  }

  py::object call_grad(const py::args& args, const detail::KeyBuffer& key, const std::vector<Tensor>& tensors,
                       const std::vector<const Tensor*>& ptrs) const {
    std::vector<Tensor> outs(tensors.size() + 1);
    detail::CallLooks looks;
    bool hit;
    {
      ReleaseGil release;
      hit = core_->run(key.view(), ptrs, looks.look(outs)).has_value();
    }
    if (!hit) {
      const auto lock = core_->try_miss_lock();  // as call_jit's
      if (!lock.owns_lock()) return uncached(args);
      std::vector<std::string> parts = describe_all(args);
      {
        ReleaseGil release;
        hit = core_->run(key.view(), ptrs, looks.look(outs, &parts)).has_value();
      }
      if (!hit) {
        Tape g = grad_tape(trace_py(f_, args, false, /*value_guards=*/true, what()).tape);
        ReleaseGil release;
        core_->add(key.view(), std::move(parts), std::move(g), nullptr, ptrs, outs);
      }
    }
    return value_and_grads(args, outs);
  }

  // Inside another trace: the gradient tape played, recorded on that trace.
  py::object traced_grad(const py::args& args) const {
    PyTrace t = trace_py(f_, args, false, false, what());
    return value_and_grads(args, play(grad_tape(t.tape), t.inputs));
  }

  py::object f_;
  bool grad_;
  std::shared_ptr<detail::JitCore> core_;
};

}  // namespace
}  // namespace reel::py_bind

REEL_INITIALISED_CASTER(reel::py_bind::PyJit)

namespace reel::py_bind {
namespace {

// The options as reel.jit and reel.simplegrad(f) take them (`op`), each count an
// integer from 1 to the most its C++ field holds.
JitOptions jit_options(const char* op, py::handle compile_after, py::handle max_entries, py::handle max_paths,
                       bool vector_math, bool reuse_memory) {
  const auto count = [op](py::handle h, const char* what, int64_t most) {
    const int64_t v = to_int(h, op, what);
    if (v < 1 || v > most) throw Error(fmt::format("{}: expected {} from 1 to {}, got {}", op, what, most, v));
    return v;
  };
  JitOptions o;
  o.compile_after = static_cast<int>(count(compile_after, "compile_after", std::numeric_limits<int>::max()));
  o.max_entries = static_cast<std::size_t>(count(max_entries, "max_entries", INT64_MAX));
  o.max_paths = static_cast<std::size_t>(count(max_paths, "max_paths", INT64_MAX));
  o.compile.vector_math = vector_math;
  o.compile.reuse_memory = reuse_memory;
  return o;
}

}  // namespace

void bind_jit(py::module_& m) {
  py::class_<CacheInfo>(m, "CacheInfo")
      .def_readonly("hits", &CacheInfo::hits)
      .def_readonly("misses", &CacheInfo::misses)
      .def_readonly("entries", &CacheInfo::entries)
      .def_readonly("compilations", &CacheInfo::compilations)
      .def_readonly("compile_seconds", &CacheInfo::compile_seconds)
      .def_readonly("evictions", &CacheInfo::evictions)
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
         bool vector_math, bool reuse_memory) {
        const char* op = grad ? "simplegrad" : "jit";
        return PyJit(std::move(f), jit_options(op, compile_after, max_entries, max_paths, vector_math, reuse_memory),
                     grad);
      },
      py::arg("f"), py::arg("grad"), py::arg("compile_after") = 2, py::arg("max_entries") = 256,
      py::arg("max_paths") = 8, py::arg("vector_math") = true, py::arg("reuse_memory") = true);
}

}  // namespace reel::py_bind
