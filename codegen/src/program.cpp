#include "program.hpp"

#include "reel/passes.hpp"

namespace reel::codegen {

ProgramPlan plan_program(const Tape& input, bool reuse_memory) {
  verify(input);
  ProgramPlan p;
  p.tape = input.cleaned ? input : cleanup_traced(input);  // reroll, then simplify, cse, dce
  p.plan = make_plan(p.tape, reuse_memory);
  p.memory = plan_memory(p.tape, p.plan, reuse_memory);
  return p;
}

}  // namespace reel::codegen
