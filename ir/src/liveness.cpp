#include "reel/ir/tape.hpp"

namespace reel {

std::vector<Var> last_uses(const Tape& tape) {
  std::vector<Var> last(static_cast<std::size_t>(tape.size()) + 1, kNoVar);
  for (Var v = 1; v <= tape.size(); ++v)
    for (Var a : tape.op(v).args) last[static_cast<std::size_t>(a)] = v;
  return last;
}

}  // namespace reel
