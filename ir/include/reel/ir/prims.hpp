#pragma once
// Reel's own primitives by handle: one function per built-in primitive, named as the
// primitive is, returning its registry entry (looked up by name once). Rules, passes and
// the tracer's operations call primitives through these, so that a misspelt name is a
// build error rather than an error at the first gradient; the registry's string lookup
// (reel::primitive) stays for users' primitives and tape text.
#include "reel/ir/primitive.hpp"

namespace reel::prims {

// A handle itself, for a rule made at registration (when no primitive can be looked up
// yet) that calls a primitive once it runs.
using Handle = const Primitive& (*)();

// Binary arithmetic, comparisons and selection (prims_binary.cpp).
const Primitive& add();
const Primitive& sub();
const Primitive& mul();
const Primitive& div();
const Primitive& hypot();
const Primitive& lt();
const Primitive& le();
const Primitive& gt();
const Primitive& ge();
const Primitive& eq();
const Primitive& ne();
const Primitive& maximum();
const Primitive& minimum();
const Primitive& where();
const Primitive& atan2();
const Primitive& copysign();
const Primitive& powv();

// Unary element functions (prims_unary.cpp).
const Primitive& neg();
const Primitive& exp();
const Primitive& log();
const Primitive& sin();
const Primitive& cos();
const Primitive& tanh();
const Primitive& sigmoid();
const Primitive& sqrt();
const Primitive& square();
const Primitive& sign();
const Primitive& abs();
const Primitive& relu();
const Primitive& log1p();
const Primitive& expm1();
const Primitive& softplus();
const Primitive& erf();
const Primitive& lgamma();
const Primitive& digamma();
const Primitive& trigamma();
const Primitive& atan();
const Primitive& asinh();
const Primitive& clamp();
const Primitive& nodiff();
const Primitive& cast();
const Primitive& pow();
const Primitive& tan();
const Primitive& asin();
const Primitive& acos();
const Primitive& sinh();
const Primitive& cosh();
const Primitive& cbrt();
const Primitive& log2();
const Primitive& log10();
const Primitive& floor();
const Primitive& ceil();
const Primitive& round();

// Reductions (prims_reduce.cpp).
const Primitive& sum();
const Primitive& mean();
const Primitive& prod();
const Primitive& max();
const Primitive& min();
const Primitive& argmax();
const Primitive& argmin();
const Primitive& sum_to();

// Shapes and matrix products (prims_shape.cpp).
const Primitive& reshape();
const Primitive& broadcast_to();
const Primitive& transpose();
const Primitive& matmul();
const Primitive& batch_matmul();

// Layout and indexing (prims_index.cpp, prims_gather.cpp).
const Primitive& slice();
const Primitive& unslice();
const Primitive& place();
const Primitive& permute();
const Primitive& concat();
const Primitive& gather();
const Primitive& scatter_add();
const Primitive& index_update();

// Convolution and pooling (prims_nn.cpp, prims_pool.cpp).
const Primitive& conv2d();
const Primitive& conv2d_data_grad();
const Primitive& conv2d_filter_grad();
const Primitive& max_pool2d();
const Primitive& max_pool2d_grad();
const Primitive& max_pool2d_gather();
const Primitive& avg_pool2d();
const Primitive& avg_pool2d_grad();

// Guards (prims_control.cpp).
const Primitive& guard();
const Primitive& guard_value();

// Loops and calls (prims_scan.cpp, prims_revolve.cpp, prims_while.cpp, prims_call.cpp).
const Primitive& scan();
const Primitive& revolve();
const Primitive& while_loop();
const Primitive& call();
const Primitive& checkpoint();

}  // namespace reel::prims
