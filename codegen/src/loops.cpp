#include "loops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>

#include "reel/ir/loop_params.hpp"
#include "reel/ir/while_loop.hpp"

namespace reel::codegen {

namespace {

int64_t round64(int64_t bytes) { return (bytes + 63) / 64 * 64; }
int64_t bytes_of(const VarType& t) { return numel(t.shape) * static_cast<int64_t>(dtype_size(t.dtype)); }
VarType without_leading(const VarType& t) { return {t.dtype, Shape(t.shape.begin() + 1, t.shape.end())}; }

// The alignment every slice k * bytes of a 64-aligned stack keeps: the largest power of
// two dividing `bytes`, at most 64.
int64_t slice_align(int64_t bytes) { return bytes == 0 ? 64 : std::min<int64_t>(64, bytes & -bytes); }

std::vector<VarType> output_types(const Tape& t) {
  std::vector<VarType> out;
  for (Var o : t.outputs) out.push_back(t.type(o));
  return out;
}

// The scan's layout (its attributes read as ScanParams), checked against its body as
// scan's type rule does; false if the call is not a scan of that form.
bool scan_layout(LoopPlan& lp, const ScanParams& p, const std::vector<VarType>& args,
                 const std::vector<VarType>& results) {
  const Tape& body = *p.body;
  lp.kind = LoopKind::scan;
  lp.length = p.length;
  lp.num_consts = p.C, lp.num_carry = p.K, lp.num_xs = p.X;
  lp.reverse = p.reverse;
  lp.has_index = p.has_index;
  lp.index0 = p.index0;
  std::vector<VarType> want;
  if (lp.has_index) want.push_back({DType::i64, {}});
  want.insert(want.end(), args.begin(), args.begin() + static_cast<std::ptrdiff_t>(p.C + p.K));
  for (std::size_t j = lp.num_consts + lp.num_carry; j < args.size(); ++j) {
    if (args[j].shape.empty() || args[j].shape[0] != lp.length) return false;
    want.push_back(without_leading(args[j]));
  }
  const std::vector<VarType> outs = output_types(body);
  if (body.input_types() != want || outs.size() != results.size() || outs.size() < lp.num_carry) return false;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    VarType r = outs[i];
    if (i >= lp.num_carry) r.shape.insert(r.shape.begin(), lp.length);
    if (r != results[i] || (i < lp.num_carry && r != args[lp.num_consts + i])) return false;
  }
  return true;
}

// The while loop's layout (WhileParams), checked against its cond and body as
// while_loop's type rule does; false if the call is not a while loop of that form.
bool while_layout(LoopPlan& lp, const WhileParams& w, const std::vector<VarType>& args,
                  const std::vector<VarType>& results) {
  lp.kind = LoopKind::while_loop;
  lp.num_consts = w.C, lp.num_carry = w.K;
  lp.max_trips = w.max_trips;
  const std::vector<VarType> carries(args.begin() + static_cast<std::ptrdiff_t>(w.C), args.end());
  const Tape &cond = *w.cond, &body = *w.body;
  return cond.input_types() == args && body.input_types() == args && output_types(body) == carries &&
         results == carries && cond.outputs.size() == 1 && numel(cond.type(cond.outputs[0]).shape) == 1;
}

// A loop's attributes as `Params` (ScanParams, WhileParams, CallParams), or nothing
// where they do not read (a call of no form the loop step runs).
template <class Params>
std::optional<Params> read_params(const Attrs& a, [[maybe_unused]] std::size_t nargs) {
  try {
    if constexpr (std::is_same_v<Params, CallParams>) return CallParams::read(a);
    else return Params::read(a, nargs);
  } catch (const Error&) {
    return std::nullopt;
  }
}

std::shared_ptr<const ProgramPlan> plan_body(const Tape& body, bool reuse) {
  return std::make_shared<const ProgramPlan>(plan_program(body, reuse));
}

// The body without the outputs at positions [first, ...) whose `kept` is false.
Tape pruned(const Tape& body, std::size_t first, const std::vector<bool>& kept) {
  std::vector<int> positions;
  for (std::size_t o = 0; o < body.outputs.size(); ++o)
    if (o < first || kept[o - first]) positions.push_back(static_cast<int>(o));
  return select_outputs(body, positions);
}

std::string vars(const Var first, int count) {
  std::string s;
  for (int i = 0; i < count; ++i) s += fmt::format("{}%{}", i ? ", " : "", first + i);
  return s;
}

std::string call_label(const Tape& t, Var v) {
  const Op& op = t.op(v);
  std::string args;
  for (Var a : op.args) args += fmt::format("{}%{}", args.empty() ? "" : ", ", a);
  return fmt::format("{} = {}({})", vars(v, op.results), op.prim->name, args);
}

}  // namespace

