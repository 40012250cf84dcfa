#pragma once
// How an elementwise primitive computes one element, written against an abstract
// scalar machine. The code generator implements it with LLVM instructions; keeping
// the interface here lets each primitive describe its code generation in the same
// place as its other rules without ir/ depending on LLVM.
#include <span>

namespace reel {

class ScalarEmitter {
 public:
  using Value = void*;  // opaque to ir/: an llvm::Value* in the code generator
  virtual ~ScalarEmitter() = default;
  virtual Value constant(double v) = 0;
  virtual Value add(Value a, Value b) = 0;
  virtual Value sub(Value a, Value b) = 0;
  virtual Value mul(Value a, Value b) = 0;
  virtual Value div(Value a, Value b) = 0;
  virtual Value neg(Value a) = 0;
  virtual Value exp(Value a) = 0;
  virtual Value log(Value a) = 0;
  virtual Value sin(Value a) = 0;
  virtual Value cos(Value a) = 0;
  virtual Value tanh(Value a) = 0;
  virtual Value sqrt(Value a) = 0;
  virtual Value pow(Value a, double p) = 0;
};

}  // namespace reel
