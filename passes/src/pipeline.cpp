#include <fmt/format.h>

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

PassPipeline::PassPipeline(std::vector<std::string> names) : names_(std::move(names)) {
  for (const std::string& n : names_) passes_.push_back(&find_pass(n));
}

Tape PassPipeline::run(const Tape& tape) const {
  if (passes_.empty()) return tape;
  Tape t = (*passes_[0])(tape);  // no copy of the input first: a tape can be large
  for (std::size_t i = 1; i < passes_.size(); ++i) t = (*passes_[i])(t);
  return t;
}

}  // namespace reel
