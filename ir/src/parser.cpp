// Text -> Tape. Every error names the line, what was expected and what was found.
#include <fmt/format.h>

#include <optional>

#include <cctype>
#include <cmath>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "reel/ir/builder.hpp"
#include "text_nesting.hpp"

namespace reel {

namespace {

class LineError : public Error {
 public:
  using Error::Error;
};

// Tape attributes nested deeper than kMaxTextNesting: reported once, by the outermost
// parse_tape, not wrapped again by every level ("in a tape attribute: ..." each).
class TooDeep : public Error {
 public:
  using Error::Error;
};
// How many tape attributes the current parse is inside (on this thread).
thread_local int g_depth = 0;

// A cursor over one line of tape text.
class Cursor {
 public:
  explicit Cursor(std::string_view line) : s_(line) {}

  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  bool at_end() {
    skip_ws();
    return i_ >= s_.size();
  }
  bool peek(char c) {
    skip_ws();
    return i_ < s_.size() && s_[i_] == c;
  }
  bool accept(std::string_view tok) {
    skip_ws();
    if (s_.substr(i_, tok.size()) != tok) return false;
    i_ += tok.size();
    return true;
  }
  // A word such as 'out' or 'inp', not the start of a longer name.
  bool accept_keyword(std::string_view word) {
    skip_ws();
    if (s_.substr(i_, word.size()) != word) return false;
    const std::size_t end = i_ + word.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_'))
      return false;
    i_ = end;
    return true;
  }
  void expect(std::string_view tok) {
    if (!accept(tok)) fail(fmt::format("'{}'", tok));
  }
  [[noreturn]] void fail(const std::string& expected) {
    skip_ws();
    const std::string_view rest = s_.substr(i_);
    throw LineError(fmt::format("expected {}, got {}", expected,
                                rest.empty() ? std::string("end of line")
                                             : fmt::format("'{}'", rest.substr(0, 24))));
  }

  std::string ident() {
    skip_ws();
    const std::size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_'))
      ++i_;
    if (start == i_) fail("a name");
    return std::string(s_.substr(start, i_ - start));
  }

  Var var() {
    expect("%");
    // The number follows '%' directly, without sign or leading zero: %1, %23.
    if (i_ >= s_.size() || s_[i_] < '1' || s_[i_] > '9') fail("a variable number right after '%'");
    const int64_t v = integer_token("a variable number after '%'");
    if (v < 1 || v > INT32_MAX) throw LineError(fmt::format("bad variable number %{}", v));
    return static_cast<Var>(v);
  }

  // A number token: digits, sign, '.', exponent, or inf/nan.
  std::string number_token(const std::string& what) {
    skip_ws();
    const std::size_t start = i_;
    while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                              s_[i_] == '-' || s_[i_] == '+'))
      ++i_;
    if (start == i_) fail(what);
    return std::string(s_.substr(start, i_ - start));
  }

