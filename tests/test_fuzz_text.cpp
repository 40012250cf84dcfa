// A mutation fuzzer of tape text (issue 17, item 10). The printed tapes of the tests'
// programs (forward, gradient and forward-mode tapes, with attributes) are mutated:
// tokens, numbers, attributes and lines deleted, duplicated and altered. Every mutant
// goes to parse_tape; whatever parses must print and parse back to the same text, and
// is played and compiled (and differentiated, both ways, where it has one scalar
// output), and the two must agree or both raise reel::Error (compiled code may skip a
// dead call the interpreter refuses); derivative tapes fail only for a primitive
// without the rule. A crash, a hang or another exception fails the run; doctest then
// prints the seed and the mutant.
//
// REEL_FUZZ_SEEDS=N runs N mutants (CI runs 3000), from REEL_FUZZ_FIRST (default 1),
// so that long runs can be split between processes.
//
// Loops (scan, fori_loop, while_loop, nested; and random tapes' loops) are in the
// corpus too. A mutated bound or step can make a loop run for ever, which only running
// it tells: a mutant runs if its scans have at most kMaxTrips iterations and its
// while_loops, none inside another loop's body, end within kMaxTrips (tried first).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <reel/ir/evaluate.hpp>
#include <reel/ir/while_loop.hpp>

#include "random_tape.hpp"
#include "test_util.hpp"

using namespace reel;

