#include "server/openai_request.h"

#include "model/text/chat_messages.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace pagoda::server {

namespace {

using nlohmann::json;

// Reads fields of one JSON object; the first error is kept (with its field name) and later reads
// become no-ops, so a parser reads like a list of fields.
class FieldReader {
 public:
  explicit FieldReader(const json& object) : object_(object) {}

  bool ok() const { return status_.is_ok(); }
  const Status& status() const { return status_; }
  const std::string& param() const { return param_; }

  void fail(const std::string& param, const std::string& message) {
    if (!ok()) return;
    param_ = param;
    status_ = Status::invalid_argument(param + ": " + message);
  }

  // The field when present and not null.
  const json* get(const char* name) const {
    if (!ok()) return nullptr;
    auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  void read_bool(const char* name, bool& out) {
    if (const json* v = get(name)) {
      if (!v->is_boolean()) return fail(name, "must be a boolean");
      out = v->get<bool>();
    }
  }
  void read_number(const char* name, double lo, double hi, float& out) {
    if (const json* v = get(name)) {
      if (!v->is_number()) return fail(name, "must be a number");
      const double x = v->get<double>();
      if (!std::isfinite(x) || x < lo || x > hi) {
        return fail(name, "must be between " + trim_number(lo) + " and " + trim_number(hi) + ", got " + v->dump());
      }
      out = static_cast<float>(x);
    }
  }
  // Integers only (2.0 is a float in JSON and rejected, as OpenAI does).
  template <typename Int>
  void read_int(const char* name, int64_t lo, int64_t hi, Int& out) {
    if (const json* v = get(name)) {
      if (!v->is_number_integer()) return fail(name, "must be an integer");
      if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return fail(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + v->dump());
      }
      const int64_t x = v->get<int64_t>();
      if (x < lo || x > hi) {
        return fail(name, "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + v->dump());
      }
      out = static_cast<Int>(x);
    }
  }
  void read_string(const char* name, std::string& out) {
    if (const json* v = get(name)) {
      if (!v->is_string()) return fail(name, "must be a string");
      out = v->get<std::string>();
    }
  }

 private:
  static std::string trim_number(double x) {
    std::string s = std::to_string(x);
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

  const json& object_;
  Status status_;
  std::string param_;
};

bool token_ids(const json& v, int32_t vocab_size, std::vector<int32_t>& out) {
  out.clear();
  for (const json& id : v) {
    if (!id.is_number_integer()) return false;
    const int64_t x = id.get<int64_t>();
    if (x < 0 || x >= vocab_size || (id.is_number_unsigned() && id.get<uint64_t>() >= static_cast<uint64_t>(vocab_size))) {
      return false;
    }
    out.push_back(static_cast<int32_t>(x));
  }
  return true;
}

Result<json> parse_object(std::string_view body) {
  json j;
  try {
    j = json::parse(body.begin(), body.end());
  } catch (const json::exception& e) {
    return Status::invalid_argument(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return Status::invalid_argument("the body must be a JSON object");
  return j;
}

// Fields shared by both endpoints.
// kv_select: {"method", "budget", "recent", "observe"}; see ApiRequest::kv_select.
void read_kv_select(FieldReader& r, ApiRequest& req) {
  const json* v = r.get("kv_select");
  if (v == nullptr) return;
  if (!v->is_object()) return r.fail("kv_select", "must be an object {\"method\": \"h2o\" | \"snapkv\" | \"off\", \"budget\": N, ...}");
  FieldReader f(*v);
  std::string method;
  f.read_string("method", method);
  kvcache::KvSelectParams p;
  const int64_t kMax = int64_t{1} << 40;
  f.read_int("budget", 0, kMax, p.budget);
  f.read_int("recent", 1, kMax, p.recent);
  f.read_int("observe", 1, kMax, p.observe);
  for (const auto& [key, value] : v->items()) {
    if (f.ok() && key != "method" && key != "budget" && key != "recent" && key != "observe") {
      f.fail(key, "unknown field (kv_select takes method, budget, recent, observe)");
    }
  }
  if (!f.ok()) return r.fail("kv_select." + f.param(), f.status().message().substr(f.param().size() + 2));
  if (f.get("method") == nullptr) return r.fail("kv_select.method", "is required (\"h2o\", \"snapkv\" or \"off\")");
  const std::optional<kvcache::KvSelectMethod> m = kvcache::kv_select_method_from_name(method);
  if (!m || method.empty()) return r.fail("kv_select.method", "unknown method \"" + method + "\" (\"h2o\", \"snapkv\" or \"off\")");
  p.method = *m;
  if (p.on()) {
    if (f.get("budget") == nullptr) return r.fail("kv_select.budget", "is required (the most tokens' KV kept)");
    if (p.method != kvcache::KvSelectMethod::kSnapKv && f.get("observe") != nullptr) {
      return r.fail("kv_select.observe", "is SnapKV's observation window; h2o takes none");
    }
    Status s = kvcache::normalize_kv_select(p);
    if (!s.is_ok()) return r.fail("kv_select", s.message());
  } else if (f.get("budget") != nullptr || f.get("recent") != nullptr || f.get("observe") != nullptr) {
    return r.fail("kv_select", "method \"off\" takes no budget, recent or observe");
  }
  req.kv_select = p;
}

// logit_bias: {"token id": bias, ...} (OpenAI: ids as decimal strings, bias in [-100, 100]).
void read_logit_bias(FieldReader& r, const RequestLimits& limits, ApiRequest& req) {
  const json* bias = r.get("logit_bias");
  if (bias == nullptr) return;
  if (!bias->is_object()) return r.fail("logit_bias", "must be an object of token id -> bias");
  if (bias->size() > static_cast<size_t>(limits.max_logit_bias)) {
    return r.fail("logit_bias", "at most " + std::to_string(limits.max_logit_bias) + " entries");
  }
  auto& out = req.sampling.logit_bias;
  for (auto it = bias->begin(); it != bias->end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    const bool digits = !key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos;
    if (digits) id = std::stoll(key);
    if (!digits || id >= limits.vocab_size) {
      return r.fail("logit_bias", "\"" + key + "\" is not a token id in [0, " + std::to_string(limits.vocab_size) + ")");
    }
    if (!it->is_number()) return r.fail("logit_bias", "the bias of token " + key + " must be a number");
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < -100 || v > 100) {
      return r.fail("logit_bias", "the bias of token " + key + " must be between -100 and 100, got " + it->dump());
    }
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
  }
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].first == out[i - 1].first) return r.fail("logit_bias", "token " + std::to_string(out[i].first) + " is given twice");
  }
}

// The other constraint fields (ResponseFormat): a GBNF grammar, a regex, or choices. Limits:
// 64 KiB of grammar or pattern text, 1,024 choices.
void read_constraint_fields(FieldReader& r, ApiRequest& req) {
  constexpr size_t kMaxText = 64 << 10, kMaxChoices = 1024;
  std::string given;  // the first constraint field seen (two are an error)
  const auto text = [&](const std::string& param, const json& v, ResponseFormat kind) {
    if (!given.empty()) return r.fail(param, "a reply takes one constraint; " + given + " is given too");
    given = param;
    if (!v.is_string() || v.get_ref<const std::string&>().empty()) return r.fail(param, "must be a non-empty string");
    if (v.get_ref<const std::string&>().size() > kMaxText) return r.fail(param, "is longer than 64 KiB");
    req.response_format = kind;
    req.reply_constraint = v.get<std::string>();
    req.reply_constraint_param = param;
  };
  const auto choices = [&](const std::string& param, const json& v) {
    if (!given.empty()) return r.fail(param, "a reply takes one constraint; " + given + " is given too");
    given = param;
    if (!v.is_array() || v.empty() || v.size() > kMaxChoices) return r.fail(param, "must be a list of 1 to 1,024 strings");
    for (const json& c : v) {
      if (!c.is_string()) return r.fail(param, "must be a list of strings");
      req.reply_choices.push_back(c.get<std::string>());
    }
    req.response_format = ResponseFormat::kChoice;
    req.reply_constraint_param = param;
  };
  if (const json* v = r.get("grammar")) text("grammar", *v, ResponseFormat::kGrammar);
  if (const json* v = r.get("guided_grammar")) text("guided_grammar", *v, ResponseFormat::kGrammar);
  if (const json* v = r.get("guided_regex")) text("guided_regex", *v, ResponseFormat::kRegex);
  if (const json* v = r.get("guided_choice")) choices("guided_choice", *v);
  if (const json* so = r.get("structured_outputs")) {
    if (!so->is_object()) return r.fail("structured_outputs", "must be an object");
    for (auto it = so->begin(); it != so->end() && r.ok(); ++it) {
      const std::string param = "structured_outputs." + it.key();
      if (it->is_null() || it.key() == "disable_any_whitespace" || it.key() == "disable_additional_properties") continue;
      if (it.key() == "grammar") {
        text(param, *it, ResponseFormat::kGrammar);
      } else if (it.key() == "regex") {
        text(param, *it, ResponseFormat::kRegex);
      } else if (it.key() == "choice") {
        choices(param, *it);
      } else {
        r.fail(param, "is not supported here (grammar, regex or choice; JSON goes in response_format)");
      }
    }
  }
}

// response_format: {"type": "text" | "json_object" | "json_schema", "json_schema": {"name",
// "schema", "strict"}}. The schema is kept in the client's key order (reply_schema): properties
// are generated in that order.
void read_response_format(FieldReader& r, ApiRequest& req) {
  // Other engines' JSON fields would be ignored as unknown: refused instead.
  for (const char* other : {"json_schema", "guided_json"}) {
    if (r.get(other) != nullptr) {
      return r.fail(other, "is not supported: constrain replies with response_format (json_object or json_schema)");
    }
  }
  read_constraint_fields(r, req);
  if (!r.ok()) return;
  const bool constrained = req.response_format != ResponseFormat::kText;
  const json* format = r.get("response_format");
  if (format == nullptr) return;
  const json* type = format->is_object() && format->contains("type") ? &(*format)["type"] : nullptr;
  const std::string t = type != nullptr && type->is_string() ? type->get<std::string>() : "";
  if (t == "text") return;
  if (constrained) return r.fail("response_format", "a reply takes one constraint; a grammar, regex or choice is given too");
  if (t == "json_object") {
    req.response_format = ResponseFormat::kJsonObject;
    return;
  }
  if (t != "json_schema") {
    return r.fail("response_format", "type must be \"text\", \"json_object\" or \"json_schema\"");
  }
  const json* spec = format->contains("json_schema") ? &(*format)["json_schema"] : nullptr;
  if (spec == nullptr || !spec->is_object() || !spec->contains("schema") ||
      !((*spec)["schema"].is_object() || (*spec)["schema"].is_boolean())) {
    return r.fail("response_format.json_schema.schema", "must be a JSON Schema object");
  }
  req.response_format = ResponseFormat::kJsonSchema;
}

void read_common(FieldReader& r, const RequestLimits& limits, ApiRequest& req) {
  req.sampling = engine::SamplingParams{};
  req.sampling.temperature = 1.0f;
  req.sampling.top_k = 0;
  req.sampling.top_p = 1.0f;
  req.sampling.min_p = 0.0f;
  req.sampling.repetition_penalty = 1.0f;
  r.read_string("model", req.model);
  r.read_number("temperature", 0, 2, req.sampling.temperature);
  r.read_number("top_p", 0, 1, req.sampling.top_p);
  if (r.ok() && r.get("top_p") != nullptr && req.sampling.top_p <= 0) r.fail("top_p", "must be greater than 0");
  r.read_int("top_k", -1, int64_t{1} << 30, req.sampling.top_k);
  r.read_number("min_p", 0, 1, req.sampling.min_p);
  r.read_number("repetition_penalty", 0, 10, req.sampling.repetition_penalty);
  if (r.ok() && req.sampling.repetition_penalty <= 0) r.fail("repetition_penalty", "must be greater than 0");
  if (r.get("seed") != nullptr) {
    int64_t seed = 0;
    r.read_int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), seed);
    req.sampling.seed = static_cast<uint64_t>(seed);
    req.has_seed = true;
  }
  r.read_int("n", 1, limits.max_choices, req.n);
  r.read_bool("stream", req.stream);
  if (const json* so = r.get("stream_options")) {
    if (!so->is_object()) return r.fail("stream_options", "must be an object");
    auto it = so->find("include_usage");
    if (it != so->end() && !it->is_null()) {
      if (!it->is_boolean()) return r.fail("stream_options.include_usage", "must be a boolean");
      req.include_usage = it->get<bool>();
    }
  }
  if (const json* stop = r.get("stop")) {
    if (stop->is_string()) {
      req.stop = {stop->get<std::string>()};
    } else if (stop->is_array()) {
      for (const json& s : *stop) {
        if (!s.is_string()) return r.fail("stop", "must be a string or an array of strings");
        req.stop.push_back(s.get<std::string>());
      }
    } else {
      return r.fail("stop", "must be a string or an array of strings");
    }
    if (req.stop.size() > limits.max_stop) return r.fail("stop", "at most " + std::to_string(limits.max_stop) + " stop strings");
    for (const std::string& s : req.stop) {
      if (s.empty()) return r.fail("stop", "stop strings must not be empty");
    }
  }
  if (const json* ids = r.get("stop_token_ids")) {
    if (!ids->is_array() || !token_ids(*ids, limits.vocab_size, req.stop_token_ids)) {
      return r.fail("stop_token_ids", "must be an array of token ids in [0, " + std::to_string(limits.vocab_size) + ")");
    }
    if (req.stop_token_ids.size() > limits.max_stop) return r.fail("stop_token_ids", "too many ids");
  }
  r.read_bool("ignore_eos", req.ignore_eos);
  r.read_int("priority", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), req.priority);
  r.read_string("cache_salt", req.cache_salt);
  if (r.ok() && r.get("cache_salt") != nullptr && req.cache_salt.empty()) r.fail("cache_salt", "must not be empty");
  read_kv_select(r, req);

  r.read_number("presence_penalty", -2, 2, req.sampling.presence_penalty);
  r.read_number("frequency_penalty", -2, 2, req.sampling.frequency_penalty);
  read_logit_bias(r, limits, req);
  if (const json* tools = r.get("tools"); !req.chat && tools != nullptr && !(tools->is_array() && tools->empty())) {
    r.fail("tools", "tools are a chat completions field (/v1/chat/completions)");
  }
  read_response_format(r, req);
}

