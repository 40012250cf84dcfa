#include "memory_plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>


namespace reel::codegen {

namespace {

constexpr int64_t kAlign = 64;
int64_t round_up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw Error("compile: the workspace needs more bytes than int64 can count");
  return r;
}

}  // namespace

namespace {

// The workspace slot a step uses during itself only (a loop's scratch, an eager call's), or -1.
int scratch_slot(const Step& step) {
  const StepRow& row = step_row(step);
  return row.scratch != nullptr ? row.scratch(step) : -1;
}

// Greedy by decreasing size: each buffer at the lowest offset free of every placed
// buffer whose life overlaps its own. Quadratic; for plans of moderate size.
int64_t assign_by_size(std::vector<BufferLife>& bufs, std::vector<int64_t>& offset) {
  std::vector<std::size_t> order(bufs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return bufs[a].bytes != bufs[b].bytes ? bufs[a].bytes > bufs[b].bytes : bufs[a].first < bufs[b].first;
  });
  offset.assign(bufs.size(), 0);
  std::vector<std::size_t> placed;
  int64_t total = 0;
  std::vector<std::pair<int64_t, int64_t>> busy;  // [start, end) of overlapping buffers
  for (std::size_t i : order) {
    busy.clear();
    for (std::size_t j : placed)
      if (bufs[j].first <= bufs[i].last && bufs[i].first <= bufs[j].last)
        busy.emplace_back(offset[j], offset[j] + bufs[j].bytes);
    std::sort(busy.begin(), busy.end());
    int64_t at = 0;
    for (const auto& [start, end] : busy) {
      if (start - at >= bufs[i].bytes) break;
      at = std::max(at, end);
    }
    offset[i] = at;
    total = std::max(total, checked_add(at, bufs[i].bytes));
    placed.push_back(i);
  }
  return total;
}

// A linear scan over the steps with a best-fit free list (adjacent free blocks merge).
int64_t assign_by_scan(std::vector<BufferLife>& bufs, std::vector<int64_t>& offset) {
  std::vector<std::size_t> by_first(bufs.size()), by_last(bufs.size());
  std::iota(by_first.begin(), by_first.end(), 0);
  std::iota(by_last.begin(), by_last.end(), 0);
  std::stable_sort(by_first.begin(), by_first.end(), [&](std::size_t a, std::size_t b) {
    return bufs[a].first != bufs[b].first ? bufs[a].first < bufs[b].first : bufs[a].bytes > bufs[b].bytes;
  });
  std::stable_sort(by_last.begin(), by_last.end(),
                   [&](std::size_t a, std::size_t b) { return bufs[a].last < bufs[b].last; });
  offset.assign(bufs.size(), 0);
  std::map<int64_t, int64_t> free_at;              // offset -> size
  std::multimap<int64_t, int64_t> free_by_size;    // size -> offset
  auto erase_sized = [&](int64_t size, int64_t off) {
    auto [lo, hi] = free_by_size.equal_range(size);
    for (auto it = lo; it != hi; ++it)
      if (it->second == off) {
        free_by_size.erase(it);
        return;
      }
  };
  int64_t top = 0;
  auto release = [&](int64_t off, int64_t size) {
    auto next = free_at.lower_bound(off);
    if (next != free_at.end() && off + size == next->first) {
      erase_sized(next->second, next->first);
      size += next->second;
      next = free_at.erase(next);
    }
    if (next != free_at.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        erase_sized(prev->second, prev->first);
        off = prev->first;
        size += prev->second;
        free_at.erase(prev);
      }
    }
    free_at.emplace(off, size);
    free_by_size.emplace(size, off);
  };
  auto take = [&](int64_t size) {
    if (auto it = free_by_size.lower_bound(size); it != free_by_size.end()) {
      const int64_t block = it->first, off = it->second;
      free_by_size.erase(it);
      free_at.erase(off);
      if (block > size) release(off + size, block - size);
      return off;
    }
    // Nothing fits: grow at the end, starting inside a free block that reaches it.
    if (!free_at.empty()) {
      auto last = std::prev(free_at.end());
      if (last->first + last->second == top) {
        const int64_t off = last->first;
        erase_sized(last->second, last->first);
        free_at.erase(last);
        top = checked_add(off, size);
        return off;
      }
    }
    const int64_t off = top;
    top = checked_add(top, size);
    return off;
  };
  std::size_t next_free = 0;
  for (std::size_t i : by_first) {
    while (next_free < by_last.size() && bufs[by_last[next_free]].last < bufs[i].first) {
      const std::size_t j = by_last[next_free++];
      release(offset[j], bufs[j].bytes);
    }
    offset[i] = take(bufs[i].bytes);
  }
  return top;
}

}  // namespace

