#pragma once
// Primitives registered for tests, shared by the test suite and reel-opt-test (the
// reel-opt that also knows them, for FileCheck tests of tapes that call them, the way
// MLIR's test tools register test dialects):
// - conv1d(x, w, pad=P) with derivative rules that are two more custom primitives
//   receiving pad, conv1d_data_grad(dy, w, pad) and conv1d_filter_grad(x, dy, pad, k)
//   (reel::define_primitive);
// - sincos(x): two results, sin(x) and cos(x) (reel::register_primitive with
//   results = 2);
// - call_body(x, body={tape}): a tape attribute applied to x, differentiated by
//   differentiating the body.
namespace reel::test {

// Registers them once; safe to call again.
void register_test_primitives();

}  // namespace reel::test
