#include "structured/regex.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_map>
#include <vector>

namespace pagoda::structured {

namespace {

// Syntax tree: [nodes], children by index.
struct Node {
  enum Kind { kSet, kCat, kAlt, kRepeat } kind = kCat;
  CodePointSet set;         // kSet
  std::vector<int32_t> kids;  // kCat, kAlt: any number; kRepeat: one
  int64_t lo = 0, hi = -1;  // kRepeat; hi < 0: unbounded
};

CodePointSet intersect(const CodePointSet& a, const CodePointSet& b) {
  CodePointSet u = a.complement();
  u.add(b.complement());
  u.normalize();
  return u.complement();
}

CodePointSet class_of(char c) {  // \d \w \s (lower case); upper case: the complement
  CodePointSet s;
  switch (std::tolower(static_cast<unsigned char>(c))) {
    case 'd': s.add('0', '9'); break;
    case 'w': s.add('0', '9'), s.add('A', 'Z'), s.add('a', 'z'), s.add('_', '_'); break;
    default:  // ECMAScript's WhiteSpace and LineTerminator
      s.add('\t', '\r'), s.add(' ', ' '), s.add(0xA0, 0xA0), s.add(0x1680, 0x1680), s.add(0x2000, 0x200A);
      s.add(0x2028, 0x2029), s.add(0x202F, 0x202F), s.add(0x205F, 0x205F), s.add(0x3000, 0x3000), s.add(0xFEFF, 0xFEFF);
  }
  s.normalize();
  return std::isupper(static_cast<unsigned char>(c)) ? s.complement() : s;
}

class RegexParser {
 public:
  RegexParser(std::string_view text, const CodePointSet* allowed) : text_(text), allowed_(allowed) {}

  Result<int32_t> parse() {
    if (!text_.empty() && text_[0] == '^') ++pos_;
    int32_t root = alternation();
    if (failed_) return status_;
    if (pos_ < text_.size() && text_[pos_] == '$' && pos_ + 1 == text_.size()) ++pos_;
    if (pos_ < text_.size()) {
      fail(text_[pos_] == ')' ? "unbalanced )" : text_[pos_] == '$' ? "$ is supported only at the end" : "unexpected character");
      return status_;
    }
    return root;
  }
  std::vector<Node>& nodes() { return nodes_; }

 private:
  int32_t add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int32_t>(nodes_.size() - 1);
  }
  int32_t set_node(CodePointSet s) {
    s.normalize();
    if (allowed_ != nullptr) s = intersect(s, *allowed_);
    Node n;
    n.kind = Node::kSet;
    n.set = std::move(s);
    return add(std::move(n));
  }
  int32_t fail(const std::string& message) {
    if (!failed_) {
      failed_ = true;
      status_ = Status::invalid_argument("regex: " + message + " at offset " + std::to_string(pos_));
    }
    return -1;
  }
  bool peek(char c) const { return pos_ < text_.size() && text_[pos_] == c; }

  int32_t alternation() {
    if (++depth_ > 200) return fail("groups nested more than 200 deep");
    Node alt;
    alt.kind = Node::kAlt;
    alt.kids.push_back(concatenation());
    while (!failed_ && peek('|')) {
      ++pos_;
      alt.kids.push_back(concatenation());
    }
    --depth_;
    if (failed_) return -1;
    return alt.kids.size() == 1 ? alt.kids[0] : add(std::move(alt));
  }

  int32_t concatenation() {
    Node cat;
    while (!failed_ && pos_ < text_.size() && !peek('|') && !peek(')')) {
      if (peek('$') && pos_ + 1 == text_.size()) break;
      const int32_t atom = this->atom();
      if (failed_) return -1;
      cat.kids.push_back(quantified(atom));
    }
    return cat.kids.size() == 1 ? cat.kids[0] : add(std::move(cat));
  }

