// Must not compile: a struct whose fields Reel cannot see (no REEL_FIELDS) passed to
// reel::gradient. The build's error names the fix (tests/CMakeLists.txt checks it).
#include <reel/reel.hpp>

struct Model {
  reel::Tensor W;
};

int main() {
  Model m{reel::ones({2})};
  auto [dm] = reel::gradient([](const Model& model) { return reel::sum(model.W); }, m);
  (void)dm;
}
