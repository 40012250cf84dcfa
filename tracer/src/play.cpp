#include "reel/play.hpp"

#include "reel/dispatch.hpp"
#include "reel/ir/evaluate.hpp"

namespace reel {

std::vector<Tensor> play(const Tape& tape, const std::vector<Tensor>& args) {
  return run_tape("play", tape, args, [](const Op& op, std::span<const Tensor> in) {
    return detail::apply_list(*op.prim, in, op.attrs);
  });
}

}  // namespace reel
