// Tracing Python functions and the transformations of their tapes: reel.trace, the
// gradient family (grad, vjp, jvp, hvp), tapes (text, passes, pictures) and compiled
// functions (reel.compile, reel.compile_grad), which run with the GIL released.
#include <fmt/format.h>

#include <chrono>

#include "common.hpp"
#include "transforms.hpp"

namespace reel::py_bind {

PyTrace trace_py(py::handle f, const py::tuple& args, bool lift, bool value_guards, const char* op,
                 bool plain_results) {
  if (!PyCallable_Check(f.ptr()))
    throw Error(fmt::format("{}: expected a function, got {}", op, shown(f)));
  PyTrace out;
  flatten(args, out.inputs, op);
  TracedTensors t = trace_tensors(
      out.inputs,
      [&](const std::vector<Tensor>& wrapped) {
        std::size_t next = 0;
        py::tuple wrapped_args = rebuild(args, wrapped, next, false);
        out.result = f(*wrapped_args);
        if (plain_results) flatten(out.result, out.outputs, op);
        else out.outputs = result_tensors(out.result, op);
        return out.outputs;
      },
      lift, value_guards);
  out.captured = std::move(t.captured);
  out.tape = std::move(t.tape);
  return out;
}

CompileOptions compile_options(const char* op, bool vector_math, bool reuse_memory, const std::string& optimization) {
  CompileOptions o;
  o.vector_math = vector_math;
  o.reuse_memory = reuse_memory;
  using O = CompileOptions::Optimization;
  if (optimization == "automatic") o.optimization = O::automatic;
  else if (optimization == "full") o.optimization = O::full;
  else if (optimization == "quick") o.optimization = O::quick;
  else
    throw Error(fmt::format("{}: expected optimization \"automatic\", \"full\" or \"quick\", got \"{}\"", op,
                            optimization));
  return o;
}

std::vector<Tensor> detached(std::span<const Tensor> ts) {
  std::vector<Tensor> out;
  out.reserve(ts.size());
  for (const Tensor& t : ts) out.push_back(detach(t));
  return out;
}

py::tuple gradients_per_arg(const py::tuple& args, std::span<const Tensor> grads, std::size_t first) {
  py::tuple out(args.size());
  std::size_t next = first;
  for (std::size_t i = 0; i < args.size(); ++i) out[i] = rebuild(args[i], grads, next, true);
  return out;
}

py::tuple value_and_grads(const py::tuple& args, std::span<const Tensor> outs) {
  py::tuple result(args.size() + 1);
  result[0] = to_py(outs[0]);
  std::size_t next = 1;
  for (std::size_t i = 0; i < args.size(); ++i) result[i + 1] = rebuild(args[i], outs, next, true);
  return result;
}

std::vector<Tensor> run_compiled(const CompiledFunction& f, std::span<const Tensor> args) {
  std::vector<const Tensor*> ptrs(args.size());
  for (std::size_t i = 0; i < args.size(); ++i) ptrs[i] = &args[i];
  std::vector<Tensor> outs(f.num_outputs());
  ReleaseGil release;
  f.run(ptrs, outs);
  return outs;
}

namespace {

py::tuple as_args(py::handle primals) {
  if (py::isinstance<py::tuple>(primals)) return py::reinterpret_borrow<py::tuple>(primals);
  if (py::isinstance<py::list>(primals)) return py::tuple(py::reinterpret_borrow<py::list>(primals));
  return py::make_tuple(primals);  // one argument
}

// reel.grad(f, *args): (value, gradients per argument), through the interpreter.
py::tuple grad_py(py::handle f, py::tuple args) {
  PyTrace t = trace_py(f, args, /*lift=*/true, false, "grad");
  const std::vector<Tensor> outs = play_gradient(grad_tape(t.tape), detached(t.inputs), t.captured);
  return py::make_tuple(to_py(outs.at(0)), gradients_per_arg(args, outs, 1));
}

py::tuple vjp_py(py::handle f, py::handle seed, py::tuple args) {
  PyTrace t = trace_py(f, args, /*lift=*/true, false, "vjp");
  const Tensor s = as_tensor(seed, "vjp");
  check_seed(t.tape, s);
  const std::vector<Tensor> outs =
      play_gradient(vjp_tape(t.tape), detached(t.inputs), t.captured, std::span<const Tensor>(&s, 1));
  return py::make_tuple(to_py(outs.at(0)), gradients_per_arg(args, outs, 1));
}

// The primals (a tuple of f's arguments, or one argument) and one direction per tensor
// in them: their tensors, and k directions each (k < 0: one), checked.
struct Directions {
  py::tuple args;
  std::vector<Tensor> a, v;
  int64_t k = -1;
};
Directions directions(const char* op, py::handle primals, py::handle dirs) {
  Directions d{as_args(primals), {}, {}, -1};
  flatten(d.args, d.a, op);
  flatten(as_args(dirs), d.v, op);
  if (d.a.size() != d.v.size())
    throw Error(fmt::format("{}: expected one direction per argument tensor ({}), got {}", op, d.a.size(), d.v.size()));
  d.k = tangent_count(op, d.a, d.v);
  return d;
}

// (value tree, tangent tree, values, tangents)
py::tuple jvp_py(py::handle f, py::handle primals, py::handle tangents) {
  const auto [args, a, v, k] = directions("jvp", primals, tangents);
  PyTrace t = trace_py(f, args, /*lift=*/true, false, "jvp");
  const std::vector<Tensor> out = play_forward(t.tape, detached(a), t.captured, v, k);
  const std::size_t m = out.size() / 2;
  std::span<const Tensor> values(out.data(), m), dots(out.data() + m, m);
  std::size_t i = 0, j = 0;
  return py::make_tuple(rebuild(t.result, values, i, false), rebuild(t.result, dots, j, false), to_list(values),
                        to_list(dots));
}

// (value, gradients, H v), the last two with the primals' structure.
py::tuple hvp_py(py::handle f, py::handle primals, py::handle vs) {
  const auto [args, a, v, k] = directions("hvp", primals, vs);
  PyTrace t = trace_py(f, args, /*lift=*/true, false, "hvp");
  const std::size_t n = a.size();
  const std::vector<Tensor> out = play_forward(own_gradients(grad_tape(t.tape), n), detached(a), t.captured, v, k);
  std::vector<Tensor> grads(out.begin() + 1, out.begin() + 1 + static_cast<std::ptrdiff_t>(n));
  std::vector<Tensor> hv(out.begin() + static_cast<std::ptrdiff_t>(n + 2),
                         out.begin() + static_cast<std::ptrdiff_t>(2 * n + 2));  // after [value, grads, d value]
  std::size_t i = 0, j = 0;
  return py::make_tuple(to_py(out.at(0)), rebuild(args, grads, i, true), rebuild(args, hv, j, true));
}

// reel.compile_grad(f, *args): the gradient tape compiled once; a call returns
// (value, gradient of each argument), the gradients shaped as the arguments.
class CompiledGrad {
 public:
  CompiledGrad(py::handle f, py::tuple args) {
    CacheKey key;
    std::vector<Tensor> tensors;
    append_args_key(key, args, tensors, "compile_grad");
    key_ = key.view();
    traced_ = describe_all(args);
    PyTrace t = trace_py(f, args, /*lift=*/false, false, "compile_grad");
    fn_ = compile(grad_tape(t.tape));
  }
  // The arguments must be those traced: tensors of the same dtypes and shapes, the same
  // plain values (they are constants of the code) and the same structure.
  py::tuple call(const py::args& args) const {
    CacheKey key;
    std::vector<Tensor> leaves;
    append_args_key(key, args, leaves, "compile_grad");
    if (key.view() != key_) {
      std::string traced, given;
      for (std::size_t i = 0; i < args.size() || i < traced_.size(); ++i) {
        traced += fmt::format("{}{}", i ? ", " : "", i < traced_.size() ? traced_[i] : "-");
        given += fmt::format("{}{}", i ? ", " : "", i < args.size() ? describe(args[i]) : "-");
      }
      throw Error(fmt::format("compile_grad: expected arguments as traced ({}), got ({}); plain values are "
                              "constants of the compiled code: use reel.simplegrad(f) for arguments that change",
                              traced, given));
    }
    return value_and_grads(args, run_compiled(fn_, leaves));
  }
  const CompiledFunction& compiled() const { return fn_; }