std::shared_ptr<const LoopPlan> plan_loop(const Tape& t, Var v, const std::vector<bool>& used, bool reuse) {
  const Op& op = t.op(v);
  const Attrs& a = op.attrs;
  const LoopForm form = loop_form(*op.prim);
  if (form == LoopForm::none) return nullptr;
  auto lp = std::make_shared<LoopPlan>();
  std::vector<VarType> args, results;
  for (Var x : op.args) args.push_back(t.type(x));
  for (int i = 0; i < op.results; ++i) results.push_back(t.type(v + i));
  if (form == LoopForm::while_loop) {
    const std::optional<WhileParams> w = read_params<WhileParams>(a, args.size());
    if (!w || !while_layout(*lp, *w, args, results)) return nullptr;
    lp->cond = plan_body(*w->cond, reuse);
    lp->body = plan_body(*w->body, reuse);
  } else if (form == LoopForm::scan) {
    const std::optional<ScanParams> p = read_params<ScanParams>(a, args.size());
    if (!p || !scan_layout(*lp, *p, args, results)) return nullptr;
    for (std::size_t j = lp->num_carry; j < results.size(); ++j) lp->kept.push_back(used[v + static_cast<Var>(j)]);
    const bool all = std::all_of(lp->kept.begin(), lp->kept.end(), [](bool k) { return k; });
    lp->body = plan_body(all ? *p->body : pruned(*p->body, lp->num_carry, lp->kept), reuse);
  } else {
    const std::optional<CallParams> p = read_params<CallParams>(a, args.size());  // (call, checkpoint: run once)
    if (!p) return nullptr;
    const Tape& body = *p->body;
    lp->kind = LoopKind::call;
    if (body.input_types() != args || output_types(body) != results) return nullptr;
    for (int i = 0; i < op.results; ++i) lp->kept.push_back(used[v + i]);
    const bool all = std::all_of(lp->kept.begin(), lp->kept.end(), [](bool k) { return k; });
    lp->body = plan_body(all ? body : pruned(body, 0, lp->kept), reuse);
  }

  // The scratch: the bodies' workspace (they run in turn), then the carries'
  // temporaries, the counter, cond's result and the tables of bases.
  int64_t at = round64(std::max(lp->body->plan.workspace_bytes, lp->cond ? lp->cond->plan.workspace_bytes : 0));
  const bool alternate = lp->kind == LoopKind::while_loop || (lp->kind == LoopKind::scan && lp->length >= 2);
  for (std::size_t c = 0; alternate && c < lp->num_carry; ++c) {
    lp->temps.push_back(at);
    at += round64(bytes_of(args[lp->num_consts + c]));
  }
  auto take = [&](int64_t bytes) {
    const int64_t off = at;
    at += round64(bytes);
    return off;
  };
  if (lp->has_index) lp->counter = take(sizeof(int64_t));
  if (lp->kind == LoopKind::scan && has_guards(*lp)) lp->failure = take(3 * sizeof(int64_t));
  if (lp->cond) lp->cond_out = take(bytes_of(lp->cond->tape.type(lp->cond->tape.outputs[0])));
  auto table = [](const ProgramPlan& p) {
    return static_cast<int64_t>((kFirstInputBase + p.plan.num_inputs + p.tape.outputs.size()) * sizeof(void*));
  };
  lp->body_bases = take(table(*lp->body));
  if (lp->cond) lp->cond_bases = take(table(*lp->cond));
  lp->scratch_bytes = at;
  return lp;
}

