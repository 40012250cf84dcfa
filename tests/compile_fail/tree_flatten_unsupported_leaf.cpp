// Must not compile: tree_flatten of a struct with a field of a type the walk cannot see
// into (a std::set is no tree). The build's error names the fix (tests/CMakeLists.txt).
#include <reel/reel.hpp>

#include <set>

struct Bag {
  reel::Tensor W;
  std::set<int> ids;
};
REEL_FIELDS(Bag, W, ids)

int main() {
  Bag b{reel::ones({2}), {1, 2}};
  auto [leaves, def] = reel::tree_flatten(b);
  (void)leaves;
}
