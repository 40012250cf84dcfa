#pragma once
// What GradBench's C++ headers (../shared/gradbench-cpp/gradbench) include, included
// here first at namespace scope. A scalar eval file then includes its GradBench header
// inside an unnamed namespace:
//   #include "gradbench_prelude.hpp"
//   namespace {
//   #include "gradbench/evals/lse.hpp"
//   }
// The standard and JSON headers it includes are then no-ops (already included), and
// what it defines itself (its eval's namespace, gradbench/main.hpp's Function and
// generic_main, multithread.hpp's num_threads, adbench's helpers) is local to the file.
// A header that includes something not listed here fails to compile, loudly.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>
