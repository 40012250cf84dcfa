// The scalar mode's table (reel-gradbench --scalar): module name -> its functions, each
// eval from its own file here. Built without them when GradBench's C++ headers were
// missing at configure time (REEL_GRADBENCH_SCALAR undefined): the table is then empty
// and scalar_mode_missing() says why.
#include <map>
#include <string>

#include "session.hpp"

#ifdef REEL_GRADBENCH_SCALAR
#include "scalar.hpp"

namespace gradbench {

namespace {
const std::map<std::string, scalar::ScalarEval>& scalar_evals() {
  static const std::map<std::string, scalar::ScalarEval> m{
      {"lse", scalar::lse_eval()}, {"llsq", scalar::llsq_eval()}, {"ode", scalar::ode_eval()},
      {"det", scalar::det_eval()}, {"gmm", scalar::gmm_eval()},   {"lstm", scalar::lstm_eval()},
  };
  return m;
}
}  // namespace

const Modules& scalar_modules() {
  static const Modules m = [] {
    Modules table;
    for (const auto& [name, eval] : scalar_evals()) table.emplace(name, eval.functions);
    return table;
  }();
  return m;
}

int64_t scalar_operations(const std::string& module, const json& input) {
  auto e = scalar_evals().find(module);
  return e == scalar_evals().end() ? -1 : e->second.operations(input);
}

std::string scalar_mode_missing() { return ""; }

}  // namespace gradbench

#else

namespace gradbench {

const Modules& scalar_modules() {
  static const Modules none;
  return none;
}

int64_t scalar_operations(const std::string&, const json&) { return -1; }

std::string scalar_mode_missing() {
  return "reel-gradbench was built without its scalar mode: GradBench's C++ headers were not found at "
         REEL_GRADBENCH_CPP_DIR " (nor nlohmann's json.hpp) when it was configured";
}

}  // namespace gradbench

#endif
