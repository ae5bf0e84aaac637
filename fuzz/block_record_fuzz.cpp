// Block records ("PGKV", kvcache/block_record.h), as every tier reads them back from disk, Redis
// or the network: any bytes -> peek_block_record / decode_block_record give a record or a Status,
// never a read out of bounds. Each input is decoded twice: as given (the checksum almost always
// fails, so this exercises the header checks) and with its checksum field recomputed (so that
// mutated headers that agree with their size reach a successful decode). A record that decodes
// re-encodes to exactly its own bytes.
#include <xxhash.h>

#include <cstring>

#include "fuzz/fuzz_util.h"
#include "kvcache/block_record.h"

using namespace pagoda::kvcache;

namespace {

constexpr size_t kOffChecksum = 80;  // block_record.h: the checksum field

void decode_and_check(std::vector<uint64_t>& storage, size_t size) {
  const ConstByteSpan bytes{reinterpret_cast<const uint8_t*>(storage.data()), size};
  auto meta = peek_block_record(bytes);
  auto view = decode_block_record(bytes);
  if (!view.is_ok()) return;
  if (!meta.is_ok()) pagoda::fuzz::fuzz_fail("block record: decodes but its header does not peek");
  if (static_cast<int64_t>(size) != record_bytes(view->meta)) pagoda::fuzz::fuzz_fail("block record: size");
  std::vector<uint64_t> again((size + 7) / 8);
  const ConstByteSpan payload[] = {view->payload};
  encode_block_record(view->meta, view->tokens, payload, ByteSpan{reinterpret_cast<uint8_t*>(again.data()), size});
  if (std::memcmp(again.data(), storage.data(), size) != 0) pagoda::fuzz::fuzz_fail("block record: re-encoding differs");
  std::vector<uint8_t> dest(view->payload.size());
  const ByteSpan segs[] = {ByteSpan{dest.data(), dest.size() / 2}, ByteSpan{dest.data() + dest.size() / 2, dest.size() - dest.size() / 2}};
  copy_record_payload(*view, segs);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint64_t> storage((size + 7) / 8);  // records are read into aligned buffers
  if (size > 0) std::memcpy(storage.data(), data, size);
  decode_and_check(storage, size);
  if (size >= kOffChecksum + 8) {
    auto* p = reinterpret_cast<uint8_t*>(storage.data());
    std::memset(p + kOffChecksum, 0, 8);
    const uint64_t sum = XXH3_64bits(p, size);
    std::memcpy(p + kOffChecksum, &sum, 8);
    decode_and_check(storage, size);
  }
  return 0;
}
