#include "structured/gbnf.h"

#include <cctype>
#include <map>
#include <optional>
#include <string>

namespace pagoda::structured {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class GbnfParser {
 public:
  GbnfParser(std::string_view text, Grammar& g) : text_(text), g_(g), b_(g) {}

  Status parse() {
    space();
    while (pos_ < text_.size()) {
      const size_t at = pos_;
      std::string name = rule_name();
      if (name.empty()) return fail(at, "expected a rule name");
      space();
      if (text_.substr(pos_, 3) != "::=") return fail(pos_, "expected ::= after the rule name " + name);
      pos_ += 3;
      const int32_t rule = rule_id(name, at);
      if (defined_.count(rule) != 0) return fail(at, "rule " + name + " is defined twice");
      defined_[rule] = at;
      PAGODA_RETURN_IF_ERROR(alternatives(rule, false));
      if (failed_) return status_;
    }
    if (failed_) return status_;
    for (const auto& [name, use] : uses_) {
      if (defined_.count(ids_[name]) == 0) return fail(use, "rule " + name + " is used but not defined");
    }
    auto root = ids_.find("root");
    if (root == ids_.end() || defined_.count(root->second) == 0) {
      return Status::invalid_argument("grammar: no rule named root (the grammar starts there)");
    }
    g_.root = root->second;
    if (g_.num_rules() > kMaxGbnfRules) {
      return Status::invalid_argument("grammar: " + std::to_string(g_.num_rules()) + " rules after expansion (at most " +
                                      std::to_string(kMaxGbnfRules) + ")");
    }
    Status checked = check_grammar(g_);
    if (!checked.is_ok()) return Status::invalid_argument("grammar: " + checked.message());
    return Status::ok();
  }

