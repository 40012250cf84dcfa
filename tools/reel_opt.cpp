// reel-opt: reads a tape in text form, runs passes on it, prints the result.
//   reel-opt [--vmap=N] [--passes=grad,cse,dce] [--print-plan [--no-reuse]] [--dot | --dot-plan]
//            [--split-input-file] [--print-after-all] [--print-after=cse,dce] [file]
// (standard input without a file). --print-plan prints, instead of the tape, the
// schedule and memory plan reel::compile would make of the result; --dot the result as
// Graphviz DOT (reel::to_dot; after grad or vjp, its forward and adjoint parts told
// apart), --dot-plan the tape as compiled with each fused loop in a box (reel::plan_dot).
// --vmap=N batches the tape over N elements before the passes (reel::vmap_tape, every
// input batched on a new leading axis).
// --print-after-all (--print-after=NAMES: after those passes only), as LLVM's opt,
// prints the tape after each pass to standard error under "# *** Tape after NAME ***"
// (PassPipeline::print_after_all; REEL_PRINT_AFTER_ALL=1 does the same in any program).
// --split-input-file (as in MLIR's tools) treats each part of the input between lines
// "# -----" as a separate tape, prints the results separated by "# -----", and prints
// a part's error as "error: ..." in its place instead of stopping, so that one
// FileCheck file holds several cases, negative ones included.
//
// reel-opt-test, built from this file by tests/CMakeLists.txt, also knows the test
// suite's custom primitives (tests/test_prims.hpp), as MLIR's test tools know test
// dialects: FileCheck files whose RUN line names it may call them.
#include <fmt/core.h>
#include <reel/reel.hpp>
#ifdef REEL_OPT_TEST_PRIMITIVES
#include "test_prims.hpp"
#endif

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int usage() {
  fmt::print(stderr,
             "usage: reel-opt [options] [file]   (standard input without a file, or with -)\n"
             "  --vmap=N              batch every input over a new leading axis of N first (vmap_tape)\n"
             "  --passes=P1,P2,...    run these passes in order ({})\n"
             "  --print-plan          print the schedule and memory plan of the result instead of the tape\n"
             "  --no-reuse            (with --print-plan) plan without reusing memory\n"
             "  --dot                 print the result as Graphviz DOT (render: dot -Tsvg)\n"
             "  --dot-plan            the same, as compiled: each fused loop (kernel) in a box\n"
             "  --split-input-file    treat parts between '# -----' lines as separate tapes\n"
             "  --print-after-all     print the tape after each pass to standard error\n"
             "  --print-after=P1,...  print the tape after these passes only\n"
             "  -h, --help            this list\n",
             fmt::join(reel::pass_names(), ", "));
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
#ifdef REEL_OPT_TEST_PRIMITIVES
  reel::test::register_test_primitives();
#endif
  std::vector<std::string> passes, print_after;
  std::string path;
  int64_t vmap_size = 0;
  bool print_plan = false, reuse = true, split_input = false, print_after_all = false, dot = false, dot_plan = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--passes=", 0) == 0) passes = split(arg.substr(9));
    else if (arg.rfind("--vmap=", 0) == 0) {
      const std::string n = arg.substr(7);
      char* end = nullptr;
      vmap_size = std::strtoll(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || vmap_size <= 0) {
        fmt::print(stderr, "reel-opt: --vmap expects a batch size of at least 1, given '{}'\n", n);
        return 2;
      }
    } else if (arg == "--print-plan") print_plan = true;
    else if (arg == "--no-reuse") reuse = false;
    else if (arg == "--dot") dot = true;
    else if (arg == "--dot-plan") dot_plan = true;
    else if (arg == "--split-input-file") split_input = true;
    else if (arg == "--print-after-all") print_after_all = true;
    else if (arg.rfind("--print-after=", 0) == 0) for (std::string& p : split(arg.substr(14))) print_after.push_back(std::move(p));
    else if (arg == "-h" || arg == "--help") return usage();
    else if (arg.rfind("-", 0) == 0 && arg != "-") return usage();
    else path = arg;
  }
  std::stringstream text;
  if (path.empty() || path == "-") {
    text << std::cin.rdbuf();
  } else {
    std::ifstream in(path);
    if (!in) {
      fmt::print(stderr, "reel-opt: cannot open '{}'\n", path);
      return 1;
    }
    text << in.rdbuf();
  }
  auto process = [&](const std::string& part) {
    reel::PassPipeline pipeline(passes);
    if (print_after_all) pipeline.print_after_all();
    for (const std::string& p : print_after) pipeline.print_after(p);
    reel::Tape in = reel::parse_tape(part);
    if (vmap_size > 0) in = reel::vmap_tape(in, std::vector<bool>(in.inputs().size(), true), vmap_size);
    const reel::Tape tape = pipeline.run(in);
    bool gradient = false;  // (a gradient tape's parts are told apart in pictures)
    for (const std::string& p : passes) gradient = gradient || p == "grad" || p == "vjp";
    if (dot) return reel::to_dot(tape, {.gradient = gradient});
    if (dot_plan) return reel::plan_dot(tape, {.reuse_memory = reuse}, {.gradient = gradient});
    return print_plan ? reel::plan_text(tape, {.reuse_memory = reuse}) : fmt::format("{}\n", tape);
  };
  if (split_input) {
    std::vector<std::string> parts(1);
    for (std::string line; std::getline(text, line);) {
      if (line.rfind("# -----", 0) == 0) parts.emplace_back();
      else parts.back() += line + "\n";
    }
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (i > 0) fmt::print("# -----\n");
      try {
        fmt::print("{}", process(parts[i]));
      } catch (const reel::Error& e) {
        fmt::print("error: {}\n", e.what());
      }
    }
    return 0;
  }
  try {
    fmt::print("{}", process(text.str()));
  } catch (const reel::Error& e) {
    fmt::print(stderr, "reel-opt: {}\n", e.what());
    return 1;
  }
  return 0;
}
