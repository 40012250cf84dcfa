#pragma once
// The checkpointing table (reel_bench --checkpoint-table): memory against recomputation
// time for the gradient of an n-step scan, x = sin(x) * 1.01 + square(x) * 0.001 on 8
// doubles, n = 10^3 .. 10^6, with each of scan's checkpoint policies (store all, every
// k, sqrt, binomial), interpreted (reel::play of the gradient tape) and compiled. Each
// row runs in a fresh process (this program with --checkpoint-row) so that its peak RSS
// is its own.
#include <string>

namespace bench {

// --checkpoint-row POLICY N MODE: measures one row in this process and prints its
// fields on one line. POLICY: store, every:K, sqrt, binomial:S; MODE: play or compiled.
int checkpoint_row_mode(const std::string& policy, long n, const std::string& mode);

// Prints the table, each row measured in a child process (`self` --checkpoint-row ...).
int checkpoint_table(const std::string& self, bool quick);

}  // namespace bench