bool loop_result_stored(const LoopPlan& lp, int i) {
  const auto k = static_cast<std::size_t>(i);
  switch (lp.kind) {
    case LoopKind::while_loop: return true;
    case LoopKind::scan: return k < lp.num_carry || lp.kept[k - lp.num_carry];
    case LoopKind::call: return lp.kept[k];
  }
  return true;
}

bool has_guards(const LoopPlan& lp) {
  return std::any_of(lp.body->plan.steps.begin(), lp.body->plan.steps.end(),
                     [](const Step& s) { return std::holds_alternative<CheckStep>(s); });
}

bool runs_as_kernel(const LoopPlan& lp) {
  constexpr std::size_t kMaxSteps = 256;
  if (lp.kind != LoopKind::scan || lp.body->plan.steps.size() > kMaxSteps) return false;
  for (const Step& s : lp.body->plan.steps) {
    const auto* inner = std::get_if<LoopCallStep>(&s);
    const auto* loop = std::get_if<LoopStep>(&s);  // its fused gathers' indices checked in C++, or none
    const bool ok = (loop != nullptr && loop->checks.empty()) || std::holds_alternative<ReduceStep>(s) ||
                    std::holds_alternative<TransposeStep>(s) || std::holds_alternative<CopyStep>(s) ||
                    std::holds_alternative<CheckStep>(s) ||
                    (std::holds_alternative<PlaceStep>(s) && place_covers(lp.body->tape, std::get<PlaceStep>(s).out)) ||
                    (inner != nullptr && runs_as_kernel(*inner->loop) && !has_guards(*inner->loop));
    if (!ok) return false;
  }
  return true;
}

LoopBuffers loop_buffers(const Tape& t, const Plan& p, const LoopCallStep& step,
                         const std::function<BufferRef(int slot)>& ref, const std::function<int64_t(int slot)>& align) {
  const LoopPlan& lp = *step.loop;
  const Op& op = t.op(step.out);
  auto slot = [&](Var x) { return p.slot_of[x]; };
  const BufferRef scratch = ref(step.scratch);
  auto in_scratch = [&](int64_t off) { return BufferRef{scratch.base, scratch.offset + off}; };
  LoopBuffers b;
  LoopArgs& L = b.args;
  L.kind = lp.kind;
  L.length = lp.length;
  L.reverse = lp.reverse;
  L.has_index = lp.has_index;
  L.index0 = lp.index0;
  L.max_trips = lp.max_trips;
  L.workspace = in_scratch(0);
  L.body_bases = in_scratch(lp.body_bases);
  L.cond_bases = in_scratch(lp.cond_bases);
  L.counter = in_scratch(lp.counter);
  L.cond_out = in_scratch(lp.cond_out);
  b.failure = in_scratch(lp.failure);
  if (lp.cond) L.cond_dtype = lp.cond->tape.type(lp.cond->tape.outputs[0]).dtype;
  L.label = call_label(t, step.out);
  if (lp.kind == LoopKind::call) {
    for (Var a : op.args) {
      L.consts.push_back(ref(slot(a)));
      b.consts_align.push_back(align(slot(a)));
    }
    for (int i = 0; i < op.results; ++i)
      if (lp.kept[static_cast<std::size_t>(i)]) {
        L.results.push_back(ref(slot(step.out + i)));
        b.result_align.push_back(align(slot(step.out + i)));
      }
    b.input_align = b.consts_align;
    b.output_align = b.result_align;
    return b;
  }
  if (lp.has_index) b.input_align.push_back(64);
  for (std::size_t i = 0; i < lp.num_consts; ++i) {
    L.consts.push_back(ref(slot(op.args[i])));
    b.consts_align.push_back(align(slot(op.args[i])));
    b.input_align.push_back(b.consts_align.back());
  }
  for (std::size_t c = 0; c < lp.num_carry; ++c) {
    const Var init = op.args[lp.num_consts + c], result = step.out + static_cast<Var>(c);
    const BufferRef r = ref(slot(result));
    L.carries.push_back({ref(slot(init)), r, lp.temps.empty() ? r : in_scratch(lp.temps[c]), bytes_of(t.type(init))});
    b.init_align.push_back(align(slot(init)));
    b.result_align.push_back(align(slot(result)));
    b.input_align.push_back(std::min(b.init_align.back(), b.result_align.back()));
    b.output_align.push_back(b.result_align.back());
  }
  for (std::size_t j = 0; j < lp.num_xs; ++j) {
    const Var x = op.args[lp.num_consts + lp.num_carry + j];
    const int64_t bytes = bytes_of(without_leading(t.type(x)));
    L.xs.push_back({ref(slot(x)), bytes});
    b.xs_align.push_back(align(slot(x)));
    b.input_align.push_back(std::min(b.xs_align.back(), slice_align(bytes)));
  }
  for (std::size_t j = 0; j < lp.kept.size() && lp.kind == LoopKind::scan; ++j) {
    if (!lp.kept[j]) continue;
    const Var y = step.out + static_cast<Var>(lp.num_carry + j);
    const int64_t bytes = bytes_of(without_leading(t.type(y)));
    L.ys.push_back({ref(slot(y)), bytes});
    b.ys_align.push_back(align(slot(y)));
    b.output_align.push_back(std::min(b.ys_align.back(), slice_align(bytes)));
  }
  return b;
}

