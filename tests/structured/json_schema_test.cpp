// The JSON-schema grammars against the independent reference (json_reference.h): random valid
// instances of each schema, with random spacing, and their random one-byte mutations and
// truncations are accepted by the matcher exactly when the reference accepts them; every prefix
// of an accepted text keeps the matcher alive. Unsupported keywords are errors naming them.
#include <gtest/gtest.h>

#include "structured/json_reference.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"

namespace pagoda::structured {
namespace {

using testing::ojson;

struct Rng {
  uint64_t s;
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
  uint32_t below(uint32_t n) { return next() % n; }
};

const char* kSchemas[] = {
    R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
        "ok": {"type": "boolean"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        "score": {"type": "number"}}, "required": ["name", "age"], "additionalProperties": false})",
    R"({"anyOf": [{"type": "null"}, {"type": "number"}, {"type": "array", "items": {"type": "string", "maxLength": 3},
        "minItems": 1, "maxItems": 2}]})",
    R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"}, "kids": {"type": "array",
        "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["v"]}}, "$ref": "#/$defs/node"})",
    R"({"type": "object", "properties": {"a": {"type": ["string", "null"]}, "b": {"const": "x"}, "c": {}}})",
    R"({})",
};

std::string ws(Rng& r) {
  const char* options[] = {"", "", "", " ", "\n", "  ", " \n", "\t"};
  return options[r.below(8)];
}

std::string random_string(Rng& r, size_t max_len) {
  std::string s = "\"";
  const size_t n = r.below(static_cast<uint32_t>(std::min<size_t>(max_len, 8) + 1));
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = r.below(12);
    s += k == 0 ? std::string("\\n") : k == 1 ? std::string("\\\"") : std::string(1, static_cast<char>('a' + r.below(26)));
  }
  return s + "\"";
}

std::string random_number(Rng& r, bool integer) {
  std::string s = r.below(3) == 0 ? "-" : "";
  s += r.below(4) == 0 ? "0" : std::to_string(1 + r.below(99999));
  if (!integer && r.below(2) == 0) s += "." + std::to_string(r.below(1000));
  if (!integer && r.below(4) == 0) s += "e" + std::string(r.below(2) ? "-" : "") + std::to_string(r.below(99));
  return s;
}

// A random text the schema allows (the generator knows the grammar's spacing rules).
std::string instance(const ojson& root, const ojson& s, Rng& r, int depth) {
  if (auto ref = s.find("$ref"); ref != s.end()) {
    const std::string name = ref->get<std::string>().substr(ref->get<std::string>().find_last_of('/') + 1);
    return instance(root, root["$defs"][name], r, depth + 1);
  }
  if (auto c = s.find("const"); c != s.end()) return c->dump();
  if (auto e = s.find("enum"); e != s.end()) return (*e)[r.below(static_cast<uint32_t>(e->size()))].dump();
  if (auto a = s.find("anyOf"); a != s.end()) return instance(root, (*a)[r.below(static_cast<uint32_t>(a->size()))], r, depth + 1);
  std::string type;
  if (auto t = s.find("type"); t != s.end()) {
    type = t->is_string() ? t->get<std::string>() : (*t)[r.below(static_cast<uint32_t>(t->size()))].get<std::string>();
  } else {
    const char* any[] = {"string", "number", "boolean", "null", "array", "object"};
    type = any[r.below(depth > 2 ? 4 : 6)];
  }
  if (type == "string") return random_string(r, s.value("maxLength", size_t{8}));
  if (type == "number" || type == "integer") return random_number(r, type == "integer");
  if (type == "boolean") return r.below(2) ? "true" : "false";
  if (type == "null") return "null";
  if (type == "array") {
    const size_t lo = s.value("minItems", size_t{0}), hi = s.value("maxItems", size_t{3});
    const size_t n = depth > 3 ? lo : lo + r.below(static_cast<uint32_t>(hi - lo + 1));
    const ojson item = s.contains("items") ? s["items"] : ojson::object();
    std::string out = "[" + ws(r);
    for (size_t i = 0; i < n; ++i) out += (i ? ws(r) + "," + ws(r) : "") + instance(root, item, r, depth + 1);
    return out + (n ? ws(r) : "") + "]";
  }
  // object
  std::string out = "{" + ws(r);
  bool any = false;
  if (s.contains("properties")) {
    const ojson required = s.value("required", ojson::array());
    for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
      const bool req = std::find(required.begin(), required.end(), ojson(it.key())) != required.end();
      if (!req && (depth > 3 || r.below(2) == 0)) continue;
      out += (any ? ws(r) + "," + ws(r) : "") + ojson(it.key()).dump() + ws(r) + ":" + ws(r) + instance(root, it.value(), r, depth + 1);
      any = true;
    }
  } else if (depth < 3) {
    for (uint32_t i = r.below(3); i > 0; --i) {
      out += (any ? "," + ws(r) : "") + random_string(r, 4) + ":" + ws(r) + instance(root, ojson::object(), r, depth + 1);
      any = true;
    }
  }
  return out + (any ? ws(r) : "") + "}";
}

bool matcher_accepts(const Grammar& g, std::string_view text, bool* prefixes_alive = nullptr) {
  MatchState s = initial_state(g), next;
  for (unsigned char c : text) {
    advance(g, s, c, next);
    if (next.empty()) return false;
    std::swap(s, next);
  }
  if (prefixes_alive != nullptr) *prefixes_alive = true;
  return accepting(s);
}

