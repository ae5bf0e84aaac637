// LeaseTable (transfer/lease_table.h): grants, validate-after-read confirms, expiry.
#include "transfer/lease_table.h"

#include <algorithm>
#include <climits>

#include "core/check.h"

namespace pagoda::transfer {

LeaseTable::LeaseTable(int64_t num_blocks, const Clock& clock, int64_t ttl_ns)
    : clock_(clock), ttl_ns_(ttl_ns), generations_(num_blocks, 1), lease_counts_(num_blocks, 0) {
  CHECK(num_blocks >= 0 && ttl_ns > 0);
}

Lease LeaseTable::grant(std::span<const int32_t> blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry e;
  e.lease.id = next_id_++;
  e.lease.expires_ns = clock_.now_ns() + ttl_ns_;
  e.lease.blocks.reserve(blocks.size());
  for (int32_t b : blocks) {
    CHECK(b >= 0 && b < static_cast<int64_t>(generations_.size())) << "lease of block " << b;
    ++lease_counts_[b];
    e.lease.blocks.push_back({b, generations_[b]});
  }
  ++stats_.granted;
  ++stats_.active;
  ++stats_.held;
  Lease out = e.lease;
  leases_.emplace(out.id, std::move(e));
  return out;
}

void LeaseTable::end_locked(Entry& e) {
  CHECK(e.state == State::kActive);
  e.state = State::kEnded;
  --stats_.active;
  for (const BlockRef& r : e.lease.blocks) {
    CHECK(lease_counts_[r.block] > 0);
    if (--lease_counts_[r.block] == 0) ++generations_[r.block];  // may be reused once unpinned
  }
}

void LeaseTable::expire_locked(int64_t now) {
  for (auto& [id, e] : leases_) {
    if (e.state == State::kActive && now >= e.lease.expires_ns) {
      end_locked(e);
      ++stats_.expired;
    }
  }
}

Status LeaseTable::confirm(uint64_t id, std::span<const BlockRef> refs) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.state != State::kActive) {
    ++stats_.refused;
    return Status::not_found("lease " + std::to_string(id) + " is unknown or has ended");
  }
  Entry& e = it->second;
  if (clock_.now_ns() >= e.lease.expires_ns) {
    end_locked(e);
    ++stats_.expired;
    ++stats_.refused;
    return Status::unavailable("lease " + std::to_string(id) + " expired before the transfer was confirmed");
  }
  // Every reference must be one of the lease's blocks at its generation (a subset is fine: the
  // peer may have had some blocks already).
  for (const BlockRef& r : refs) {
    bool found = false;
    for (const BlockRef& mine : e.lease.blocks) found = found || mine == r;
    if (!found || r.block < 0 || r.block >= static_cast<int64_t>(generations_.size()) ||
        generations_[r.block] != r.generation) {
      end_locked(e);
      ++stats_.refused;
      return Status::invalid_argument("block " + std::to_string(r.block) + " generation " +
                                      std::to_string(r.generation) + " is not part of lease " + std::to_string(id));
    }
  }
  end_locked(e);
  ++stats_.confirmed;
  return Status::ok();
}

std::vector<uint64_t> LeaseTable::take_ended() {
  std::lock_guard<std::mutex> lock(mutex_);
  expire_locked(clock_.now_ns());
  std::vector<uint64_t> out;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.state == State::kEnded) {
      out.push_back(it->first);
      it = leases_.erase(it);
      --stats_.held;
    } else {
      ++it;
    }
  }
  return out;
}

int64_t LeaseTable::next_deadline_ns() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int64_t next = INT64_MAX;
  for (const auto& [id, e] : leases_) {
    if (e.state == State::kActive) next = std::min(next, e.lease.expires_ns);
    else next = std::min<int64_t>(next, 0);  // ended, not reaped: due now
  }
  return next;
}

uint64_t LeaseTable::generation(int32_t block) const {
  std::lock_guard<std::mutex> lock(mutex_);
  CHECK(block >= 0 && block < static_cast<int64_t>(generations_.size()));
  return generations_[block];
}

LeaseStats LeaseTable::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace pagoda::transfer