void read_max_tokens(FieldReader& r, const char* name, const RequestLimits& limits, ApiRequest& req) {
  if (r.get(name) == nullptr) return;
  r.read_int(name, 1, std::numeric_limits<int64_t>::max(), req.max_tokens);
  if (r.ok() && req.max_tokens > limits.max_context) {
    r.fail(name, std::to_string(req.max_tokens) + " is more than the model's context of " +
                     std::to_string(limits.max_context) + " tokens");
  }
  req.max_tokens_given = true;
}

// n x prompts choices, and the explicit n x prompts x max_tokens budget.
void check_totals(FieldReader& r, const RequestLimits& limits, ApiRequest& req, size_t num_prompts) {
  if (!r.ok()) return;
  const int64_t choices = static_cast<int64_t>(req.n) * static_cast<int64_t>(num_prompts);
  if (choices > limits.max_choices) {
    return r.fail("n", "n x prompts = " + std::to_string(choices) + " choices; the server allows at most " +
                           std::to_string(limits.max_choices));
  }
  if (req.max_tokens_given && choices * req.max_tokens > limits.max_total_tokens) {
    r.fail("max_tokens", "n x prompts x max_tokens = " + std::to_string(choices * req.max_tokens) +
                             " tokens; the server allows at most " + std::to_string(limits.max_total_tokens) + " per request");
  }
}

