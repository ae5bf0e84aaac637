// A reference for the JSON-schema grammars, written independently of them: a text is accepted
// iff it is JSON (nlohmann's parser), its whitespace outside strings is only runs of at most
// two of space / tab / newline, its numbers have at most 16 integer, 16 fraction and 2 exponent
// digits, and its value validates against the schema (the supported keywords; object keys in
// the schema's property order, none missing that is required, none extra).
#pragma once

#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace pagoda::testing {

using ojson = nlohmann::ordered_json;

// The lexical rules outside strings (whitespace runs, digit counts).
inline bool reference_lexical(std::string_view t) {
  size_t i = 0;
  while (i < t.size()) {
    const char c = t[i];
    if (c == '"') {  // skip the string
      ++i;
      while (i < t.size() && t[i] != '"') i += t[i] == '\\' ? 2 : 1;
      ++i;
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      size_t run = 0;
      while (i < t.size() && (t[i] == ' ' || t[i] == '\t' || t[i] == '\n' || t[i] == '\r')) {
        if (t[i] == '\r') return false;
        ++run, ++i;
      }
      if (run > 2) return false;
      continue;
    }
    if (c == '-' || std::isdigit(static_cast<unsigned char>(c))) {
      if (c == '-') ++i;
      size_t d = 0;
      while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++d, ++i;
      if (d > 16) return false;
      if (i < t.size() && t[i] == '.') {
        ++i, d = 0;
        while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++d, ++i;
        if (d > 16) return false;
      }
      if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
        ++i;
        if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
        d = 0;
        while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++d, ++i;
        if (d > 2) return false;
      }
      continue;
    }
    ++i;
  }
  return true;
}

inline bool reference_validate(const ojson& root, const ojson& s, const ojson& v, int depth = 0) {
  if (depth > 64) return false;
  if (s.is_boolean()) return s.get<bool>();
  if (auto r = s.find("$ref"); r != s.end()) {
    const std::string target = r->get<std::string>();
    if (target == "#") return reference_validate(root, root, v, depth + 1);
    const std::string name = target.substr(target.find_last_of('/') + 1);
    const char* container = target.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
    return reference_validate(root, root[container][name], v, depth + 1);
  }
  if (auto c = s.find("const"); c != s.end()) return v == *c;
  if (auto e = s.find("enum"); e != s.end()) {
    for (const ojson& x : *e) {
      if (x == v) return true;
    }
    return false;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (auto a = s.find(key); a != s.end()) {
      for (const ojson& alt : *a) {
        if (reference_validate(root, alt, v, depth + 1)) return true;
      }
      return false;
    }
  }
  auto type_ok = [&](const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "number") return v.is_number();
    if (t == "integer") return v.is_number_integer();
    if (t == "boolean") return v.is_boolean();
    if (t == "null") return v.is_null();
    return false;
  };
  if (auto t = s.find("type"); t != s.end()) {
    bool ok = false;
    if (t->is_string()) ok = type_ok(t->get<std::string>());
    for (const ojson& x : *t) ok = ok || (x.is_string() && type_ok(x.get<std::string>()));
    if (!ok) return false;
  }
  if (v.is_object() && s.contains("properties") && !s["properties"].empty()) {
    const ojson& props = s["properties"];
    auto p = props.begin();
    for (auto it = v.begin(); it != v.end(); ++it) {  // keys: a subsequence of the properties
      while (p != props.end() && p.key() != it.key()) ++p;
      if (p == props.end()) return false;
      if (!reference_validate(root, p.value(), it.value(), depth + 1)) return false;
      ++p;
    }
    if (auto r = s.find("required"); r != s.end()) {
      for (const ojson& name : *r) {
        if (!v.contains(name.get<std::string>())) return false;
      }
    }
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (auto items = s.find("items"); items != s.end()) {
      for (const ojson& x : v) {
        if (!reference_validate(root, *items, x, depth + 1)) return false;
      }
    }
  }
  if (v.is_string()) {
    const size_t n = v.get<std::string>().size();  // ASCII and single-byte escapes in the tests
    if (s.contains("minLength") && n < s["minLength"].get<size_t>()) return false;
    if (s.contains("maxLength") && n > s["maxLength"].get<size_t>()) return false;
  }
  return true;
}

inline bool reference_accepts(const ojson& schema, std::string_view text) {
  if (!reference_lexical(text)) return false;
  const ojson v = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return false;
  return reference_validate(schema, schema, v);
}

}  // namespace pagoda::testing
