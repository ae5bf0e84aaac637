#include "kvcache/block_record.h"

#include <xxhash.h>

#include <cstring>
#include <string>

namespace pagoda::kvcache {
namespace {

// Field offsets of the fixed header (see block_record.h).
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffHeaderBytes = 6, kOffBlockSize = 8, kOffNLayer = 12,
                 kOffNKvHead = 16, kOffHeadDim = 20, kOffDType = 24, kOffLayout = 25, kOffKOnly = 26, kOffReserved = 27,
                 kOffPayloadBytes = 32, kOffModel = 40, kOffFormat = 48, kOffSalt = 56, kOffHash = 64,
                 kOffParent = 72, kOffChecksum = 80, kOffZeros = 88;
constexpr int64_t kMaxBlockSize = (65535 - kRecordFixedHeaderBytes) / 4 / kRecordAlign * kRecordAlign;
constexpr int64_t kMaxLayers = int64_t{1} << 12;
constexpr int64_t kMaxRowWidth = int64_t{1} << 20;  // n_kv_head x head_dim

template <typename T>
void put(uint8_t* p, size_t off, T v) {
  std::memcpy(p + off, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
}
template <typename T>
T get(const uint8_t* p, size_t off) {
  T v;
  std::memcpy(&v, p + off, sizeof(T));
  return v;
}

uint64_t record_checksum(ConstByteSpan bytes) {
  XXH3_state_t* state = XXH3_createState();
  CHECK(state != nullptr) << "XXH3_createState";
  XXH3_64bits_reset(state);
  static constexpr uint8_t kZero[8] = {};
  XXH3_64bits_update(state, bytes.data(), kOffChecksum);
  XXH3_64bits_update(state, kZero, sizeof(kZero));
  XXH3_64bits_update(state, bytes.data() + kOffChecksum + 8, bytes.size() - kOffChecksum - 8);
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return h;
}

int64_t expected_payload(const BlockRecordMeta& m) {
  return m.n_layer * (kernels::kv_block_bytes_k(m.kv_dtype, m.head_dim, m.block_size, m.n_kv_head) +
                      (m.k_only ? 0 : kernels::kv_block_bytes_v(m.kv_dtype, m.head_dim, m.block_size, m.n_kv_head)));
}

}  // namespace

BlockRecordMeta record_meta_for(const KvLayout& layout) {
  BlockRecordMeta m;
  m.block_size = static_cast<int32_t>(layout.block_size);
  m.n_layer = static_cast<int32_t>(layout.n_layer);
  m.n_kv_head = static_cast<int32_t>(layout.n_kv_head);
  m.head_dim = static_cast<int32_t>(layout.head_dim);
  m.kv_dtype = layout.dtype;
  m.kv_layout = layout.layout;
  m.k_only = layout.k_only;
  m.payload_bytes = layout.bytes_per_block();
  return m;
}

int64_t record_header_bytes(int64_t block_size) {
  const int64_t raw = kRecordFixedHeaderBytes + 4 * block_size;
  return (raw + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
}

void encode_block_record(const BlockRecordMeta& meta, std::span<const int32_t> tokens,
                         std::span<const ConstByteSpan> payload, ByteSpan out) {
  CHECK(meta.block_size > 0 && meta.block_size <= kMaxBlockSize) << "block size " << meta.block_size;
  CHECK_EQ(static_cast<int64_t>(tokens.size()), static_cast<int64_t>(meta.block_size));
  CHECK_EQ(static_cast<int64_t>(out.size()), record_bytes(meta));
  const int64_t header_bytes = record_header_bytes(meta.block_size);
  uint8_t* p = out.data();
  std::memset(p, 0, static_cast<size_t>(header_bytes));
  put<uint32_t>(p, kOffMagic, kBlockRecordMagic);
  put<uint16_t>(p, kOffVersion, kBlockRecordVersion);
  put<uint16_t>(p, kOffHeaderBytes, static_cast<uint16_t>(header_bytes));
  put<uint32_t>(p, kOffBlockSize, static_cast<uint32_t>(meta.block_size));
  put<uint32_t>(p, kOffNLayer, static_cast<uint32_t>(meta.n_layer));
  put<uint32_t>(p, kOffNKvHead, static_cast<uint32_t>(meta.n_kv_head));
  put<uint32_t>(p, kOffHeadDim, static_cast<uint32_t>(meta.head_dim));
  put<uint8_t>(p, kOffDType, static_cast<uint8_t>(meta.kv_dtype));
  put<uint8_t>(p, kOffLayout, static_cast<uint8_t>(meta.kv_layout));
  put<uint8_t>(p, kOffKOnly, meta.k_only ? 1 : 0);
  put<uint64_t>(p, kOffPayloadBytes, static_cast<uint64_t>(meta.payload_bytes));
  put<uint64_t>(p, kOffModel, meta.ns.model_fingerprint);
  put<uint64_t>(p, kOffFormat, meta.ns.kv_format);
  put<uint64_t>(p, kOffSalt, meta.ns.cache_salt);
  put<uint64_t>(p, kOffHash, meta.block_hash);
  put<uint64_t>(p, kOffParent, meta.parent_hash);
  std::memcpy(p + kRecordFixedHeaderBytes, tokens.data(), tokens.size_bytes());
  int64_t at = header_bytes;
  for (ConstByteSpan seg : payload) {
    CHECK_LE(at + static_cast<int64_t>(seg.size()), static_cast<int64_t>(out.size())) << "payload longer than the meta says";
    std::memcpy(p + at, seg.data(), seg.size());
    at += static_cast<int64_t>(seg.size());
  }
  CHECK_EQ(at, static_cast<int64_t>(out.size())) << "payload shorter than the meta says";
  put<uint64_t>(p, kOffChecksum, record_checksum(out));
}

Result<BlockRecordMeta> peek_block_record(ConstByteSpan bytes) {
  if (static_cast<int64_t>(bytes.size()) < kRecordFixedHeaderBytes) {
    return Status::error("block record of " + std::to_string(bytes.size()) + " bytes is shorter than its header");
  }
  const uint8_t* p = bytes.data();
  if (get<uint32_t>(p, kOffMagic) != kBlockRecordMagic) return Status::error("not a block record (bad magic)");
  const uint16_t version = get<uint16_t>(p, kOffVersion);
  if (version != kBlockRecordVersion) {
    return Status::error("block record version " + std::to_string(version) + " (this build reads " +
                         std::to_string(kBlockRecordVersion) + ")");
  }
  for (size_t i = kOffReserved; i < kOffPayloadBytes; ++i) {
    if (p[i] != 0) return Status::error("block record: reserved header bytes are not zero");
  }
  for (size_t i = kOffZeros; i < static_cast<size_t>(kRecordFixedHeaderBytes); ++i) {
    if (p[i] != 0) return Status::error("block record: reserved header bytes are not zero");
  }
  BlockRecordMeta m;
  const uint32_t block_size = get<uint32_t>(p, kOffBlockSize);
  const uint32_t n_layer = get<uint32_t>(p, kOffNLayer), n_kv_head = get<uint32_t>(p, kOffNKvHead),
                 head_dim = get<uint32_t>(p, kOffHeadDim);
  if (block_size == 0 || block_size > kMaxBlockSize) return Status::error("block record: block size " + std::to_string(block_size));
  if (n_layer == 0 || n_layer > kMaxLayers || n_kv_head == 0 || head_dim == 0 ||
      static_cast<uint64_t>(n_kv_head) * head_dim > static_cast<uint64_t>(kMaxRowWidth)) {  // no overflow: 32 x 32 bits
    return Status::error("block record: shape " + std::to_string(n_layer) + " x " + std::to_string(n_kv_head) + " x " +
                         std::to_string(head_dim) + " out of range");
  }
  const uint8_t dtype = get<uint8_t>(p, kOffDType), layout = get<uint8_t>(p, kOffLayout);
  if (dtype > static_cast<uint8_t>(kernels::KvDType::kInt4)) return Status::error("block record: unknown KV dtype " + std::to_string(dtype));
  if (layout > static_cast<uint8_t>(kernels::KvLayoutKind::kNZ)) return Status::error("block record: unknown KV layout " + std::to_string(layout));
  m.block_size = static_cast<int32_t>(block_size);
  m.n_layer = static_cast<int32_t>(n_layer);
  m.n_kv_head = static_cast<int32_t>(n_kv_head);
  m.head_dim = static_cast<int32_t>(head_dim);
  m.kv_dtype = static_cast<kernels::KvDType>(dtype);
  m.kv_layout = static_cast<kernels::KvLayoutKind>(layout);
  if (p[kOffKOnly] > 1) return Status::error("block record: K-only flag " + std::to_string(p[kOffKOnly]));
  m.k_only = p[kOffKOnly] == 1;
  if (m.kv_dtype == kernels::KvDType::kInt4 && head_dim % 2 != 0) return Status::error("block record: int4 with an odd head dim");
  const int64_t header_bytes = get<uint16_t>(p, kOffHeaderBytes);
  if (header_bytes != record_header_bytes(m.block_size)) {
    return Status::error("block record: header size " + std::to_string(header_bytes) + " disagrees with its block size");
  }
  const uint64_t payload = get<uint64_t>(p, kOffPayloadBytes);
  m.payload_bytes = expected_payload(m);  // bounded: 2^12 layers x 2 x 2^14 x 2^20 x 4 B < 2^51
  if (payload != static_cast<uint64_t>(m.payload_bytes)) {
    return Status::error("block record: payload of " + std::to_string(payload) + " bytes, its shape needs " +
                         std::to_string(m.payload_bytes));
  }
  if (static_cast<int64_t>(bytes.size()) < header_bytes) return Status::error("block record: truncated token ids");
  // The padding after the token ids is zero, so a record has one encoding (found by fuzzing: a
  // record with stray padding bytes and a matching checksum decoded).
  for (int64_t i = kRecordFixedHeaderBytes + 4 * int64_t{m.block_size}; i < header_bytes; ++i) {
    if (p[i] != 0) return Status::error("block record: padding after the token ids is not zero");
  }
  m.ns.model_fingerprint = get<uint64_t>(p, kOffModel);
  m.ns.kv_format = get<uint64_t>(p, kOffFormat);
  m.ns.cache_salt = get<uint64_t>(p, kOffSalt);
  m.block_hash = get<uint64_t>(p, kOffHash);
  m.parent_hash = get<uint64_t>(p, kOffParent);
  return m;
}

Result<BlockRecordView> decode_block_record(ConstByteSpan bytes) {
  CHECK(reinterpret_cast<uintptr_t>(bytes.data()) % 4 == 0) << "block record buffer not 4-byte aligned";
  PAGODA_ASSIGN_OR_RETURN(BlockRecordMeta m, peek_block_record(bytes));
  const int64_t header_bytes = record_header_bytes(m.block_size);
  if (static_cast<int64_t>(bytes.size()) != header_bytes + m.payload_bytes) {
    return Status::error("block record of " + std::to_string(bytes.size()) + " bytes, its header says " +
                         std::to_string(header_bytes + m.payload_bytes) + " (truncated or padded)");
  }
  if (get<uint64_t>(bytes.data(), kOffChecksum) != record_checksum(bytes)) {
    return Status::error("block record checksum mismatch (corrupt record)");
  }
  BlockRecordView v;
  v.meta = m;
  v.tokens = {reinterpret_cast<const int32_t*>(bytes.data() + kRecordFixedHeaderBytes), static_cast<size_t>(m.block_size)};
  v.payload = bytes.subspan(static_cast<size_t>(header_bytes));
  return v;
}

Status check_block_record(const BlockRecordMeta& meta, const KvLayout& layout, const KvNamespace& ns,
                          BlockHash hash) {
  const BlockRecordMeta want = record_meta_for(layout);
  if (meta.block_size != want.block_size || meta.n_layer != want.n_layer || meta.n_kv_head != want.n_kv_head ||
      meta.head_dim != want.head_dim) {
    return Status::error("block record of another shape (block size " + std::to_string(meta.block_size) + ", " +
                         std::to_string(meta.n_layer) + " layers x " + std::to_string(meta.n_kv_head) + " kv heads x " +
                         std::to_string(meta.head_dim) + ")");
  }
  if (meta.kv_dtype != want.kv_dtype || meta.kv_layout != want.kv_layout || meta.payload_bytes != want.payload_bytes) {
    return Status::error("block record of another KV format (" + std::string(kernels::kv_dtype_name(meta.kv_dtype)) + " " +
                         std::string(kernels::kv_layout_name(meta.kv_layout)) + ")");
  }
  if (!(meta.ns == ns)) return Status::error("block record of another namespace (model, KV format or cache salt)");
  if (meta.block_hash != hash) return Status::error("block record of another block hash");
  return Status::ok();
}

void copy_record_payload(const BlockRecordView& record, std::span<const ByteSpan> dest) {
  size_t at = 0;
  for (ByteSpan seg : dest) {
    CHECK_LE(at + seg.size(), record.payload.size()) << "destination larger than the record's payload";
    std::memcpy(seg.data(), record.payload.data() + at, seg.size());
    at += seg.size();
  }
  CHECK_EQ(at, record.payload.size()) << "destination smaller than the record's payload";
}

}  // namespace pagoda::kvcache