Status finish(const FieldReader& r, std::string* param) {
  if (!r.ok() && param != nullptr) *param = r.param();
  return r.status();
}

// prompt: "text" | ["text", ...] | [id, ...] | [[id, ...], ...]
void read_prompts(FieldReader& r, const RequestLimits& limits, ApiRequest& req) {
  const json* p = r.get("prompt");
  if (p == nullptr) return r.fail("prompt", "is required");
  const std::string ids_error = "token ids must be integers in [0, " + std::to_string(limits.vocab_size) + ")";
  auto add_text = [&](const json& v) { req.prompts.push_back({false, v.get<std::string>(), {}}); };
  auto add_ids = [&](const json& v) {
    PromptInput in;
    in.is_tokens = true;
    if (!token_ids(v, limits.vocab_size, in.tokens)) return r.fail("prompt", ids_error);
    if (in.tokens.empty()) return r.fail("prompt", "a token-id prompt must not be empty");
    req.prompts.push_back(std::move(in));
  };
  if (p->is_string()) return add_text(*p);
  if (!p->is_array() || p->empty()) return r.fail("prompt", "must be a string, an array of strings or an array of token ids");
  if (p->front().is_number()) return add_ids(*p);
  for (const json& item : *p) {
    if (item.is_string()) {
      add_text(item);
    } else if (item.is_array()) {
      add_ids(item);
    } else {
      return r.fail("prompt", "must be a string, an array of strings or an array of token ids");
    }
    if (!r.ok()) return;
  }
}

