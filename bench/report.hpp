#pragma once
// reel_bench's output: the tables on standard output and the results file (JSON).
#include <string>
#include <vector>

#include "scaling.hpp"
#include "workloads.hpp"

namespace bench {

void print_workload_table(const std::vector<Result>& results);  // with its note
void print_conv_choice(const ConvChoice& c);

void print_runner_header();
void print_runner_rows(const std::vector<RunnerRow>& rows);

void print_scaling_header();
void print_scaling_row(const Row& r);  // and flushes: rows take a while each

// Writes every result as one JSON array to `path` and says so; 1 (with a message on
// standard error) if it cannot.
int write_results(const std::string& path, const std::vector<Result>& results, const std::vector<RunnerRow>& runners,
                  const std::vector<Row>& rows);

}  // namespace bench
