#include "structured/json_schema.h"

#include <algorithm>
#include <map>
#include <set>

#include "structured/regex.h"

namespace pagoda::structured {

namespace {

// A pattern searched for (JSON Schema's reading) as one matched whole: each unanchored side
// gets [\s\S]*. Anchors with a top-level '|' (^a|b$ anchors each alternative) are refused.
Result<std::string> pattern_as_full_match(const std::string& p) {
  const bool starts = !p.empty() && p.front() == '^';
  size_t backslashes = 0;  // before a final '$': an odd count escapes it
  for (size_t i = p.size() - (p.empty() ? 0 : 1); i-- > 0 && p[i] == '\\';) ++backslashes;
  const bool ends = !p.empty() && p.back() == '$' && backslashes % 2 == 0 && !(starts && p.size() == 1);
  const std::string middle = p.substr(starts ? 1 : 0, p.size() - (starts ? 1 : 0) - (ends ? 1 : 0));
  if (starts || ends) {
    int depth = 0;
    bool in_class = false;
    for (size_t i = 0; i < middle.size(); ++i) {
      const char c = middle[i];
      if (c == '\\') {
        ++i;
      } else if (in_class) {
        in_class = c != ']';
      } else if (c == '[') {
        in_class = true;
      } else if (c == '(') {
        ++depth;
      } else if (c == ')') {
        --depth;
      } else if (c == '|' && depth == 0) {
        return Status::invalid_argument("anchors around a top-level '|' anchor one alternative each; group them: "
                                        "^(a|b)$");
      }
    }
  }
  return std::string(starts ? "" : "[\\s\\S]*") + "(?:" + middle + ")" + (ends ? "" : "[\\s\\S]*");
}

using ojson = nlohmann::ordered_json;

const std::set<std::string> kAnnotations = {"title",   "description", "default", "examples", "$schema",
                                            "$id",     "$comment",    "strict",  "$defs",    "definitions",
                                            "readOnly", "writeOnly", "deprecated"};

class Compiler {
 public:
  // Adds rules to g; root (its $defs) is the schema the value rule is compiled from.
  Compiler(const ojson& root, Grammar& g) : root_(root), g_(g), b_(g_) { ws_ = b_.repeat(ws_char(), 0, 2, -1, "ws"); }

  Result<int32_t> value() { return schema(root_, "#"); }
  int32_t any_object() {
    any_value();
    return any_object_;
  }
  int32_t ws() const { return ws_; }
  int32_t literal(std::string_view text) { return b_.literal(text); }

 private:
  static Element ws_char() {
    ByteSet s;
    s.set(' '), s.set('\t'), s.set('\n');
    return byte_set(s);
  }
  Element lit(std::string_view text) { return ref(b_.literal(text)); }

  // The generic JSON value (and object, used by json_object), built once.
  int32_t any_value() {
    if (any_value_ >= 0) return any_value_;
    any_value_ = g_.add_rule("value");
    any_object_ = g_.add_rule("object");
    const int32_t array = g_.add_rule("array");
    const int32_t str = string_rule(0, -1);
    const int32_t member = b_.rule("member", {{ref(str), ref(ws_), lit(":"), ref(ws_), ref(any_value_)}});
    const int32_t comma = b_.rule("comma", {{ref(ws_), lit(","), ref(ws_)}});
    // One whitespace slot between two tokens: empty containers are their own alternative.
    const int32_t members = b_.repeat(ref(member), 1, -1, comma, "members");
    g_.add_alternative(any_object_, {lit("{"), ref(ws_), lit("}")});
    g_.add_alternative(any_object_, {lit("{"), ref(ws_), ref(members), ref(ws_), lit("}")});
    const int32_t items = b_.repeat(ref(any_value_), 1, -1, comma, "items");
    g_.add_alternative(array, {lit("["), ref(ws_), lit("]")});
    g_.add_alternative(array, {lit("["), ref(ws_), ref(items), ref(ws_), lit("]")});
    for (int32_t alt : {any_object_, array, str, number_rule(false), lit_rule("true"), lit_rule("false"), lit_rule("null")}) {
      g_.add_alternative(any_value_, {ref(alt)});
    }
    return any_value_;
  }
  int32_t lit_rule(std::string_view text) { return b_.literal(text); }

