#include "reel/ir/tape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "reel/error.hpp"

namespace reel {

bool same_tape(const Tape& a, const Tape& b) {
  if (a.ops.size() != b.ops.size() || a.outputs != b.outputs) return false;
  for (std::size_t i = 0; i < a.ops.size(); ++i) {
    const Op& x = a.ops[i];
    const Op& y = b.ops[i];
    if (x.kind != y.kind || x.prim != y.prim || x.args != y.args || x.index != y.index || x.type != y.type ||
        x.results != y.results || x.attrs != y.attrs)
      return false;
    if (x.kind == OpKind::constant &&
        (x.value.dtype() != y.value.dtype() || x.value.shape() != y.value.shape() ||
         std::memcmp(x.value.raw(), y.value.raw(), x.value.nbytes()) != 0))
      return false;
  }
  return true;
}

std::vector<Var> Tape::inputs() const {
  std::vector<Var> in;
  for (Var v = 1; v <= size(); ++v)
    if (op(v).kind == OpKind::input) in.push_back(v);
  return in;
}

std::vector<VarType> Tape::input_types() const {
  std::vector<VarType> types;
  for (Var v : inputs()) types.push_back(type(v));
  return types;
}

int32_t Tape::count(OpKind kind) const {
  int32_t n = 0;
  for (const Op& o : ops) n += o.kind == kind;
  return n;
}

namespace {
const char* kind_name(AttrKind k) {
  switch (k) {
    case AttrKind::integer: return "an integer";
    case AttrKind::real: return "a number";
    case AttrKind::shape: return "a shape";
    case AttrKind::ints: return "a list of integers";
    case AttrKind::reals: return "a list of numbers";
    case AttrKind::boolean: return "true or false";
    case AttrKind::string: return "a string";
    case AttrKind::dtype: return "a dtype (f32 or f64)";
    case AttrKind::tape: return "a tape {...}";
    case AttrKind::axis: return "an integer (an axis)";
    case AttrKind::axes: return "a list of integers (axes)";
  }
  return "?";
}

// An axis attribute of the first argument, as given, into [0, rank): one place, so every
// later stage reads one spelling and an error quotes what the caller wrote.
void normalize_axis_attr(const Primitive& prim, const AttrSpec& spec, std::span<const VarType> args, AttrValue& v) {
  if (args.empty())
    throw Error(fmt::format("{}: attribute '{}' is an axis of the first argument, but the call has none", prim.name,
                            spec.name));
  if (auto* a = std::get_if<int64_t>(&v)) {
    *a = normalize_axis(prim.name, *a, args[0]);
    return;
  }
  Shape& axes = std::get<Shape>(v);
  axes = normalize_axes(prim.name, axes, args[0]);
}

void check_call_attrs(const Primitive& prim, std::span<const VarType> args, Attrs& attrs) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool index = prim.is_index_arg(i);
    if (index && args[i].dtype != DType::i64)
      throw Error(fmt::format("{}: expected i64 indices for argument {}, got {}", prim.name, i + 1,
                              type_str(args[i])));
    if (!index && !prim.any_dtype && !is_float(args[i].dtype))
      throw Error(fmt::format("{}: expected an f32 or f64 argument {}, got {}", prim.name, i + 1,
                              type_str(args[i])));
  }
  if (prim.arity == kVariadic && args.empty())
    throw Error(fmt::format("{}: expected at least one argument, got none", prim.name));
  if (prim.arity != kVariadic && static_cast<int>(args.size()) != prim.arity)
    throw Error(fmt::format("{}: expected {} argument{}, got {}", prim.name, prim.arity,
                            prim.arity == 1 ? "" : "s", args.size()));
  for (const auto& [name, value] : attrs.items()) {
    bool known = false;
    for (const AttrSpec& spec : prim.attrs) known |= spec.name == name;
    if (!known) throw Error(fmt::format("{}: unknown attribute '{}'", prim.name, name));
  }
  Attrs ordered;
  for (const AttrSpec& spec : prim.attrs) {
    if (!attrs.has(spec.name)) {
      if (spec.optional) continue;
      throw Error(fmt::format("{}: missing attribute '{}'", prim.name, spec.name));
    }
    AttrValue v = attrs.get(spec.name);
    if (spec.kind == AttrKind::real && std::holds_alternative<int64_t>(v))
      v = static_cast<double>(std::get<int64_t>(v));
    if (spec.kind == AttrKind::reals && std::holds_alternative<Shape>(v)) {
      const Shape& ints = std::get<Shape>(v);
      v = std::vector<double>(ints.begin(), ints.end());
    }
    const bool ok = ((spec.kind == AttrKind::integer || spec.kind == AttrKind::axis) &&
                     std::holds_alternative<int64_t>(v)) ||
                    (spec.kind == AttrKind::real && std::holds_alternative<double>(v)) ||
                    ((spec.kind == AttrKind::shape || spec.kind == AttrKind::ints || spec.kind == AttrKind::axes) &&
                     std::holds_alternative<Shape>(v)) ||
                    (spec.kind == AttrKind::reals && std::holds_alternative<std::vector<double>>(v)) ||
                    (spec.kind == AttrKind::boolean && std::holds_alternative<bool>(v)) ||
                    (spec.kind == AttrKind::string && std::holds_alternative<std::string>(v)) ||
                    (spec.kind == AttrKind::dtype && std::holds_alternative<DType>(v)) ||
                    (spec.kind == AttrKind::tape && std::holds_alternative<TapeRef>(v) &&
                     std::get<TapeRef>(v).tape != nullptr);
    if (!ok)
      throw Error(fmt::format("{}: attribute '{}' must be {}", prim.name, spec.name,
                              kind_name(spec.kind)));
    if (const auto* s = std::get_if<Shape>(&v); s != nullptr && spec.kind == AttrKind::shape) {
      for (int64_t d : *s)
        if (d < 0)
          throw Error(fmt::format("{}: attribute '{}' has a negative dimension: {}", prim.name,
                                  spec.name, shape_str(*s)));
      (void)numel(*s, prim.name.c_str());  // throws if the element count overflows
    }
    if (spec.kind == AttrKind::axis || spec.kind == AttrKind::axes) normalize_axis_attr(prim, spec, args, v);
    ordered.set(spec.name, std::move(v));
  }
  attrs = std::move(ordered);
}