  int64_t integer_token(const std::string& what) {
    const std::string tok = number_token(what);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end != '\0' || errno != 0) throw LineError(fmt::format("expected {}, got '{}'", what, tok));
    return v;
  }

  double real_token(const std::string& what, DType dtype = DType::f64) {
    return parse_real(number_token(what), what, dtype);
  }

  // A number that reads exactly; one too large for the dtype (1e999) is an error, not inf.
  static double parse_real(const std::string& tok, const std::string& what, DType dtype) {
    char* end = nullptr;
    const double v = dtype == DType::f32 ? std::strtof(tok.c_str(), &end)
                                         : std::strtod(tok.c_str(), &end);
    if (*end != '\0' || tok.empty()) throw LineError(fmt::format("expected {}, got '{}'", what, tok));
    if (std::isinf(v) && tok.find_first_of("iI") == std::string::npos)
      throw LineError(fmt::format("{} is out of range for {}", tok, dtype_name(dtype)));
    return v;
  }

  Shape shape() {
    expect("[");
    Shape s;
    if (accept("]")) return s;
    do {
      const int64_t d = integer_token("a dimension");
      if (d < 0) throw LineError(fmt::format("expected a dimension >= 0, got {}", d));
      s.push_back(d);
    } while (accept(","));
    expect("]");
    return s;
  }

  static bool written_as_integer(const std::string& tok) {
    return !tok.empty() && tok.find_first_not_of("+-0123456789") == std::string::npos;
  }
  // tok as an integer, if it is written as one and fits in int64.
  static std::optional<int64_t> as_integer(const std::string& tok) {
    if (!written_as_integer(tok)) return std::nullopt;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(tok.c_str(), &end, 10);
    if (*end != '\0' || errno != 0) return std::nullopt;
    return static_cast<int64_t>(v);
  }

  // [1, 2] (integers, a Shape: also a shape's text) or [0.5, 1] (numbers).
  AttrValue list() {
    expect("[");
    std::vector<std::string> toks;
    if (!accept("]")) {
      do toks.push_back(number_token("a list element"));
      while (accept(","));
      expect("]");
    }
    bool ints = true;
    for (const std::string& t : toks) ints = ints && written_as_integer(t);
    if (ints) {
      Shape v;
      for (const std::string& t : toks) {
        const std::optional<int64_t> x = as_integer(t);
        if (!x) throw LineError(fmt::format("expected an integer, got '{}'", t));
        v.push_back(*x);
      }
      return v;
    }
    std::vector<double> v;
    for (const std::string& t : toks) v.push_back(parse_real(t, "a list element", DType::f64));
    return v;
  }

  // {line; line; ...}: a tape whose lines are joined by ';' (nested tapes and quoted
  // strings may hold ';' and braces of their own).
  TapeRef braced_tape() {
    // Nested tapes are parsed recursively: a cap (the printer's, text_nesting.hpp) keeps
    // hostile input from exhausting the stack (and the copies of inner text from growing
    // with the depth).
    if (g_depth >= kMaxTextNesting)
      throw TooDeep(fmt::format("expected tape attributes (loop and checkpoint bodies) nested at most {} deep, got deeper",
                                kMaxTextNesting));
    struct Nest {
      int& d;
      explicit Nest(int& d_) : d(d_) { ++d; }
      ~Nest() { --d; }
    } nest(g_depth);
    expect("{");
    std::string text;
    int depth = 0;
    bool in_string = false;
    while (true) {
      if (i_ >= s_.size()) throw LineError("unterminated tape attribute: expected '}'");
      const char c = s_[i_++];
      if (in_string) {
        if (c == '\\' && i_ < s_.size()) {
          text += c;
          text += s_[i_++];
          continue;
        }
        in_string = c != '"';
      } else if (c == '"') {
        in_string = true;
      } else if (c == '{') {
        ++depth;
      } else if (c == '}') {
        if (depth == 0) break;
        --depth;
      } else if (c == ';' && depth == 0) {
        text += '\n';
        continue;
      }
      text += c;
    }
    try {
      return TapeRef{std::make_shared<const Tape>(parse_tape(text))};
    } catch (const TooDeep&) {
      throw;
    } catch (const Error& e) {
      throw LineError(fmt::format("in a tape attribute: {}", e.what()));
    }
  }

  // "text", with \" \\ and \n escapes.
  std::string quoted() {
    expect("\"");
    std::string out;
    while (true) {
      if (i_ >= s_.size()) throw LineError("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ >= s_.size()) throw LineError("unterminated string");
      const char e = s_[i_++];
      if (e == 'n') out += '\n';
      else if (e == '"' || e == '\\') out += e;
      else throw LineError(fmt::format("unknown escape '\\{}' in a string", e));
    }
  }

  VarType type() {
    expect("::");
    return bare_type();
  }
  VarType bare_type() {
    const std::string dt = ident();
    VarType t;
    if (dt == "f64") t.dtype = DType::f64;
    else if (dt == "f32") t.dtype = DType::f32;
    else if (dt == "i64") t.dtype = DType::i64;
    else throw LineError(fmt::format("expected dtype f32, f64 or i64, got '{}'", dt));
    t.shape = shape();
    (void)numel(t.shape);  // throws if the element count overflows
    return t;
  }

  AttrValue attr_value() {
    if (peek('[')) return list();
    if (peek('"')) return quoted();
    if (peek('{')) return braced_tape();
    const std::string tok = number_token("an attribute value");
    if (tok == "true" || tok == "false") return tok == "true";
    if (tok == "f32") return DType::f32;
    if (tok == "f64") return DType::f64;
    if (tok == "i64") return DType::i64;
    if (const std::optional<int64_t> i = as_integer(tok)) return *i;
    return parse_real(tok, "an attribute value", DType::f64);  // also an integer too large for int64
  }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
};

// Where a line's comment starts: the first '#' outside a quoted string.
std::size_t comment_start(std::string_view line) {
  bool in_string = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (in_string && line[i] == '\\') ++i;
    else if (line[i] == '"') in_string = !in_string;
    else if (line[i] == '#' && !in_string) return i;
  }
  return line.size();
}

class Parser {
 public:
  Tape parse(std::string_view text) {
    int line_no = 0;
    bool have_out = false;
    std::size_t pos = 0;
    while (pos <= text.size()) {
      const std::size_t nl = text.find('\n', pos);
      std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
      pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
      ++line_no;
      line = line.substr(0, comment_start(line));
      Cursor c(line);
      if (c.at_end()) continue;
      try {
        if (have_out) throw LineError("nothing may follow the 'out' line");
        have_out = parse_line(c);
      } catch (const TooDeep& e) {
        if (g_depth > 0) throw;  // (the outermost parse names its line)
        throw Error(fmt::format("parse_tape: line {}: {}", line_no, e.what()));
      } catch (const Error& e) {
        throw Error(fmt::format("parse_tape: line {}: {}", line_no, e.what()));
      }
    }
    if (!have_out) throw Error(fmt::format("parse_tape: line {}: missing 'out' line", line_no));
    return b_.finish();
  }