namespace {

// The corpus: programs written with Reel's operations, and random tapes; each as its
// forward tape, its gradient tape and its forward-mode tape.
std::vector<std::string> corpus() {
  std::vector<std::string> texts;
  auto add = [&](const Tape& t) {
    texts.push_back(to_string(t));
    if (t.outputs.size() == 1 && t.type(t.outputs[0]).shape.empty()) texts.push_back(to_string(grad_tape(t)));
    texts.push_back(to_string(jvp_tape(t)));
  };
  const Tensor m = tensor({0.5, -1, 2, 0.25, 3, -0.75}, {2, 3}), v = tensor({1.0, -2.0, 0.5});
  Tensor idx(DType::i64, {4});
  for (int i = 0; i < 4; ++i) idx.mutable_data<int64_t>()[i] = (i * 2 + 1) % 3;
  add(trace([](const Tensor& x) { return sum(sigmoid(x)); }, v));
  add(trace([](const Tensor& x) { return sum(softmax(x, -1) * log_softmax(x, 0)); }, m));
  add(trace([](const Tensor& x) { return logsumexp(x, std::vector<int64_t>{0, 1}) + sum(mean(x, 1, true)); }, m));
  add(trace([](const Tensor& x) { return sum(max(x, 0)) * sum(min(x, -1, false)) + sum(prod(x, 1)); }, m));
  add(trace([](const Tensor& x, const Tensor& y) { return sum(matmul(x, y)) + sum(pow(abs(y), 2.5)); }, m, v));
  add(trace([](const Tensor& x) { return sum(matmul(reshape(x, {1, 2, 3}), transpose(x)) * 0.5); }, m));
  add(trace([&](const Tensor& x) { return sum(gather(x, idx, 1) * 2.0) + sum(take(x, idx)); }, m));
  add(trace([&](const Tensor& x) {
    return sum(square(scatter_add(x, idx, ones({2, 4}), -1)) + index_update(x, 0, 0, 1, ones({1, 3})));
  }, m));
  add(trace([](const Tensor& x) { return sum(concat({x, slice(x, 1, 0, 3, 2)}, 1)) * sum(tanh(x)); }, m));
  add(trace([](const Tensor& x) { return sum(stack({x, exp(x)}, -1)) * sum(squeeze(expand_dims(x, 0), 0)); }, m));
  add(trace([](const Tensor& x) {
    return sum(where(x > 0.5, clamp(x, -0.5, 0.75), maximum(x, minimum(x, 0.1))) + relu(x) + softplus(erf(x)));
  }, m));
  add(trace([](const Tensor& x) { return sum(permute(broadcast_to(x, {4, 2, 3}), {2, 0, 1})) * sum(log1p(square(x))); }, m));
  add(trace([](const Tensor& x) {
    const Tensor img = reshape(x, {1, 1, 2, 3});
    return sum(conv2d(img, ones({2, 1, 2, 2}), {.stride = {1, 1}, .padding = {1, 0}, .dilation = {1, 2}})) +
           sum(max_pool2d(img, {2, 2}, {.stride = {1, 1}})) + sum(avg_pool2d(img, {2, 1}, {.padding = {1, 0}}));
  }, m));
  add(trace([](const Tensor& x) { return sum(tril(x) * 3.0 + triu(x, 1) + sum_to(x, {1, 3})); }, m));
  add(trace([](const Tensor& x) { return sum(cast(x, DType::f32) * 2.0f); }, v));
  add(trace([](const Tensor& x) { return sum(gather(x, argmax(x, 1), 1)) + sum(nodiff(x) * x); }, m));
  // Loops: a scan over the rows (carry and ys), a fori_loop indexing with its counter (and
  // binomial checkpointing), a scan checkpointing every iteration, a while_loop whose trip
  // count depends on the values, a scan inside a fori_loop.
  add(trace([](const Tensor& x, const Tensor& y) {
    const auto [c, ys] = scan([&](const Tensor& h, const Tensor& row) {
      const Tensor n = tanh(h * row + y) * 0.5 + h * 0.5;
      return std::pair{n, sin(n)};
    }, y, x, {.reverse = true});
    return sum(c * c) + sum(ys);
  }, m, v));
  add(trace([](const Tensor& x) {
    return sum(fori_loop(0, 2, [&](const Tensor& i, const Tensor& c) { return c * gather(x, i) + cos(c); }, ones({3}),
                         {.checkpoint = Checkpoint::binomial(1)}));
  }, m));
  add(trace([](const Tensor& x) {
    return sum(scan([](const Tensor& h, const Tensor& row) { return std::pair{tanh(h + row), none}; }, zeros({3}), x,
                    {.checkpoint = Checkpoint::every(1)}).first);
  }, m));
  add(trace([](const Tensor& x) {
    using C = std::pair<Tensor, Tensor>;
    return sum(while_loop([](const C& c) { return sum(c.second * c.second) < 20.0 * (c.first + 1.0); },
                          [](const C& c) { return C{c.first + 1.0, c.second * 1.5 + sin(c.second)}; },
                          C{scalar(0.0), x}).second);
  }, v));
  add(trace([](const Tensor& x, const Tensor& y) {
    return sum(fori_loop(1, 3, [&](const Tensor&, const Tensor& c) {
      return scan([](const Tensor& h, const Tensor& row) { return std::pair{sin(h) * row, none}; }, c, x).first;
    }, y));
  }, m, v));
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    test::RandomTape gen(seed);
    const Tape t = gen.make(seed % 3 == 0 ? DType::f32 : DType::f64);
    texts.push_back(to_string(t));
    add(test::scalarised(t));
  }
  return texts;
}

// Numbers and attribute values at their edges.
const std::vector<std::string> kEdgeNumbers = {
    "0", "-0", "1", "-1", "2", "3", "-2", "-3", "7", "0.5", "-0.5", "1e308", "-1e308", "1e-320", "1e999", "nan",
    "inf", "-inf", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "99999999999999999999",
    "4294967296", "2147483648", "1e30", "65536"};
