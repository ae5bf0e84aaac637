// KvTransferParams: the P/D handshake record a router carries between a prefill and a decode
// worker, in the request and response bodies' "kv_transfer_params", with vLLM's field names
// (NixlConnector) and a few of Pagoda's own:
//
//   router -> prefill  {"do_remote_decode": true, "do_remote_prefill": false, remote_*: null}
//   prefill -> router  {"do_remote_prefill": true, "do_remote_decode": false,
//                       "remote_engine_id", "remote_host", "remote_port" (its UCX listener),
//                       "remote_request_id", "remote_block_ids": [..], "tp_size": 1,
//                       Pagoda: "remote_block_generations": [..] (one per block id),
//                       "remote_lease_id", "remote_num_tokens" (prompt tokens the blocks hold:
//                       every block full but the last), "remote_block_size"}
//   router -> decode   the prefill's answer as it came
// A decode worker that cannot use them (malformed, refused, failed, timed out) computes the
// prompt itself; the prefill's lease then expires.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace pagoda::transfer {

struct KvTransferParams {
  bool do_remote_decode = false;
  bool do_remote_prefill = false;
  std::string remote_engine_id;
  std::string remote_host;
  int remote_port = 0;
  std::string remote_request_id;
  std::vector<int32_t> remote_block_ids;
  std::vector<uint64_t> remote_block_generations;  // [remote_block_ids.size()]
  uint64_t remote_lease_id = 0;
  int64_t remote_num_tokens = 0;
  int64_t remote_block_size = 0;
  int tp_size = 1;
};

// The "kv_transfer_params" of a JSON request body: nullopt when absent or null. Errors name
// what is wrong (a 400 for the client).
Result<std::optional<KvTransferParams>> kv_transfer_params_from_body(std::string_view body);
// Parses one JSON object (the value of "kv_transfer_params").
Result<KvTransferParams> parse_kv_transfer_params(std::string_view json_object);
std::string kv_transfer_params_json(const KvTransferParams& params);

}  // namespace pagoda::transfer
