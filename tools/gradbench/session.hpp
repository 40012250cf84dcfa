#pragma once
// reel-gradbench's core: GradBench's protocol (../shared/specs/gradbench.md) over JSON
// messages, and the evals, written with Reel's public API. A library, so that tests
// can replay recorded transcripts through it.
#include <nlohmann/json.hpp>

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

// The evals: module name -> function name -> maker (evals/registry.cpp; one file per
// eval in evals/).
const std::map<std::string, std::map<std::string, Maker>>& modules();

class Session {
 public:
  // The reply to one message. Never throws for bad input: a message it cannot use gets
  // a reply with success false and an error (evaluate, define) or a bare {id}.
  json handle(const json& message);

 private:
  std::map<std::string, bool> defined_;
};

}  // namespace gradbench
