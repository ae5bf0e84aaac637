// DiskTier ops: lookup, put, get, erase, poll, and what each I/O completion does (the design and
// the write protocol are at the top of disk_tier.h; create() and the start-up scan are in
// disk_tier_open.cpp).
#include "kvcache/disk_tier.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/check.h"

namespace pagoda::kvcache {
DiskTier::DiskTier(const DiskTierOptions& options, const Clock& clock, const Logger& logger,
                   std::unique_ptr<IoBackend> io, DiskTierInfo info, OpenFiles files, AlignedBuffer write_buf,
                   AlignedBuffer read_buf, AlignedBuffer zero_page)
    : options_(options),
      clock_(clock),
      logger_(logger),
      io_(std::move(io)),
      info_(std::move(info)),
      lock_fd_(files.lock_fd),
      fds_(std::move(files.fds)),
      slots_(info_.num_slots, options.eviction),
      write_buf_(std::move(write_buf)),
      write_units_(static_cast<int64_t>(write_buf_.size()) / info_.slot_bytes),
      read_buf_(std::move(read_buf)),
      read_units_(static_cast<int64_t>(read_buf_.size()) / info_.slot_bytes),
      zero_page_(std::move(zero_page)) {
  stats_.capacity_blocks = info_.num_slots;
  requests_.reserve(static_cast<size_t>(io_->max_in_flight()) * 2);
}

DiskTier::~DiskTier() {
  // Writes already started finish (a commit whose record is written, an erase's zero page), so a
  // clean shutdown leaves on disk what the index held. Reads are dropped: their destinations may
  // be gone. The kernel (or the I/O threads) may still be using our buffers: wait them out.
  closing_ = true;
  on_evict_ = nullptr;
  read_queue_.clear();
  std::vector<IoResult> results;
  for (;;) {
    if (enabled_) submit_requests();
    if (io_->in_flight() == 0) break;
    results.clear();
    io_->wait(results);
    for (const IoResult& result : results) {
      if (enabled_) handle_result(result);
    }
  }
  for (int fd : fds_) {
    if (enabled_) ::fdatasync(fd);  // a clean shutdown leaves the records on the device
    io_->close_file(fd);
  }
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string disk_tier_file_path(const std::string& dir, int64_t file) {
  char name[32];
  std::snprintf(name, sizeof(name), "kv-slots-%04lld.pgkv", static_cast<long long>(file));
  return dir + "/" + name;
}

// ---- ops -------------------------------------------------------------------------------------

TierOpId DiskTier::complete_now(TierOpKind kind, int64_t num_items, int64_t num_ok, Status status) {
  const TierOpId id = next_op_++;
  const int64_t now = clock_.now_ns();
  done_.push_back(TierCompletion{id, kind, num_items, num_ok, std::move(status), now, now, 0});
  return id;
}

TierOpId DiskTier::refuse(TierOpKind kind, int64_t num_items) {
  (kind == TierOpKind::kPut ? stats_.put_failures : stats_.get_failures) += kind == TierOpKind::kLookup ? 0 : num_items;
  return complete_now(kind, num_items, 0, Status::unavailable(disabled_reason_));
}

TierOpId DiskTier::new_op(TierOpKind kind, int64_t num_items, Op*& op) {
  const TierOpId id = next_op_++;
  Op& o = ops_[id];
  o.kind = kind;
  o.submit_ns = clock_.now_ns();
  o.items.resize(static_cast<size_t>(num_items));
  o.num_pending = num_items;
  op = &o;
  if (num_items == 0) finished_.push_back(id);
  return id;
}

void DiskTier::resolve(TierOpId id, Item& item, bool ok, const Status& why) {
  CHECK(item.state == ItemState::kPending) << "item of op " << id << " resolved twice";
  item.state = ok ? ItemState::kOk : ItemState::kFailed;
  Op& op = ops_.at(id);
  if (!ok && op.status.is_ok() && !why.is_ok()) op.status = why;
  if (--op.num_pending == 0) finished_.push_back(id);
}

void DiskTier::flush_finished() {
  for (TierOpId id : finished_) {
    Op& op = ops_.at(id);
    const int64_t n = static_cast<int64_t>(op.items.size());
    int64_t num_ok = 0;
    while (num_ok < n && op.items[static_cast<size_t>(num_ok)].state == ItemState::kOk) ++num_ok;
    if (op.kind == TierOpKind::kPut) {
      stats_.put_blocks += num_ok;
      stats_.put_failures += n - num_ok;
    } else {
      stats_.get_blocks += num_ok;
      stats_.get_failures += n - num_ok;
    }
    done_.push_back(TierCompletion{id, op.kind, n, num_ok, num_ok == n ? Status::ok() : op.status, op.submit_ns,
                                   clock_.now_ns(), op.bytes});
    ops_.erase(id);
  }
  finished_.clear();
}

TierOpId DiskTier::lookup(std::span<const BlockHash> chain) {
  ++stats_.lookups;
  const int64_t n = static_cast<int64_t>(chain.size());
  if (!enabled_) return refuse(TierOpKind::kLookup, n);
  int64_t held = 0;
  while (held < n && slots_.find(chain[static_cast<size_t>(held)])) ++held;
  stats_.lookup_hit_blocks += held;
  return complete_now(TierOpKind::kLookup, n, held, Status::ok());
}

TierOpId DiskTier::put(std::span<const TierPut> blocks) {
  ++stats_.puts;
  const int64_t n = static_cast<int64_t>(blocks.size());
  if (!enabled_) return refuse(TierOpKind::kPut, n);
  // Completed writes first: their staging units and slots are free again for this put, which on
  // a slow host may come long after the last poll.
  reap_results();
  Op* op = nullptr;
  const TierOpId id = new_op(TierOpKind::kPut, n, op);
  stage_puts(id, *op, blocks);
  if (op->slots_needed > 0) make_room(id, *op);
  assign_slots();
  start_reads();  // demotions make_room queued
  submit_requests();
  flush_finished();
  return id;
}

Status DiskTier::check_put(const TierPut& b) const {
  PAGODA_RETURN_IF_ERROR(check_block_record(b.meta, options_.layout, b.meta.ns, b.meta.block_hash));
  if (b.meta.ns.model_fingerprint != options_.model_fingerprint || b.meta.ns.kv_format != options_.kv_format) {
    return Status::invalid_argument("disk tier: a block of another model or KV format");
  }
  if (static_cast<int64_t>(b.tokens.size()) != b.meta.block_size) {
    return Status::invalid_argument("disk tier: a block with " + std::to_string(b.tokens.size()) + " token ids");
  }
  int64_t payload = 0;
  for (ConstByteSpan seg : b.payload) payload += static_cast<int64_t>(seg.size());
  if (payload != b.meta.payload_bytes) {
    return Status::invalid_argument("disk tier: a block payload of " + std::to_string(payload) + " bytes");
  }
  return Status::ok();
}

// Classifies every block (bad, held already, being written, to write) and encodes the ones to
// write into staging buffers, in chain order; from the first that fails, the rest fail too.
void DiskTier::stage_puts(TierOpId id, Op& op, std::span<const TierPut> blocks) {
  RunAllocator::Run run;  // staging units taken and not yet used: [run.first, +run.count)
  Status failed;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const TierPut& b = blocks[i];
    Item& item = op.items[i];
    item.hash = b.meta.block_hash;
    item.priority = b.priority;
    if (!failed.is_ok()) {
      resolve(id, item, false, failed);
      continue;
    }
    if (Status st = check_put(b); !st.is_ok()) {
      failed = st;
      resolve(id, item, false, failed);
      continue;
    }
    if (auto held = slots_.find(item.hash)) {  // a put of a held block refreshes it
      slots_.touch(*held, item.priority);
      resolve(id, item, true);
      continue;
    }
    if (slots_.find_writing(item.hash) || staged_.contains(item.hash)) {  // on its way already
      resolve(id, item, true);
      continue;
    }
    if (run.count == 0) run = write_units_.allocate(static_cast<int64_t>(blocks.size() - i));
    if (run.count == 0) {
      failed = Status::unavailable("disk tier: every write buffer is busy (" + format_bytes(options_.write_buffer_bytes) +
                                   " of records in flight)");
      resolve(id, item, false, failed);
      continue;
    }
    item.unit = run.first++;
    --run.count;
    staged_.emplace(item.hash, false);
    uint8_t* buf = write_unit(item.unit);
    encode_block_record(b.meta, b.tokens, b.payload, ByteSpan(buf, static_cast<size_t>(info_.record_bytes)));
    std::memset(buf + info_.record_bytes, 0, static_cast<size_t>(info_.slot_bytes - info_.record_bytes));
    std::memset(buf, 0, 4);  // zero magic: not a record on disk until the commit write puts it back
    ++op.slots_needed;
  }
  if (run.count > 0) write_units_.release(run.first, run.count);
}

// Promises the op the slots it needs: free ones, slots on their way to free, and victims.
// Staged items that cannot get a slot (every slot busy) fail, the last ones first.
void DiskTier::make_room(TierOpId id, Op& op) {
  int64_t available = slots_.num_free() + slots_.num_incoming() - slots_owed_;
  CHECK_GE(available, 0);
  while (available < op.slots_needed) {
    const std::optional<int64_t> victim = slots_.victim();
    if (!victim) break;
    const bool demote = static_cast<bool>(on_evict_);
    slots_.evict(*victim, demote);
    ++stats_.evictions;
    if (demote) read_queue_.push_back(ReadJob{0, 0, *victim, 1});
    ++available;
  }
  const Status no_slot = Status::unavailable("disk tier: no slot to evict (every slot is being read or written)");
  for (size_t i = op.items.size(); i-- > 0 && available < op.slots_needed;) {
    Item& item = op.items[i];
    if (item.unit < 0 || item.state != ItemState::kPending) continue;
    write_units_.release(item.unit, 1);
    staged_.erase(item.hash);
    item.unit = -1;
    --op.slots_needed;
    resolve(id, item, false, no_slot);
  }
  if (op.slots_needed > 0) {
    slots_owed_ += op.slots_needed;
    waiting_puts_.push_back(id);
  }
}

// Hands free slots to the waiting puts, oldest first, and queues their record writes: items
// whose staging buffers and slots are both consecutive go in one request.
void DiskTier::assign_slots() {
  const int64_t max_run = std::max<int64_t>(1, options_.max_request_bytes / info_.slot_bytes);
  while (!waiting_puts_.empty() && slots_.num_free() > 0) {
    const TierOpId id = waiting_puts_.front();
    Op& op = ops_.at(id);
    while (op.slots_needed > 0 && slots_.num_free() > 0) {
      const RunAllocator::Run run = slots_.allocate(op.slots_needed);
      Request r;  // the write being grown
      for (int64_t k = 0; k < run.count; ++k) {
        while (op.items[static_cast<size_t>(op.next_unassigned)].unit < 0 ||
               op.items[static_cast<size_t>(op.next_unassigned)].slot >= 0) {
          ++op.next_unassigned;
        }
        const int64_t i = op.next_unassigned++;
        Item& item = op.items[static_cast<size_t>(i)];
        item.slot = run.first + k;
        const bool erased = staged_.at(item.hash);
        staged_.erase(item.hash);
        slots_.begin_write(item.slot, item.hash, item.priority);
        if (erased) slots_.doom(item.slot);  // erased while it waited: written, never visible
        const bool extends = r.num_slots > 0 && r.num_slots < max_run && i == r.first_item + r.num_slots &&
                             item.unit == r.unit + r.num_slots && item.slot == r.first_slot + r.num_slots &&
                             same_file(item.slot, r.first_slot);
        if (extends) {
          ++r.num_slots;
          continue;
        }
        if (r.num_slots > 0) queue_write(r);
        r = Request::of(RequestKind::kBody, id, i, item.slot, 1, item.unit);
      }
      if (r.num_slots > 0) queue_write(r);
      op.slots_needed -= run.count;
      slots_owed_ -= run.count;
    }
    if (op.slots_needed > 0) break;
    waiting_puts_.pop_front();
  }
}

// Starts the queued reads, oldest first, as far as bounce buffers allow (a read that gets fewer
// buffers than it has slots goes in parts).
void DiskTier::start_reads() {
  while (!read_queue_.empty()) {
    ReadJob& job = read_queue_.front();
    const RunAllocator::Run run = read_units_.allocate(job.count);
    if (run.count == 0) return;
    Request r = Request::of(job.op != 0 ? RequestKind::kRead : RequestKind::kDemote, job.op, job.first_item,
                            job.first_slot, run.count, run.first);
    r.io = IoRequest{0, IoOpcode::kRead, fd_of(job.first_slot), offset_of(job.first_slot), read_unit(run.first),
                     run.count * info_.slot_bytes};
    queue_request(r);
    job.first_item += run.count;
    job.first_slot += run.count;
    job.count -= run.count;
    if (job.count == 0) read_queue_.pop_front();
  }
}

TierOpId DiskTier::get(std::span<const TierGet> blocks) {
  ++stats_.gets;
  const int64_t n = static_cast<int64_t>(blocks.size());
  if (!enabled_) return refuse(TierOpKind::kGet, n);
  Op* op = nullptr;
  const TierOpId id = new_op(TierOpKind::kGet, n, op);
  const int64_t segments = 2 * options_.layout.n_layer;
  op->dests.reserve(static_cast<size_t>(n * segments));
  const int64_t max_run = std::max<int64_t>(1, options_.max_request_bytes / info_.slot_bytes);
  bool missed = false;
  ReadJob job;
  for (int64_t i = 0; i < n; ++i) {
    const TierGet& b = blocks[static_cast<size_t>(i)];
    CHECK_EQ(static_cast<int64_t>(b.dest.size()), segments) << "a get needs a pool block's segments";
    int64_t dest_bytes = 0;
    for (ByteSpan seg : b.dest) dest_bytes += static_cast<int64_t>(seg.size());
    CHECK_EQ(dest_bytes, options_.layout.bytes_per_block()) << "get destination of another size";
    CHECK_EQ(static_cast<int64_t>(b.tokens_out.size()), options_.layout.block_size);
    Item& item = op->items[static_cast<size_t>(i)];
    item.hash = b.hash;
    item.ns = b.ns;
    item.tokens_out = b.tokens_out;
    item.first_dest = static_cast<int64_t>(op->dests.size());
    op->dests.insert(op->dests.end(), b.dest.begin(), b.dest.end());
    const std::optional<int64_t> slot = missed ? std::nullopt : slots_.find(b.hash);
    if (!slot) {  // a miss: nothing from here on is read
      missed = true;
      resolve(id, item, false);
      continue;
    }
    slots_.pin(*slot);
    item.slot = *slot;
    const bool extends = job.count > 0 && job.count < max_run && *slot == job.first_slot + job.count &&
                         same_file(*slot, job.first_slot);
    if (extends) {
      ++job.count;
      continue;
    }
    if (job.count > 0) read_queue_.push_back(job);
    job = ReadJob{id, i, *slot, 1};
  }
  if (job.count > 0) read_queue_.push_back(job);
  start_reads();
  submit_requests();
  flush_finished();
  return id;
}

void DiskTier::erase(std::span<const BlockHash> hashes) {
  if (!enabled_) return;
  for (BlockHash hash : hashes) {
    if (const std::optional<int64_t> slot = slots_.find(hash)) {
      slots_.doom(*slot);
      if (slots_.slot(*slot).pins == 0) invalidate(*slot);  // else when its last read ends
    } else if (const std::optional<int64_t> writing = slots_.find_writing(hash)) {
      slots_.doom(*writing);  // its write finishes, then the slot is dropped
    } else if (auto staged = staged_.find(hash); staged != staged_.end()) {
      staged->second = true;  // waiting for a slot: dropped once written
    }
  }
  submit_requests();
}

FoundBlocks DiskTier::take_found_blocks() {
  FoundBlocks out;
  out.block_size = options_.layout.block_size;
  const size_t bs = static_cast<size_t>(out.block_size);
  for (size_t i = 0; i < found_.blocks.size(); ++i) {
    if (!slots_.find(found_.blocks[i].hash)) continue;  // dropped since
    out.blocks.push_back(found_.blocks[i]);
    out.tokens.insert(out.tokens.end(), found_.tokens.begin() + static_cast<std::ptrdiff_t>(i * bs),
                      found_.tokens.begin() + static_cast<std::ptrdiff_t>((i + 1) * bs));
  }
  found_ = FoundBlocks{};
  return out;
}

void DiskTier::poll(std::vector<TierCompletion>& out) {
  if (!found_.blocks.empty()) found_ = FoundBlocks{};  // not taken before the step loop: not wanted
  reap_results();
  if (enabled_) {
    assign_slots();
    start_reads();
  }
  submit_requests();
  flush_finished();
  out.insert(out.end(), done_.begin(), done_.end());
  done_.clear();
}

void DiskTier::reap_results() {
  results_.clear();
  io_->reap(results_);
  for (const IoResult& result : results_) handle_result(result);
}

TierStats DiskTier::stats() const {
  TierStats s = stats_;
  s.used_blocks = slots_.num_ready();
  return s;
}

std::string DiskTier::describe() const {
  const KvLayout& l = options_.layout;
  std::string s = "disk tier: " + options_.dir + ": " + format_bytes(info_.num_slots * info_.slot_bytes) + " in " +
                  std::to_string(info_.num_files) + (info_.num_files == 1 ? " file" : " files") + ", " +
                  std::to_string(info_.num_slots) + " blocks of " + format_bytes(info_.slot_bytes) + " (" +
                  std::to_string(info_.num_slots * l.block_size) + " tokens), " +
                  (info_.direct_io ? "O_DIRECT" : "buffered") + " I/O through " + info_.backend + "; found " +
                  std::to_string(info_.records_found) + " records";
  const int64_t dropped = info_.dropped_foreign + info_.dropped_unreadable + info_.dropped_incomplete +
                          info_.dropped_truncated + info_.dropped_duplicate;
  if (dropped > 0) {
    s += ", dropped " + std::to_string(dropped) + " (" + std::to_string(info_.dropped_foreign) +
         " of another model/KV format/shape, " + std::to_string(info_.dropped_unreadable) + " unreadable, " +
         std::to_string(info_.dropped_incomplete) + " incomplete, " + std::to_string(info_.dropped_truncated) +
         " truncated, " + std::to_string(info_.dropped_duplicate) + " duplicate)";
  }
  char ms[32];
  std::snprintf(ms, sizeof(ms), " in %.0f ms", static_cast<double>(info_.scan_ns) * 1e-6);
  return s + ms;
}

void DiskTier::check_integrity() const {
  slots_.check_integrity();
  int64_t staged = 0, owed = 0;
  for (const auto& [id, op] : ops_) {
    for (const Item& item : op.items) staged += item.unit >= 0 && op.kind == TierOpKind::kPut;
    owed += op.slots_needed;
  }
  CHECK_EQ(staged, write_units_.size() - write_units_.num_free()) << "staging buffers leaked";
  CHECK_EQ(owed, slots_owed_);
  int64_t waiting = 0;
  for (TierOpId id : waiting_puts_) {
    for (const Item& item : ops_.at(id).items) waiting += item.unit >= 0 && item.slot < 0;
  }
  CHECK_EQ(waiting, static_cast<int64_t>(staged_.size())) << "staged blocks and waiting items disagree";
  int64_t bounce = 0, live = 0;
  for (const Request& r : requests_) {
    if (!r.in_use) continue;
    ++live;
    if (r.kind == RequestKind::kRead || r.kind == RequestKind::kDemote) bounce += r.num_slots;
  }
  CHECK_EQ(bounce, read_units_.size() - read_units_.num_free()) << "bounce buffers leaked";
  CHECK_EQ(live + static_cast<int64_t>(free_requests_.size()), static_cast<int64_t>(requests_.size()));
  CHECK_LE(static_cast<int64_t>(to_submit_.size()), live);
  CHECK_LE(slots_owed_, slots_.num_free() + slots_.num_incoming());
}

}  // namespace pagoda::kvcache