namespace {

void copy(void* to, const void* from, int64_t bytes) {
  if (bytes > 0 && to != from) std::memcpy(to, from, static_cast<std::size_t>(bytes));
}

// A body's table of bases: its workspace and constants; the caller fills in the rest.
void** bases_of(void* const* bases, const LoopArgs& L, const BufferRef& table, const Program& p) {
  auto** sub = at<void*>(bases, table);
  sub[kWorkspaceBase] = at<void>(bases, L.workspace);
  sub[kConstantBase] = const_cast<void*>(p.constant_pool.raw());
  return sub;
}

void run_scan(void* const* bases, const LoopArgs& L, int64_t& k) {
  const Program& body = *L.body;
  void** sub = bases_of(bases, L, L.body_bases, body);
  void** in = sub + kFirstInputBase;
  int64_t* counter = nullptr;
  if (L.has_index) *in++ = counter = at<int64_t>(bases, L.counter);
  for (const BufferRef& c : L.consts) *in++ = at<void>(bases, c);
  void** carry_in = in;
  void** x_in = carry_in + L.carries.size();
  void** carry_out = sub + kFirstInputBase + body.num_inputs;
  void** y_out = carry_out + L.carries.size();
  const int64_t n = L.length;
  const std::size_t K = L.carries.size(), X = L.xs.size(), Y = L.ys.size();
  if (n == 0) {
    for (const LoopArgs::Carry& c : L.carries) copy(at<void>(bases, c.result), at<void>(bases, c.init), c.bytes);
    return;
  }
  for (std::size_t c = 0; c < K; ++c) carry_out[c] = at<void>(bases, L.carries[c].init);
  for (int64_t i = 0; i < n; ++i) {
    k = L.reverse ? n - 1 - i : i;
    if (counter != nullptr) *counter = L.index0 + k;
    // The buffers alternate so that iteration n - 1 writes the result.
    const bool to_result = ((n - 1 - i) & 1) == 0;
    for (std::size_t c = 0; c < K; ++c) {
      carry_in[c] = carry_out[c];
      carry_out[c] = at<void>(bases, to_result ? L.carries[c].result : L.carries[c].temp);
    }
    for (std::size_t j = 0; j < X; ++j) x_in[j] = at<char>(bases, L.xs[j].base) + k * L.xs[j].bytes;
    for (std::size_t j = 0; j < Y; ++j) y_out[j] = at<char>(bases, L.ys[j].base) + k * L.ys[j].bytes;
    body.run(sub);
  }
}

void run_while(void* const* bases, const LoopArgs& L, int64_t& k) {
  const Program &body = *L.body, &cond = *L.cond;
  void** cs = bases_of(bases, L, L.cond_bases, cond);
  void** bs = bases_of(bases, L, L.body_bases, body);
  const std::size_t C = L.consts.size(), K = L.carries.size();
  for (std::size_t i = 0; i < C; ++i) cs[kFirstInputBase + i] = bs[kFirstInputBase + i] = at<void>(bases, L.consts[i]);
  void** cond_in = cs + kFirstInputBase + C;
  cs[kFirstInputBase + cond.num_inputs] = at<void>(bases, L.cond_out);
  void** carry_in = bs + kFirstInputBase + C;
  void** carry_out = bs + kFirstInputBase + body.num_inputs;
  // Trip k reads the initial carries (k = 0), the results (k odd) or the temporaries,
  // and writes the results (k even) or the temporaries.
  auto carry = [&](int64_t trip, std::size_t c) {
    const LoopArgs::Carry& b = L.carries[c];
    return at<void>(bases, trip == 0 ? b.init : trip % 2 == 1 ? b.result : b.temp);
  };
  for (k = 0;; ++k) {
    for (std::size_t c = 0; c < K; ++c) cond_in[c] = carry_in[c] = carry(k, c);
    cond.run(cs);
    if (first_element(bases, L.cond_dtype, L.cond_out) == 0.0) break;
    if (k == L.max_trips) throw_max_trips(L.max_trips);
    for (std::size_t c = 0; c < K; ++c) carry_out[c] = carry(k + 1, c);
    body.run(bs);
  }
  if (k % 2 == 0)  // the last carries are the initial ones or the temporaries
    for (std::size_t c = 0; c < K; ++c) copy(at<void>(bases, L.carries[c].result), carry(k, c), L.carries[c].bytes);
}

void run_call(void* const* bases, const LoopArgs& L) {
  const Program& body = *L.body;
  void** sub = bases_of(bases, L, L.body_bases, body);
  void** in = sub + kFirstInputBase;
  for (const BufferRef& a : L.consts) *in++ = at<void>(bases, a);
  for (const BufferRef& r : L.results) *in++ = at<void>(bases, r);
  body.run(sub);
}

}  // namespace