// messages: model::chat_messages_from_json (the router reads them the same way).
void read_messages(FieldReader& r, ApiRequest& req) {
  const json* m = r.get("messages");
  if (m == nullptr) return r.fail("messages", "is required");
  std::string field;
  auto messages = model::chat_messages_from_json(*m, &field);
  if (!messages.is_ok()) {
    const std::string& text = messages.status().message();
    return r.fail(field, text.substr(std::min(text.size(), field.size() + 2)));
  }
  req.messages = std::move(messages).value();
}

}  // namespace

// The json_schema's schema with the client's key order (the body parsed again, ordered).
void read_reply_schema(FieldReader& r, std::string_view body, ApiRequest& req) {
  if (!r.ok() || req.response_format != ResponseFormat::kJsonSchema) return;
  const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  req.reply_schema = ordered["response_format"]["json_schema"]["schema"];
}

Result<ApiRequest> parse_completion_request(std::string_view body, const RequestLimits& limits, std::string* param) {
  PAGODA_ASSIGN_OR_RETURN(json j, parse_object(body));
  ApiRequest req;
  FieldReader r(j);
  read_common(r, limits, req);
  read_reply_schema(r, body, req);
  read_prompts(r, limits, req);
  read_max_tokens(r, "max_tokens", limits, req);
  if (r.get("logprobs") != nullptr) r.read_int("logprobs", 0, limits.max_logprobs, req.logprobs);
  bool echo = false;
  r.read_bool("echo", echo);
  if (echo) r.fail("echo", "is not supported");
  if (const json* suffix = r.get("suffix"); suffix != nullptr && !(suffix->is_string() && suffix->get<std::string>().empty())) {
    r.fail("suffix", "is not supported");
  }
  int best_of = req.n;
  r.read_int("best_of", 1, limits.max_choices, best_of);
  if (r.ok() && best_of != req.n) r.fail("best_of", "must equal n (best-of selection is not supported)");
  check_totals(r, limits, req, req.prompts.size());
  PAGODA_RETURN_IF_ERROR(finish(r, param));
  return req;
}

