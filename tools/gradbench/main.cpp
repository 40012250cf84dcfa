// reel-gradbench: a GradBench tool (github.com/gradbench/gradbench) written with Reel.
// Reads one JSON message per line on standard input and writes one JSON reply per line
// on standard output; logs to standard error; exits when standard input closes. The
// protocol and the evals: ../shared/specs/gradbench.md; README, "GradBench".
#include <cstdio>
#include <iostream>
#include <string>

#include "session.hpp"

int main() {
  std::ios::sync_with_stdio(false);
  gradbench::Session session;
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