// Equal attributes, numbers compared bit for bit (a NaN attribute equals itself).
bool same_attrs(const Attrs& a, const Attrs& b) {
  const auto& x = a.items();
  const auto& y = b.items();
  if (x.size() != y.size()) return false;
  auto bits = [](double d) { return std::bit_cast<uint64_t>(d); };
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i].first != y[i].first || x[i].second.index() != y[i].second.index()) return false;
    if (const auto* d = std::get_if<double>(&x[i].second)) {
      if (bits(*d) != bits(std::get<double>(y[i].second))) return false;
    } else if (const auto* v = std::get_if<std::vector<double>>(&x[i].second)) {
      const auto& w = std::get<std::vector<double>>(y[i].second);
      if (v->size() != w.size() || !std::equal(v->begin(), v->end(), w.begin(),
                                               [&](double p, double q) { return bits(p) == bits(q); }))
        return false;
    } else if (!(x[i].second == y[i].second)) {
      return false;
    }
  }
  return true;
}

std::string attrs_text(const Attrs& attrs) {
  std::string s;
  for (const auto& [name, value] : attrs.items()) s += fmt::format("{}{}={}", s.empty() ? "" : ", ", name, attr_str(value));
  return s.empty() ? "none" : s;
}

// A type rule's answer (a user's may be anything): dimensions >= 0 whose product fits.
const VarType& checked_result(const Primitive& prim, const VarType& t) {
  bool ok = t.dtype == DType::f32 || t.dtype == DType::f64 || t.dtype == DType::i64;
  for (int64_t d : t.shape) ok = ok && d >= 0;
  if (ok) {
    try {
      (void)numel(t.shape);
    } catch (const Error&) {
      ok = false;
    }
  }
  if (!ok)
    throw Error(fmt::format("{}: the type rule returned an invalid type {} (expected dimensions >= 0 whose product "
                            "fits in int64)", prim.name, shape_str(t.shape)));
  return t;
}
}  // namespace

