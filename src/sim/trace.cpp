#include "sim/trace.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace pagoda::sim {

namespace {

using nlohmann::json;

// splitmix64's finalizer: a bijection of 64-bit values with full avalanche.
uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

Result<int64_t> read_count(const json& o, const char* key, bool required, int64_t min_value) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) {
    if (required) return Status::invalid_argument(std::string("missing \"") + key + "\"");
    return int64_t{0};
  }
  if (!it->is_number_integer() || it->get<int64_t>() < min_value || it->get<int64_t>() > (int64_t{1} << 40)) {
    return Status::invalid_argument(std::string("\"") + key + "\" must be an integer >= " + std::to_string(min_value) +
                                    ", got " + it->dump());
  }
  return it->get<int64_t>();
}

Result<TraceRequest> parse_line(const json& o, const TraceOptions& opt) {
  if (!o.is_object()) return Status::invalid_argument("a line must be a JSON object");
  TraceRequest r;
  if (auto it = o.find("timestamp"); it != o.end() && !it->is_null()) {
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0) {
      return Status::invalid_argument("\"timestamp\" must be a number of milliseconds >= 0, got " + it->dump());
    }
    r.timestamp_ms = it->get<double>();
  }
  PAGODA_ASSIGN_OR_RETURN(r.output_length, read_count(o, "output_length", false, 0));
  const json* tokens = nullptr;
  for (const char* key : {"prompt_token_ids", "tokens"}) {
    if (auto it = o.find(key); it != o.end()) tokens = &*it;
  }
  if (auto ids = o.find("hash_ids"); ids != o.end()) {
    if (tokens != nullptr) return Status::invalid_argument("a line has both \"hash_ids\" and prompt tokens");
    PAGODA_ASSIGN_OR_RETURN(r.input_length, read_count(o, "input_length", true, 1));
    if (!ids->is_array()) return Status::invalid_argument("\"hash_ids\" must be an array");
    for (const json& id : *ids) {
      if (!id.is_number_unsigned() && !(id.is_number_integer() && id.get<int64_t>() >= 0)) {
        return Status::invalid_argument("\"hash_ids\" must hold integers >= 0, got " + id.dump());
      }
      r.hash_ids.push_back(id.get<uint64_t>());
    }
    const int64_t k = static_cast<int64_t>(r.hash_ids.size());
    const int64_t B = opt.block_tokens;
    if (!((k - 1) * B < r.input_length && r.input_length <= k * B)) {
      return Status::invalid_argument("input_length " + std::to_string(r.input_length) + " needs " +
                                      std::to_string((r.input_length + B - 1) / B) + " hash_ids of " +
                                      std::to_string(B) + "-token blocks, the line has " + std::to_string(k) +
                                      " (--trace-block-tokens sets the block)");
    }
    if (opt.replay_block_tokens > 0 && opt.replay_block_tokens != B) {  // reduced (or enlarged) scale
      r.input_length = (r.input_length * opt.replay_block_tokens + B - 1) / B;
    }
    return r;
  }
  if (tokens == nullptr) {
    return Status::invalid_argument("a line needs \"hash_ids\" with \"input_length\" (Mooncake) or \"prompt_token_ids\"");
  }
  if (!tokens->is_array() || tokens->empty()) return Status::invalid_argument("prompt tokens must be a non-empty array");
  for (const json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= opt.vocab_size) {
      return Status::invalid_argument("prompt token " + t.dump() + " is not an id below the vocabulary size " +
                                      std::to_string(opt.vocab_size));
    }
    r.prompt_tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  r.input_length = static_cast<int64_t>(r.prompt_tokens.size());
  if (auto it = o.find("input_length"); it != o.end() && !(it->is_number_integer() && it->get<int64_t>() == r.input_length)) {
    return Status::invalid_argument("\"input_length\" " + it->dump() + " is not the number of prompt tokens (" +
                                    std::to_string(r.input_length) + ")");
  }
  return r;
}

}  // namespace

Result<std::vector<TraceRequest>> parse_trace(const std::string& text, const TraceOptions& opt, const std::string& name) {
  if (opt.block_tokens <= 0 || opt.vocab_size <= 1 || opt.replay_block_tokens < 0) {
    return Status::invalid_argument("bad trace block size or vocabulary");
  }
  std::vector<TraceRequest> out;
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (opt.max_requests > 0 && static_cast<int64_t>(out.size()) >= opt.max_requests) break;
    const std::string where = name + ":" + std::to_string(line_no);
    json o = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (o.is_discarded()) return Status::invalid_argument(where + ": not valid JSON");
    auto r = parse_line(o, opt);
    if (!r.is_ok()) return r.status().with_context(where);
    if (!out.empty() && r->timestamp_ms < out.back().timestamp_ms) {
      return Status::invalid_argument(where + ": timestamp " + std::to_string(r->timestamp_ms) +
                                      " is earlier than the line before's");
    }
    out.push_back(std::move(r).value());
  }
  if (out.empty()) return Status::invalid_argument(name + ": no requests");
  return out;
}

Result<std::vector<TraceRequest>> read_trace(const std::string& path, const TraceOptions& opt) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot open trace " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status::error("cannot read trace " + path);
  return parse_trace(text.str(), opt, path);
}

void synthesize_prompt(const TraceRequest& r, const TraceOptions& opt, std::vector<int32_t>& out) {
  out.resize(static_cast<size_t>(r.input_length));
  if (!r.prompt_tokens.empty()) {
    std::copy(r.prompt_tokens.begin(), r.prompt_tokens.end(), out.begin());
    return;
  }
  const uint64_t vocab = static_cast<uint64_t>(opt.vocab_size);
  const int64_t B = opt.replay_block_tokens > 0 ? opt.replay_block_tokens : opt.block_tokens;
  for (int64_t i = 0; i < r.input_length; ++i) {
    const uint64_t id = r.hash_ids[static_cast<size_t>(i / B)];
    const uint64_t j = static_cast<uint64_t>(i % B);
    out[static_cast<size_t>(i)] = static_cast<int32_t>(mix64(mix64(id) ^ j) % vocab);
  }
}

}  // namespace pagoda::sim