 private:
  std::string key_;
  std::vector<std::string> traced_;
  CompiledFunction fn_;
};

}  // namespace
}  // namespace reel::py_bind

REEL_INITIALISED_CASTER(reel::py_bind::CompiledGrad)

namespace reel::py_bind {
namespace {

std::vector<Tensor> call_args(const py::args& args) {
  std::vector<Tensor> out;
  if (args.size() == 1 && (py::isinstance<py::list>(args[0]) || py::isinstance<py::tuple>(args[0]))) {
    for (py::handle a : args[0]) out.push_back(as_tensor(a, "compiled function"));
  } else {
    out.reserve(args.size());
    for (py::handle a : args) out.push_back(as_tensor(a, "compiled function"));
  }
  return out;
}

// Seconds per call of f on args, timed in C++ (the benchmark's side-by-side baseline):
// f(args) as a C++ program calls it.
double time_cpp_calls(const CompiledFunction& f, const std::vector<Tensor>& args, int64_t calls) {
  ReleaseGil release;
  std::vector<Tensor> keep;
  for (int i = 0; i < 10; ++i) keep = f(args);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < calls; ++i) keep = f(args);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(calls);
}

}  // namespace

void bind_transforms(py::module_& m) {
  py::class_<Tape>(m, "Tape", "A linear SSA tape: print it for its text form (docs/tape-format.md).")
      .def("__str__", [](const Tape& t) { return fmt::format("{}", t); })
      .def("__repr__", [](const Tape& t) {
        return fmt::format("reel.Tape({} inputs, {} operations, {} outputs)", t.inputs().size(), t.ops.size(),
                           t.outputs.size());
      })
      .def_property_readonly("num_inputs", [](const Tape& t) { return t.inputs().size(); })
      .def_property_readonly("num_outputs", [](const Tape& t) { return t.outputs.size(); })
      .def("__len__", [](const Tape& t) { return t.ops.size(); });

  m.def("trace",
        [](py::handle f, py::args args) { return trace_py(f, args, false, false, "trace").tape; },
        py::arg("f"), "The tape of f at these arguments (their tensors are its inputs, in walk order).");
  m.def("parse_tape", [](const std::string& text) { return parse_tape(text); }, py::arg("text"));
  m.def("play",
        [](const Tape& tape, py::handle args) {
          std::vector<Tensor> in;
          flatten(args, in, "play");
          return to_list(play(tape, in));
        },
        py::arg("tape"), py::arg("args"), "Interprets a tape on new inputs; a list of its outputs.");
  m.def("grad_tape", &grad_tape, py::arg("tape"));
  m.def("vjp_tape", &vjp_tape, py::arg("tape"));
  m.def("jvp_tape",
        [](const Tape& tape, py::handle k) {
          return k.is_none() ? jvp_tape(tape) : jvp_tape(tape, to_int(k, "jvp_tape", "k"));
        },
        py::arg("tape"), py::arg("k") = py::none());
  m.def("forward_mode", &forward_mode, py::arg("tape"));
  m.def("reverse_mode", &reverse_mode, py::arg("tape"));
  m.def("simplify", &simplify, py::arg("tape"));
  m.def("cse", &cse, py::arg("tape"));
  m.def("dce", &dce, py::arg("tape"));
  m.def("cleanup", &cleanup, py::arg("tape"));
  m.def("to_dot",
        [](const Tape& tape, bool gradient, const std::string& title) {
          DotOptions o;
          o.gradient = gradient;
          o.title = title;
          return to_dot(tape, o);
        },
        py::arg("tape"), py::arg("gradient") = false, py::arg("title") = "",
        "Graphviz DOT of a tape; gradient=True tells a gradient tape's forward and adjoint parts apart.");
  m.def("plan_dot", [](const Tape& tape) { return plan_dot(tape); }, py::arg("tape"));
  m.def("plan_text", [](const Tape& tape) { return plan_text(tape); }, py::arg("tape"));
  m.def("dump_ir", [](const Tape& tape) { return dump_ir(tape); }, py::arg("tape"));

  m.def("_grad", &grad_py);
  m.def("_vjp", &vjp_py);
  m.def("_jvp", &jvp_py);
  m.def("_hvp", &hvp_py);

  py::class_<CompiledFunction>(m, "CompiledFunction",
                               "Native code of a tape: f(*args) (or f([args])) returns a list of its outputs.")
      .def("__call__", [](const CompiledFunction& f, py::args args) { return to_list(run_compiled(f, call_args(args))); })
      .def("profile",
           [](const CompiledFunction& f, py::handle args, int runs) {
             std::vector<Tensor> in;
             flatten(args, in, "profile");
             ReleaseGil release;
             return f.profile(in, runs);
           },
           py::arg("args"), py::arg("runs") = 20, "Each step's time over `runs` calls, as text.")
      .def_property_readonly("tape", &CompiledFunction::tape)
      .def_property_readonly("llvm_ir", &CompiledFunction::llvm_ir)
      .def("workspace_bytes", &CompiledFunction::workspace_bytes)
      .def("workspace_lower_bound", &CompiledFunction::workspace_lower_bound)
      .def("num_steps", &CompiledFunction::num_steps)
      .def("num_kernels", &CompiledFunction::num_kernels)
      .def("kernels_compiled", &CompiledFunction::kernels_compiled)
      .def("num_outputs", &CompiledFunction::num_outputs);
  m.def("compile",
        [](const Tape& tape, bool vector_math, bool reuse_memory, const std::string& optimization) {
          const CompileOptions options = compile_options("compile", vector_math, reuse_memory, optimization);
          ReleaseGil release;
          return compile(tape, options);
        },
        py::arg("tape"), py::arg("vector_math") = true, py::arg("reuse_memory") = true,
        py::arg("optimization") = "automatic");

  py::class_<CompiledGrad>(m, "CompiledGrad",
                           "reel.compile_grad(f, *args): g(*args) returns (value, gradient of each argument).")
      .def(py::init<py::handle, py::tuple>())
      .def("__call__", &CompiledGrad::call)
      .def_property_readonly("compiled", &CompiledGrad::compiled)
      .def_property_readonly("tape", [](const CompiledGrad& g) { return g.compiled().tape(); });

  m.def("_time_cpp_calls",
        [](const CompiledFunction& f, py::handle args, int64_t calls) {
          std::vector<Tensor> in;
          flatten(args, in, "_time_cpp_calls");
          return time_cpp_calls(f, in, calls);
        });
}

}  // namespace reel::py_bind
