// KvTransferParams <-> JSON (transfer/kv_transfer_params.h).
#include "transfer/kv_transfer_params.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <type_traits>

namespace pagoda::transfer {

namespace {

using nlohmann::json;
constexpr size_t kMaxBlocks = 1 << 20;

Status bad(const std::string& field, const std::string& why) {
  return Status::invalid_argument("kv_transfer_params." + field + ": " + why);
}

Result<KvTransferParams> from_json(const json& j) {
  if (!j.is_object()) return Status::invalid_argument("kv_transfer_params must be an object");
  KvTransferParams p;
  auto flag = [&](const char* key, bool& out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (!it->is_boolean()) return bad(key, "must be a boolean");
    out = it->get<bool>();
    return Status::ok();
  };
  auto text = [&](const char* key, std::string& out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (!it->is_string()) return bad(key, "must be a string");
    out = it->get<std::string>();
    return Status::ok();
  };
  auto integer = [&](const char* key, int64_t lo, int64_t hi, auto& out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return Status::ok();
    if (!it->is_number_integer()) return bad(key, "must be an integer");
    if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi)) return bad(key, "out of range");
    const int64_t v = it->get<int64_t>();
    if (v < lo || v > hi) return bad(key, "out of range");
    out = static_cast<std::remove_reference_t<decltype(out)>>(v);
    return Status::ok();
  };
  PAGODA_RETURN_IF_ERROR(flag("do_remote_decode", p.do_remote_decode));
  PAGODA_RETURN_IF_ERROR(flag("do_remote_prefill", p.do_remote_prefill));
  PAGODA_RETURN_IF_ERROR(text("remote_engine_id", p.remote_engine_id));
  PAGODA_RETURN_IF_ERROR(text("remote_host", p.remote_host));
  PAGODA_RETURN_IF_ERROR(text("remote_request_id", p.remote_request_id));
  PAGODA_RETURN_IF_ERROR(integer("remote_port", 0, 65535, p.remote_port));
  PAGODA_RETURN_IF_ERROR(integer("remote_num_tokens", 0, INT32_MAX, p.remote_num_tokens));
  PAGODA_RETURN_IF_ERROR(integer("remote_block_size", 0, 1 << 16, p.remote_block_size));
  PAGODA_RETURN_IF_ERROR(integer("tp_size", 1, 1, p.tp_size));
  if (auto it = j.find("remote_lease_id"); it != j.end() && !it->is_null()) {
    if (!it->is_number_unsigned()) return bad("remote_lease_id", "must be a non-negative integer");
    p.remote_lease_id = it->get<uint64_t>();
  }
  if (auto it = j.find("remote_block_ids"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > kMaxBlocks) return bad("remote_block_ids", "must be an array of block ids");
    for (const json& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
        return bad("remote_block_ids", "must hold non-negative integers");
      }
      p.remote_block_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
  }
  if (auto it = j.find("remote_block_generations"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > kMaxBlocks) return bad("remote_block_generations", "must be an array");
    for (const json& v : *it) {
      if (!v.is_number_unsigned()) return bad("remote_block_generations", "must hold non-negative integers");
      p.remote_block_generations.push_back(v.get<uint64_t>());
    }
  }
  if (p.do_remote_decode && p.do_remote_prefill) {
    return Status::invalid_argument("kv_transfer_params: do_remote_decode and do_remote_prefill exclude each other");
  }
  if (p.do_remote_prefill) {
    if (p.remote_block_generations.size() != p.remote_block_ids.size()) {
      return bad("remote_block_generations", "needs one generation per remote block id");
    }
    if (p.remote_host.empty() || p.remote_port == 0) return bad("remote_host", "the prefill worker's address is missing");
    if (p.remote_block_size > 0 && (p.remote_num_tokens + p.remote_block_size - 1) / p.remote_block_size !=
                                       static_cast<int64_t>(p.remote_block_ids.size())) {
      return bad("remote_num_tokens", "must be the tokens the blocks hold (all but the last block full)");
    }
  }
  return p;
}

}  // namespace

Result<std::optional<KvTransferParams>> kv_transfer_params_from_body(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::optional<KvTransferParams>();  // the body's own parser reports it
  auto it = j.find("kv_transfer_params");
  if (it == j.end() || it->is_null()) return std::optional<KvTransferParams>();
  PAGODA_ASSIGN_OR_RETURN(KvTransferParams p, from_json(*it));
  return std::optional<KvTransferParams>(std::move(p));
}

Result<KvTransferParams> parse_kv_transfer_params(std::string_view json_object) {
  json j = json::parse(json_object, nullptr, false);
  if (j.is_discarded()) return Status::invalid_argument("kv_transfer_params is not valid JSON");
  return from_json(j);
}

std::string kv_transfer_params_json(const KvTransferParams& p) {
  json j;
  j["do_remote_decode"] = p.do_remote_decode;
  j["do_remote_prefill"] = p.do_remote_prefill;
  auto opt_text = [&](const char* key, const std::string& v) { j[key] = v.empty() ? json(nullptr) : json(v); };
  opt_text("remote_engine_id", p.remote_engine_id);
  opt_text("remote_host", p.remote_host);
  opt_text("remote_request_id", p.remote_request_id);
  j["remote_port"] = p.remote_port == 0 ? json(nullptr) : json(p.remote_port);
  j["remote_block_ids"] = p.remote_block_ids;
  j["remote_block_generations"] = p.remote_block_generations;
  j["remote_lease_id"] = p.remote_lease_id;
  j["remote_num_tokens"] = p.remote_num_tokens;
  j["remote_block_size"] = p.remote_block_size;
  j["tp_size"] = p.tp_size;
  return j.dump();
}

}  // namespace pagoda::transfer
