// Must not compile: a struct derived from a listed one, without a list of its own (its
// own tensor V would silently get no gradient).
#include <reel/reel.hpp>

struct Linear {
  reel::Tensor W;
};
REEL_FIELDS(Linear, W)
struct Two : Linear {
  reel::Tensor V;
};

int main() {
  Two m;
  m.W = reel::ones({2});
  m.V = reel::ones({2});
  auto [dm] = reel::gradient([](const Two& t) { return reel::sum(t.W * t.V); }, m);
  (void)dm;
}