 private:
  // Whitespace, newlines and # comments.
  void space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }
  std::string rule_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  // Whether a new rule (`name ::=`) starts at pos_.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
    return text_.substr(p, 3) == "::=";
  }
  int32_t rule_id(const std::string& name, size_t at) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = g_.add_rule(name);
    ids_[name] = id;
    uses_.emplace(name, at);
    return id;
  }

  Status fail(size_t at, const std::string& message) {
    if (failed_) return status_;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    failed_ = true;
    status_ = Status::invalid_argument("grammar: line " + std::to_string(line) + ", column " + std::to_string(col) +
                                       ": " + message);
    return status_;
  }

  // alternatives := sequence ('|' sequence)*, added to `rule`; nested: inside ( ).
  Status alternatives(int32_t rule, bool nested) {
    if (++depth_ > 200) return fail(pos_, "groups nested more than 200 deep");
    while (true) {
      Alternative alt;
      PAGODA_RETURN_IF_ERROR(sequence(alt, nested));
      g_.add_alternative(rule, std::move(alt));
      space();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      break;
    }
    --depth_;
    return Status::ok();
  }

  Status sequence(Alternative& alt, bool nested) {
    size_t last = alt.size();  // first element of the last symbol (a repetition applies to it)
    bool have_last = false;
    while (true) {
      space();
      if (pos_ >= text_.size()) break;
      const char c = text_[pos_];
      if (c == '|' || c == ')') break;
      if (!nested && at_rule_start()) break;
      const size_t at = pos_;
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) return fail(at, std::string("'") + c + "' repeats nothing");
        PAGODA_RETURN_IF_ERROR(repetition(alt, last));
        have_last = false;  // "a**" is refused, as in llama.cpp
        continue;
      }
      last = alt.size();
      have_last = true;
      if (c == '"') {
        PAGODA_RETURN_IF_ERROR(literal(alt));
        if (alt.size() == last) have_last = false;  // "" is nothing to repeat
      } else if (c == '[') {
        CodePointSet set;
        PAGODA_RETURN_IF_ERROR(char_class(set));
        alt.push_back(b_.chars(set, "class"));
      } else if (c == '.') {
        ++pos_;
        if (!any_char_) {  // one rule for every '.' of the grammar
          CodePointSet none;
          any_char_ = b_.chars(none.complement(), "any");
        }
        alt.push_back(*any_char_);
      } else if (c == '(') {
        ++pos_;
        const int32_t group = g_.add_rule("group");
        PAGODA_RETURN_IF_ERROR(alternatives(group, true));
        space();
        if (pos_ >= text_.size() || text_[pos_] != ')') return fail(at, "unclosed (");
        ++pos_;
        alt.push_back(ref(group));
      } else if (c == '<' || c == '!') {
        return fail(at, "token references (<...>, !) match tokens, not text: they are not supported here");
      } else if (is_name_char(c)) {
        const std::string name = rule_name();
        alt.push_back(ref(rule_id(name, at)));
      } else {
        return fail(at, std::string("unexpected character '") + c + "'");
      }
      if (failed_) return status_;
    }
    return Status::ok();
  }

  // The last symbol (elements [last, end) of alt) repeated: *, +, ?, {m}, {m,}, {m,n}, {,n}.
  Status repetition(Alternative& alt, size_t last) {
    const size_t at = pos_;
    int64_t lo = 0, hi = -1;
    const char c = text_[pos_++];
    if (c == '*') {
      lo = 0, hi = -1;
    } else if (c == '+') {
      lo = 1, hi = -1;
    } else if (c == '?') {
      lo = 0, hi = 1;
    } else {
      space();
      const bool has_lo = pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]));
      if (has_lo) PAGODA_RETURN_IF_ERROR(number(lo));
      space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        space();
        if (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
          PAGODA_RETURN_IF_ERROR(number(hi));
        } else if (!has_lo) {
          return fail(at, "{,} needs a bound");
        }
      } else {
        if (!has_lo) return fail(at, "expected a count in {}");
        hi = lo;
      }
      space();
      if (pos_ >= text_.size() || text_[pos_] != '}') return fail(at, "unclosed {");
      ++pos_;
      if (hi >= 0 && hi < lo) return fail(at, "a repetition's upper bound is below its lower bound");
    }
    Element item;
    if (alt.size() - last == 1) {
      item = alt[last];
    } else {
      Alternative span(alt.begin() + static_cast<std::ptrdiff_t>(last), alt.end());
      item = ref(b_.rule("item", {std::move(span)}));
    }
    alt.resize(last);
    int32_t rule;
    if (lo == 0 && hi < 0) {
      rule = b_.star(item);
    } else if (lo == 1 && hi < 0) {
      rule = b_.plus(item);
    } else if (lo == 0 && hi == 1) {
      rule = b_.opt(item);
    } else if (lo == 0 && hi == 0) {
      return Status::ok();  // x{0}: nothing
    } else {
      rule = b_.repeat(item, lo, hi, -1);
    }
    alt.push_back(ref(rule));
    if (g_.num_rules() > kMaxGbnfRules) return fail(at, "the grammar grows past " + std::to_string(kMaxGbnfRules) + " rules");
    return Status::ok();
  }

  Status number(int64_t& out) {
    const size_t at = pos_;
    out = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      out = out * 10 + (text_[pos_++] - '0');
      if (out > kMaxGbnfRepeat) return fail(at, "repetition counts are at most " + std::to_string(kMaxGbnfRepeat));
    }
    return Status::ok();
  }

  // One code point of a literal or class (an escape or UTF-8 text).
  Status code_point(uint32_t& cp) {
    const size_t at = pos_;
    if (text_[pos_] != '\\') {
      if (!decode_utf8(text_, pos_, cp)) return fail(at, "invalid UTF-8");
      return Status::ok();
    }
    if (++pos_ >= text_.size()) return fail(at, "an escape at the end of the text");
    const char e = text_[pos_++];
    int digits = 0;
    switch (e) {
      case 'n': cp = '\n'; return Status::ok();
      case 'r': cp = '\r'; return Status::ok();
      case 't': cp = '\t'; return Status::ok();
      case '\\': case '"': case '[': case ']': case '-': case '/': case '^': cp = static_cast<uint8_t>(e); return Status::ok();
      case 'x': digits = 2; break;
      case 'u': digits = 4; break;
      case 'U': digits = 8; break;
      default: return fail(at, std::string("unknown escape \\") + e);
    }
    cp = 0;
    for (int k = 0; k < digits; ++k) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) {
        return fail(at, "\\" + std::string(1, e) + " needs " + std::to_string(digits) + " hex digits");
      }
      const char h = text_[pos_++];
      cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return fail(at, "not a character: \\" + std::string(1, e));
    return Status::ok();
  }

  Status literal(Alternative& alt) {
    const size_t at = pos_++;
    std::string bytes;
    while (true) {
      if (pos_ >= text_.size()) return fail(at, "unterminated string");
      if (text_[pos_] == '"') break;
      uint32_t cp = 0;
      PAGODA_RETURN_IF_ERROR(code_point(cp));
      append_utf8(cp, bytes);
    }
    ++pos_;
    for (unsigned char c : bytes) alt.push_back(byte_range(c, c));
    return Status::ok();
  }

  Status char_class(CodePointSet& set) {
    const size_t at = pos_++;
    bool negated = false;
    if (pos_ < text_.size() && text_[pos_] == '^') {
      negated = true;
      ++pos_;
    }
    while (true) {
      if (pos_ >= text_.size()) return fail(at, "unterminated [");
      if (text_[pos_] == ']') break;
      uint32_t lo = 0, hi = 0;
      PAGODA_RETURN_IF_ERROR(code_point(lo));
      hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        PAGODA_RETURN_IF_ERROR(code_point(hi));
        if (hi < lo) return fail(at, "a range whose end is below its start");
      }
      set.add(lo, hi);
    }
    ++pos_;
    set.normalize();
    if (negated) set = set.complement();
    return Status::ok();
  }

  std::string_view text_;
  Grammar& g_;
  GrammarBuilder b_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool failed_ = false;
  Status status_ = Status::ok();
  std::map<std::string, int32_t> ids_;
  std::map<int32_t, size_t> defined_;
  std::map<std::string, size_t> uses_;  // first mention of each name
  std::optional<Element> any_char_;     // '.': built at its first use
};

}  // namespace

Result<Grammar> grammar_from_gbnf(std::string_view text) {
  Grammar g;
  GbnfParser parser(text, g);
  Status s = parser.parse();
  if (!s.is_ok()) return s;
  return g;
}

}  // namespace pagoda::structured
