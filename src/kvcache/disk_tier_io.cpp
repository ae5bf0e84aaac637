// DiskTier I/O: queueing requests to the backend and what each completion does (the write
// protocol, verification and fault rules are at the top of disk_tier.h).
#include <cerrno>
#include <cstring>

#include "core/check.h"
#include "kvcache/disk_tier.h"

namespace pagoda::kvcache {
namespace {

constexpr int kMaxRetries = 8;          // EINTR/EAGAIN resubmissions of one request
constexpr int64_t kMaxCorruptLogs = 8;  // corrupt records logged one by one (all are counted)

void set_magic(uint8_t* record) {
  const uint32_t magic = kBlockRecordMagic;
  std::memcpy(record, &magic, sizeof(magic));
}

const char* kind_name(IoOpcode opcode) { return opcode == IoOpcode::kRead ? "read" : "write"; }

}  // namespace

void DiskTier::queue_request(Request request) {
  int64_t index;
  if (!free_requests_.empty()) {
    index = free_requests_.back();
    free_requests_.pop_back();
  } else {
    index = static_cast<int64_t>(requests_.size());
    requests_.emplace_back();
  }
  request.in_use = true;
  request.io.tag = static_cast<uint64_t>(index);
  requests_[static_cast<size_t>(index)] = request;
  to_submit_.push_back(index);
}

void DiskTier::queue_write(Request request) {
  request.io = IoRequest{0, IoOpcode::kWrite, fd_of(request.first_slot), offset_of(request.first_slot),
                         write_unit(request.unit), request.num_slots * info_.slot_bytes};
  queue_request(request);
}

void DiskTier::invalidate(int64_t slot) {
  slots_.begin_invalidate(slot);
  Request r = Request::of(RequestKind::kInvalidate, 0, 0, slot, 1, -1);
  r.io = IoRequest{0, IoOpcode::kWrite, fd_of(slot), offset_of(slot), zero_page_.data(), kIoAlign};
  queue_request(r);
}

void DiskTier::submit_requests() {
  const int64_t room = io_->max_in_flight() - io_->in_flight();
  batch_.clear();
  while (!to_submit_.empty() && static_cast<int64_t>(batch_.size()) < room) {
    const Request& r = requests_[static_cast<size_t>(to_submit_.front())];
    to_submit_.pop_front();
    IoRequest io = r.io;  // what is left of it (a short transfer moved r.done bytes)
    io.buf += r.done;
    io.offset += r.done;
    io.len -= r.done;
    ++(io.opcode == IoOpcode::kRead ? io_stats_.read_requests : io_stats_.write_requests);
    batch_.push_back(io);
  }
  if (!batch_.empty()) io_->submit(batch_);
}

void DiskTier::handle_result(const IoResult& result) {
  CHECK(result.tag < requests_.size() && requests_[result.tag].in_use) << "I/O result for unknown request " << result.tag;
  Request& entry = requests_[result.tag];
  const int64_t left = entry.io.len - entry.done;
  if (enabled_ && result.res > 0 && result.res < left) {  // short: the rest goes again
    entry.done += result.res;
    ++io_stats_.short_transfers;
    to_submit_.push_back(static_cast<int64_t>(result.tag));
    return;
  }
  if (enabled_ && (result.res == -EINTR || result.res == -EAGAIN) && entry.retries < kMaxRetries) {
    ++entry.retries;
    to_submit_.push_back(static_cast<int64_t>(result.tag));
    return;
  }
  const Request r = entry;  // completions may queue requests, which may move requests_
  entry.in_use = false;
  free_requests_.push_back(static_cast<int64_t>(result.tag));
  if (!enabled_) return fail_request(r, Status::unavailable(disabled_reason_));
  if (closing_ && (r.kind == RequestKind::kRead || r.kind == RequestKind::kDemote)) {
    return fail_request(r, Status::aborted("disk tier closed"));
  }
  if (result.res < 0 || (result.res == 0 && left > 0)) return fault(r, result.res);
  switch (r.kind) {
    case RequestKind::kBody: return complete_body(r);
    case RequestKind::kCommit: return complete_commit(r);
    case RequestKind::kRead: return complete_read(r);
    case RequestKind::kDemote: return complete_demote(r);
    case RequestKind::kInvalidate: return slots_.release(r.first_slot);
  }
}

// The records are on disk without their magic: write each one's first page again, with it.
void DiskTier::complete_body(const Request& r) {
  Op& op = ops_.at(r.op);
  for (int64_t k = 0; k < r.num_slots; ++k) {
    Item& item = op.items[static_cast<size_t>(r.first_item + k)];
    if (slots_.slot(item.slot).doomed) {  // erased while written: it never becomes visible
      slots_.release(item.slot);
      write_units_.release(item.unit, 1);
      item.unit = -1;
      resolve(r.op, item, true);
      continue;
    }
    slots_.begin_commit(item.slot);
    uint8_t* record = write_unit(item.unit);
    set_magic(record);
    Request commit = Request::of(RequestKind::kCommit, r.op, r.first_item + k, item.slot, 1, item.unit);
    commit.io = IoRequest{0, IoOpcode::kWrite, fd_of(item.slot), offset_of(item.slot), record, kIoAlign};
    queue_request(commit);
  }
}

void DiskTier::complete_commit(const Request& r) {
  Op& op = ops_.at(r.op);
  Item& item = op.items[static_cast<size_t>(r.first_item)];
  write_units_.release(item.unit, 1);
  item.unit = -1;
  if (slots_.slot(item.slot).doomed) {
    invalidate(item.slot);  // erased while committed: take the magic back off
  } else {
    slots_.commit(item.slot);
  }
  op.bytes += info_.record_bytes;
  stats_.bytes_written += info_.record_bytes;
  resolve(r.op, item, true);
}

Status DiskTier::verify(ConstByteSpan bytes, const KvNamespace* ns, BlockHash hash, BlockRecordView& view) const {
  Result<BlockRecordView> decoded = decode_block_record(bytes);
  if (!decoded.is_ok()) return decoded.status();
  view = *decoded;
  if (ns != nullptr) return check_block_record(view.meta, options_.layout, *ns, hash);
  // A demotion: whatever salt it carries, but this tier's model and format.
  PAGODA_RETURN_IF_ERROR(check_block_record(view.meta, options_.layout, view.meta.ns, hash));
  if (view.meta.ns.model_fingerprint != options_.model_fingerprint || view.meta.ns.kv_format != options_.kv_format) {
    return Status::error("block record of another model or KV format");
  }
  return Status::ok();
}

void DiskTier::count_corrupt(int64_t slot, const Status& why) {
  ++stats_.corrupt_records;
  if (stats_.corrupt_records <= kMaxCorruptLogs) {
    logger_.warn("disk tier: dropped the record in slot " + std::to_string(slot) + " (" +
                 disk_tier_file_path(options_.dir, slot / info_.slots_per_file) + " at byte " +
                 std::to_string(offset_of(slot)) + "): " + why.message() +
                 (stats_.corrupt_records == kMaxCorruptLogs ? " (further corrupt records are only counted)" : ""));
  }
}

// Verifies each record before a byte of it reaches the caller's block; a bad one is dropped.
void DiskTier::complete_read(const Request& r) {
  Op& op = ops_.at(r.op);
  const size_t segments = static_cast<size_t>(2 * options_.layout.n_layer);
  for (int64_t k = 0; k < r.num_slots; ++k) {
    Item& item = op.items[static_cast<size_t>(r.first_item + k)];
    const int64_t slot = r.first_slot + k;
    CHECK_EQ(item.slot, slot);
    const ConstByteSpan bytes(read_unit(r.unit + k), static_cast<size_t>(info_.record_bytes));
    BlockRecordView view;
    const Status st = verify(bytes, &item.ns, item.hash, view);
    const bool doomed = slots_.slot(slot).doomed;
    if (st.is_ok()) {
      std::memcpy(item.tokens_out.data(), view.tokens.data(), view.tokens.size_bytes());
      copy_record_payload(view, std::span<const ByteSpan>(op.dests).subspan(static_cast<size_t>(item.first_dest), segments));
      if (!doomed) slots_.touch(slot, 0);
      op.bytes += info_.record_bytes;
      stats_.bytes_read += info_.record_bytes;
    } else {
      count_corrupt(slot, st);
      if (!doomed) slots_.doom(slot);
    }
    if (slots_.unpin(slot)) invalidate(slot);
    resolve(r.op, item, st.is_ok(),
            st.is_ok() ? st : Status::error("disk tier: corrupt record in slot " + std::to_string(slot) + ": " + st.message()));
  }
  read_units_.release(r.unit, r.num_slots);
}

// An evicted record, read back for the eviction callback (the next tier down copies it).
void DiskTier::complete_demote(const Request& r) {
  const Slot& slot = slots_.slot(r.first_slot);
  const ConstByteSpan bytes(read_unit(r.unit), static_cast<size_t>(info_.record_bytes));
  BlockRecordView view;
  const Status st = verify(bytes, nullptr, slot.hash, view);
  if (st.is_ok()) {
    if (on_evict_) on_evict_(view, slot.priority);
    slots_.release(r.first_slot);
  } else {
    count_corrupt(r.first_slot, st);
    invalidate(r.first_slot);
  }
  read_units_.release(r.unit, 1);
}

// Undoes what a request held (slots, buffers, pins) and fails its items.
void DiskTier::fail_request(const Request& r, const Status& why) {
  switch (r.kind) {
    case RequestKind::kBody:
    case RequestKind::kCommit: {
      Op& op = ops_.at(r.op);
      for (int64_t k = 0; k < r.num_slots; ++k) {
        Item& item = op.items[static_cast<size_t>(r.first_item + k)];
        slots_.release(item.slot);
        write_units_.release(item.unit, 1);
        item.unit = -1;
        resolve(r.op, item, false, why);
      }
      return;
    }
    case RequestKind::kRead: {
      Op& op = ops_.at(r.op);
      for (int64_t k = 0; k < r.num_slots; ++k) {
        slots_.unpin(r.first_slot + k);  // a doomed slot stays doomed: the tier is off
        resolve(r.op, op.items[static_cast<size_t>(r.first_item + k)], false, why);
      }
      read_units_.release(r.unit, r.num_slots);
      return;
    }
    case RequestKind::kDemote:
      slots_.release(r.first_slot);
      read_units_.release(r.unit, 1);
      return;
    case RequestKind::kInvalidate:
      slots_.release(r.first_slot);
      return;
  }
}

void DiskTier::fault(const Request& r, int64_t res) {
  ++stats_.faults;
  const std::string what = std::string(kind_name(r.io.opcode)) + " of " + std::to_string(r.io.len - r.done) +
                           " bytes at byte " + std::to_string(r.io.offset + r.done) + " of " +
                           disk_tier_file_path(options_.dir, r.first_slot / info_.slots_per_file);
  std::string why;
  if (res == -ENOSPC) {
    why = "the disk is full (" + what + ": " + std::strerror(ENOSPC) + ")";
  } else if (res < 0) {
    why = what + " failed: " + std::strerror(static_cast<int>(-res));
  } else {
    why = what + " moved no bytes (short " + kind_name(r.io.opcode) + ")";
  }
  disable(why);
  fail_request(r, Status::unavailable(disabled_reason_));
}

// Turns the tier off: everything not yet handed to the backend fails now; what is in flight
// fails as it finishes (its buffers stay ours until then).
void DiskTier::disable(const std::string& reason) {
  if (!enabled_) return;
  enabled_ = false;
  disabled_reason_ = "disk tier off: " + reason;
  logger_.warn(disabled_reason_ + "; continuing without the disk tier (requests recompute what it held)");
  const Status why = Status::unavailable(disabled_reason_);
  while (!to_submit_.empty()) {
    const int64_t index = to_submit_.front();
    to_submit_.pop_front();
    Request& entry = requests_[static_cast<size_t>(index)];
    const Request r = entry;
    entry.in_use = false;
    free_requests_.push_back(index);
    fail_request(r, why);
  }
  for (const ReadJob& job : read_queue_) {
    if (job.op == 0) {
      slots_.release(job.first_slot);
      continue;
    }
    Op& op = ops_.at(job.op);
    for (int64_t k = 0; k < job.count; ++k) {
      slots_.unpin(job.first_slot + k);
      resolve(job.op, op.items[static_cast<size_t>(job.first_item + k)], false, why);
    }
  }
  read_queue_.clear();
  for (TierOpId id : waiting_puts_) {
    Op& op = ops_.at(id);
    for (Item& item : op.items) {
      if (item.unit < 0 || item.slot >= 0 || item.state != ItemState::kPending) continue;
      write_units_.release(item.unit, 1);
      staged_.erase(item.hash);
      item.unit = -1;
      resolve(id, item, false, why);
    }
    op.slots_needed = 0;
  }
  waiting_puts_.clear();
  slots_owed_ = 0;
}

}  // namespace pagoda::kvcache