 private:
  // Returns true for the 'out' line.
  bool parse_line(Cursor& c) {
    if (c.accept_keyword("out")) {
      std::vector<Var> outs;
      if (!c.at_end()) do outs.push_back(defined(c.var())); while (c.accept(","));
      if (!c.at_end()) c.fail("',' or end of line");
      b_.set_outputs(std::move(outs));
      return true;
    }
    if (c.accept_keyword("inp")) {
      next(c.var());
      b_.input(c.type());
      end(c);
      return false;
    }
    const Var first = c.var();
    next(first);
    int results = 1;  // %3, %4 = f(...): a call with several results
    while (c.accept(",")) {
      const Var r = c.var();
      if (r != first + results)
        throw LineError(fmt::format("expected %{} in the list of results, got %{}", first + results, r));
      ++results;
    }
    c.expect("=");
    const std::string name = c.ident();
    if (results > 1 && name == "const") throw LineError("a constant defines one variable");
    if (name == "const") {
      parse_constant(c);
      return false;
    }
    const Primitive* prim = find_primitive(name);
    if (prim == nullptr) throw LineError(fmt::format("unknown primitive '{}'", name));
    std::vector<Var> args;
    Attrs attrs;
    c.expect("(");
    if (!c.accept(")")) {
      do {
        if (c.peek('%')) {
          if (!attrs.empty()) throw LineError("arguments come before attributes");
          args.push_back(defined(c.var()));
        } else {
          const std::string key = c.ident();
          if (attrs.has(key)) throw LineError(fmt::format("attribute '{}' is given twice", key));
          c.expect("=");
          for (const AttrSpec& spec : prim->attrs)
            if (spec.name == key && spec.kind != AttrKind::tape && c.peek('{'))
              throw LineError(fmt::format("{}: attribute '{}' does not take a tape {{...}}", name, key));
          attrs.set(key, c.attr_value());
        }
      } while (c.accept(","));
      c.expect(")");
    }
    std::vector<VarType> declared{c.type()};
    while (c.accept(",")) declared.push_back(c.bare_type());
    end(c);
    if (prim->results != kVariadic && prim->results != results)
      throw LineError(fmt::format("{} has {} result{}, the line defines {}", name, prim->results,
                                  prim->results == 1 ? "" : "s", results));
    if (declared.size() != static_cast<std::size_t>(results))
      throw LineError(fmt::format("{}: the line defines {} variables but declares {} type{}", name, results,
                                  declared.size(), declared.size() == 1 ? "" : "s"));
    const std::vector<Var> vs = b_.call_results(*prim, std::move(args), std::move(attrs));
    if (vs.size() != static_cast<std::size_t>(results))
      throw LineError(fmt::format("{} gives {} result{} here, the line defines {}", name, vs.size(),
                                  vs.size() == 1 ? "" : "s", results));
    for (std::size_t i = 0; i < vs.size(); ++i)
      if (b_.type(vs[i]) != declared[i])
        throw LineError(fmt::format("{} gives {}{}, but the line declares {}", name, type_str(b_.type(vs[i])),
                                    vs.size() > 1 ? fmt::format(" for result {}", i + 1) : "",
                                    type_str(declared[i])));
    return false;
  }

  void parse_constant(Cursor& c) {
    std::vector<std::string> tokens;
    bool list = false;
    if (c.accept("[")) {
      list = true;
      if (!c.accept("]")) {
        do tokens.push_back(c.number_token("a number")); while (c.accept(","));
        c.expect("]");
      }
    } else {
      tokens.push_back(c.number_token("a number or '['"));
    }
    const VarType t = c.type();
    end(c);
    if (!list && !t.shape.empty())
      throw LineError(fmt::format("a constant of type {} needs a [...] list of values", type_str(t)));
    if (list && t.shape.empty())
      throw LineError(fmt::format("a constant of type {} is one number, not a list", type_str(t)));
    if (static_cast<int64_t>(tokens.size()) != numel(t.shape))
      throw LineError(fmt::format("a constant of type {} needs {} values, got {}", type_str(t),
                                  numel(t.shape), tokens.size()));
    if (t.dtype == DType::i64) {  // integers, read exactly (not through double)
      Tensor c(DType::i64, t.shape);
      for (std::size_t i = 0; i < tokens.size(); ++i) {
        Cursor num(tokens[i]);
        c.mutable_data<int64_t>()[i] = num.integer_token("an integer");
      }
      b_.constant(c);
      return;
    }
    std::vector<double> values;
    for (const std::string& tok : tokens) {
      Cursor num(tok);
      values.push_back(num.real_token("a number", t.dtype));
    }
    b_.constant(tensor(values, t.shape, t.dtype));
  }

  void next(Var v) {
    if (v != b_.tape().size() + 1)
      throw LineError(fmt::format("expected variable %{} next, got %{}", b_.tape().size() + 1, v));
  }
  Var defined(Var v) {
    if (v > b_.tape().size()) throw LineError(fmt::format("%{} is used before it is defined", v));
    return v;
  }
  static void end(Cursor& c) {
    if (!c.at_end()) c.fail("end of line");
  }

  TapeBuilder b_;
};

}  // namespace

Tape parse_tape(std::string_view text) { return Parser().parse(text); }

}  // namespace reel
