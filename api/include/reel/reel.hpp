#pragma once
// Reel: trace C++ numerical code into tapes, differentiate them, run them.
#include "reel/error.hpp"
#include "reel/tensor.hpp"
#include "reel/format.hpp"
#include "reel/ir/tape.hpp"
#include "reel/ir/builder.hpp"
#include "reel/ops.hpp"
#include "reel/trace.hpp"
#include "reel/play.hpp"
#include "reel/passes.hpp"
#include "reel/grad.hpp"
#include "reel/compile.hpp"
#include "reel/simplegrad.hpp"