MemoryPlan plan_memory(const Tape& t, Plan& p, bool reuse) {
  const int num_steps = static_cast<int>(p.steps.size());
  const std::size_t num_slots = p.slots.size();
  std::vector<int> first(num_slots, -1), last(num_slots, -1);
  auto workspace = [&](Var v) {
    const int s = p.slot_of[v];
    return s >= 0 && p.slots[static_cast<std::size_t>(s)].kind == SlotKind::workspace ? s : -1;
  };
  for (int s = 0; s < num_steps; ++s)
    step_row(p.steps[static_cast<std::size_t>(s)]).accesses(t, p, p.steps[static_cast<std::size_t>(s)], [&](Var v, bool) {
      const int slot = workspace(v);
      if (slot < 0) return;
      if (first[slot] < 0) first[slot] = s;
      last[slot] = s;
    });
  for (int s = 0; s < num_steps; ++s)
    if (const int slot = scratch_slot(p.steps[static_cast<std::size_t>(s)]); slot >= 0) first[slot] = last[slot] = s;

  MemoryPlan mp;
  mp.reuse = reuse;
  // In-place updates: merged[s] is the slot that slot s (a stored loop value) was
  // merged into, which may itself have been merged since.
  std::vector<int> merged(num_slots, -1);
  auto resolve = [&](int s) {
    while (s >= 0 && merged[static_cast<std::size_t>(s)] >= 0) s = merged[static_cast<std::size_t>(s)];
    return s;
  };
  auto live_slot = [&](Var v) { return resolve(workspace(v)); };
  if (reuse) {
    for (int s = 0; s < num_steps; ++s) {
      const auto* loop = std::get_if<LoopStep>(&p.steps[static_cast<std::size_t>(s)]);
      if (loop == nullptr) continue;
      // Workspace inputs of the loop that die here and are read element for element.
      std::vector<std::pair<int, Var>> candidates;
      std::vector<int> disqualified;
      step_row(p.steps[static_cast<std::size_t>(s)]).accesses(t, p, p.steps[static_cast<std::size_t>(s)], [&](Var v, bool written) {
        const int slot = live_slot(v);
        if (written || slot < 0) return;
        if (!has_loop_shape(t.type(v).shape, loop->shape) || last[slot] != s) disqualified.push_back(slot);
        else candidates.emplace_back(slot, v);
      });
      for (Var m : loop->members)  // a gather's or strided read's source is not read element for element
        if (is_indexed_member(t, m) && live_slot(t.op(m).args[0]) >= 0) disqualified.push_back(live_slot(t.op(m).args[0]));
      for (Var m : loop->rereads)
        if (live_slot(t.op(m).args[0]) >= 0) disqualified.push_back(live_slot(t.op(m).args[0]));
      std::vector<int> taken;
      for (Var m : loop->members) {
        const int ms = workspace(m);
        if (!p.stored[m] || ms < 0 || first[ms] != s) continue;
        for (const auto& [slot, v] : candidates) {
          auto has = [](const std::vector<int>& xs, int x) { return std::find(xs.begin(), xs.end(), x) != xs.end(); };
          if (has(disqualified, slot) || has(taken, slot) || t.type(v).dtype != t.type(m).dtype ||
              p.slots[static_cast<std::size_t>(slot)].bytes != p.slots[static_cast<std::size_t>(ms)].bytes)
            continue;
          taken.push_back(slot);
          merged[static_cast<std::size_t>(ms)] = slot;
          last[slot] = std::max(last[slot], last[ms]);
          mp.in_place.emplace_back(m, v);
          break;
        }
      }
    }
    for (Var v = 1; v <= t.size(); ++v)
      if (p.slot_of[v] >= 0) p.slot_of[v] = resolve(p.slot_of[v]);
  }

  for (std::size_t s = 0; s < num_slots; ++s) {
    if (p.slots[s].kind != SlotKind::workspace || merged[s] >= 0) continue;
    if (first[s] < 0) first[s] = last[s] = 0;  // (never happens for a planned tape)
    mp.buffers.push_back({static_cast<int>(s), round_up(p.slots[s].bytes), first[s], last[s]});
  }

  // The liveness lower bound: the most bytes alive at one step.
  std::vector<int64_t> delta(static_cast<std::size_t>(num_steps) + 2, 0);
  for (const BufferLife& b : mp.buffers) {
    delta[static_cast<std::size_t>(b.first)] += b.bytes;
    delta[static_cast<std::size_t>(b.last) + 1] -= b.bytes;
  }
  int64_t alive = 0;
  for (int64_t d : delta) mp.lower_bound = std::max(mp.lower_bound, alive = checked_add(alive, d));

  std::vector<int64_t> offset;
  if (!reuse) {
    for (const BufferLife& b : mp.buffers) {
      offset.push_back(mp.workspace_bytes);
      mp.workspace_bytes = checked_add(mp.workspace_bytes, b.bytes);
    }
  } else {
    mp.workspace_bytes = assign_by_scan(mp.buffers, offset);
    constexpr std::size_t kQuadraticLimit = 3000;
    if (mp.buffers.size() <= kQuadraticLimit && mp.workspace_bytes > mp.lower_bound) {
      std::vector<int64_t> greedy;
      const int64_t total = assign_by_size(mp.buffers, greedy);
      if (total < mp.workspace_bytes) mp.workspace_bytes = total, offset = std::move(greedy);
    }
  }
  for (std::size_t i = 0; i < mp.buffers.size(); ++i)
    p.slots[static_cast<std::size_t>(mp.buffers[i].slot)].offset = offset[i];
  p.workspace_bytes = mp.workspace_bytes;
  return mp;
}