  // A quantifier after atom, if any: {m}, {m,}, {m,n} (else '{' is a literal), *, +, ?. At most
  // one: a second quantifier right after it is an error (ECMAScript's too), never a repeat.
  int32_t quantified(int32_t atom) {
    if (failed_ || pos_ >= text_.size()) return atom;
    int64_t lo = 0, hi = -1;
    const char c = text_[pos_];
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_, lo = 1;
    } else if (c == '?') {
      ++pos_, hi = 1;
    } else if (!(c == '{' && counted(lo, hi))) {
      return atom;
    }
    if (failed_) return -1;
    if (peek('?')) ++pos_;  // lazy: the same texts match
    if (peek('+')) return fail("possessive quantifiers are not supported");
    if (peek('*') || peek('?') || (peek('{') && is_counted_at(pos_))) return fail("a quantifier repeats a quantifier");
    Node rep;
    rep.kind = Node::kRepeat;
    rep.kids = {atom};
    rep.lo = lo, rep.hi = hi;
    return add(std::move(rep));
  }
  bool is_counted_at(size_t p) const {
    if (p >= text_.size() || text_[p] != '{') return false;
    ++p;
    const size_t digits = p;
    while (p < text_.size() && std::isdigit(static_cast<unsigned char>(text_[p]))) ++p;
    if (p == digits) return false;
    if (p < text_.size() && text_[p] == ',') {
      ++p;
      while (p < text_.size() && std::isdigit(static_cast<unsigned char>(text_[p]))) ++p;
    }
    return p < text_.size() && text_[p] == '}';
  }
  bool counted(int64_t& lo, int64_t& hi) {
    if (!is_counted_at(pos_)) return false;
    ++pos_;
    lo = number();
    hi = lo;
    if (peek(',')) {
      ++pos_;
      hi = std::isdigit(static_cast<unsigned char>(text_[pos_])) ? number() : -1;
    }
    ++pos_;  // '}'
    if (lo > kMaxRegexRepeat || hi > kMaxRegexRepeat) fail("repetition counts are at most " + std::to_string(kMaxRegexRepeat));
    if (hi >= 0 && hi < lo) fail("a repetition's upper bound is below its lower bound");
    return true;
  }
  int64_t number() {
    int64_t v = 0;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
      v = std::min<int64_t>(v * 10 + (text_[pos_++] - '0'), kMaxRegexRepeat + 1);
    }
    return v;
  }

  int32_t atom() {
    const char c = text_[pos_];
    if (c == '(') return group();
    if (c == '[') return char_class();
    if (c == '*' || c == '+' || c == '?') return fail("a quantifier repeats nothing");
    if (c == '^') return fail("^ is supported only at the start");
    if (c == '$') return fail("$ is supported only at the end");
    if (c == '.') {
      ++pos_;
      CodePointSet not_dot;
      not_dot.add('\n', '\n'), not_dot.add('\r', '\r'), not_dot.add(0x2028, 0x2029);
      not_dot.normalize();
      return set_node(not_dot.complement());
    }
    CodePointSet s;
    if (c == '\\') {
      if (!escape(s, false)) return -1;
      return set_node(std::move(s));
    }
    uint32_t cp = 0;
    if (!decode_utf8(text_, pos_, cp)) return fail("invalid UTF-8");
    s.add(cp, cp);
    return set_node(std::move(s));
  }

  int32_t group() {
    ++pos_;
    if (peek('?')) {
      const std::string_view rest = text_.substr(pos_);
      if (rest.starts_with("?:")) {
        pos_ += 2;
      } else if (rest.starts_with("?=") || rest.starts_with("?!") || rest.starts_with("?<=") || rest.starts_with("?<!")) {
        return fail("lookaround assertions are not supported");
      } else if (rest.starts_with("?<") || rest.starts_with("?P<")) {
        const size_t close = text_.find('>', pos_);
        if (close == std::string_view::npos) return fail("unterminated group name");
        pos_ = close + 1;
      } else {
        return fail("inline flags and (?...) extensions are not supported");
      }
    }
    const int32_t inner = alternation();
    if (failed_) return -1;
    if (!peek(')')) return fail("unclosed (");
    ++pos_;
    return inner;
  }

  // One escape at pos_ ('\'): adds its code points to s. in_class: \b is a backspace there.
  bool escape(CodePointSet& s, bool in_class) {
    if (pos_ + 1 >= text_.size()) return fail("an escape at the end of the pattern"), false;
    const char e = text_[pos_ + 1];
    pos_ += 2;
    switch (e) {
      case 'd': case 'D': case 'w': case 'W': case 's': case 'S': s.add(class_of(e)); return true;
      case 'n': s.add('\n', '\n'); return true;
      case 'r': s.add('\r', '\r'); return true;
      case 't': s.add('\t', '\t'); return true;
      case 'f': s.add('\f', '\f'); return true;
      case 'v': s.add('\v', '\v'); return true;
      case '0': s.add(0, 0); return true;
      case 'b':
        if (in_class) {
          s.add('\b', '\b');
          return true;
        }
        return fail("word boundaries (\\b) are not supported"), false;
      case 'B': return fail("word boundaries (\\B) are not supported"), false;
      case 'p': case 'P': return fail("Unicode properties (\\p) are not supported"), false;
      case 'k': return fail("backreferences are not supported"), false;
      case 'x': case 'u': return hex_escape(e, s);
      default: break;
    }
    if (e >= '1' && e <= '9') return fail("backreferences are not supported"), false;
    if (std::isalnum(static_cast<unsigned char>(e))) return fail(std::string("unknown escape \\") + e), false;
    pos_ -= 1;  // an escaped character (punctuation, or any UTF-8 character)
    uint32_t cp = 0;
    if (!decode_utf8(text_, pos_, cp)) return fail("invalid UTF-8"), false;
    s.add(cp, cp);
    return true;
  }
  bool hex_escape(char e, CodePointSet& s) {
    const bool braces = e == 'u' && peek('{');
    if (braces) ++pos_;
    const int digits = braces ? 6 : e == 'x' ? 2 : 4;
    uint32_t cp = 0;
    int k = 0;
    for (; k < digits && pos_ < text_.size() && std::isxdigit(static_cast<unsigned char>(text_[pos_])); ++k) {
      const char h = text_[pos_++];
      cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : std::tolower(h) - 'a' + 10);
    }
    if (braces ? (k == 0 || !peek('}')) : k != digits) return fail(std::string("\\") + e + " needs hex digits"), false;
    if (braces) ++pos_;
    if (cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) return fail("not a character"), false;
    s.add(cp, cp);
    return true;
  }

  int32_t char_class() {
    ++pos_;
    bool negated = false;
    if (peek('^')) ++pos_, negated = true;
    CodePointSet s;
    while (true) {
      if (pos_ >= text_.size()) return fail("unterminated [");
      if (peek(']')) break;
      uint32_t lo = 0;
      if (!class_atom(s, lo)) {
        if (failed_) return -1;
        continue;  // a class escape (\d ...): not a range end
      }
      if (peek('-') && pos_ + 1 < text_.size() && text_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = 0;
        CodePointSet ignored;
        if (!class_atom(ignored, hi)) return fail("a range ends at a class escape");
        if (hi < lo) return fail("a range whose end is below its start");
        s.add(lo, hi);
      } else {
        s.add(lo, lo);
      }
    }
    ++pos_;
    s.normalize();
    return set_node(negated ? s.complement() : std::move(s));
  }
  // One class member: a single code point (true, in cp) or a class escape added to s (false).
  bool class_atom(CodePointSet& s, uint32_t& cp) {
    if (peek('\\')) {
      CodePointSet one;
      if (!escape(one, true)) return false;
      one.normalize();
      if (one.ranges.size() == 1 && one.ranges[0].lo == one.ranges[0].hi) {
        cp = one.ranges[0].lo;
        return true;
      }
      s.add(one);
      return false;
    }
    if (!decode_utf8(text_, pos_, cp)) return fail("invalid UTF-8"), false;
    return true;
  }

  std::string_view text_;
  const CodePointSet* allowed_;
  size_t pos_ = 0;
  int depth_ = 0;
  bool failed_ = false;
  Status status_ = Status::ok();
  std::vector<Node> nodes_;
};

