#include "measure.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

#include <unistd.h>

namespace bench {

std::string human(double ns) {
  if (ns < 1e3) return fmt::format("{:.0f} ns", ns);
  if (ns < 1e6) return fmt::format("{:.1f} us", ns / 1e3);
  return fmt::format("{:.2f} ms", ns / 1e6);
}

double current_rss_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

double peak_rss_mb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.starts_with("VmHWM:")) return std::strtod(line.c_str() + 6, nullptr) / 1024.0;  // in kB
  return 0;
}

void dump_tape(const std::string& workload, const reel::Tape& tape) {
  const char* dir = std::getenv("REEL_BENCH_DUMP_TAPES");
  if (dir == nullptr) return;
  std::string name;
  for (char c : workload) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  std::ofstream(std::string(dir) + "/" + name + ".tape") << reel::to_string(tape) << "\n";
}

std::string run_child(const std::string& cmd) {
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + cmd);
  char line[4096];
  std::string out;
  while (std::fgets(line, sizeof line, pipe) != nullptr) out += line;
  if (pclose(pipe) != 0) throw std::runtime_error("failed: " + cmd + "\n" + out);
  return out;
}

}  // namespace bench
