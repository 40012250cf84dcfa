#include "reel/checkpoint.hpp"

#include <memory>

#include "reel/dispatch.hpp"
#include "reel/ir/evaluate.hpp"
#include "reel/ir/loop_params.hpp"
#include "reel/ir/prims.hpp"

namespace reel::detail {

std::vector<Tensor> run_checkpoint(Tape body, const std::vector<Tensor>& args, const std::vector<Tensor>& captured) {
  // The traced inputs are f's leaves, then the tensors it captured, in that order.
  std::vector<Tensor> inputs = args;
  inputs.insert(inputs.end(), captured.begin(), captured.end());
  if (inputs.empty()) return evaluate(body, {});  // f of no tensors: nothing to recompute from
  return apply_results(prims::checkpoint(), inputs, CallParams{std::make_shared<const Tape>(std::move(body))}.attrs());
}

}  // namespace reel::detail
