#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "reel/passes.hpp"

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
  };
  return passes;
}
}  // namespace

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

PassPipeline::PassPipeline(std::vector<std::string> names) : names_(std::move(names)) {
  for (const std::string& n : names_) passes_.push_back(&find_pass(n));
  const auto& tail = cleanup_pass_names();
  ends_with_cleanup_ = names_.size() >= tail.size() && std::equal(tail.rbegin(), tail.rend(), names_.rbegin());
}

Tape PassPipeline::run(const Tape& tape) const {
  if (passes_.empty()) return tape;
  Tape t = (*passes_[0])(tape);  // no copy of the input first: a tape can be large
  for (std::size_t i = 1; i < passes_.size(); ++i) t = (*passes_[i])(t);
  t.cleaned = ends_with_cleanup_;
  return t;
}

}  // namespace reel