// Thompson automaton over bytes.
class Nfa {
 public:
  explicit Nfa(const std::vector<Node>& nodes) : nodes_(nodes) {}

  int32_t new_state() {
    states_.emplace_back();
    if (states_.size() > kMaxRegexStates) too_big_ = true;
    return static_cast<int32_t>(states_.size() - 1);
  }
  // The automaton of node from `start`; returns its end state.
  int32_t build(int32_t node, int32_t start) {
    if (too_big_) return start;
    const Node& n = nodes_[static_cast<size_t>(node)];
    switch (n.kind) {
      case Node::kSet: {
        const int32_t end = new_state();
        std::vector<Utf8Sequence> seqs;
        for (const CodePointRange& r : n.set.ranges) utf8_sequences(r.lo, r.hi, seqs);
        ByteSet single;
        for (const Utf8Sequence& seq : seqs) {
          if (seq.size() == 1) {
            for (int b = seq[0].lo; b <= seq[0].hi; ++b) single.set(static_cast<size_t>(b));
            continue;
          }
          int32_t cur = start;
          for (size_t k = 0; k < seq.size(); ++k) {
            const int32_t next = k + 1 == seq.size() ? end : new_state();
            edge(cur, byte_range(seq[k].lo, seq[k].hi).bytes, next);
            cur = next;
          }
        }
        if (single.any()) edge(start, single, end);
        return end;
      }
      case Node::kCat: {
        int32_t cur = start;
        for (int32_t kid : n.kids) cur = build(kid, cur);
        return cur;
      }
      case Node::kAlt: {
        const int32_t end = new_state();
        for (int32_t kid : n.kids) {
          const int32_t s = new_state();
          eps(start, s);
          eps(build(kid, s), end);
        }
        return end;
      }
      case Node::kRepeat: {
        int32_t cur = start;
        for (int64_t i = 0; i < n.lo && !too_big_; ++i) cur = build(n.kids[0], cur);
        const int32_t end = new_state();
        if (n.hi < 0) {  // a fresh loop state: loop -> kid -> loop, loop -> end
          const int32_t loop = new_state();
          eps(cur, loop);
          eps(build(n.kids[0], loop), loop);
          cur = loop;
        } else {
          for (int64_t i = n.lo; i < n.hi && !too_big_; ++i) {
            eps(cur, end);  // every optional copy may be skipped straight to the end
            cur = build(n.kids[0], cur);
          }
        }
        eps(cur, end);
        return end;
      }
    }
    return start;
  }
  bool too_big() const { return too_big_; }

