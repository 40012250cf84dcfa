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

}  // namespace reel
