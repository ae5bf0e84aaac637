// The control messages of the KV transfer (UCX active messages; the bulk bytes move by
// one-sided gets). Little-endian, length-prefixed, decoded with bounds checks: any byte string
// is safe to decode (an error, never a read out of bounds).
//
//   kHello         client -> server  u64 request id                      (sent once per peer)
//   kDescriptor    server -> client  u64 request id, PoolDescriptor
//   kConfirm       client -> server  u64 request id, u64 lease id, u32 n, n x (i32 block, u64 generation)
//   kConfirmReply  server -> client  u64 request id, i32 status code, string message
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "transfer/lease_table.h"
#include "transfer/pool_memory.h"

namespace pagoda::transfer {

enum class MessageId : uint16_t { kHello = 1, kDescriptor = 2, kConfirm = 3, kConfirmReply = 4 };

struct ConfirmMessage {
  uint64_t request_id = 0;
  uint64_t lease_id = 0;
  std::vector<BlockRef> refs;
};

struct ConfirmReply {
  uint64_t request_id = 0;
  Status status;
};

std::vector<uint8_t> encode_hello(uint64_t request_id);
Result<uint64_t> decode_hello(std::span<const uint8_t> bytes);
std::vector<uint8_t> encode_descriptor(uint64_t request_id, const PoolDescriptor& d);
Result<PoolDescriptor> decode_descriptor(std::span<const uint8_t> bytes, uint64_t* request_id);
std::vector<uint8_t> encode_confirm(const ConfirmMessage& m);
Result<ConfirmMessage> decode_confirm(std::span<const uint8_t> bytes);
std::vector<uint8_t> encode_confirm_reply(const ConfirmReply& r);
Result<ConfirmReply> decode_confirm_reply(std::span<const uint8_t> bytes);

}  // namespace pagoda::transfer