  int32_t string_rule(int64_t min_len, int64_t max_len) {
    ByteSet plain;
    for (int c = 0x20; c < 256; ++c) plain.set(static_cast<size_t>(c));
    plain.reset('"'), plain.reset('\\');
    ByteSet esc;
    for (char c : std::string("\"\\/bfnrt")) esc.set(static_cast<unsigned char>(c));
    ByteSet hex;
    for (char c : std::string("0123456789abcdefABCDEF")) hex.set(static_cast<unsigned char>(c));
    if (str_char_ < 0) {
      str_char_ = b_.rule("char", {{byte_set(plain)},
                                   {lit("\\"), byte_set(esc)},
                                   {lit("\\"), lit("u"), byte_set(hex), byte_set(hex), byte_set(hex), byte_set(hex)}});
    }
    // Lengths count characters; a multi-byte UTF-8 character counts as its bytes here (bounds are
    // approximate above ASCII).
    const int32_t body = b_.repeat(ref(str_char_), min_len, max_len, -1, "chars");
    return b_.rule("string", {{lit("\""), ref(body), lit("\"")}});
  }

  // A string whose text matches `pattern` as JSON Schema reads it: somewhere in the string
  // (a search), so an unanchored side may have any text; ^ and $ anchor it. The string's
  // characters are those JSON writes without escapes (no '"', '\\' or controls).
  Result<int32_t> pattern_rule(const std::string& pattern, const std::string& where) {
    Result<std::string> full = pattern_as_full_match(pattern);
    if (!full.is_ok()) return Status::invalid_argument("pattern at " + where + ": " + full.status().message());
    CodePointSet escaped;  // what JSON writes escaped: controls, '"', '\\'
    escaped.add(0, 0x1F), escaped.add('"', '"'), escaped.add('\\', '\\');
    escaped.normalize();
    const CodePointSet allowed = escaped.complement();
    Result<int32_t> body = add_regex_rules(g_, *full, &allowed);
    if (!body.is_ok()) return Status::invalid_argument("pattern at " + where + ": " + body.status().message());
    return b_.rule("pattern", {{lit("\""), ref(*body), lit("\"")}});
  }

  // JSON numbers with at most 16 integer digits, 16 fraction digits and 2 exponent digits, so
  // a reply cannot run on digit by digit, nor overflow a double (every grammar built here is finite but for nesting).
  int32_t number_rule(bool integer) {
    const Element digit = byte_range('0', '9');
    const int32_t intpart = b_.rule("int", {{lit("0")}, {byte_range('1', '9'), ref(b_.repeat(digit, 0, 15, -1, "digits"))}});
    const int32_t sign = b_.opt(lit("-"), "sign");
    if (integer) return b_.rule("integer", {{ref(sign), ref(intpart)}});
    const int32_t frac = b_.opt(ref(b_.rule("frac", {{lit("."), ref(b_.repeat(digit, 1, 16, -1, "fraction"))}})), "frac?");
    ByteSet e;
    e.set('e'), e.set('E');
    ByteSet pm;
    pm.set('+'), pm.set('-');
    const int32_t exp = b_.opt(
        ref(b_.rule("exp", {{byte_set(e), ref(b_.opt(byte_set(pm), "expsign")), ref(b_.repeat(digit, 1, 2, -1, "expdigits"))}})),
        "exp?");
    return b_.rule("number", {{ref(sign), ref(intpart), ref(frac), ref(exp)}});
  }

  Status unsupported(const std::string& where, const std::string& key) {
    return Status::invalid_argument("the schema keyword '" + key + "' at " + where + " is not supported");
  }