const std::vector<std::string> kEdgeValues = {"[]", "[-1]", "[0,0]", "[1,-1]", "[9223372036854775807]", "[0]",
                                              "[1e300]", "[2,2]", "[-9223372036854775808,1]", "true", "f32", "\"x\"",
                                              "{inp %1::f64[]; out %1}"};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  std::string mutate(const std::string& text) {
    std::vector<std::string> tokens = tokenize(text);
    for (int n = pick(0, 4) < 3 ? 1 : pick(2, 3); n > 0 && !tokens.empty(); --n) {
      const std::size_t i = static_cast<std::size_t>(pick(0, static_cast<int>(tokens.size()) - 1));
      switch (pick(0, 14)) {
        case 12: case 13: case 14: {  // a constant's value (the types stay as declared)
          std::vector<std::size_t> values;
          bool in_const = false;
          for (std::size_t k = 0; k < tokens.size(); ++k) {
            if (tokens[k] == "const") in_const = true;
            else if (tokens[k] == "::" || tokens[k] == "\n") in_const = false;
            else if (in_const && number_like(tokens[k])) values.push_back(k);
          }
          if (!values.empty()) tokens[values[pick_index(values)]] = kEdgeNumbers[pick_index(kEdgeNumbers)];
          break;
        }
        case 0: tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(i)); break;
        case 1: tokens.insert(tokens.begin() + static_cast<std::ptrdiff_t>(i), tokens[i]); break;
        case 2: tokens[i] = tokens[static_cast<std::size_t>(pick(0, static_cast<int>(tokens.size()) - 1))]; break;
        case 3: case 4: {  // a number (a dimension, an attribute, a constant, a variable) at an edge
          const std::size_t k = find(tokens, i, [](const std::string& t) { return number_like(t); });
          if (k < tokens.size()) tokens[k] = keep_percent(tokens[k], kEdgeNumbers[pick_index(kEdgeNumbers)]);
          break;
        }
        case 5: {  // an attribute's whole value
          const std::size_t k = find(tokens, i, [](const std::string& t) { return t == "="; });
          if (k + 1 < tokens.size()) {
            std::size_t end = k + 1;
            if (tokens[end] == "[") {
              while (end < tokens.size() && tokens[end] != "]") ++end;
            }
            tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(k + 1),
                         tokens.begin() + static_cast<std::ptrdiff_t>(std::min(end + 1, tokens.size())));
            tokens.insert(tokens.begin() + static_cast<std::ptrdiff_t>(k + 1), kEdgeValues[pick_index(kEdgeValues)]);
          }
          break;
        }
        case 6: {  // a dtype
          static const std::vector<std::string> dtypes = {"f32", "f64", "i64", "f16", "bool"};
          const std::size_t k = find(tokens, i, [](const std::string& t) { return t == "f32" || t == "f64" || t == "i64"; });
          if (k < tokens.size()) tokens[k] = dtypes[pick_index(dtypes)];
          break;
        }
        case 7: {  // another built-in primitive's name (the other tests register deliberately broken ones)
          static const std::vector<const Primitive*> prims = [] {
            std::vector<const Primitive*> builtin;
            for (const Primitive* p : all_primitives())
              if (is_builtin(*p)) builtin.push_back(p);
            return builtin;
          }();
          const std::size_t k = find(tokens, i, [](const std::string& t) { return find_primitive(t) != nullptr; });
          if (k < tokens.size()) tokens[k] = prims[static_cast<std::size_t>(pick(0, static_cast<int>(prims.size()) - 1))]->name;
          break;
        }
        case 8: {  // punctuation inserted
          static const std::vector<std::string> punct = {",", "(", ")", "[", "]", "=", "::", "%", "\n", "{", "}", ";", "-"};
          tokens.insert(tokens.begin() + static_cast<std::ptrdiff_t>(i), punct[pick_index(punct)]);
          break;
        }
        default: {  // whole lines: deleted, duplicated or swapped
          std::vector<std::string> lines = split_lines(join(tokens));
          if (lines.empty()) break;
          const std::size_t a = static_cast<std::size_t>(pick(0, static_cast<int>(lines.size()) - 1));
          const std::size_t b = static_cast<std::size_t>(pick(0, static_cast<int>(lines.size()) - 1));
          const int how = pick(0, 2);
          if (how == 0) lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(a));
          else if (how == 1) lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(a), lines[b]);
          else std::swap(lines[a], lines[b]);
          std::string joined;
          for (const std::string& l : lines) joined += l + "\n";
          tokens = tokenize(joined);
        }
      }
    }
    return join(tokens);
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <class V>
  std::size_t pick_index(const V& v) { return static_cast<std::size_t>(pick(0, static_cast<int>(v.size()) - 1)); }

  // Runs of name and number characters, '::', single punctuation, and white space.
  static std::vector<std::string> tokenize(const std::string& s) {
    std::vector<std::string> out;
    std::size_t i = 0;
    auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '%'; };
    while (i < s.size()) {
      std::size_t j = i + 1;
      if (word(s[i]) || ((s[i] == '-' || s[i] == '+') && i + 1 < s.size() && word(s[i + 1]))) {
        while (j < s.size() && (word(s[j]) || ((s[j] == '-' || s[j] == '+') && (s[j - 1] == 'e' || s[j - 1] == 'E'))))
          ++j;
      } else if (s[i] == ':' && i + 1 < s.size() && s[i + 1] == ':') {
        j = i + 2;
      } else if (s[i] == ' ') {
        while (j < s.size() && s[j] == ' ') ++j;
      }
      out.push_back(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  static std::string join(const std::vector<std::string>& tokens) {
    std::string s;
    for (const std::string& t : tokens) s += t;
    return s;
  }
  static std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> lines;
    std::size_t start = 0;
    while (start < s.size()) {
      const std::size_t nl = s.find('\n', start);
      lines.push_back(s.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    return lines;
  }
  static bool number_like(const std::string& t) {
    const std::size_t k = t[0] == '%' || t[0] == '-' ? 1 : 0;
    return k < t.size() && std::isdigit(static_cast<unsigned char>(t[k]));
  }
  static std::string keep_percent(const std::string& old, const std::string& edge) {
    return old[0] == '%' ? "%" + (edge[0] == '-' ? edge.substr(1) : edge) : edge;
  }
  // The first token from i on (wrapping around) that satisfies ok, or size() if none.
  template <class Ok>
  static std::size_t find(const std::vector<std::string>& tokens, std::size_t i, Ok ok) {
    for (std::size_t n = 0; n < tokens.size(); ++n) {
      const std::size_t k = (i + n) % tokens.size();
      if (ok(tokens[k])) return k;
    }
    return tokens.size();
  }

  std::mt19937_64 rng_;
};

// Element counts a mutant may run with (a mutated dimension can ask for terabytes; the
// parser accepts any count whose bytes fit in int64, and allocating it is not the point),
// counting the variables of loop bodies too.
constexpr int64_t kMaxElements = 1 << 16;
int64_t elements(const Tape& t) {
  int64_t total = 0;
  for (Var v = 1; v <= t.size() && total <= kMaxElements; ++v) {
    total += numel(t.type(v).shape);
    for (const auto& [name, value] : t.op(v).attrs.items())
      if (const auto* body = std::get_if<TapeRef>(&value)) total += elements(*body->tape);
  }
  return total;
}
bool small_enough(const Tape& t) { return elements(t) <= kMaxElements; }

// Whether t's loops are bounded: scans of at most kMaxTrips iterations, no while_loop
// in a loop's body (nested while_loops are not tried), and the while_loops of the tape
// itself end within kMaxTrips iterations on these arguments (run first, with that
// limit; where an error stops the run before a while_loop, the mutant is not run).
constexpr int64_t kMaxTrips = 1000;
bool loops_bounded(const Tape& t, bool in_body) {
  for (const Op& op : t.ops) {
    if (op.kind != OpKind::call) continue;
    if (op.prim->name == "scan" && op.attrs.integer("length") > kMaxTrips) return false;
    if (op.prim->name == "while_loop" && in_body) return false;
    for (const auto& [name, value] : op.attrs.items())
      if (const auto* body = std::get_if<TapeRef>(&value); body != nullptr && !loops_bounded(*body->tape, true))
        return false;
  }
  return true;
}
// (t is small_enough.)
bool runnable(const Tape& t, const std::vector<Tensor>& args) {
  if (!loops_bounded(t, false)) return false;
  int whiles = 0, ended = 0;
  for (const Op& op : t.ops) whiles += op.kind == OpKind::call && op.prim->name == "while_loop";
  if (whiles == 0) return true;
  try {
    (void)run_tape("fuzz", t, args, [&](const Op& op, std::span<const Tensor> in) -> Results<Tensor> {
      if (op.prim->name != "while_loop") return op.prim->eager(in, op.attrs);
      std::vector<Tensor> out = run_while_loop(op.attrs.tape("cond"), op.attrs.tape("body"),
                                               static_cast<std::size_t>(op.attrs.integer("num_consts")),
                                               std::vector<Tensor>(in.begin(), in.end()), nullptr, kMaxTrips);
      ++ended;
      return out;
    });
  } catch (const Error&) {
    // (A while_loop not tried: compiled code, which skips dead calls, might run it.)
  }
  return ended == whiles;
}

std::vector<Tensor> inputs_for(const Tape& t, uint64_t seed) {
  std::vector<Tensor> args;
  std::mt19937_64 rng(seed);
  for (const VarType& type : t.input_types()) {
    if (type.dtype == DType::i64) {  // indices: mostly in range for a small axis, sometimes not
      Tensor idx(DType::i64, type.shape);
      for (int64_t k = 0; k < idx.numel(); ++k)
        idx.mutable_data<int64_t>()[k] = std::uniform_int_distribution<int64_t>(-1, 3)(rng);
      args.push_back(idx);
    } else {
      args.push_back(randn(type.shape, rng(), type.dtype));
    }
  }
  return args;
}

struct Counts {
  int64_t mutants = 0, rejected = 0, parsed = 0, large = 0, played = 0, compiled = 0, agreed = 0, play_errors = 0,
          compile_errors = 0, derivatives = 0, loops = 0;
  uint64_t seed = 0;
  // Elements within the tolerance only relative to the tape's intermediate values (a
  // cancelling sum), or only compiled without vector math (libmvec's last bits, amplified
  // by an ill-conditioned tape), the first few described.
  int64_t cancelling = 0, vector_math = 0;
  std::vector<std::string> loose_seen;
};

// The largest finite magnitude among the values the interpreter computes for `t` on
// `args`: its inputs, constants and every call's results (a loop's own, not its body's).
double largest_value(const Tape& t, const std::vector<Tensor>& args) {
  double m = 0;
  auto note = [&m](const Tensor& x) {
    if (!x.defined() || x.dtype() == DType::i64) return;
    for (double v : x.values())
      if (std::isfinite(v)) m = std::max(m, std::abs(v));
  };
  for (const Tensor& a : args) note(a);
  for (const Op& op : t.ops)
    if (op.kind == OpKind::constant) note(op.value);
  (void)run_tape("fuzz", t, args, [&](const Op& op, std::span<const Tensor> in) {
    Results<Tensor> outs = op.prim->eager(in, op.attrs);
    for (const Tensor& o : outs) note(o);
    return outs;
  });
  return m;
}

// Outputs of compiled code against the interpreter's: equal types, and values equal up
// to the compiled tolerance relative to each value and to the magnitudes it was
// computed from, NaN where the other has NaN. libmvec's vector functions are within 4
// ulp of libm's, which a tape may amplify: at 200,000 seeds a forward-mode value (x <-
// 1.5 x + sin(x) and its tangent through cos(x), in a while_loop, x near 5e10) was
// -25011222.064795241 compiled and -25011222.070833236 interpreted, printed as
// -2.50112e+07 both. So an element beyond the output-relative tolerance is compiled again
// without vector math (`scalar`, only then): if that agrees, the code is right and the
// difference was libmvec's last bits. Else reassociated sums err relative to their
// terms, not to their result: both must agree with the absolute part scaled by the
// largest value the tape computes on the way.
void compare(const std::vector<Tensor>& a, const std::vector<Tensor>& b, const std::string& what, const Tape& t,
             const std::vector<Tensor>& args, Counts& c, const std::function<std::vector<Tensor>()>& scalar) {
  REQUIRE_MESSAGE(a.size() == b.size(), what, ": ", a.size(), " outputs vs ", b.size());
  double intermediate = -1;  // (not computed yet)
  std::vector<Tensor> without;  // compiled without vector math (not yet)
  auto note = [&](int64_t& n, const char* why, std::size_t k, std::size_t i, double x, double y) {
    if (n++ < 5 && c.loose_seen.size() < 10)
      c.loose_seen.push_back(fmt::format("seed {} {} output {} element {}: {:.17g} vs {:.17g}, values up to {:.3g}, {}",
                                         c.seed, what, k, i, x, y, intermediate, why));
  };
  for (std::size_t k = 0; k < a.size(); ++k) {
    REQUIRE_MESSAGE((a[k].dtype() == b[k].dtype() && a[k].shape() == b[k].shape()), what, ": output ", k, " types differ");
    const auto va = a[k].values(), vb = b[k].values();
    double scale = 0;
    for (double x : vb)
      if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
    const test::Tolerance tol = test::compiled_tolerance(a[k].dtype());
    auto close = [&](double x, double y, double s) {
      return (std::isnan(x) && std::isnan(y)) || x == y || std::abs(x - y) <= 64 * (tol.atol * (1 + s) + tol.rtol * std::abs(y));
    };
    for (std::size_t i = 0; i < va.size(); ++i) {
      if (close(va[i], vb[i], scale)) continue;
      if (intermediate < 0) intermediate = largest_value(t, args);
      if (without.empty()) without = scalar();
      const double wide = std::max(scale, intermediate), plain = without.at(k).values().at(i);
      if (close(plain, vb[i], scale)) {  // (the code is right; libmvec's last bits differ)
        note(c.vector_math, "the same compiled without vector math", k, i, va[i], vb[i]);
        continue;
      }
      if (close(va[i], vb[i], wide) && close(plain, vb[i], wide)) {
        note(c.cancelling, "within the tolerance of the values on the way", k, i, va[i], vb[i]);
        continue;
      }
      FAIL_CHECK(fmt::format("{}: output {} element {}: {:.17g} vs {:.17g} (without vector math {:.17g}; the tape's "
                             "values reach {:.17g})",
                             what, k, i, va[i], vb[i], plain, intermediate));
      return;
    }
  }
}

// Runs a parsed mutant: interpreted and compiled must agree or raise reel::Error.
void run(const Tape& t, const std::vector<Tensor>& args, Counts& c, const char* what) {
  std::vector<Tensor> interpreted, compiled;
  bool play_ok = false, compile_ok = false;
  std::string play_error, compile_error;
  try {
    interpreted = play(t, args);
    play_ok = true;
    ++c.played;
  } catch (const Error& e) {
    play_error = e.what();
    ++c.play_errors;
  }
  try {
    compiled = compile(t)(args);
    compile_ok = true;
    ++c.compiled;
  } catch (const Error& e) {
    compile_error = e.what();
    ++c.compile_errors;
  }
  // A value the interpreter refuses (an index out of range) compiled code must refuse too,
  // never read out of bounds; unless the refused call was dead (the interpreter runs
  // every call, compiled code only those the outputs need).
  Tape pruned;
  const Tape* played = &t;  // (what the interpreter ran)
  if (compile_ok && !play_ok) {
    try {
      pruned = dce(t);
      played = &pruned;
      interpreted = play(pruned, args);
      play_ok = true;
    } catch (const Error& e) {
      FAIL_CHECK(what, ": compiled code ran what the interpreter refused: ", e.what());
    }
  }
  // And what the interpreter runs, compiled code runs too.
  CHECK_MESSAGE(!(play_ok && !compile_ok), what, ": the interpreter ran it, compiling refused: ", compile_error);
  if (play_ok && compile_ok) {
    compare(compiled, interpreted, what, *played, args, c, [&] {
      CompileOptions scalar;
      scalar.vector_math = false;
      return compile(t, scalar)(args);
    });
    ++c.agreed;
  }
}

// A parsed tape (so a verified one) has derivative tapes, unless one of its primitives
// has no rule for the mode (trigamma) or a while_loop has no trip count (reverse mode):
// nothing else may stop grad_tape or jvp_tape.
void check_derivative_error(const Error& e) {
  const std::string m = e.what();
  CHECK_MESSAGE((m.find("has no reverse-mode (adjoint) rule") != std::string::npos ||
                 m.find("has no forward-mode (tangent) rule") != std::string::npos ||
                 m.find("while_loop has no trip count") != std::string::npos),
                "a derivative tape of a parsed mutant failed: ", m);
}

}  // namespace

TEST_CASE("fuzz: mutated tape text parses to an error or to a tape that runs the same compiled and interpreted") {
  const char* env = std::getenv("REEL_FUZZ_SEEDS");
  const char* first_env = std::getenv("REEL_FUZZ_FIRST");
  const uint64_t mutants = env ? std::strtoull(env, nullptr, 10) : 3000;
  const uint64_t first = first_env ? std::strtoull(first_env, nullptr, 10) : 1;
  const std::vector<std::string> texts = corpus();
  // The corpus itself parses back and runs.
  for (const std::string& text : texts) CHECK_NOTHROW(parse_tape(text));
  Counts c;
  for (uint64_t seed = first; seed < first + mutants; ++seed) {
    Mutator mutator(seed);
    const std::string& original = texts[seed % texts.size()];
    const std::string text = mutator.mutate(original);
    CAPTURE(seed);
    CAPTURE(text);
    ++c.mutants;
    c.seed = seed;
    Tape t;
    try {
      t = parse_tape(text);
    } catch (const Error&) {
      ++c.rejected;
      continue;
    }
    ++c.parsed;
    const std::string printed = to_string(t);
    CHECK_MESSAGE(to_string(parse_tape(printed)) == printed, "the parsed mutant does not print back the same");
    if (!small_enough(t)) {
      ++c.large;
      continue;
    }
    const std::vector<Tensor> args = inputs_for(t, seed);
    if (!runnable(t, args)) {
      ++c.large;
      continue;
    }
    run(t, args, c, "mutant");
    c.loops += std::any_of(t.ops.begin(), t.ops.end(), [](const Op& op) { return op.attrs.has("body"); });
    // Its derivatives, where it has one scalar floating-point output.
    if (t.outputs.size() == 1 && t.type(t.outputs[0]).shape.empty() && t.type(t.outputs[0]).dtype != DType::i64) {
      try {
        const Tape g = grad_tape(t);
        ++c.derivatives;
        if (small_enough(g) && runnable(g, args)) run(g, args, c, "gradient");
        else ++c.large;
      } catch (const Error& e) {
        check_derivative_error(e);
      }
      try {
        const Tape j = jvp_tape(t);
        std::vector<Tensor> with_tangents = args;
        for (const Tensor& a : inputs_for(t, seed + 1)) with_tangents.push_back(a);
        ++c.derivatives;
        if (small_enough(j) && runnable(j, with_tangents)) run(j, with_tangents, c, "forward mode");
        else ++c.large;
      } catch (const Error& e) {
        check_derivative_error(e);
      }
    }
  }
  MESSAGE(fmt::format("fuzz text: {} mutants of {} tapes from seed {}: {} rejected by parse_tape, {} parsed ({} too large "
                      "or too long to run); {} played, {} compiled and run, {} agreed; errors: {} from play, {} from compiled "
                      "code; {} derivative tapes; {} of the mutants run hold loops",
                      c.mutants, texts.size(), first, c.rejected, c.parsed, c.large, c.played, c.compiled, c.agreed,
                      c.play_errors, c.compile_errors, c.derivatives, c.loops));
  MESSAGE(fmt::format("fuzz text: {} elements agreed only compiled without vector math, {} only relative to the values "
                      "their tape computes on the way{}{}",
                      c.vector_math, c.cancelling, c.loose_seen.empty() ? "" : ":\n", fmt::join(c.loose_seen, "\n")));
  // The mutants reach every stage.
  if (mutants >= 1000) {
    CHECK(c.rejected > 0);
    CHECK(c.agreed > 0);
    CHECK(c.derivatives > 0);
    CHECK(c.loops > 0);
  }
}
