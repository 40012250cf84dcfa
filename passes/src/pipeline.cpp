#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>

#include "reel/ir/loop_params.hpp"
#include "reel/passes.hpp"
#include "rewrite.hpp"

namespace reel {

namespace {
const std::map<std::string, Pass>& registry() {
  static const std::map<std::string, Pass> passes{
      {"grad", reverse_mode},
      {"vjp", reverse_mode_seeded},
      {"jvp", forward_mode},
      {"simplify", simplify},
      {"cse", cse},
      {"dce", dce},
      {"reroll", [](const Tape& t) { return reroll(t); }},
      {"vectorize", vectorize},
  };
  return passes;
}

// The passes that can consume their input (passes/src/rewrite.hpp), by name; null for
// the others.
Tape (*consuming_form(const std::string& name))(Tape&&) {
  if (name == "simplify") return passes::simplify;
  if (name == "cse") return passes::cse;
  if (name == "dce") return passes::dce;
  return nullptr;
}

// A boolean environment setting read by `parse` (which may warn: the warning is printed).
bool setting_from_environment(const char* name, bool (*parse)(const char*, std::string&)) {
  std::string warning;
  const bool value = parse(std::getenv(name), warning);
  if (!warning.empty()) {
    fmt::print(stderr, "reel: warning: {}\n", warning);
    std::fflush(stderr);
  }
  return value;
}

// REEL_REROLL, read once per process; set_auto_reroll overrides it.
std::atomic<int> reroll_override{-1};
bool reroll_from_environment() {
  static const bool on = setting_from_environment("REEL_REROLL", detail::reroll_setting);
  return on;
}

// REEL_PRINT_AFTER_ALL, read once per process (a bad value's warning is printed once).
bool print_after_all_from_environment() {
  static const bool on = setting_from_environment("REEL_PRINT_AFTER_ALL", detail::print_after_all_setting);
  return on;
}
}  // namespace

namespace {
// A 0/1 setting NAME=value: unset or empty gives `unset`; any other value sets a warning
// (ending with `otherwise`) and gives `unset`.
bool binary_setting(const char* name, const char* value, bool unset, const char* otherwise, std::string& warning) {
  warning.clear();
  const std::string_view v = value != nullptr ? value : "";
  if (v == "0" || v == "1") return v == "1";
  if (!v.empty()) warning = fmt::format("{}=\"{}\" is not 0 or 1; {}", name, v, otherwise);
  return unset;
}
}  // namespace

bool detail::print_after_all_setting(const char* value, std::string& warning) {
  return binary_setting("REEL_PRINT_AFTER_ALL", value, false, "the tape is not printed after passes", warning);
}

bool detail::reroll_setting(const char* value, std::string& warning) {
  return binary_setting("REEL_REROLL", value, true, "traced loops are re-rolled", warning);
}

bool auto_reroll() {
  const int o = reroll_override.load(std::memory_order_relaxed);
  return o < 0 ? reroll_from_environment() : o == 1;
}

bool set_auto_reroll(bool on) {
  const bool before = auto_reroll();
  reroll_override.store(on ? 1 : 0, std::memory_order_relaxed);
  return before;
}

std::vector<std::string> with_auto_reroll(std::vector<std::string> names) {
  if (auto_reroll()) names.insert(names.begin(), {"reroll", "vectorize"});
  return names;
}

Tape cleanup_traced(const Tape& tape) {
  if (!auto_reroll()) return cleanup(tape);
  static const PassPipeline pipeline(with_auto_reroll(cleanup_pass_names()));
  return pipeline.run(tape);
}

Tape derivative_pipeline(const std::string& derivative, const Tape& tape) {
  std::vector<std::string> names;
  if (!tape.cleaned) names = cleanup_pass_names();
  names.push_back(derivative);
  for (const std::string& n : cleanup_pass_names()) names.push_back(n);
  return PassPipeline(with_auto_reroll(std::move(names))).run(tape);
}

std::vector<std::string> pass_names() {
  std::vector<std::string> names;
  for (const auto& [name, pass] : registry()) names.push_back(name);
  return names;
}

const Pass& find_pass(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end())
    throw Error(fmt::format("unknown pass '{}' (known: {})", name, fmt::join(pass_names(), ", ")));
  return it->second;
}

const std::vector<std::string>& cleanup_pass_names() {
  static const std::vector<std::string> names{"simplify", "cse", "dce"};
  return names;
}

Tape cleanup(const Tape& tape) {
  static const PassPipeline pipeline(cleanup_pass_names());
  return pipeline.run(tape);
}

PassPipeline::PassPipeline(std::vector<std::string> names)
    : names_(std::move(names)), print_all_(print_after_all_from_environment()) {
  for (const std::string& n : names_) passes_.push_back(&find_pass(n));
  const auto& tail = cleanup_pass_names();
  ends_with_cleanup_ = names_.size() >= tail.size() && std::equal(tail.rbegin(), tail.rend(), names_.rbegin());
}

PassPipeline& PassPipeline::print_after_all(bool on) {
  print_all_ = on;
  return *this;
}

PassPipeline& PassPipeline::print_after(const std::string& pass) {
  if (!registry().contains(pass))
    throw Error(fmt::format("PassPipeline::print_after: expected a pass name ({}), got '{}'", fmt::join(pass_names(), ", "),
                            pass));
  print_after_.insert(pass);
  return *this;
}

PassPipeline& PassPipeline::print_to(std::ostream& out) {
  out_ = &out;
  return *this;
}

void PassPipeline::dump_after(std::size_t i, const Tape& tape) const {
  if (!print_all_ && !print_after_.contains(names_[i])) return;
  const std::string text = fmt::format("# *** Tape after {} ***\n{}\n", names_[i], tape);
  static std::mutex mutex;  // one dump at a time, when pipelines run on several threads
  std::lock_guard<std::mutex> lock(mutex);
  (out_ != nullptr ? *out_ : std::cerr) << text << std::flush;
}

Tape PassPipeline::run(const Tape& tape) const {
  if (passes_.empty()) return tape;
  // No copy of the input: a tape can be large. reroll, which often finds nothing to
  // fold, passes the tape it was given on unless it folds something. The passes after
  // the first that changes it own their tape: simplify, cse and dce compact it in place
  // (passes/src/rewrite.hpp). (Consuming the caller's tape too was slower overall: the
  // traced operations' lists, scattered over the heap, then made the compile after it
  // 0.5 s slower at 10^6 operations than fresh copies did.)
  const Tape* current = &tape;
  Tape t;
  for (std::size_t i = 0; i < passes_.size(); ++i) {
    if (names_[i] == "reroll") {
      if (std::optional<Tape> folded = detail::reroll_if_any(*current, RerollOptions{})) {
        t = std::move(*folded);
        current = &t;
      }
    } else if (names_[i] == "vectorize") {  // likewise: most tapes have no scan
      if (std::any_of(current->ops.begin(), current->ops.end(), [](const Op& op) {
            return op.kind == OpKind::call && loop_form(*op.prim) == LoopForm::scan;
          })) {
        t = vectorize(*current);
        current = &t;
      }
    } else if (Tape (*consuming)(Tape&&) = current == &t ? consuming_form(names_[i]) : nullptr) {
      t = consuming(std::move(t));  // (a tape this pipeline made: its operations are moved, not copied)
    } else {
      t = (*passes_[i])(*current);
      current = &t;
    }
    dump_after(i, *current);
  }
  if (current != &t) t = *current;
  t.cleaned = ends_with_cleanup_;
  return t;
}

}  // namespace reel