// tools, tool_choice, parallel_tool_calls, chat_template_kwargs, reasoning_effort (chat only).
// `ordered` is the body parsed keeping its key order: templates print tool schemas as sent.
void read_tools(FieldReader& r, const nlohmann::ordered_json& ordered, ApiRequest& req) {
  if (r.get("tools") != nullptr) {
    std::string field;
    auto tools = model::chat_tools_from_json(ordered["tools"], &field);
    if (!tools.is_ok()) {
      const std::string& text = tools.status().message();
      const std::string why = text.size() > field.size() + 2 ? text.substr(field.size() + 2) : text;
      return r.fail(field, why);
    }
    req.tools = std::move(tools).value();
  }
  if (const json* choice = r.get("tool_choice")) {
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "auto") req.tool_choice = ToolChoice::kAuto;
      else if (c == "none") req.tool_choice = ToolChoice::kNone;
      else if (c == "required") req.tool_choice = ToolChoice::kRequired;
      else return r.fail("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    } else if (choice->is_object() && choice->value("type", std::string()) == "function" && choice->contains("function") &&
               (*choice)["function"].is_object() && (*choice)["function"].contains("name") &&
               (*choice)["function"]["name"].is_string()) {
      req.tool_choice = ToolChoice::kNamed;
      req.tool_choice_name = (*choice)["function"]["name"].get<std::string>();
    } else {
      return r.fail("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    if (req.tool_choice != ToolChoice::kAuto && req.tool_choice != ToolChoice::kNone && req.tools.empty()) {
      return r.fail("tool_choice", "names a tool call but no tools are given");
    }
    if (req.tool_choice == ToolChoice::kNamed) {
      bool found = false;
      for (const model::ChatTool& t : req.tools) found = found || t.name == req.tool_choice_name;
      if (!found) return r.fail("tool_choice", "'" + req.tool_choice_name + "' is not one of the tools");
    }
  }
  r.read_bool("parallel_tool_calls", req.parallel_tool_calls);
  if (const json* kwargs = r.get("chat_template_kwargs")) {
    if (!kwargs->is_object()) return r.fail("chat_template_kwargs", "must be an object");
    for (auto it = kwargs->begin(); it != kwargs->end(); ++it) {
      // `thinking` is DeepSeek-V3.1's name for the same switch.
      const bool thinking_key = it.key() == "enable_thinking" || it.key() == "thinking";
      if (thinking_key && it->is_boolean()) {
        req.enable_thinking = it->get<bool>();
      } else if (thinking_key) {
        return r.fail("chat_template_kwargs." + it.key(), "must be a boolean");
      } else {
        // Templates are C++ here (model/text/chat_template.h): a variable they do not read would be ignored.
        return r.fail("chat_template_kwargs." + it.key(),
                      "is not a variable of Pagoda's templates (enable_thinking, or thinking, is)");
      }
    }
  }
  r.read_string("reasoning_effort", req.reasoning_effort);
}

