#include "concurrent.hpp"

namespace reel::codegen {

std::vector<std::vector<int>> concurrent_groups(const Tape& t, const Plan& p, int64_t chunk_elements) {
  std::vector<std::vector<int>> groups;
  if (chunk_elements <= 0) return groups;
  struct Access {
    std::pair<SlotKind, int> where;  // a workspace (one), or an input, constant or output
    int64_t begin, end;
    bool written;
  };
  std::vector<int> run;
  std::vector<Access> touched;
  int heavy = 0;
  auto close = [&] {
    if (heavy >= 2) groups.push_back(run);
    run.clear(), touched.clear(), heavy = 0;
  };
  for (std::size_t s = 0; s < p.steps.size(); ++s) {
    const StepRow& row = step_row(p.steps[s]);
    const StepCost c = row.cost != nullptr ? row.cost(t, p.steps[s], chunk_elements) : StepCost{};
    if (!c.eligible) {
      close();
      continue;
    }
    std::vector<Access> mine;
    row.accesses(t, p, p.steps[s], [&](Var v, bool written) {
      const int slot = p.slot_of[v];
      if (slot < 0) return;
      const Slot& sl = p.slots[static_cast<std::size_t>(slot)];
      const int64_t bytes = numel(t.type(v).shape) * static_cast<int64_t>(dtype_size(t.type(v).dtype));
      const int64_t at = sl.kind == SlotKind::workspace ? sl.offset : 0;
      mine.push_back({{sl.kind, sl.kind == SlotKind::workspace ? 0 : sl.index}, at, at + bytes, written});
    });
    bool conflict = false;
    for (const Access& a : mine)
      for (const Access& b : touched)
        conflict = conflict || ((a.written || b.written) && a.where == b.where && a.begin < b.end && b.begin < a.end);
    if (conflict) close();
    run.push_back(static_cast<int>(s));
    touched.insert(touched.end(), mine.begin(), mine.end());
    heavy += c.serial_work ? 1 : 0;
  }
  close();
  return groups;
}

}  // namespace reel::codegen