void run_loop(void* const* bases, const LoopArgs& L) {
  int64_t k = 0;
  try {
    switch (L.kind) {
      case LoopKind::scan: run_scan(bases, L, k); return;
      case LoopKind::while_loop: run_while(bases, L, k); return;
      case LoopKind::call: run_call(bases, L); return;
    }
  } catch (const GuardFailure& e) {
    if (L.kind == LoopKind::call) throw GuardFailure(fmt::format("compiled {}: {}", L.label, e.what()));
    throw GuardFailure(fmt::format("compiled {}, iteration {}: {}", L.label, k, e.what()));
  } catch (const Error& e) {
    if (L.kind == LoopKind::call) throw Error(fmt::format("compiled {}: {}", L.label, e.what()));
    throw Error(fmt::format("compiled {}, iteration {}: {}", L.label, k, e.what()));
  }
}

std::string loop_text(const Tape& t, const LoopCallStep& step) {
  const LoopPlan& lp = *step.loop;
  std::string s;
  switch (lp.kind) {
    case LoopKind::scan:
      s = fmt::format("scan {} ({} iterations{}{}; {})", call_label(t, step.out), lp.length,
                      lp.reverse ? ", reversed" : "", lp.has_index ? fmt::format(", counter from {}", lp.index0) : "",
                      runs_as_kernel(lp) ? "one kernel" : "a step running the body");
      break;
    case LoopKind::while_loop:
      s = fmt::format("while {}{}", call_label(t, step.out),
                      lp.max_trips >= 0 ? fmt::format(" (at most {} iterations)", lp.max_trips) : "");
      break;
    case LoopKind::call: s = fmt::format("call {}", call_label(t, step.out)); break;
  }
  auto indented = [](const std::string& name, const ProgramPlan& p) {
    std::string out = fmt::format("\n    {}:", name);
    const std::string text = plan_text(p.tape, p.plan, p.memory);
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t end = std::min(text.find('\n', at), text.size());
      out += "\n      " + text.substr(at, end - at);
      at = end + 1;
    }
    return out;
  };
  if (lp.cond) s += indented("cond", *lp.cond);
  s += indented("body", *lp.body);
  return s;
}

}  // namespace reel::codegen