std::string plan_text(const Tape& t, const Plan& p, const MemoryPlan& mp) {
  std::string out = fmt::format("schedule: {} steps\n", p.steps.size());
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    out += fmt::format("  step {}: ", s);
    out += step_row(p.steps[s]).text(t, p, p.steps[s]);
    out += "\n";
  }
  out += fmt::format("memory: {} workspace buffers, {} bytes, liveness lower bound {} bytes{}\n",
                     mp.buffers.size(), mp.workspace_bytes, mp.lower_bound,
                     mp.reuse ? "" : " (reuse off)");
  std::vector<std::vector<Var>> holders(p.slots.size());  // the values (not views) in a slot
  for (Var v = 1; v <= t.size(); ++v)
    if (p.slot_of[v] >= 0 && !(t.op(v).kind == OpKind::call && t.op(v).prim->structure == Structure::view))
      holders[static_cast<std::size_t>(p.slot_of[v])].push_back(v);
  for (const BufferLife& b : mp.buffers) {
    const std::vector<Var>& held = holders[static_cast<std::size_t>(b.slot)];
    out += fmt::format("  buffer [{}]: offset {}, {} bytes, steps {}..{}\n",
                       held.empty() ? fmt::format("scratch of step {}", b.first) : var_list(held),
                       p.slots[static_cast<std::size_t>(b.slot)].offset, b.bytes, b.first, b.last);
  }
  for (const auto& [v, over] : mp.in_place) out += fmt::format("  in place: %{} over %{}\n", v, over);
  return out;
}

}  // namespace reel::codegen
