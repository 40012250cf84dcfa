#pragma once
// Internal to reroll (reroll.cpp): the hashing its structural keys are made of.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "reel/ir/attrs.hpp"
#include "reel/ir/tape.hpp"

namespace reel::reroll_detail {

// Mixes v into the hash h.
void mix(uint64_t& h, uint64_t v);

// Last position of each context key: open addressing over the distinct keys.
class LastSeen {
 public:
  LastSeen() : keys_(1024), pos_(1024, kNoVar) {}
  // Records `p` for `key` and returns the position recorded before (kNoVar if none).
  Var exchange(uint64_t key, Var p);

 private:
  void grow();
  std::vector<uint64_t> keys_;
  std::vector<Var> pos_;
  std::size_t used_ = 0;
};

// Hashes of attribute values; a tape's by its text, once per tape.
class AttrHasher {
 public:
  uint64_t value(const AttrValue& value);

 private:
  uint64_t tape(const TapeRef& r);
  std::unordered_map<const Tape*, uint64_t> tape_hashes_;
};

}  // namespace reel::reroll_detail
