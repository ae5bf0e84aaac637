#include "model/text/chat_tools.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <utility>

namespace pagoda::model {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::array<std::pair<ToolSyntax, const char*>, 5> kToolNames = {{
    {ToolSyntax::kNone, "none"},
    {ToolSyntax::kHermes, "hermes"},
    {ToolSyntax::kLlama3, "llama3"},
    {ToolSyntax::kMistral, "mistral"},
    {ToolSyntax::kDeepSeek, "deepseek"},
}};

// A JSON string as Python prints it with ensure_ascii=False: only '"', '\\' and control
// characters are escaped (\n, \t, ... by name, the rest as \u00XX).
void python_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void python_dump(const ojson& v, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.type()) {
    case ojson::value_t::object: {
      if (v.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += indent > 0 ? "," : ", ";
        first = false;
        if (indent > 0) newline(depth + 1);
        python_string(it.key(), out);
        out += ": ";
        python_dump(it.value(), indent, depth + 1, out);
      }
      if (indent > 0) newline(depth);
      out += '}';
      return;
    }
    case ojson::value_t::array: {
      if (v.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += indent > 0 ? "," : ", ";
        if (indent > 0) newline(depth + 1);
        python_dump(v[i], indent, depth + 1, out);
      }
      if (indent > 0) newline(depth);
      out += ']';
      return;
    }
    case ojson::value_t::string: python_string(v.get<std::string>(), out); return;
    case ojson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; return;
    case ojson::value_t::null: out += "null"; return;
    case ojson::value_t::number_float: {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e16) {
        char buf[32];
        std::snprintf(buf, sizeof(buf), "%.1f", d);  // Python prints 2.0, not 2
        out += buf;
      } else {
        out += v.dump();
      }
      return;
    }
    default: out += v.dump(); return;  // integers
  }
}

}  // namespace

const char* tool_syntax_name(ToolSyntax syntax) {
  for (const auto& [s, name] : kToolNames) {
    if (s == syntax) return name;
  }
  return "?";
}

std::optional<ToolSyntax> tool_syntax_from_name(std::string_view name) {
  for (const auto& [s, n] : kToolNames) {
    if (name == n) return s;
  }
  return std::nullopt;
}

std::string tool_syntax_names() {
  std::string out;
  for (const auto& [s, n] : kToolNames) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

const char* reasoning_syntax_name(ReasoningSyntax syntax) { return syntax == ReasoningSyntax::kThink ? "think" : "none"; }

std::optional<ReasoningSyntax> reasoning_syntax_from_name(std::string_view name) {
  if (name == "think") return ReasoningSyntax::kThink;
  if (name == "none") return ReasoningSyntax::kNone;
  return std::nullopt;
}

Result<std::vector<ChatTool>> chat_tools_from_json(const ojson& tools, std::string* field) {
  auto fail = [&](const std::string& at, const std::string& why) -> Status {
    if (field != nullptr) *field = at;
    return Status::invalid_argument(at + ": " + why);
  };
  if (!tools.is_array()) return fail("tools", "must be an array of tools");
  std::vector<ChatTool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const ojson& t = tools[i];
    if (!t.is_object()) return fail(at, "must be an object");
    auto type = t.find("type");
    if (type == t.end() || !type->is_string() || type->get<std::string>() != "function") {
      return fail(at + ".type", "must be \"function\" (the only kind of tool)");
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return fail(at + ".function", "must be an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
      return fail(at + ".function.name", "must be a non-empty string");
    }
    const std::string n = name->get<std::string>();
    if (n.size() > 64 || n.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") != std::string::npos) {
      return fail(at + ".function.name", "must be 1 to 64 of a-z, A-Z, 0-9, '_', '-', '.' (OpenAI's rule)");
    }
    auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_null() && !params->is_object()) {
      return fail(at + ".function.parameters", "must be a JSON Schema object");
    }
    auto desc = fn->find("description");
    if (desc != fn->end() && !desc->is_null() && !desc->is_string()) return fail(at + ".function.description", "must be a string");
    for (const ChatTool& earlier : out) {
      if (earlier.name == n) return fail(at + ".function.name", "'" + n + "' is offered twice");
    }
    out.push_back({n, t});
  }
  return out;
}

std::string python_json(const ojson& value, int indent) {
  std::string out;
  python_dump(value, indent, 0, out);
  return out;
}

}  // namespace pagoda::model