TEST(JsonSchemaGrammar, AgreesWithTheReferenceOnRandomTexts) {
  Rng r{17};
  const std::string alphabet = "{}[],:\" 0123456789abcdeftnrul-.\n\\xE";
  int64_t accepted = 0, refused = 0;
  for (const char* text : kSchemas) {
    const ojson schema = ojson::parse(text);
    SCOPED_TRACE(text);
    auto g = grammar_from_json_schema(schema);
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    for (int trial = 0; trial < 600; ++trial) {
      std::string t = instance(schema, schema, r, 0);
      t = ws(r) + t + ws(r);
      ASSERT_TRUE(testing::reference_accepts(schema, t)) << "generator made an invalid text: " << t;
      ASSERT_TRUE(matcher_accepts(*g, t)) << t;
      ++accepted;
      for (int m = 0; m < 4; ++m) {
        std::string u = t;
        const uint32_t op = r.below(4);
        const size_t at = r.below(static_cast<uint32_t>(u.size() + 1));
        const char c = alphabet[r.below(static_cast<uint32_t>(alphabet.size()))];
        if (op == 0 && at < u.size()) u.erase(at, 1);
        else if (op == 1) u.insert(at, 1, c);
        else if (op == 2 && at < u.size()) u[at] = c;
        else u = u.substr(0, at);
        const bool want = testing::reference_accepts(schema, u);
        ASSERT_EQ(matcher_accepts(*g, u), want) << "mutated from " << t << " to " << u;
        (want ? accepted : refused) += 1;
      }
    }
  }
  EXPECT_GT(refused, 1000);  // the mutations do reach refusals
  EXPECT_GT(accepted, 3000);
}

TEST(JsonSchemaGrammar, JsonObjectModeAcceptsObjectsOnly) {
  const Grammar g = json_object_grammar();
  EXPECT_TRUE(matcher_accepts(g, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_TRUE(matcher_accepts(g, " {}"));
  EXPECT_FALSE(matcher_accepts(g, "[1]"));
  EXPECT_FALSE(matcher_accepts(g, "\"x\""));
  EXPECT_FALSE(matcher_accepts(g, "{\"a\": }"));
  EXPECT_FALSE(matcher_accepts(g, "{\"a\": 1"));  // not complete
}

TEST(JsonSchemaGrammar, UnsupportedKeywordsAreNamed) {
  auto err = [](const char* text) {
    auto g = grammar_from_json_schema(ojson::parse(text));
    EXPECT_FALSE(g.is_ok()) << text;
    return g.is_ok() ? std::string() : g.status().message();
  };
  EXPECT_NE(err(R"({"type": "string", "pattern": "(a)\\1"})").find("pattern at #: regex: backreferences"), std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}})").find("'format' at #/properties/d"),
            std::string::npos);
  EXPECT_NE(err(R"({"type": "integer", "minimum": 3})").find("minimum"), std::string::npos);
  EXPECT_NE(err(R"({"type": "array", "prefixItems": []})").find("prefixItems"), std::string::npos);
  EXPECT_NE(err(R"({"type": "strange"})").find("strange"), std::string::npos);
  EXPECT_NE(err(R"({"$ref": "#/$defs/missing"})").find("missing"), std::string::npos);
  EXPECT_NE(err(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})").find("required"), std::string::npos);
  EXPECT_NE(err(R"({"type": "array", "minItems": 3, "maxItems": 1})").find("maxItems"), std::string::npos);
  EXPECT_NE(err(R"(false)").find("false"), std::string::npos);
  // An object without properties: any object, or only {} when nothing else is allowed.
  auto empty = grammar_from_json_schema(ojson::parse(R"({"type": "object", "properties": {}, "additionalProperties": false})"));
  ASSERT_TRUE(empty.is_ok());
  MatchState s = initial_state(*empty);
  EXPECT_FALSE(advance_text(*empty, s, "{\"a\""));
  EXPECT_TRUE(advance_text(*empty, s, "{ }") && accepting(s));
  // Annotations are fine.
  EXPECT_TRUE(grammar_from_json_schema(ojson::parse(R"({"title": "t", "description": "d", "type": "boolean", "default": true})")).is_ok());
}

TEST(JsonSchemaGrammar, FiniteSchemasEndWhereTheyMust) {
  auto g = grammar_from_json_schema(ojson::parse(R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "required": ["a"]})"));
  ASSERT_TRUE(g.is_ok());
  MatchState s = initial_state(*g);
  ASSERT_TRUE(advance_text(*g, s, "{\"a\": true}"));
  EXPECT_TRUE(accepting(s));
  EXPECT_TRUE(can_continue(s));  // trailing whitespace may follow
  ASSERT_TRUE(advance_text(*g, s, "\n\n"));
  EXPECT_TRUE(accepting(s));
  EXPECT_FALSE(can_continue(s));  // nothing more: the reply must end
  EXPECT_FALSE(advance_text(*g, s, " "));
}

}  // namespace
}  // namespace pagoda::structured

namespace pagoda::structured {
namespace {

TEST(JsonSchemaGrammar, DeepNestingIsRefusedNotOverflowed) {
  std::string deep = R"({"type": "string"})";
  for (int i = 0; i < 40; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  auto g = grammar_from_json_schema(testing::ojson::parse(deep));
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("nests deeper"), std::string::npos);
  std::string ok = R"({"type": "string"})";
  for (int i = 0; i < 20; ++i) ok = R"({"type": "array", "items": )" + ok + ", \"maxItems\": 1}";
  auto g2 = grammar_from_json_schema(testing::ojson::parse(ok));
  ASSERT_TRUE(g2.is_ok());
  MatchState s = initial_state(*g2);
  EXPECT_TRUE(advance_text(*g2, s, std::string(20, '[') + "\"x\"" + std::string(20, ']')));
  EXPECT_TRUE(accepting(s));
}

}  // namespace
}  // namespace pagoda::structured
