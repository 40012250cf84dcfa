// Tape -> Graphviz DOT (reel/ir/dot.hpp).
#include "reel/ir/dot.hpp"

#include <fmt/format.h>

#include <string_view>

namespace reel {

namespace {

// Text inside a DOT double-quoted string.
std::string quoted(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string short_text(std::string s, std::size_t max = 48) {
  if (s.size() > max) s = s.substr(0, max - 3) + "...";
  return s;
}

struct Writer {
  std::string out;
  int bodies = 0;  // body tapes drawn so far (their node names' prefix)

  // Draws `t` with node names prefix + "v" + number; returns the name of its outputs node.
  std::string tape(const Tape& t, const std::string& prefix, const DotOptions& o, const std::string& indent) {
    check_structure("to_dot", t);
    const Var n = t.size();
    std::vector<int> part(static_cast<std::size_t>(n) + 1, 0);  // 1: forward, 2: adjoint
    if (o.gradient && !t.outputs.empty()) {
      std::vector<bool> forward(static_cast<std::size_t>(n) + 1, false);
      forward[static_cast<std::size_t>(t.outputs[0])] = true;
      for (Var v = n; v >= 1; --v) {
        if (!forward[static_cast<std::size_t>(v)]) continue;
        for (Var a : t.op(v).args) forward[static_cast<std::size_t>(a)] = true;
      }
      for (Var v = 1; v <= n; ++v) part[static_cast<std::size_t>(v)] = forward[static_cast<std::size_t>(v)] ? 1 : 2;
    }
    std::vector<int> cluster_of(static_cast<std::size_t>(n) + 1, -1);
    for (std::size_t c = 0; c < o.clusters.size(); ++c)
      for (Var v : o.clusters[c].vars) {
        if (v < 1 || v > n)
          throw Error(fmt::format("to_dot: cluster {} names %{}, which is not on the tape (1 to {})", c + 1, v, n));
        if (cluster_of[static_cast<std::size_t>(v)] >= 0)
          throw Error(fmt::format("to_dot: %{} is in cluster {} and cluster {}", v, cluster_of[static_cast<std::size_t>(v)] + 1, c + 1));
        cluster_of[static_cast<std::size_t>(v)] = static_cast<int>(c);
      }
    auto name = [&](Var v) {
      const Op& op = t.op(v);
      return fmt::format("{}v{}", prefix, op.kind == OpKind::result ? op.args[0] : v);
    };
    auto node = [&](Var v) -> std::string {
      const Op& op = t.op(v);
      std::string label, shape = "box", style = "rounded";
      if (op.kind == OpKind::input) {
        label = fmt::format("%{}: input\n{}", v, type_str(op.type));
        shape = "ellipse", style = "";
      } else if (op.kind == OpKind::constant) {
        label = op.value.numel() == 1 ? fmt::format("%{} = {}", v, op.value.values()[0])
                                      : fmt::format("%{}: constant\n{}", v, type_str(op.type));
        shape = "note", style = "";
      } else {
        std::vector<std::string> attrs;
        for (const auto& [key, value] : op.attrs.items())
          if (!std::holds_alternative<TapeRef>(value)) attrs.push_back(short_text(fmt::format("{}={}", key, attr_str(value))));
        std::string vars = fmt::format("%{}", v);
        for (Var r = v + 1; r < v + op.results; ++r) vars += fmt::format(", %{}", r);
        label = fmt::format("{} = {}", vars, op.prim->name);
        if (!attrs.empty()) label += fmt::format("\n{}", fmt::join(attrs, "\n"));
      }
      const int p = part[static_cast<std::size_t>(v)];
      const char* fill = p == 1 ? "#dbe8fb" : p == 2 ? "#fde3c8" : "white";
      return fmt::format("{}  {} [label=\"{}\", shape={}, style=\"{}{}filled\", fillcolor=\"{}\"];\n", indent, name(v),
                         quoted(label), shape, style, style.empty() ? "" : ",", fill);
    };
    std::vector<std::string> in_cluster(o.clusters.size());
    std::string loose;
    for (Var v = 1; v <= n; ++v) {
      const Op& op = t.op(v);
      if (op.kind == OpKind::result) continue;  // drawn as its call
      const int c = cluster_of[static_cast<std::size_t>(v)];
      (c >= 0 ? in_cluster[static_cast<std::size_t>(c)] : loose) += node(v);
      if (op.kind != OpKind::call) continue;
      for (const auto& [key, value] : op.attrs.items())
        if (const auto* body = std::get_if<TapeRef>(&value); body != nullptr && body->tape) {
          const std::string sub = fmt::format("{}b{}_", prefix, ++bodies);
          out += fmt::format("{}  subgraph cluster_{} {{\n{}    label=\"{} of %{}\"; style=dashed; color=gray40;\n", indent,
                             sub, indent, quoted(key), v);
          const std::string outs = tape(*body->tape, sub, DotOptions{}, indent + "  ");
          out += fmt::format("{}  }}\n", indent);
          out += fmt::format("{}  {} -> {} [style=dotted, arrowhead=none, label=\"{}\"];\n", indent, outs, name(v), quoted(key));
        }
    }
    for (std::size_t c = 0; c < o.clusters.size(); ++c) {
      if (in_cluster[c].empty()) continue;
      out += fmt::format("{}  subgraph cluster_{}k{} {{\n{}    label=\"{}\"; style=filled; color=\"#eeeeee\";\n{}{}  }}\n",
                         indent, prefix, c, indent, quoted(o.clusters[c].label), in_cluster[c], indent);
    }
    out += loose;
    for (Var v = 1; v <= n; ++v) {
      const Op& op = t.op(v);
      if (op.kind != OpKind::call) continue;
      for (Var a : op.args)
        out += fmt::format("{}  {} -> {} [label=\"{}\"];\n", indent, name(a), name(v), quoted(type_str(t.type(a))));
    }
    const std::string outs = prefix + "outputs";
    out += fmt::format("{}  {} [label=\"outputs\", shape=doubleoctagon];\n", indent, outs);
    for (std::size_t i = 0; i < t.outputs.size(); ++i)
      out += fmt::format("{}  {} -> {} [label=\"{}: {}\"];\n", indent, name(t.outputs[i]), outs, i,
                         quoted(type_str(t.type(t.outputs[i]))));
    return outs;
  }
};

}  // namespace

std::string to_dot(const Tape& tape, const DotOptions& options) {
  Writer w;
  w.out = "digraph tape {\n  rankdir=TB; fontname=\"Helvetica\"; node [fontname=\"Helvetica\", fontsize=10]; edge [fontname=\"Helvetica\", fontsize=8];\n";
  if (!options.title.empty()) w.out += fmt::format("  label=\"{}\"; labelloc=t;\n", quoted(options.title));
  if (options.gradient)
    w.out += "  legend [shape=plaintext, label=\"blue: forward part (what the value needs); orange: adjoint part\"];\n";
  w.tape(tape, "", options, "");
  return w.out + "}\n";
}

}  // namespace reel