int64_t normalize_axis(std::string_view op, int64_t axis, const VarType& x, int64_t extra) {
  const auto rank = static_cast<int64_t>(x.shape.size()) + extra;
  if (axis < -rank || axis >= rank)
    throw Error(rank == 0 ? fmt::format("{}: axis {} is out of range for {}, which has no axes", op, axis, type_str(x))
                          : fmt::format("{}: axis {} is out of range for {} (expected {} <= axis < {})", op, axis,
                                        type_str(x), -rank, rank));
  return axis < 0 ? axis + rank : axis;
}

Shape normalize_axes(std::string_view op, const Shape& axes, const VarType& x) {
  Shape out;
  for (int64_t axis : axes) {
    const int64_t a = normalize_axis(op, axis, x);
    if (std::find(out.begin(), out.end(), a) != out.end())
      throw Error(fmt::format("{}: axes {}: axis {} is given twice for {}", op, shape_str(axes), axis, type_str(x)));
    out.push_back(a);
  }
  return out;
}

VarType infer_call(const Primitive& prim, std::span<const VarType> args, Attrs& attrs) {
  if (prim.results != 1 && prim.results != kVariadic)
    throw Error(fmt::format("{}: the primitive has {} results; call it with call_results / apply_results",
                            prim.name, prim.results));
  Results<VarType> types = infer_call_results(prim, args, attrs);
  if (types.size() != 1)
    throw Error(fmt::format("{}: the call has {} results; call it with call_results / apply_results", prim.name,
                            types.size()));
  return std::move(types[0]);
}

Results<VarType> infer_call_results(const Primitive& prim, std::span<const VarType> args, Attrs& attrs) {
  check_call_attrs(prim, args, attrs);
  Results<VarType> types = prim.infer(args, attrs);
  check_result_count(prim, "the type rule (infer)", types.size());
  for (const VarType& t : types) checked_result(prim, t);
  return types;
}

void check_structure(const char* op_name, const Tape& tape) {
  for (Var v = 1; v <= tape.size(); ++v) {
    const Op& op = tape.op(v);
    auto fail = [&](const std::string& what) {
      throw Error(fmt::format("{}: malformed tape: %{}: {}", op_name, v, what));
    };
    switch (op.kind) {
      case OpKind::input:
        if (!op.args.empty()) fail("an input has arguments");
        break;
      case OpKind::constant:
        if (!op.args.empty()) fail("a constant has arguments");
        if (!op.value.defined() || op.value.dtype() != op.type.dtype ||
            op.value.shape() != op.type.shape)
          fail(fmt::format("the constant's value does not have type {}", type_str(op.type)));
        break;
      case OpKind::call:
        if (op.prim == nullptr) fail("a call without a primitive");
        if (op.prim->arity == kVariadic ? op.args.empty() : static_cast<int>(op.args.size()) != op.prim->arity)
          fail(fmt::format("{} takes {} arguments, the call has {}", op.prim->name, op.prim->arity,
                           op.args.size()));
        for (Var a : op.args)
          if (a < 1 || a >= v) fail(fmt::format("argument %{} is not defined before use", a));
        if (op.results < 1 || (op.prim->results != kVariadic && op.results != op.prim->results))
          fail(fmt::format("{} has {} results, the call says {}", op.prim->name, op.prim->results, op.results));
        for (int32_t i = 1; i < op.results; ++i) {
          const Var r = v + i;
          if (r > tape.size() || tape.op(r).kind != OpKind::result || tape.op(r).index != i ||
              tape.op(r).args.size() != 1 || tape.op(r).args[0] != v)
            fail(fmt::format("{} has {} results, but %{} is not its result {}", op.prim->name, op.results, r, i));
        }
        break;
      case OpKind::result: {
        // The call and its results are contiguous: %c, then its results 1, 2, ... in order.
        const Var c = op.args.size() == 1 ? op.args[0] : kNoVar;
        if (c < 1 || c >= v || tape.op(c).kind != OpKind::call || op.index < 1 || c + op.index != v ||
            op.index >= tape.op(c).results)
          fail(fmt::format("a result operation must directly follow its call as result 1, 2, ...: this one "
                           "is result {} of %{}{}", op.index, c,
                           c >= 1 && c < v && tape.op(c).kind == OpKind::call
                               ? fmt::format(" ({}, {} results)", tape.op(c).prim->name, tape.op(c).results)
                               : std::string(", which is not a call before it")));
        break;
      }
      default: fail("unknown kind of operation");
    }
  }
  for (Var o : tape.outputs)
    if (o < 1 || o > tape.size())
      throw Error(fmt::format("{}: malformed tape: output %{} is not a variable of the tape", op_name, o));
}

