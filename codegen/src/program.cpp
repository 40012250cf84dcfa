#include "program.hpp"

#include "reel/passes.hpp"

namespace reel::codegen {

namespace {
ProgramPlan planned(Tape cleaned, bool reuse_memory) {
  ProgramPlan p;
  p.tape = std::move(cleaned);
  p.plan = make_plan(p.tape, reuse_memory);
  p.memory = plan_memory(p.tape, p.plan, reuse_memory);
  return p;
}
}  // namespace

ProgramPlan plan_program(const Tape& input, bool reuse_memory) {
  verify(input);
  return planned(input.cleaned ? input : cleanup_traced(input), reuse_memory);  // reroll, then simplify, cse, dce
}

ProgramPlan plan_verified(Tape&& input, bool reuse_memory) {
  return planned(input.cleaned ? std::move(input) : cleanup_traced(input), reuse_memory);
}

}  // namespace reel::codegen
