#include "steps.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <type_traits>

#include "loops.hpp"
#include "reel/blas.hpp"
#include "reel/ir/guards.hpp"
#include "reel/parallel.hpp"

namespace reel::codegen {

double first_element(void* const* bases, DType dtype, const BufferRef& ref) {
  switch (dtype) {
    case DType::f64: return *at<const double>(bases, ref);
    case DType::f32: return static_cast<double>(*at<const float>(bases, ref));
    default: return static_cast<double>(*at<const int64_t>(bases, ref));
  }
}

namespace {

void gemm(void* const* bases, const GemmArgs& g) {
  const auto ta = static_cast<int32_t>(g.trans_a), tb = static_cast<int32_t>(g.trans_b);
  if (g.dtype == DType::f64)
    reel_rt_gemm_f64(ta, tb, g.m, g.n, g.k, at<double>(bases, g.a), g.lda, at<double>(bases, g.b), g.ldb,
                     at<double>(bases, g.c), g.ldc);
  else
    reel_rt_gemm_f32(ta, tb, g.m, g.n, g.k, at<float>(bases, g.a), g.lda, at<float>(bases, g.b), g.ldb,
                     at<float>(bases, g.c), g.ldc);
}

// The products of batch elements [first, last), each matrix's offset found by counting
// the batch index up (row-major) from first.
void batch_gemm_range(void* const* bases, const BatchGemmArgs& g, int64_t first, int64_t last) {
  const std::size_t dims = g.batch.size();
  std::vector<int64_t> idx(dims, 0);
  int64_t rest = first;
  for (std::size_t d = dims; d-- > 0;) idx[d] = rest % g.batch[d], rest /= g.batch[d];
  const int64_t elem = g.gemm.dtype == DType::f64 ? 8 : 4;
  for (int64_t i = first; i < last; ++i) {
    GemmArgs one = g.gemm;
    for (std::size_t d = 0; d < dims; ++d) {
      one.a.offset += idx[d] * g.stride_a[d] * elem;
      one.b.offset += idx[d] * g.stride_b[d] * elem;
      one.c.offset += idx[d] * g.stride_c[d] * elem;
    }
    gemm(bases, one);
    for (std::size_t d = dims; d-- > 0;) {  // the next batch index
      if (++idx[d] < g.batch[d]) break;
      idx[d] = 0;
    }
  }
}

void batch_gemm(void* const* bases, const BatchGemmArgs& g) {
  int64_t count = 1;
  for (int64_t b : g.batch) count *= b;
  if (g.chunk <= 0) return batch_gemm_range(bases, g, 0, count);
  parallel::for_chunks((count + g.chunk - 1) / g.chunk, [&](int64_t c) {
    batch_gemm_range(bases, g, c * g.chunk, std::min(count, (c + 1) * g.chunk));
  });
}

void gemv(void* const* bases, const GemvArgs& g) {
  const auto ta = static_cast<int32_t>(g.trans_a);
  if (g.dtype == DType::f64)
    reel_rt_gemv_f64(ta, g.rows, g.cols, at<double>(bases, g.a), at<double>(bases, g.x), at<double>(bases, g.y));
  else
    reel_rt_gemv_f32(ta, g.rows, g.cols, at<float>(bases, g.a), at<float>(bases, g.x), at<float>(bases, g.y));
}

void parallel_kernel(void* const* bases, const ParallelKernelArgs& p) {
  const int64_t chunks = (p.extent + p.chunk - 1) / p.chunk;
  int64_t width = 0;  // a chunk's partial results: every sum's, one after another
  for (const ParallelKernelArgs::Sum& sum : p.sums) width += sum.count;
  // Each chunk's partial sums, on the stack when few (not thread_local: a thread waiting
  // for its chunks may run another step's).
  double few[64];
  std::vector<double> many(width * chunks > 64 ? static_cast<std::size_t>(width * chunks) : 0);
  double* partials = many.empty() ? few : many.data();
  parallel::for_chunks(chunks, [&](int64_t c) {
    p.code(bases, p.buffers.data(), c * p.chunk, std::min(p.extent, (c + 1) * p.chunk), partials + c * width);
  });
  int64_t at_sum = 0;
  for (const ParallelKernelArgs::Sum& sum : p.sums) {
    const BufferRef& out = p.buffers[static_cast<std::size_t>(sum.param)];
    for (int64_t j = 0; j < sum.count; ++j) {
      double total = partials[at_sum + j];
      for (int64_t c = 1; c < chunks; ++c) total = kernels::reduce_combine(sum.op, total, partials[c * width + at_sum + j]);
      if (sum.scale != 1.0) total *= sum.scale;
      switch (sum.dtype) {
        case DType::f64: at<double>(bases, out)[j] = total; break;
        case DType::f32: at<float>(bases, out)[j] = static_cast<float>(total); break;
        default: at<int64_t>(bases, out)[j] = static_cast<int64_t>(total); break;
      }
    }
    at_sum += sum.count;
  }
}

void run_concurrent(void* const* bases, const ConcurrentArgs& c) {
  parallel::for_chunks(static_cast<int64_t>(c.branches.size()),
                       [&](int64_t i) { c.branches[static_cast<std::size_t>(i)]->run(bases); });
}

void zero(void* const* bases, const ZeroArgs& z) {
  if (z.bytes > 0) std::memset(at<char>(bases, z.to), 0, static_cast<std::size_t>(z.bytes));
}

void copy(void* const* bases, const CopyArgs& c) {
  if (c.bytes > 0) std::memcpy(at<char>(bases, c.to), at<char>(bases, c.from), static_cast<std::size_t>(c.bytes));
}

// Throws reel::Error unless the eager function made one tensor of each result's type.
void check_results(const ExternArgs& call, const std::vector<Tensor>& outs) {
  const std::size_t k = call.results.size();
  check_result_count(*call.prim, "the eager function", outs.size());
  for (std::size_t i = 0; i < k; ++i) {
    const Tensor& out = outs[i];
    const VarType& want = call.results[i].type;
    if (!out.defined() || out.dtype() != want.dtype || out.shape() != want.shape)
      throw Error(fmt::format("{}: the eager function made {}{}, the type rule says {}", call.prim->name,
                              out.defined() ? type_str(out.dtype(), out.shape()) : "undefined",
                              k > 1 ? fmt::format(" for result {}", i + 1) : "", type_str(want)));
  }
}

void external(void* const* bases, const ExternArgs& call) {
  // Copies of the arguments, or views of the workspace where call.borrow allows.
  std::vector<Tensor> args;
  args.reserve(call.args.size());
  for (const TypedBuffer& a : call.args) {
    if (call.borrow && numel(a.type.shape) > 0) {
      args.push_back(Tensor::borrow(at<void>(bases, a.ref), a.type.dtype, a.type.shape));
      continue;
    }
    args.emplace_back(a.type.dtype, a.type.shape);
    if (args.back().nbytes() > 0) std::memcpy(args.back().mutable_raw(), at<void>(bases, a.ref), args.back().nbytes());
  }
  const std::size_t k = call.results.size();
  if (call.borrow && call.prim->lowering.eager_into) {  // written where they go: no allocation, no copy
    std::vector<Tensor> outs;
    outs.reserve(k);
    for (const TypedBuffer& r : call.results)
      outs.push_back(numel(r.type.shape) > 0 ? Tensor::borrow(at<void>(bases, r.ref), r.type.dtype, r.type.shape)
                                            : Tensor(r.type.dtype, r.type.shape));
    call.prim->lowering.eager_into(args, call.attrs, outs, call.has_scratch ? at<void>(bases, call.scratch) : nullptr);
    return;
  }
  std::vector<Tensor> outs;
  try {
    outs = call.prim->eager(args, call.attrs);
  } catch (const GuardFailure& e) {  // name the guard
    throw GuardFailure(fmt::format("compiled {}: {}", call.label, e.what()));
  }
  check_results(call, outs);
  for (std::size_t i = 0; i < k; ++i)
    if (outs[i].nbytes() > 0) std::memcpy(at<void>(bases, call.results[i].ref), outs[i].raw(), outs[i].nbytes());
}

void check_indices(void* const* bases, const CheckIndicesArgs& c) {
  const auto* idx = at<const int64_t>(bases, c.indices);
  for (int64_t i = 0; i < c.count; ++i)
    if (idx[i] < 0 || idx[i] >= c.axis_length)
      throw Error(fmt::format("{}: index {} (element {} of the indices) is out of range for axis {} of length {}",
                              c.prim->name, idx[i], i, c.axis, c.axis_length));
  if (!c.distinct) return;
  std::vector<bool> seen(static_cast<std::size_t>(c.axis_length), false);
  for (int64_t i = 0; i < c.count; ++i) {
    if (seen[static_cast<std::size_t>(idx[i])])
      throw Error(fmt::format("{}: index {} appears twice; expected distinct indices", c.prim->name, idx[i]));
    seen[static_cast<std::size_t>(idx[i])] = true;
  }
}

GuardFailure guard_failure(const GuardArgs& g, double v) {
  return GuardFailure(fmt::format("compiled {}: {}", g.label, branch_guard_failure(g.expected, v, g.loop)));
}

void guard(void* const* bases, const GuardArgs& g) {
  const double v = first_element(bases, g.dtype, g.cond);
  if ((v != 0.0) != g.expected) throw guard_failure(g, v);
}

void loop_guard(void* const* bases, const LoopGuardArgs& g) {
  const auto* failure = at<const int64_t>(bases, g.failure);
  if (failure[0] == 0) return;
  const GuardArgs& which = g.guards.at(static_cast<std::size_t>(failure[1]));
  double v;
  std::memcpy(&v, failure + 2, sizeof v);
  throw GuardFailure(fmt::format("compiled {}, iteration {}: {}", g.label, failure[0] - 1, guard_failure(which, v).what()));
}

// The one place a step's arguments are cast back from `const void*`: instantiated per
// argument type together with the function that reads it.
template <class Args, void (*Run)(void* const*, const Args&)>
void step(void* const* bases, const void* args) {
  Run(bases, *static_cast<const Args*>(args));
}

template <class Args, void (*Run)(void* const*, const Args&)>
BoundStep bound(const Args& args) {
  return {&step<Args, Run>, &args};
}

template <class... F>
struct Overloaded : F... {
  using F::operator()...;
};

}  // namespace

namespace {

// The code of kernel k, called with `buffers` buffers; throws reel::Error (an internal
// error) if there is no such kernel or it takes another number.
StepFn kernel_fn(int k, std::size_t buffers, const std::vector<StepFn>& kernel_code,
                 const std::vector<std::size_t>& kernel_params) {
  const auto i = static_cast<std::size_t>(k);
  if (k < 0 || i >= kernel_code.size() || kernel_params.size() != kernel_code.size())
    throw Error(fmt::format("compile: internal error: a step calls kernel {} of {}", k, kernel_code.size()));
  if (buffers != kernel_params[i])
    throw Error(fmt::format("compile: internal error: a step gives kernel {} {} buffers, it takes {}", k, buffers,
                            kernel_params[i]));
  return kernel_code[i];
}

}  // namespace

BoundStep bind_step(StepArgs& s, const std::vector<StepFn>& kernel_code,
                    const std::vector<std::size_t>& kernel_params) {
  return std::visit(
      Overloaded{
          [&](const KernelArgs& k) -> BoundStep {
            return {kernel_fn(k.kernel, k.buffers.size(), kernel_code, kernel_params), k.buffers.data()};
          },
          [&](ParallelKernelArgs& k) -> BoundStep {
            // (a kernel with chunks is emitted as a RangeFn, emit.hpp)
            k.code = reinterpret_cast<RangeFn>(reinterpret_cast<void (*)()>(kernel_fn(k.kernel, k.buffers.size(), kernel_code, kernel_params)));
            return bound<ParallelKernelArgs, parallel_kernel>(k);
          },
          [](const GemmArgs& a) { return bound<GemmArgs, gemm>(a); },
          [](const BatchGemmArgs& a) { return bound<BatchGemmArgs, batch_gemm>(a); },
          [](const GemvArgs& a) { return bound<GemvArgs, gemv>(a); },
          [](const CopyArgs& a) { return bound<CopyArgs, copy>(a); },
          [](const ZeroArgs& a) { return bound<ZeroArgs, zero>(a); },
          [](const ExternArgs& a) { return bound<ExternArgs, external>(a); },
          [](const CheckIndicesArgs& a) { return bound<CheckIndicesArgs, check_indices>(a); },
          [](const GuardArgs& a) { return bound<GuardArgs, guard>(a); },
          [](const LoopArgs& a) { return bound<LoopArgs, run_loop>(a); },
          [](const LoopGuardArgs& a) { return bound<LoopGuardArgs, loop_guard>(a); },
          [](const ConcurrentArgs& a) { return bound<ConcurrentArgs, run_concurrent>(a); },
      },
      s);
}

namespace {

// The bytes of a step's arguments as bind_step points at them, if they are plain data
// that may be copied; 0 for the others.
std::size_t plain_bytes(const StepArgs& s) {
  return std::visit(Overloaded{
                        [](const KernelArgs& k) { return k.buffers.size() * sizeof(BufferRef); },
                        [](const ParallelKernelArgs&) { return std::size_t{0}; },
                        [](const BatchGemmArgs&) { return std::size_t{0}; },
                        [](const ExternArgs&) { return std::size_t{0}; },
                        [](const GuardArgs&) { return std::size_t{0}; },
                        [](const LoopArgs&) { return std::size_t{0}; },
                        [](const LoopGuardArgs&) { return std::size_t{0}; },
                        [](const ConcurrentArgs&) { return std::size_t{0}; },
                        [](const auto& a) {
                          using Args = std::decay_t<decltype(a)>;
                          static_assert(std::is_trivially_copyable_v<Args> && alignof(Args) <= alignof(int64_t));
                          return sizeof(Args);
                        },
                    },
                    s);
}

std::size_t words(std::size_t bytes) { return (bytes + sizeof(int64_t) - 1) / sizeof(int64_t); }

}  // namespace

std::vector<BoundStep> bind_steps(std::vector<StepArgs>& steps, const std::vector<StepFn>& kernel_code,
                                  const std::vector<std::size_t>& kernel_params, std::vector<int64_t>& arena) {
  std::size_t total = 0;
  for (const StepArgs& s : steps) total += words(plain_bytes(s));
  arena.assign(total, 0);
  std::vector<BoundStep> calls;
  calls.reserve(steps.size());
  std::size_t at = 0;
  for (StepArgs& s : steps) {
    BoundStep c = bind_step(s, kernel_code, kernel_params);
    if (const std::size_t bytes = plain_bytes(s); bytes > 0) {
      std::memcpy(arena.data() + at, c.args, bytes);
      c.args = arena.data() + at;
      at += words(bytes);
    }
    calls.push_back(c);
  }
  return calls;
}

void bind_program(Program& program, const std::vector<StepFn>& kernel_code,
                  const std::vector<std::size_t>& kernel_params) {
  for (StepArgs& s : program.steps) {
    if (auto* loop = std::get_if<LoopArgs>(&s))
      for (Program* body : {loop->body.get(), loop->cond.get()})
        if (body != nullptr) bind_program(*body, kernel_code, kernel_params);
    if (auto* c = std::get_if<ConcurrentArgs>(&s))
      for (const std::shared_ptr<Program>& branch : c->branches) bind_program(*branch, kernel_code, kernel_params);
  }
  program.calls = bind_steps(program.steps, kernel_code, kernel_params, program.arena);
  program.may_throw = std::any_of(program.steps.begin(), program.steps.end(), [](const StepArgs& s) { return may_throw(s); });
  program.calls_out = std::any_of(program.steps.begin(), program.steps.end(), [](const StepArgs& s) { return calls_out(s); });
}

bool calls_out(const StepArgs& step) {
  if (const auto* loop = std::get_if<LoopArgs>(&step))
    return (loop->body && loop->body->calls_out) || (loop->cond && loop->cond->calls_out);
  if (const auto* c = std::get_if<ConcurrentArgs>(&step))
    return std::any_of(c->branches.begin(), c->branches.end(), [](const auto& b) { return b->calls_out; });
  return std::holds_alternative<ExternArgs>(step);
}

bool may_throw(const StepArgs& step) {
  if (const auto* loop = std::get_if<LoopArgs>(&step))
    return (loop->body && loop->body->may_throw) || (loop->cond && loop->cond->may_throw);
  if (const auto* c = std::get_if<ConcurrentArgs>(&step))
    return std::any_of(c->branches.begin(), c->branches.end(), [](const auto& b) { return b->may_throw; });
  return std::holds_alternative<ExternArgs>(step) || std::holds_alternative<CheckIndicesArgs>(step) ||
         std::holds_alternative<GuardArgs>(step) || std::holds_alternative<LoopGuardArgs>(step);
}

void Program::run_timed(void* const* bases, std::vector<double>& seconds) const {
  seconds.resize(calls.size(), 0.0);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    calls[i].fn(bases, calls[i].args);
    seconds[i] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

std::string describe_step(const StepArgs& step, const std::vector<std::string>& kernel_keys) {
  auto kernel = [&](int k) {
    const std::string& key = kernel_keys.at(static_cast<std::size_t>(k));
    std::size_t cut = key.find(';');  // (the kind, dtypes and dims; then the first load, or what is kept)
    if (cut != std::string::npos) cut = key.find(';', cut + 1);
    cut = std::min({cut, key.size(), std::size_t{120}});
    return fmt::format("kernel {} ({})", k, key.substr(0, cut));
  };
  auto gemm = [](const GemmArgs& g) {
    return fmt::format("{} {} x {} x {}", g.dtype == DType::f32 ? "f32" : "f64", g.m, g.n, g.k);
  };
  return std::visit(
      [&](const auto& s) -> std::string {
        using S = std::decay_t<decltype(s)>;
        if constexpr (std::is_same_v<S, KernelArgs>) return kernel(s.kernel);
        else if constexpr (std::is_same_v<S, ParallelKernelArgs>)
          return fmt::format("{}, {} outer iterations in chunks of {}", kernel(s.kernel), s.extent, s.chunk);
        else if constexpr (std::is_same_v<S, GemmArgs>) return "gemm " + gemm(s);
        else if constexpr (std::is_same_v<S, BatchGemmArgs>) {
          int64_t count = 1;
          for (int64_t b : s.batch) count *= b;
          return fmt::format("{} gemms {}", count, gemm(s.gemm));
        } else if constexpr (std::is_same_v<S, GemvArgs>)
          return fmt::format("gemv {} {} x {}", s.dtype == DType::f32 ? "f32" : "f64", s.rows, s.cols);
        else if constexpr (std::is_same_v<S, CopyArgs>) return fmt::format("copy {} bytes", s.bytes);
        else if constexpr (std::is_same_v<S, ZeroArgs>) return fmt::format("zeros {} bytes", s.bytes);
        else if constexpr (std::is_same_v<S, ExternArgs>) return "eager " + s.label;
        else if constexpr (std::is_same_v<S, CheckIndicesArgs>) return "index check";
        else if constexpr (std::is_same_v<S, GuardArgs>) return "guard " + s.label;
        else if constexpr (std::is_same_v<S, LoopArgs>) return "loop " + s.label;
        else if constexpr (std::is_same_v<S, LoopGuardArgs>) return "loop guard " + s.label;
        else return fmt::format("{} independent steps at the same time", s.branches.size());
      },
      step);
}

}  // namespace reel::codegen