  // The right-linear grammar: one rule per state reached by a byte (and the start); -1 when it
  // would pass kMaxRegexAlternatives alternatives (closures of many skippable copies).
  int32_t to_grammar(Grammar& g, int32_t start, int32_t accept) {
    size_t alternatives = 0;
    std::unordered_map<int32_t, int32_t> rule_of;
    std::vector<int32_t> todo;
    const auto rule = [&](int32_t s) {
      auto it = rule_of.find(s);
      if (it != rule_of.end()) return it->second;
      const int32_t r = g.add_rule("regex-" + std::to_string(s));
      rule_of[s] = r;
      todo.push_back(s);
      return r;
    };
    const int32_t root = rule(start);
    std::vector<int32_t> closure;
    std::vector<uint8_t> seen(states_.size(), 0);
    std::vector<std::pair<int32_t, ByteSet>> by_target;
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      const int32_t r = rule_of[s];
      // Epsilon closure of s.
      closure.assign(1, s);
      seen[static_cast<size_t>(s)] = 1;
      for (size_t i = 0; i < closure.size(); ++i) {
        for (int32_t t : states_[static_cast<size_t>(closure[i])].eps) {
          if (!seen[static_cast<size_t>(t)]) {
            seen[static_cast<size_t>(t)] = 1;
            closure.push_back(t);
          }
        }
      }
      by_target.clear();
      bool accepts = false;
      for (int32_t c : closure) {
        seen[static_cast<size_t>(c)] = 0;
        accepts = accepts || c == accept;
        for (const auto& edge : states_[static_cast<size_t>(c)].edges) {
          const int32_t target = edge.second;
          auto it = std::find_if(by_target.begin(), by_target.end(), [target](const auto& p) { return p.first == target; });
          if (it == by_target.end()) {
            by_target.emplace_back(target, edge.first);
          } else {
            it->second |= edge.first;
          }
        }
      }
      alternatives += by_target.size() + 1;
      if (alternatives > kMaxRegexAlternatives) return -1;
      for (const auto& [target, bytes] : by_target) g.add_alternative(r, {byte_set(bytes), ref(rule(target))});
      if (accepts) g.add_alternative(r, {});
    }
    return root;
  }

 private:
  struct State {
    std::vector<std::pair<ByteSet, int32_t>> edges;
    std::vector<int32_t> eps;
  };
  void edge(int32_t from, const ByteSet& bytes, int32_t to) { states_[static_cast<size_t>(from)].edges.emplace_back(bytes, to); }
  void eps(int32_t from, int32_t to) { states_[static_cast<size_t>(from)].eps.push_back(to); }

  const std::vector<Node>& nodes_;
  std::vector<State> states_;
  bool too_big_ = false;
};

}  // namespace

Result<int32_t> add_regex_rules(Grammar& g, std::string_view pattern, const CodePointSet* allowed) {
  CodePointSet normalized;
  if (allowed != nullptr) {
    normalized = *allowed;
    normalized.normalize();
  }
  RegexParser parser(pattern, allowed != nullptr ? &normalized : nullptr);
  PAGODA_ASSIGN_OR_RETURN(const int32_t root, parser.parse());
  Nfa nfa(parser.nodes());
  const int32_t start = nfa.new_state();
  const int32_t accept = nfa.build(root, start);
  if (nfa.too_big()) {
    return Status::invalid_argument("regex: the pattern needs more than " + std::to_string(kMaxRegexStates) +
                                    " automaton states (large counted repetitions); simplify it");
  }
  const int32_t rule = nfa.to_grammar(g, start, accept);
  if (rule < 0) {
    return Status::invalid_argument("regex: the pattern's grammar needs more than " + std::to_string(kMaxRegexAlternatives) +
                                    " alternatives (many optional copies in a row); simplify it");
  }
  return rule;
}

Result<Grammar> grammar_from_regex(std::string_view pattern, const CodePointSet* allowed) {
  Grammar g;
  PAGODA_ASSIGN_OR_RETURN(g.root, add_regex_rules(g, pattern, allowed));
  return g;
}

}  // namespace pagoda::structured
