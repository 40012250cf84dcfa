// Replays a recorded GradBench transcript (../shared/data/gradbench/<eval>.jsonl)
// through reel-gradbench's session and checks every reply against the recorded one
// with GradBench's rule: the same structure (keys, list lengths, types, int and float
// interchangeable) and every float within |x - y| / max(1, |x| + |y|) <= 1e-4.
// Timings are checked for their form only. Runs each evaluate once (min_runs 1,
// min_seconds 0). Exit status 0 when every reply matches. With --relative R, floats
// must agree to R relative to their size instead (|x - y| <= R max(|x| + |y|, 1e-8)),
// for transcripts whose values are too small for GradBench's rule to tell apart.
// With --scalar the session is reel-gradbench --scalar's (GradBench's own C++ with
// reel::Real); --max-ops N then skips, saying so, each evaluate whose scalar trace is
// estimated to record over N operations (the primal's; a derivative's trace is some
// three times that), whose tracing would take too long for a test.
//   gradbench_replay [--relative R] [--scalar [--max-ops N]] <transcript.jsonl>
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>

#include "session.hpp"

using gradbench::json;

namespace {

// The relative tolerance of --relative; 0: GradBench's rule.
double relative = 0;

// GradBench's comparison (python/gradbench/gradbench/comparison.py); the first
// difference, or "".
std::string compare(const json& got, const json& want, const std::string& at) {
  if (got.is_number_integer() && want.is_number_integer())  // ints: exactly, as GradBench
    return got.get<int64_t>() == want.get<int64_t>() ? "" : fmt::format("{}: {} vs {}", at, got.dump(), want.dump());
  if (got.is_number() && want.is_number()) {
    const double x = got.get<double>(), y = want.get<double>();
    if (!std::isfinite(x)) return fmt::format("{}: {} is not finite", at, x);
    const double scale = relative > 0 ? std::max(1e-8, std::abs(x) + std::abs(y)) : std::max(1.0, std::abs(x) + std::abs(y));
    if (std::abs(x - y) / scale > (relative > 0 ? relative : 1e-4))
      return fmt::format("{}: {} vs {}", at, x, y);
    return "";
  }
  if (got.type() != want.type()) return fmt::format("{}: a {} where {} was recorded", at, got.type_name(), want.type_name());
  if (got.is_array()) {
    if (got.size() != want.size()) return fmt::format("{}: {} elements vs {}", at, got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      if (std::string d = compare(got[i], want[i], fmt::format("{}[{}]", at, i)); !d.empty()) return d;
    return "";
  }
  if (got.is_object()) {
    for (const auto& [k, v] : want.items())
      if (!got.contains(k)) return fmt::format("{}: no key {}", at, k);
    for (const auto& [k, v] : got.items()) {
      if (!want.contains(k)) return fmt::format("{}: an extra key {}", at, k);
      if (std::string d = compare(v, want.at(k), at + "." + k); !d.empty()) return d;
    }
    return "";
  }
  return got == want ? "" : fmt::format("{}: {} vs {}", at, got.dump(), want.dump());
}

}  // namespace

int main(int argc, char** argv) {
  bool scalar = false;
  double max_ops = 0;  // 0: no limit
  bool usage = false;
  while (argc > 2 && std::string(argv[1]).starts_with("--")) {
    const std::string flag = argv[1];
    int used = 1;
    if (flag == "--scalar") {
      scalar = true;
    } else if ((flag == "--relative" || flag == "--max-ops") && argc > 3) {
      (flag == "--relative" ? relative : max_ops) = std::atof(argv[2]);
      used = 2;
    } else {
      usage = true;
    }
    argv += used, argc -= used;
  }
  if (usage || argc != 2 || !(relative >= 0) || !(max_ops >= 0) || (max_ops > 0 && !scalar)) {
    std::cerr << "usage: gradbench_replay [--relative R] [--scalar [--max-ops N]] <transcript.jsonl>\n";
    return 2;
  }
  if (scalar && !gradbench::scalar_mode_missing().empty()) {
    std::cerr << "gradbench_replay: --scalar: " << gradbench::scalar_mode_missing() << "\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  if (!in) {
    std::cerr << "gradbench_replay: cannot read " << argv[1] << "\n";
    return 2;
  }
  gradbench::Session session(scalar ? gradbench::Mode::scalar : gradbench::Mode::tensor);
  json last_reply;
  json last_message;
  int checked = 0, failures = 0, unanswered = 0, skipped = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json entry = json::parse(line);
    if (entry.contains("message")) {
      json message = entry.at("message");
      if (message.value("kind", "") == "evaluate" && message.at("input").is_object()) {
        message["input"]["min_runs"] = 1;
        message["input"]["min_seconds"] = 0;
      }
      last_message = message;
      if (max_ops > 0 && message.value("kind", "") == "evaluate") {
        const int64_t ops = gradbench::scalar_operations(message.value("module", ""), message.at("input"));
        if (static_cast<double>(ops) > max_ops) {
          std::cout << fmt::format("id {} {}.{} ({}): skipped: its scalar trace would record about {:.2g} operations, "
                                   "over --max-ops {:.2g}\n", message.at("id").dump(), message.value("module", ""),
                                   message.value("function", ""), message.value("description", "-"),
                                   static_cast<double>(ops), max_ops);
          ++skipped;
          last_message = json::object();  // its recorded reply is not compared
          continue;
        }
      }
      const auto t0 = std::chrono::steady_clock::now();
      last_reply = session.handle(message);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (last_reply.value("id", json()) != message.at("id")) {
        std::cout << fmt::format("id {}: the reply's id is {}\n", message.at("id").dump(), last_reply.value("id", json()).dump());
        ++failures;
      }
      if (message.value("kind", "") == "evaluate") {
        const bool ok = last_reply.value("success", false);
        std::cout << fmt::format("id {} {}.{} ({}): {} ({:.2f} s)\n", message.at("id").dump(), message.value("module", ""),
                                 message.value("function", ""), message.value("description", "-"),
                                 ok ? "ok" : "failed: " + last_reply.value("error", std::string("?")), seconds);
        if (!ok) ++failures;
        else ++unanswered;  // until a recorded reply is found
        // One evaluate timing per run, after a prepare timing.
        if (ok) {
          const json& t = last_reply.at("timings");
          if (t.size() != 2 || t[0].at("name") != "prepare" || t[1].at("name") != "evaluate" ||
              !t[1].at("nanoseconds").is_number_integer()) {
            std::cout << "  timings of the wrong form: " << t.dump() << "\n";
            ++failures;
          }
        }
      }
    } else if (entry.contains("response")) {
      const json& want = entry.at("response");
      if (want.value("id", json()) != last_message.value("id", json()) || !want.contains("output")) continue;
      --unanswered;
      ++checked;
      if (!last_reply.contains("output")) {
        std::cout << "  no output to compare\n";
        ++failures;
        continue;
      }
      const std::string d = compare(last_reply.at("output"), want.at("output"), "output");
      std::cout << (d.empty() ? "  matches the recorded reply\n" : "  MISMATCH " + d + "\n");
      if (!d.empty()) ++failures;
    }
  }
  std::cout << fmt::format("{}: {} replies compared, {} evaluates without a recorded reply (ran), {} skipped, {} failures\n",
                           argv[1], checked, unanswered, skipped, failures);
  return failures == 0 && checked > 0 ? 0 : 1;
}
