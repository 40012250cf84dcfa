#pragma once
// reel::Error: the one exception type Reel throws for bad input. Messages name the
// operation, what it expected and what it got.
#include <stdexcept>
#include <string>

namespace reel {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A guard failed: a tape (or compiled code) recorded on one path of a branch was run
// where the condition goes the other way. Cached functions catch it and take or
// trace the other path; elsewhere it is an ordinary reel::Error.
class GuardFailure : public Error {
 public:
  explicit GuardFailure(const std::string& message) : Error(message) {}
};

}  // namespace reel
