// HostTier: the design is at the top of kvcache/host_tier.h.
#include "kvcache/host_tier.h"

#include <cstring>

#include "core/check.h"

namespace pagoda::kvcache {

Result<std::unique_ptr<HostTier>> HostTier::create(const HostTierOptions& options, const Clock& clock) {
  PAGODA_RETURN_IF_ERROR(options.layout.validate());
  const int64_t record = record_bytes(record_meta_for(options.layout));
  const int64_t slot_bytes = (record + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
  const int64_t num_slots = options.capacity_bytes / slot_bytes;
  if (num_slots < 1) {
    return Status::invalid_argument("--kv-host-mem " + format_bytes(options.capacity_bytes) +
                                    " holds no KV block (one block record is " + format_bytes(slot_bytes) + ")");
  }
  Result<AlignedBuffer> slab = AlignedBuffer::allocate(static_cast<size_t>(num_slots * slot_bytes), options.prefault);
  if (!slab.is_ok()) return slab.status().with_context("host tier slab of " + format_bytes(num_slots * slot_bytes));
  return std::unique_ptr<HostTier>(new HostTier(options, clock, std::move(slab).value(), slot_bytes, num_slots));
}

HostTier::HostTier(const HostTierOptions& options, const Clock& clock, AlignedBuffer slab, int64_t slot_bytes,
                   int64_t num_slots)
    : options_(options),
      clock_(clock),
      slab_(std::move(slab)),
      slot_bytes_(slot_bytes),
      record_bytes_(record_bytes(record_meta_for(options.layout))),
      slots_(num_slots, options.eviction) {
  stats_.capacity_blocks = num_slots;
  done_.reserve(64);
}

TierOpId HostTier::complete(TierOpKind kind, int64_t num_items, int64_t num_ok, Status status, int64_t bytes,
                            int64_t submit_ns) {
  const TierOpId id = next_op_++;
  done_.push_back(TierCompletion{id, kind, num_items, num_ok, std::move(status), submit_ns, clock_.now_ns(), bytes});
  return id;
}

TierOpId HostTier::lookup(std::span<const BlockHash> chain) {
  const int64_t start = clock_.now_ns();
  ++stats_.lookups;
  int64_t held = 0;
  const int64_t n = static_cast<int64_t>(chain.size());
  while (held < n) {
    const std::optional<int64_t> slot = slots_.find(chain[static_cast<size_t>(held)]);
    if (!slot) break;
    slots_.touch(*slot, 0);  // a hit is a use: the load that follows must still find it
    ++held;
  }
  stats_.lookup_hit_blocks += held;
  return complete(TierOpKind::kLookup, n, held, Status::ok(), 0, start);
}

Status HostTier::check_put(const TierPut& b) const {
  PAGODA_RETURN_IF_ERROR(check_block_record(b.meta, options_.layout, b.meta.ns, b.meta.block_hash));
  if (static_cast<int64_t>(b.tokens.size()) != b.meta.block_size) {
    return Status::invalid_argument("host tier: a block with " + std::to_string(b.tokens.size()) + " token ids");
  }
  int64_t payload = 0;
  for (ConstByteSpan seg : b.payload) payload += static_cast<int64_t>(seg.size());
  if (payload != b.meta.payload_bytes) {
    return Status::invalid_argument("host tier: a block payload of " + std::to_string(payload) + " bytes");
  }
  return Status::ok();
}

std::optional<int64_t> HostTier::take_slot() {
  if (slots_.num_free() == 0) {
    const std::optional<int64_t> victim = slots_.victim();
    if (!victim) return std::nullopt;
    const int64_t v = *victim;
    slots_.evict(v, /*demote=*/true);  // out of the index; its bytes stay until release
    ++stats_.evictions;
    if (on_evict_) {
      const ConstByteSpan bytes(slot_data(v), static_cast<size_t>(record_bytes_));
      Result<BlockRecordView> record = decode_block_record(bytes);
      if (record.is_ok()) {
        on_evict_(record.value(), slots_.slot(v).priority);
      } else {
        ++stats_.corrupt_records;  // never demoted: a bad record must not travel
      }
    }
    slots_.release(v);
  }
  const RunAllocator::Run run = slots_.allocate(1);
  if (run.count == 0) return std::nullopt;
  return run.first;
}

TierOpId HostTier::put(std::span<const TierPut> blocks) {
  const int64_t start = clock_.now_ns();
  ++stats_.puts;
  const int64_t n = static_cast<int64_t>(blocks.size());
  int64_t num_ok = 0, bytes = 0;
  Status failed;
  for (const TierPut& b : blocks) {
    if (Status st = check_put(b); !st.is_ok()) {
      failed = st;
      break;
    }
    if (std::optional<int64_t> held = slots_.find(b.meta.block_hash)) {  // inclusive: refresh
      slots_.touch(*held, b.priority);
      ++num_ok;
      continue;
    }
    const std::optional<int64_t> slot = take_slot();
    if (!slot) {
      failed = Status::unavailable("host tier: no slot to evict");
      break;
    }
    uint8_t* data = slot_data(*slot);
    encode_block_record(b.meta, b.tokens, b.payload, ByteSpan(data, static_cast<size_t>(record_bytes_)));
    slots_.begin_write(*slot, b.meta.block_hash, b.priority);
    slots_.begin_commit(*slot);
    slots_.commit(*slot);
    bytes += record_bytes_;
    ++num_ok;
  }
  stats_.put_blocks += num_ok;
  stats_.put_failures += n - num_ok;
  stats_.bytes_written += bytes;
  return complete(TierOpKind::kPut, n, num_ok, num_ok == n ? Status::ok() : failed, bytes, start);
}

void HostTier::drop(int64_t slot) {
  slots_.doom(slot);
  slots_.begin_invalidate(slot);
  slots_.release(slot);
}

TierOpId HostTier::get(std::span<const TierGet> blocks) {
  const int64_t start = clock_.now_ns();  // the copy is the op: its time is the latency
  ++stats_.gets;
  const int64_t n = static_cast<int64_t>(blocks.size());
  int64_t num_ok = 0, bytes = 0;
  Status failed;
  for (const TierGet& b : blocks) {
    CHECK_EQ(static_cast<int64_t>(b.tokens_out.size()), options_.layout.block_size);
    const std::optional<int64_t> slot = slots_.find(b.hash);
    if (!slot) break;  // a miss: ok status, num_ok short
    const ConstByteSpan stored(slot_data(*slot), static_cast<size_t>(record_bytes_));
    Result<BlockRecordView> record = decode_block_record(stored);
    Status st = record.is_ok() ? check_block_record(record.value().meta, options_.layout, b.ns, b.hash) : record.status();
    if (!st.is_ok()) {
      drop(*slot);
      ++stats_.corrupt_records;
      failed = st.with_context("host tier record");
      break;
    }
    const BlockRecordView& view = record.value();
    copy_record_payload(view, b.dest);
    std::copy(view.tokens.begin(), view.tokens.end(), b.tokens_out.begin());
    slots_.touch(*slot, 0);
    bytes += view.meta.payload_bytes;
    ++num_ok;
  }
  stats_.get_blocks += num_ok;
  stats_.get_failures += n - num_ok;
  stats_.bytes_read += bytes;
  return complete(TierOpKind::kGet, n, num_ok, failed, bytes, start);
}

void HostTier::erase(std::span<const BlockHash> hashes) {
  for (BlockHash hash : hashes) {
    if (std::optional<int64_t> slot = slots_.find(hash)) drop(*slot);
  }
}

void HostTier::poll(std::vector<TierCompletion>& out) {
  out.insert(out.end(), done_.begin(), done_.end());
  done_.clear();
}

TierStats HostTier::stats() const {
  TierStats s = stats_;
  s.used_blocks = slots_.num_ready();
  return s;
}

std::string HostTier::describe() const {
  const int64_t n = slots_.num_slots();
  return "host tier: " + format_bytes(n * slot_bytes_) + ", " + std::to_string(n) + " blocks of " +
         format_bytes(slot_bytes_) + " (" + std::to_string(n * options_.layout.block_size) + " tokens)";
}

std::optional<ByteSpan> HostTier::record_bytes_for_test(BlockHash hash) {
  const std::optional<int64_t> slot = slots_.find(hash);
  if (!slot) return std::nullopt;
  return ByteSpan(slot_data(*slot), static_cast<size_t>(record_bytes_));
}

}  // namespace pagoda::kvcache