  Result<int32_t> schema(const ojson& s, const std::string& where) {
    // Nesting beyond this is refused (the matcher's stacks and the compiler's recursion stay bounded).
    if (++depth_ > kMaxNesting) return Status::invalid_argument("the schema nests deeper than " + std::to_string(kMaxNesting) + " levels at " + where);
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      return Status::invalid_argument("the schema at " + where + " is false: nothing matches it");
    }
    if (!s.is_object()) return Status::invalid_argument("the schema at " + where + " must be an object");
    if (auto it = s.find("$ref"); it != s.end()) return reference(*it, where);
    if (auto it = s.find("const"); it != s.end()) return b_.literal(it->dump());
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Status::invalid_argument("enum at " + where + " must be a non-empty array");
      std::vector<Alternative> alts;
      for (const ojson& v : *it) alts.push_back({lit(v.dump())});
      return b_.rule("enum", std::move(alts));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (auto it = s.find(key); it != s.end()) {
        if (!it->is_array() || it->empty()) return Status::invalid_argument(std::string(key) + " at " + where + " must be a non-empty array");
        std::vector<Alternative> alts;
        for (size_t i = 0; i < it->size(); ++i) {
          PAGODA_ASSIGN_OR_RETURN(const int32_t r, schema((*it)[i], where + "/" + key + "/" + std::to_string(i)));
          alts.push_back({ref(r)});
        }
        return b_.rule(key, std::move(alts));
      }
    }
    static const std::set<std::string> kHandled = {"type", "properties", "required", "items", "minItems", "maxItems",
                                                   "minLength", "maxLength", "additionalProperties", "pattern"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kHandled.count(it.key()) == 0 && kAnnotations.count(it.key()) == 0) return unsupported(where, it.key());
    }
    if (auto ap = s.find("additionalProperties"); ap != s.end() && !(ap->is_boolean() && !ap->get<bool>())) {
      if (!s.contains("properties")) return any_value();  // a free-form object: any object
      // With properties, only they are generated (OpenAI's strict mode).
    }
    auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties")) return object(s, where);
      if (s.contains("items")) return array(s, where);
      return any_value();
    }
    if (type->is_array()) {
      std::vector<Alternative> alts;
      for (const ojson& t : *type) {
        if (!t.is_string()) return Status::invalid_argument("type at " + where + " must be a string or strings");
        PAGODA_ASSIGN_OR_RETURN(const int32_t r, typed(s, t.get<std::string>(), where));
        alts.push_back({ref(r)});
      }
      if (alts.empty()) return Status::invalid_argument("type at " + where + " is an empty list");
      return b_.rule("types", std::move(alts));
    }
    if (!type->is_string()) return Status::invalid_argument("type at " + where + " must be a string or strings");
    return typed(s, type->get<std::string>(), where);
  }

  Result<int64_t> bound(const ojson& s, const char* key, int64_t fallback, const std::string& where) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 4096) {
      return Status::invalid_argument(std::string(key) + " at " + where + " must be an integer in [0, 4096]");
    }
    return it->get<int64_t>();
  }

  Result<int32_t> typed(const ojson& s, const std::string& type, const std::string& where) {
    if (type == "object") return object(s, where);
    if (type == "array") return array(s, where);
    if (type == "string") {
      PAGODA_ASSIGN_OR_RETURN(const int64_t lo, bound(s, "minLength", 0, where));
      PAGODA_ASSIGN_OR_RETURN(const int64_t hi, bound(s, "maxLength", -1, where));
      if (hi >= 0 && hi < lo) return Status::invalid_argument("maxLength < minLength at " + where);
      if (auto p = s.find("pattern"); p != s.end()) {
        if (!p->is_string()) return Status::invalid_argument("pattern at " + where + " must be a string");
        if (s.contains("minLength") || s.contains("maxLength")) {
          return Status::invalid_argument("pattern with minLength or maxLength at " + where +
                                          " is not supported: put the length in the pattern ({m,n})");
        }
        return pattern_rule(p->get<std::string>(), where);
      }
      return string_rule(lo, hi);
    }
    if (type == "number") return number_rule(false);
    if (type == "integer") return number_rule(true);
    if (type == "boolean") return b_.rule("boolean", {{lit("true")}, {lit("false")}});
    if (type == "null") return b_.literal("null");
    return Status::invalid_argument("type '" + type + "' at " + where + " is not a JSON Schema type");
  }

  Result<int32_t> array(const ojson& s, const std::string& where) {
    int32_t item = -1;
    if (auto it = s.find("items"); it != s.end()) {
      PAGODA_ASSIGN_OR_RETURN(item, schema(*it, where + "/items"));
    } else {
      item = any_value();
    }
    PAGODA_ASSIGN_OR_RETURN(const int64_t lo, bound(s, "minItems", 0, where));
    PAGODA_ASSIGN_OR_RETURN(const int64_t hi, bound(s, "maxItems", -1, where));
    if (hi >= 0 && hi < lo) return Status::invalid_argument("maxItems < minItems at " + where);
    const int32_t comma = b_.rule("comma", {{ref(ws_), lit(","), ref(ws_)}});
    if (hi == 0) return b_.rule("array", {{lit("["), ref(ws_), lit("]")}});
    const int32_t items = b_.repeat(ref(item), std::max<int64_t>(lo, 1), hi, comma, "items");
    std::vector<Alternative> alts = {{lit("["), ref(ws_), ref(items), ref(ws_), lit("]")}};
    if (lo == 0) alts.push_back({lit("["), ref(ws_), lit("]")});
    return b_.rule("array", std::move(alts));
  }

  // Properties in order: first[i] = none written yet, from property i; rest[i] = some written.
  Result<int32_t> object(const ojson& s, const std::string& where) {
    const ojson* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props == nullptr || props->empty()) {
      if (props != nullptr && !props->is_object()) return Status::invalid_argument("properties at " + where + " must be an object");
      const auto ap = s.find("additionalProperties");
      if (ap != s.end() && ap->is_boolean() && !ap->get<bool>()) return b_.rule("empty", {{lit("{"), ref(ws_), lit("}")}});
      any_value();
      return any_object_;
    }
    if (!props->is_object()) return Status::invalid_argument("properties at " + where + " must be an object");
    std::set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return Status::invalid_argument("required at " + where + " must be an array");
      for (const ojson& name : *r) {
        if (!name.is_string() || !props->contains(name.get<std::string>())) {
          return Status::invalid_argument("required at " + where + " names " + name.dump() + ", not a property");
        }
        required.insert(name.get<std::string>());
      }
    }
    std::vector<int32_t> kv;
    std::vector<bool> optional;
    for (auto it = props->begin(); it != props->end(); ++it) {
      PAGODA_ASSIGN_OR_RETURN(const int32_t value, schema(it.value(), where + "/properties/" + it.key()));
      kv.push_back(b_.rule("kv", {{lit(ojson(it.key()).dump()), ref(ws_), lit(":"), ref(ws_), ref(value)}}));
      optional.push_back(required.count(it.key()) == 0);
    }
    // first[i]: no property written yet, property i next (or skipped when optional), at least
    // one written; rest[i]: some written, from property i on. All optional: "{}" too.
    const size_t n = kv.size();
    std::vector<int32_t> first(n), rest(n + 1);
    rest[n] = b_.rule("end", {{}});
    for (size_t i = n; i-- > 0;) {
      std::vector<Alternative> r = {{ref(ws_), lit(","), ref(ws_), ref(kv[i]), ref(rest[i + 1])}};
      if (optional[i]) r.push_back({ref(rest[i + 1])});
      rest[i] = b_.rule("rest", std::move(r));
      std::vector<Alternative> f = {{ref(kv[i]), ref(rest[i + 1])}};
      if (optional[i] && i + 1 < n) f.push_back({ref(first[i + 1])});
      first[i] = b_.rule("first", std::move(f));
    }
    std::vector<Alternative> alts = {{lit("{"), ref(ws_), ref(first[0]), ref(ws_), lit("}")}};
    if (std::all_of(optional.begin(), optional.end(), [](bool o) { return o; })) alts.push_back({lit("{"), ref(ws_), lit("}")});
    return b_.rule("object", std::move(alts));
  }

  Result<int32_t> reference(const ojson& r, const std::string& where) {
    if (!r.is_string()) return Status::invalid_argument("$ref at " + where + " must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const ojson* def = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (target.rfind(p, 0) == 0) {
        const std::string container = p.substr(2, p.size() - 3);
        const std::string name = target.substr(p.size());
        if (root_.is_object() && root_.contains(container) && root_[container].contains(name)) def = &root_[container][name];
      }
    }
    if (target == "#") def = &root_;
    if (def == nullptr) return Status::invalid_argument("$ref at " + where + ": '" + target + "' is not in #/$defs or #/definitions");
    const int32_t rule = g_.add_rule("ref " + target);  // before compiling: recursion refers to it
    refs_[target] = rule;
    PAGODA_ASSIGN_OR_RETURN(const int32_t body, schema(*def, target));
    g_.add_alternative(rule, {ref(body)});
    return rule;
  }

  static constexpr int kMaxNesting = 32;
  int depth_ = 0;
  const ojson& root_;
  Grammar& g_;
  GrammarBuilder b_;
  int32_t ws_ = -1;
  int32_t str_char_ = -1;
  int32_t any_value_ = -1;
  int32_t any_object_ = -1;
  std::map<std::string, int32_t> refs_;
};

}  // namespace