Result<ApiRequest> parse_chat_request(std::string_view body, const RequestLimits& limits, std::string* param) {
  PAGODA_ASSIGN_OR_RETURN(json j, parse_object(body));
  ApiRequest req;
  req.chat = true;
  req.max_tokens = limits.max_context;  // until the context is full (the engine clips it)
  FieldReader r(j);
  read_common(r, limits, req);
  read_messages(r, req);
  if (r.ok() && j.contains("tools")) {
    const nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
    read_tools(r, ordered.is_object() ? ordered : nlohmann::ordered_json::object(), req);
  } else {
    read_tools(r, nlohmann::ordered_json::object(), req);
  }
  read_reply_schema(r, body, req);
  read_max_tokens(r, "max_tokens", limits, req);
  read_max_tokens(r, "max_completion_tokens", limits, req);  // the newer name wins
  bool logprobs = false;
  r.read_bool("logprobs", logprobs);
  int top_logprobs = 0;
  r.read_int("top_logprobs", 0, limits.max_logprobs, top_logprobs);
  if (r.ok() && r.get("top_logprobs") != nullptr && !logprobs) r.fail("top_logprobs", "needs \"logprobs\": true");
  if (logprobs) req.logprobs = top_logprobs;
  check_totals(r, limits, req, 1);
  PAGODA_RETURN_IF_ERROR(finish(r, param));
  return req;
}

}  // namespace pagoda::server
