#include "session.hpp"

#include <fmt/format.h>
#include <reel/reel.hpp>

#include <chrono>
#include <cmath>
#include <exception>

namespace gradbench {

namespace {

using Clock = std::chrono::steady_clock;

int64_t nanoseconds_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

json failure(const json& id, const std::string& error) { return {{"id", id}, {"success", false}, {"error", error}}; }

// A number setting of the input (min_runs, min_seconds), with its default.
double setting(const json& input, const char* name, double fallback) {
  if (!input.is_object() || !input.contains(name)) return fallback;
  const json& v = input.at(name);
  if (!v.is_number()) throw reel::Error(fmt::format("evaluate: expected {} to be a number, got {}", name, v.dump()));
  return v.get<double>();
}

// Where a result holds NaN or an infinity (nlohmann would write null), or "".
std::string non_finite(const json& v, const std::string& at) {
  if (v.is_number_float()) return std::isfinite(v.get<double>()) ? "" : at;
  if (v.is_array())
    for (std::size_t i = 0; i < v.size(); ++i)
      if (std::string w = non_finite(v[i], fmt::format("{}[{}]", at, i)); !w.empty()) return w;
  if (v.is_object())
    for (const auto& [k, e] : v.items())
      if (std::string w = non_finite(e, at + "." + k); !w.empty()) return w;
  return "";
}

}  // namespace

std::string Session::no_module(const std::string& kind, const std::string& module) const {
  if (mode_ == Mode::scalar && modules().contains(module))
    return fmt::format("{}: module {} has no scalar mode (reel-gradbench --scalar answers lse, llsq, ode, det, gmm "
                       "and lstm; run without --scalar for its tensor mode)", kind, module);
  return fmt::format("{}: no module named {}", kind, module);
}

json Session::handle(const json& message) {
  if (!message.is_object() || !message.contains("id"))
    return {{"id", nullptr}, {"success", false}, {"error", "expected a message object with an id"}};
  const json id = message.at("id");
  const std::string kind = message.contains("kind") && message.at("kind").is_string() ? message.at("kind").get<std::string>() : "";
  try {
    if (kind == "start") return {{"id", id}, {"tool", mode_ == Mode::scalar ? "reel-scalar" : "reel"}};
    if (kind == "define") {
      if (!message.contains("module") || !message.at("module").is_string())
        return failure(id, "define: expected a module name");
      const std::string module = message.at("module").get<std::string>();
      if (!table().contains(module)) return failure(id, no_module("define", module));
      defined_[module] = true;
      return {{"id", id}, {"success", true}};
    }
    if (kind == "evaluate") {
      for (const char* field : {"module", "function", "input"})
        if (!message.contains(field)) return failure(id, fmt::format("evaluate: the message has no {}", field));
      if (!message.at("module").is_string() || !message.at("function").is_string())
        return failure(id, "evaluate: expected module and function names");
      const std::string module = message.at("module").get<std::string>();
      const std::string function = message.at("function").get<std::string>();
      auto m = table().find(module);
      if (m == table().end()) return failure(id, no_module("evaluate", module));
      auto f = m->second.find(function);
      if (f == m->second.end())
        return failure(id, fmt::format("evaluate: module {} has no function {}", module, function));
      const json& input = message.at("input");
      const double min_runs = setting(input, "min_runs", 1), min_seconds = setting(input, "min_seconds", 0);
      // Tracing and compiling (or finding the compiled code in the caches) is the
      // prepare timing; the runs are timed one by one.
      json timings = json::array();
      auto t0 = Clock::now();
      Prepared work = f->second(input);
      work.run();  // the first run compiles what the caches do not hold yet
      timings.push_back({{"name", "prepare"}, {"nanoseconds", nanoseconds_since(t0)}});
      int64_t runs = 0, total = 0;
      while (static_cast<double>(runs) < min_runs || static_cast<double>(total) < min_seconds * 1e9) {
        t0 = Clock::now();
        work.run();
        const int64_t ns = nanoseconds_since(t0);
        timings.push_back({{"name", "evaluate"}, {"nanoseconds", ns}});
        total += ns;
        ++runs;
      }
      json output = work.output();
      if (const std::string where = non_finite(output, "output"); !where.empty())
        return failure(id, fmt::format("evaluate: the result is not finite at {} (JSON has no NaN or infinity)", where));
      return {{"id", id}, {"success", true}, {"output", std::move(output)}, {"timings", std::move(timings)}};
    }
    return {{"id", id}};  // analysis, and kinds this tool does not know
  } catch (const std::exception& e) {
    if (kind == "evaluate" || kind == "define") return failure(id, e.what());
    return {{"id", id}};
  }
}

}  // namespace gradbench