Result<Grammar> grammar_from_json_schema(const ojson& schema) {
  Grammar g;
  Compiler c(schema, g);
  PAGODA_ASSIGN_OR_RETURN(const int32_t value, c.value());
  g.root = GrammarBuilder(g).rule("root", {{ref(c.ws()), ref(value), ref(c.ws())}});
  return g;
}

Grammar json_object_grammar() {
  const ojson empty = ojson::object();
  Grammar g;
  Compiler c(empty, g);
  const int32_t object = c.any_object();
  g.root = GrammarBuilder(g).rule("root", {{ref(c.ws()), ref(object), ref(c.ws())}});
  return g;
}

Result<Grammar> call_grammar(const std::vector<CallShape>& calls, std::string_view trail) {
  Grammar g;
  std::vector<Alternative> alts;
  for (const CallShape& call : calls) {
    Compiler c(call.arguments_schema, g);
    PAGODA_ASSIGN_OR_RETURN(const int32_t args, c.value());
    alts.push_back({ref(c.literal(call.lead)), ref(c.ws()), ref(args), ref(c.literal(trail))});
  }
  if (alts.empty()) return Status::invalid_argument("a tool call grammar needs at least one call");
  g.root = GrammarBuilder(g).rule("root", std::move(alts));
  return g;
}

}  // namespace pagoda::structured