void verify(const Tape& tape) { verify("verify", tape); }

void verify(const char* op_name, const Tape& tape) {
  check_structure(op_name, tape);
  for (Var v = 1; v <= tape.size(); ++v) {
    const Op& op = tape.op(v);
    if (op.kind != OpKind::call) continue;
    std::vector<VarType> args;
    for (Var a : op.args) args.push_back(tape.type(a));
    Attrs attrs = op.attrs;
    std::vector<VarType> ts;
    try {
      ts = infer_call_results(*op.prim, args, attrs);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: %{}: {}", op_name, v, e.what()));
    }
    // Later stages read attributes in their checked form only (axes in [0, rank)); a call
    // built around TapeBuilder could hold another.
    if (!same_attrs(attrs, op.attrs))
      throw Error(fmt::format("{}: %{}: {}'s attributes are not in their checked form (given {}, expected {}); "
                              "add calls with TapeBuilder", op_name, v, op.prim->name, attrs_text(op.attrs),
                              attrs_text(attrs)));
    if (ts.size() != static_cast<std::size_t>(op.results))
      throw Error(fmt::format("{}: %{}: the tape gives {} {} results, its type rule gives {}", op_name, v,
                              op.prim->name, op.results, ts.size()));
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const Var r = v + static_cast<Var>(i);
      if (ts[i] != tape.type(r))
        throw Error(fmt::format("{}: %{}: the tape declares {} for this result of {}, but its type rule gives {}",
                                op_name, r, type_str(tape.type(r)), op.prim->name, type_str(ts[i])));
    }
  }
}

void check_args(const char* op, const Tape& tape, const std::vector<Tensor>& args) {
  check_args(op, tape.input_types(), args);
}

void check_args(const char* op, std::span<const VarType> types, std::span<const Tensor> args) {
  if (args.size() != types.size())
    throw Error(fmt::format("{}: expected {} argument{}, got {}", op, types.size(),
                            types.size() == 1 ? "" : "s", args.size()));
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!args[i].defined())
      throw Error(fmt::format("{}: argument {}: expected {}, got an undefined tensor", op, i + 1,
                              type_str(types[i])));
    if (args[i].dtype() != types[i].dtype || args[i].shape() != types[i].shape)
      throw Error(fmt::format("{}: argument {}: expected {}, got {}", op, i + 1,
                              type_str(types[i]), type_str(args[i].dtype(), args[i].shape())));
  }
}

Tape select_outputs(const Tape& tape, const std::vector<int>& positions) {
  Tape t = tape;
  t.outputs.clear();
  t.cleaned = false;  // dropping outputs may leave dead code
  for (int p : positions) {
    if (p < 0 || p >= static_cast<int>(tape.outputs.size()))
      throw Error(fmt::format("select_outputs: the tape has {} outputs, asked for output {}",
                              tape.outputs.size(), p));
    t.outputs.push_back(tape.outputs[static_cast<std::size_t>(p)]);
  }
  return t;
}

}  // namespace reel
