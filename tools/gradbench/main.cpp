// reel-gradbench: a GradBench tool (github.com/gradbench/gradbench) written with Reel.
// Reads one JSON message per line on standard input and writes one JSON reply per line
// on standard output; logs to standard error; exits when standard input closes. The
// protocol and the evals: ../shared/specs/gradbench.md; README, "GradBench".
//   reel-gradbench            the evals written with Reel's tensors (evals/)
//   reel-gradbench --scalar   lse, llsq, ode, det, gmm and lstm by GradBench's own templated
//                             C++ instantiated with reel::Real (scalar/); other evals undefined
#include <cstdio>
#include <iostream>
#include <string>

#include "session.hpp"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  const bool scalar = argc == 2 && argv[1] == std::string("--scalar");
  if (argc > 2 || (argc == 2 && !scalar)) {
    std::fprintf(stderr, "usage: reel-gradbench [--scalar]\n");
    return 2;
  }
  if (scalar && !gradbench::scalar_mode_missing().empty()) {
    std::fprintf(stderr, "reel-gradbench: --scalar: %s\n", gradbench::scalar_mode_missing().c_str());
    return 2;
  }
  gradbench::Session session(scalar ? gradbench::Mode::scalar : gradbench::Mode::tensor);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    gradbench::json message;
    try {
      message = gradbench::json::parse(line);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "reel-gradbench: a message is not JSON (%s); stopping\n", e.what());
      return 1;
    }
    const gradbench::json reply = session.handle(message);
    std::cout << reply.dump() << '\n' << std::flush;
  }
  return 0;
}
