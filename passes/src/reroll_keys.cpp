// reroll's hashing (reroll_keys.hpp).
#include "reroll_keys.hpp"

#include <bit>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

namespace reel::reroll_detail {

namespace {

uint64_t fmix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

}  // namespace

void mix(uint64_t& h, uint64_t v) { h = fmix(h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2))); }

Var LastSeen::exchange(uint64_t key, Var p) {
  if (2 * (used_ + 1) > keys_.size()) grow();
  for (std::size_t i = key & (keys_.size() - 1);; i = (i + 1) & (keys_.size() - 1)) {
    if (pos_[i] == kNoVar) {
      keys_[i] = key, pos_[i] = p, ++used_;
      return kNoVar;
    }
    if (keys_[i] == key) return std::exchange(pos_[i], p);
  }
}

void LastSeen::grow() {
  std::vector<uint64_t> keys(keys_.size() * 2);
  std::vector<Var> pos(keys_.size() * 2, kNoVar);
  std::swap(keys, keys_), std::swap(pos, pos_);
  used_ = 0;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (pos[i] != kNoVar) exchange(keys[i], pos[i]);
}

uint64_t AttrHasher::tape(const TapeRef& r) {
  auto [it, added] = tape_hashes_.try_emplace(r.tape.get(), 0);
  if (added && r.tape) it->second = std::hash<std::string>()(to_string(*r.tape));
  return it->second;
}

uint64_t AttrHasher::value(const AttrValue& value) {
  uint64_t h = value.index();
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, bool>) mix(h, static_cast<uint64_t>(x));
        else if constexpr (std::is_same_v<T, double>) mix(h, std::bit_cast<uint64_t>(x));
        else if constexpr (std::is_same_v<T, Shape>) for (int64_t d : x) mix(h, static_cast<uint64_t>(d));
        else if constexpr (std::is_same_v<T, std::vector<double>>) for (double d : x) mix(h, std::bit_cast<uint64_t>(d));
        else if constexpr (std::is_same_v<T, std::string>) mix(h, std::hash<std::string>()(x));
        else if constexpr (std::is_same_v<T, DType>) mix(h, static_cast<uint64_t>(x));
        else mix(h, tape(x));
      },
      value);
  return h;
}

}  // namespace reel::reroll_detail
