#pragma once
// reel-gradbench's core: GradBench's protocol (../shared/specs/gradbench.md) over JSON
// messages, and the evals, written with Reel's public API. A library, so that tests
// can replay recorded transcripts through it.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace gradbench {

using json = nlohmann::json;

// One evaluate's work, made (traced and compiled) before the timed runs: `run` is
// one timed run, `output` the last run's result as JSON.
struct Prepared {
  std::function<void()> run;
  std::function<json()> output;
};
// Makes the work of one function of a module for an input (a reel::Error for input it
// cannot use).
using Maker = std::function<Prepared(const json& input)>;

// A table of evals: module name -> function name -> maker.
using Modules = std::map<std::string, std::map<std::string, Maker>>;

// The evals written with Reel's tensors (evals/registry.cpp; one file per eval in evals/).
const Modules& modules();

// The scalar mode (reel-gradbench --scalar; scalar/registry.cpp): lse, llsq, ode, det,
// gmm and lstm answered by GradBench's own templated C++ (../shared/gradbench-cpp)
// instantiated with reel::Real. Empty when reel-gradbench was built without those
// headers; scalar_mode_missing() then says why ("" when the mode is built).
const Modules& scalar_modules();
std::string scalar_mode_missing();
// An estimate of how many operations the scalar mode's trace of one evaluate of
// `module` records for `input` (about twice as many more for a derivative's), from the
// input's sizes; -1 for a module outside the scalar mode. (gradbench_replay's --max-ops.)
int64_t scalar_operations(const std::string& module, const json& input);

// Which table a session answers from. In the scalar mode an eval outside it (hello,
// kmeans, ba, ht) is not defined: its define fails saying so, so that a benchmark's
// scalar column never shows the tensor mode's numbers.
enum class Mode { tensor, scalar };

class Session {
 public:
  explicit Session(Mode mode = Mode::tensor) : mode_(mode) {}

  // The reply to one message. Never throws for bad input: a message it cannot use gets
  // a reply with success false and an error (evaluate, define) or a bare {id}.
  json handle(const json& message);

 private:
  // The table of the session's mode; the error for a module it lacks.
  const Modules& table() const { return mode_ == Mode::scalar ? scalar_modules() : modules(); }
  std::string no_module(const std::string& kind, const std::string& module) const;

  Mode mode_;
  std::map<std::string, bool> defined_;
};

}  // namespace gradbench
