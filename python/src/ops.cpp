// The operations of the README's Operations table under their C++ names, and Python's
// operators on reel.Tensor. They run eagerly and are recorded while tracing, exactly
// as from C++ (they are the C++ functions).
#include <fmt/format.h>

#include "common.hpp"

namespace reel::py_bind {

namespace {

[[noreturn]] void bad_operand(const char* op, py::handle h) {
  throw Error(fmt::format("{}: expected a reel.Tensor, a NumPy array or a number, got {}", op, type_name(h)));
}

// A binary operation on tensors or numbers (at least one a tensor; two numbers make
// two f64 scalars).
template <class TT, class TD, class DT>
Tensor binary(const char* op, py::handle a, py::handle b, TT tt, TD td, DT dt) {
  const bool ta = is_tensor_like(a), tb = is_tensor_like(b);
  if (!ta && !is_number(a)) bad_operand(op, a);
  if (!tb && !is_number(b)) bad_operand(op, b);
  if (ta && tb) return tt(as_tensor(a, op), as_tensor(b, op));
  if (ta) return td(as_tensor(a, op), to_double(b, op, "an operand"));
  if (tb) return dt(to_double(a, op, "an operand"), as_tensor(b, op));
  return tt(scalar(to_double(a, op, "an operand")), scalar(to_double(b, op, "an operand")));
}

#define REEL_BINARY(op, expr)                                                                        \
  [](py::handle a, py::handle b) {                                                                   \
    return binary(                                                                                   \
        op, a, b, [](const Tensor& x, const Tensor& y) { return expr; },                             \
        [](const Tensor& x, double y) { return expr; }, [](double x, const Tensor& y) { return expr; }); \
  }

// The same for a symmetric operation that C++ spells only with the tensor first.
#define REEL_SYMMETRIC(op, fn)                                                                           \
  [](py::handle a, py::handle b) {                                                                       \
    return binary(                                                                                       \
        op, a, b, [](const Tensor& x, const Tensor& y) { return fn(x, y); },                             \
        [](const Tensor& x, double y) { return fn(x, y); }, [](double x, const Tensor& y) { return fn(y, x); }); \
  }

// The same for an operation that C++ spells only on two tensors: a number becomes a 0-d
// tensor of the other operand's dtype.
#define REEL_TENSORS(op, fn)                                                                              \
  [](py::handle a, py::handle b) {                                                                        \
    return binary(                                                                                        \
        op, a, b, [](const Tensor& x, const Tensor& y) { return fn(x, y); },                              \
        [](const Tensor& x, double y) { return fn(x, scalar(y, x.dtype())); },                            \
        [](double x, const Tensor& y) { return fn(scalar(x, y.dtype()), y); });                           \
  }

// A reduction's axes: None (all), an int, or a list or tuple of ints (NumPy's too).
template <class All, class One, class Many>
Tensor reduce(const char* op, const Tensor& x, py::handle axis, bool keepdims, All all, One one, Many many) {
  if (axis.is_none()) {
    if (!keepdims) return all(x);
    std::vector<int64_t> axes(static_cast<std::size_t>(x.rank()));
    for (int64_t i = 0; i < x.rank(); ++i) axes[static_cast<std::size_t>(i)] = i;
    return many(x, axes, true);
  }
  if (!is_sequence(axis)) return one(x, to_int(axis, op, "axis"), keepdims);
  return many(x, to_ints(axis, op, "axis"), keepdims);
}

#define REEL_REDUCTION(name)                                                                                   \
  m.def(                                                                                                       \
      #name,                                                                                                   \
      [](const Tensor& x, py::handle axis, bool keepdims) {                                                    \
        return reduce(                                                                                         \
            #name, x, axis, keepdims, [](const Tensor& t) { return reel::name(t); },                                  \
            [](const Tensor& t, int64_t a, bool k) { return reel::name(t, a, k); },                            \
            [](const Tensor& t, const std::vector<int64_t>& a, bool k) { return reel::name(t, a, k); });       \
      },                                                                                                       \
      py::arg("x"), py::arg("axis") = py::none(), py::arg("keepdims") = false)

std::array<int64_t, 2> pair(py::handle h, const char* op, const char* what) {
  const std::vector<int64_t> v = to_ints(h, op, what);
  if (v.size() == 1 && !py::isinstance<py::list>(h) && !py::isinstance<py::tuple>(h)) return {v[0], v[0]};
  if (v.size() != 2) throw Error(fmt::format("{}: expected {} as an int or two ints, got {} of them", op, what, v.size()));
  return {v[0], v[1]};
}

// Elementwise operations.
void bind_elementwise(py::module_& m) {
#define REEL_UNARY(name) m.def(#name, [](const Tensor& x) { return reel::name(x); }, py::arg("x"))
  REEL_UNARY(neg);
  REEL_UNARY(exp);
  REEL_UNARY(log);
  REEL_UNARY(sin);
  REEL_UNARY(cos);
  REEL_UNARY(tanh);
  REEL_UNARY(sigmoid);
  REEL_UNARY(sqrt);
  REEL_UNARY(square);
  REEL_UNARY(log1p);
  REEL_UNARY(expm1);
  REEL_UNARY(erf);
  REEL_UNARY(atan);
  REEL_UNARY(asinh);
  REEL_UNARY(tan);
  REEL_UNARY(asin);
  REEL_UNARY(acos);
  REEL_UNARY(sinh);
  REEL_UNARY(cosh);
  REEL_UNARY(cbrt);
  REEL_UNARY(log2);
  REEL_UNARY(log10);
  REEL_UNARY(floor);
  REEL_UNARY(ceil);
  REEL_UNARY(round);
  REEL_UNARY(abs);
  REEL_UNARY(sign);
  REEL_UNARY(relu);
  REEL_UNARY(softplus);
  REEL_UNARY(lgamma);
  REEL_UNARY(digamma);
  REEL_UNARY(trigamma);
  REEL_UNARY(nodiff);
  REEL_UNARY(stop_gradient);
  REEL_UNARY(transpose);
#undef REEL_UNARY

  m.def("add", REEL_BINARY("add", x + y), py::arg("a"), py::arg("b"));
  m.def("sub", REEL_BINARY("sub", x - y), py::arg("a"), py::arg("b"));
  m.def("mul", REEL_BINARY("mul", x * y), py::arg("a"), py::arg("b"));
  m.def("div", REEL_BINARY("div", x / y), py::arg("a"), py::arg("b"));
  m.def("lt", REEL_BINARY("lt", x < y), py::arg("a"), py::arg("b"));
  m.def("le", REEL_BINARY("le", x <= y), py::arg("a"), py::arg("b"));
  m.def("gt", REEL_BINARY("gt", x > y), py::arg("a"), py::arg("b"));
  m.def("ge", REEL_BINARY("ge", x >= y), py::arg("a"), py::arg("b"));
  m.def("eq", REEL_BINARY("eq", x == y), py::arg("a"), py::arg("b"));
  m.def("ne", REEL_BINARY("ne", x != y), py::arg("a"), py::arg("b"));
  m.def("hypot", REEL_SYMMETRIC("hypot", reel::hypot), py::arg("a"), py::arg("b"));
  m.def("maximum", REEL_SYMMETRIC("maximum", reel::maximum), py::arg("a"), py::arg("b"));
  m.def("minimum", REEL_SYMMETRIC("minimum", reel::minimum), py::arg("a"), py::arg("b"));
  m.def("pow", [](const Tensor& x, double p) { return reel::pow(x, p); }, py::arg("x"), py::arg("p"));
  m.def("pow", [](const Tensor& x, const Tensor& p) { return reel::pow(x, p); }, py::arg("x"), py::arg("p"));  // powv
  m.def("atan2", REEL_TENSORS("atan2", reel::atan2), py::arg("y"), py::arg("x"));
  m.def("copysign", REEL_TENSORS("copysign", reel::copysign), py::arg("x"), py::arg("y"));
  m.def("clamp", [](const Tensor& x, double lo, double hi) { return clamp(x, lo, hi); }, py::arg("x"), py::arg("lo"),
        py::arg("hi"));
  m.def("where",
        [](const Tensor& c, py::handle a, py::handle b) {
          const bool ta = is_tensor_like(a), tb = is_tensor_like(b);
          if (!ta && !is_number(a)) bad_operand("where", a);
          if (!tb && !is_number(b)) bad_operand("where", b);
          if (ta && tb) return where(c, as_tensor(a, "where"), as_tensor(b, "where"));
          if (ta) return where(c, as_tensor(a, "where"), to_double(b, "where", "b"));
          if (tb) return where(c, to_double(a, "where", "a"), as_tensor(b, "where"));
          return where(c, full(c.shape(), to_double(a, "where", "a"), c.dtype() == DType::i64 ? DType::f64 : c.dtype()),
                       to_double(b, "where", "b"));
        },
        py::arg("cond"), py::arg("a"), py::arg("b"));
  m.def("cast", [](const Tensor& x, py::handle dtype) { return cast(x, to_dtype(dtype, "cast")); }, py::arg("x"),
        py::arg("dtype"));
}

// Reductions, indexing, shapes, products, convolution and pooling.
void bind_structured(py::module_& m) {
  REEL_REDUCTION(sum);
  REEL_REDUCTION(mean);
  REEL_REDUCTION(prod);
  REEL_REDUCTION(max);
  REEL_REDUCTION(min);
  REEL_REDUCTION(logsumexp);
  m.def("softmax", [](const Tensor& x, int64_t axis) { return softmax(x, axis); }, py::arg("x"), py::arg("axis") = -1);
  m.def("log_softmax", [](const Tensor& x, int64_t axis) { return log_softmax(x, axis); }, py::arg("x"),
        py::arg("axis") = -1);
  m.def("argmax",
        [](const Tensor& x, py::handle axis) { return axis.is_none() ? argmax(x) : argmax(x, to_int(axis, "argmax", "axis")); },
        py::arg("x"), py::arg("axis") = py::none());
  m.def("argmin",
        [](const Tensor& x, py::handle axis) { return axis.is_none() ? argmin(x) : argmin(x, to_int(axis, "argmin", "axis")); },
        py::arg("x"), py::arg("axis") = py::none());

  m.def("slice", [](const Tensor& x, int64_t start, int64_t stop) { return slice(x, start, stop); }, py::arg("x"),
        py::arg("start"), py::arg("stop"));
  m.def("slice",
        [](const Tensor& x, int64_t axis, int64_t start, int64_t stop, int64_t step) {
          return slice(x, axis, start, stop, step);
        },
        py::arg("x"), py::arg("axis"), py::arg("start"), py::arg("stop"), py::arg("step") = 1);
  m.def("index", [](const Tensor& x, int64_t i, int64_t axis) { return index(x, i, axis); }, py::arg("x"),
        py::arg("i"), py::arg("axis") = 0);
  m.def("squeeze", [](const Tensor& x, int64_t axis) { return squeeze(x, axis); }, py::arg("x"), py::arg("axis"));
  m.def("expand_dims", [](const Tensor& x, int64_t axis) { return expand_dims(x, axis); }, py::arg("x"),
        py::arg("axis"));
  m.def("stack", [](const std::vector<Tensor>& xs, int64_t axis) { return stack(xs, axis); }, py::arg("xs"),
        py::arg("axis") = 0);
  m.def("concat", [](const std::vector<Tensor>& xs, int64_t axis) { return concat(xs, axis); }, py::arg("xs"),
        py::arg("axis") = 0);
  m.def("permute", [](const Tensor& x, const std::vector<int64_t>& perm) { return permute(x, perm); }, py::arg("x"),
        py::arg("perm"));
  m.def("gather", [](const Tensor& x, const Tensor& idx, int64_t axis) { return gather(x, idx, axis); },
        py::arg("x"), py::arg("indices"), py::arg("axis") = 0);
  m.def("take", [](const Tensor& x, const Tensor& idx) { return take(x, idx); }, py::arg("x"), py::arg("indices"));
  m.def("scatter_add",
        [](const Tensor& t, const Tensor& idx, const Tensor& v, int64_t axis) { return scatter_add(t, idx, v, axis); },
        py::arg("target"), py::arg("indices"), py::arg("values"), py::arg("axis") = 0);
  m.def("index_update",
        [](const Tensor& x, const Tensor& idx, const Tensor& v, int64_t axis) { return index_update(x, idx, v, axis); },
        py::arg("x"), py::arg("indices"), py::arg("values"), py::arg("axis") = 0);
  m.def("index_update",
        [](const Tensor& x, const py::slice& s, const Tensor& v, int64_t axis) {
          if (!s.attr("step").is_none() && to_int(s.attr("step"), "index_update", "slice step") != 1)
            throw Error("index_update: a slice of step 1 (start:stop) or i64 indices, got a slice with a step");
          const int64_t a = normalize_axis("index_update", axis, VarType{x.dtype(), x.shape()});
          const int64_t n = x.shape()[static_cast<std::size_t>(a)];
          const int64_t start = s.attr("start").is_none() ? 0 : to_int(s.attr("start"), "index_update", "slice start");
          const int64_t stop = s.attr("stop").is_none() ? n : to_int(s.attr("stop"), "index_update", "slice stop");
          return index_update(x, axis, start, stop, v);
        },
        py::arg("x"), py::arg("indices"), py::arg("values"), py::arg("axis") = 0);
  m.def("index_update",
        [](const Tensor& x, int64_t axis, int64_t start, int64_t stop, const Tensor& v) {
          return index_update(x, axis, start, stop, v);
        },
        py::arg("x"), py::arg("axis"), py::arg("start"), py::arg("stop"), py::arg("values"));
  m.def("tril", [](const Tensor& x, int64_t k) { return tril(x, k); }, py::arg("x"), py::arg("k") = 0);
  m.def("triu", [](const Tensor& x, int64_t k) { return triu(x, k); }, py::arg("x"), py::arg("k") = 0);
  m.def("tril_from_vector",
        [](const Tensor& v, int64_t n, int64_t k, bool column_major) { return tril_from_vector(v, n, k, column_major); },
        py::arg("v"), py::arg("n"), py::arg("k") = 0, py::arg("column_major") = false);
  m.def("matmul", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, py::arg("a"), py::arg("b"));
  m.def("dot", [](const Tensor& a, const Tensor& b) { return dot(a, b); }, py::arg("a"), py::arg("b"));
  m.def("outer", [](const Tensor& a, const Tensor& b) { return outer(a, b); }, py::arg("a"), py::arg("b"));
  m.def("reshape", [](const Tensor& x, const Shape& s) { return reshape(x, s); }, py::arg("x"), py::arg("shape"));
  m.def("broadcast_to", [](const Tensor& x, const Shape& s) { return broadcast_to(x, s); }, py::arg("x"),
        py::arg("shape"));
  m.def("sum_to", [](const Tensor& x, const Shape& s) { return sum_to(x, s); }, py::arg("x"), py::arg("shape"));
  m.def("conv2d",
        [](const Tensor& x, const Tensor& w, py::handle stride, py::handle padding, py::handle dilation) {
          return conv2d(x, w,
                        {.stride = pair(stride, "conv2d", "stride"),
                         .padding = pair(padding, "conv2d", "padding"),
                         .dilation = pair(dilation, "conv2d", "dilation")});
        },
        py::arg("x"), py::arg("w"), py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1);
  m.def("conv1d",
        [](const Tensor& x, const Tensor& w, int64_t stride, int64_t padding, int64_t dilation) {
          return conv1d(x, w, {.stride = stride, .padding = padding, .dilation = dilation});
        },
        py::arg("x"), py::arg("w"), py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1);
  auto pool = [&m](const char* name, Tensor (*op)(const Tensor&, std::array<int64_t, 2>, const Pool2dOptions&)) {
    m.def(name,
          [op, name](const Tensor& x, py::handle kernel, py::handle stride, py::handle padding) {
            return op(x, pair(kernel, name, "kernel"),
                      {.stride = stride.is_none() ? std::array<int64_t, 2>{0, 0} : pair(stride, name, "stride"),
                       .padding = pair(padding, name, "padding")});
          },
          py::arg("x"), py::arg("kernel"), py::arg("stride") = py::none(), py::arg("padding") = 0);
  };
  pool("max_pool2d", &max_pool2d);
  pool("avg_pool2d", &avg_pool2d);
}

// Python's operators on reel.Tensor.
void bind_operators(py::module_& m) {
  py::class_<Tensor> t = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  // An operand that is neither a tensor, an array nor a number: NotImplemented, so that
  // Python tries the other side or raises its TypeError (an uninitialised tensor is
  // refused by the operation, as anywhere).
#define REEL_OPERATOR(py_name, op, expr, swap)                                                           \
  t.def(py_name, [](py::handle self, py::handle other) -> py::object {                                  \
    if (!is_tensor_like(other) && !is_number(other) && !uninitialised(other))                             \
      return py::reinterpret_borrow<py::object>(Py_NotImplemented);                                       \
    auto f = REEL_BINARY(op, expr);                                                                      \
    return py::cast(swap ? f(other, self) : f(self, other));                                             \
  })
  REEL_OPERATOR("__add__", "add", x + y, false);
  REEL_OPERATOR("__radd__", "add", x + y, true);
  REEL_OPERATOR("__sub__", "sub", x - y, false);
  REEL_OPERATOR("__rsub__", "sub", x - y, true);
  REEL_OPERATOR("__mul__", "mul", x * y, false);
  REEL_OPERATOR("__rmul__", "mul", x * y, true);
  REEL_OPERATOR("__truediv__", "div", x / y, false);
  REEL_OPERATOR("__rtruediv__", "div", x / y, true);
  REEL_OPERATOR("__lt__", "lt", x < y, false);
  REEL_OPERATOR("__le__", "le", x <= y, false);
  REEL_OPERATOR("__gt__", "gt", x > y, false);
  REEL_OPERATOR("__ge__", "ge", x >= y, false);
  REEL_OPERATOR("__eq__", "eq", x == y, false);
  REEL_OPERATOR("__ne__", "ne", x != y, false);
#undef REEL_OPERATOR
  t.def("__neg__", [](const Tensor& x) { return -x; });
  t.def("__pos__", [](const Tensor& x) { return x; });
  t.def("__abs__", [](const Tensor& x) { return reel::abs(x); });
  t.def("__pow__", [](const Tensor& x, double p) { return reel::pow(x, p); });
  t.def("__pow__", [](const Tensor& x, const Tensor& p) { return reel::pow(x, p); });
  t.def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); });
  t.def("__rmatmul__", [](const Tensor& b, const Tensor& a) { return matmul(a, b); });
  t.attr("__hash__") = py::none();  // == is elementwise, as in NumPy
  t.attr("__array_ufunc__") = py::none();  // numpy_array + tensor calls the tensor's __radd__
  t.def_property_readonly("T", [](const Tensor& x) { return transpose(x); });
  t.def("reshape", [](const Tensor& x, py::args shape) {
    if (shape.size() == 1 && (!PyIndex_Check(shape[0].ptr()) || is_sequence(shape[0]))) return reshape(x, to_ints(shape[0], "reshape", "shape"));
    return reshape(x, to_ints(shape, "reshape", "shape"));
  });
  t.def("astype", [](const Tensor& x, py::handle dtype) { return cast(x, to_dtype(dtype, "astype")); });
}

}  // namespace

void bind_ops(py::module_& m) {
  bind_elementwise(m);
  bind_structured(m);
  bind_operators(m);
}

}  // namespace reel::py_bind
