#include "workspace.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include "reel/error.hpp"

namespace reel::codegen {

namespace {

struct WorkspaceStack {
  struct Buffer {
    void* data = nullptr;
    int64_t size = 0;
  };
  std::vector<Buffer> buffers;
  std::size_t depth = 0;
  ~WorkspaceStack() {
    for (Buffer& b : buffers) std::free(b.data);
  }
};
thread_local WorkspaceStack t_workspaces;

}  // namespace

void WorkspaceLease::acquire(int64_t bytes, bool may_nest) {
  WorkspaceStack& stack = t_workspaces;
  if (stack.buffers.size() <= stack.depth) stack.buffers.resize(stack.depth + 1);
  WorkspaceStack::Buffer& buf = stack.buffers[stack.depth];
  if (buf.size < bytes) {
    std::free(buf.data);
    buf.data = nullptr;
    buf.size = 0;
    buf.data = std::aligned_alloc(64, static_cast<std::size_t>((bytes + 63) / 64 * 64));
    if (buf.data == nullptr)
      throw Error(fmt::format("compiled function: cannot allocate a workspace of {} bytes", bytes));
    buf.size = bytes;
  }
  data_ = buf.data;
  if (may_nest) deepened_ = true, ++stack.depth;
}

void WorkspaceLease::release() { --t_workspaces.depth; }

}  // namespace reel::codegen
