// The table of evals: module name -> its functions, each eval from its own file.
#include "evals.hpp"

namespace gradbench {

const std::map<std::string, std::map<std::string, Maker>>& modules() {
  static const std::map<std::string, evals::Functions> m{
      {"hello", evals::hello_functions()}, {"lse", evals::lse_functions()},   {"llsq", evals::llsq_functions()},
      {"ode", evals::ode_functions()},     {"kmeans", evals::kmeans_functions()}, {"gmm", evals::gmm_functions()},
      {"lstm", evals::lstm_functions()},   {"ba", evals::ba_functions()},     {"det", evals::det_functions()},
      {"ht", evals::ht_functions()},
  };
  return m;
}

}  // namespace gradbench
