// Must not compile: a field pointing at tensors (what it points at would get no gradient).
#include <reel/reel.hpp>

struct Layer {
  reel::Tensor W;
  reel::Tensor* shared = nullptr;
};
REEL_FIELDS(Layer, W, shared)

int main() {
  Layer m{reel::ones({2})};
  for (const auto& [path, t] : reel::named_tensors(m)) (void)t;
}
