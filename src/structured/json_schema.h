// JSON Schema -> Grammar: the replies a schema allows, as bytes (OpenAI's response_format
// json_schema, and json_object's "any JSON object").
//
// Supported: type (one or a list) object / array / string / number / integer / boolean /
// null; properties with required (properties are written in the schema's order; optional ones
// may be left out; no other property is ever generated, as OpenAI's strict mode requires);
// items with minItems / maxItems; minLength / maxLength; pattern (regex.h's syntax, read as
// JSON Schema reads it: found anywhere in the string unless anchored with ^ / $; the string's
// characters are then those JSON writes unescaped); enum and const (any JSON values);
// anyOf and oneOf (as alternatives: oneOf's exclusivity is not checked); an object without
// properties is any object, or only {} with additionalProperties: false; $ref to "#/$defs/..."
// or "#/definitions/..." (recursion allowed); an empty schema (any value). Annotations (title,
// description, default, examples, $schema, $id, $comment, strict, and additionalProperties:
// false) are ignored. Anything else (format, minimum, prefixItems, ...) is an error
// naming the keyword and where it is, never silently dropped. Schemas nested more than 32
// levels deep are refused.
//
// Whitespace: up to two of space / tab / newline between any two tokens of the JSON text (and
// before and after it), so a model's own spacing is allowed but cannot run on forever. Numbers
// have at most 16 integer, 16 fraction and 2 exponent digits. With maxLength on strings and
// maxItems on arrays, a schema without recursion allows only finitely many replies.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "structured/grammar.h"

namespace pagoda::structured {

Result<Grammar> grammar_from_json_schema(const nlohmann::ordered_json& schema);
// Any JSON object (response_format json_object).
Grammar json_object_grammar();

// The rest of a tool call after its forced opening: one of `calls`, each its `lead` text (the
// rest of the name and the syntax up to the arguments), an arguments value of its schema, then
// `trail` (what closes the call). A forced call's arguments are thereby valid too.
struct CallShape {
  std::string lead;
  nlohmann::ordered_json arguments_schema;  // the tool's "parameters" ({"type": "object"} if none)
};
Result<Grammar> call_grammar(const std::vector<CallShape>& calls, std::string_view trail);

}  // namespace pagoda::structured
