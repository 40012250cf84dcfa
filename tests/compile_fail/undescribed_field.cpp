// Must not compile: a listed struct with a field of a type Reel cannot see into.
#include <reel/reel.hpp>

struct Inner {
  reel::Tensor W;
};
struct Outer {
  Inner inner;
  reel::Tensor b;
};
REEL_FIELDS(Outer, inner, b)

int main() {
  Outer m{{reel::ones({2})}, reel::ones({2})};
  for (const auto& [path, t] : reel::named_tensors(m)) (void)t;
}
