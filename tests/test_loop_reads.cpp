// PLACEHOLDER (issue 33)
#include "test_util.hpp"

using namespace reel;
