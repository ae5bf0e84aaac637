// RedisTier, the I/O thread's side: each job becomes pipelined commands (RedisShards), and
// their replies become one Done for poll(). Nothing here touches the driving thread's state.
#include <hiredis/hiredis.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kvcache/block_hash.h"
#include "store/redis_tier.h"

namespace pagoda::store {
namespace {

int64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int64_t steady_ns() { return SteadyClock().now_ns(); }

bool is_oom(const redisReply* r) { return reply_is_error(r) && reply_text(r).starts_with("OOM"); }

// The first reason an item of an op failed, kept for the completion.
void note(Status& first, Status why) {
  if (first.is_ok() && !why.is_ok()) first = std::move(why);
}

}  // namespace

void RedisTier::io_main() {
  block_sigpipe_in_this_thread();
  // After stop: the puts still queued are sent (a process that exits right after its reply,
  // `pagoda run`, leaves its blocks for the next instance), until a deadline of two calls'
  // timeouts; other jobs are dropped (their callers are gone).
  int64_t drain_until = -1;
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
      if (stop_) {
        if (drain_until < 0) drain_until = steady_ns() + 2 * (config_.timeouts.connect_ms + config_.timeouts.io_ms) * 1'000'000;
        while (!jobs_.empty() && jobs_.front().kind != JobKind::kPut) jobs_.pop_front();
        if (jobs_.empty() || steady_ns() >= drain_until) return;
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    const int64_t start = steady_ns();
    Done done = run_job(job);
    counters_->io_ns += steady_ns() - start;
    const RedisShardStats& s = shards_.stats();
    counters_->connects = s.connects;
    counters_->faults = s.faults;
    counters_->timeouts = s.timeouts;
    counters_->moved = s.moved_redirects;
    counters_->ask = s.ask_redirects;
    counters_->refreshes = s.slot_map_refreshes;
    done.faults = shards_.take_faults();
    const int64_t put_bytes = job.put_bytes;
    {
      std::lock_guard<std::mutex> lock(mu_);
      recycle(job.puts);
      if (done.is_op || done.probe_shard >= 0 || !done.faults.empty()) done_.push_back(std::move(done));
    }
    inflight_put_bytes_ -= put_bytes;
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof(one));
  }
}

void RedisTier::recycle(std::vector<PutItem>& puts) {
  for (PutItem& item : puts) {
    if (item.bytes.capacity() != 0 && free_put_buffers_.size() < 64) free_put_buffers_.push_back(std::move(item.bytes));
  }
}

RedisTier::Done RedisTier::run_job(Job& job) {
  Done done;
  done.completion.op = job.id;
  done.completion.num_items = job.num_items;
  done.completion.submit_ns = job.submit_ns;
  switch (job.kind) {
    case JobKind::kLookup: run_lookup(job, done); break;
    case JobKind::kPut: run_put(job, done); break;
    case JobKind::kGet: run_get(job, done); break;
    case JobKind::kErase: run_erase(job); done.is_op = false; break;
    case JobKind::kProbe: run_probe(job, done); break;
  }
  return done;
}

void RedisTier::run_lookup(Job& job, Done& done) {
  done.completion.kind = kvcache::TierOpKind::kLookup;
  const size_t n = job.hashes.size();
  keys_.clear();
  for (kvcache::BlockHash h : job.hashes) keys_.push_back(key_of(h));
  requests_.assign(n, RedisRequest{});
  for (size_t i = 0; i < n; ++i) {
    requests_[i].shard = shards_.shard_of(job.hashes[i]);
    requests_[i].key = keys_[i];
    requests_[i].args.add("EXISTS").add(keys_[i]);
  }
  responses_.resize(n);
  shards_.execute(requests_, responses_);
  int64_t held = 0;
  Status why;
  for (size_t i = 0; i < n; ++i) {
    const RedisResponse& r = responses_[i];
    if (r.reply == nullptr) {
      why = r.status;
      break;
    }
    if (r.reply->type != REDIS_REPLY_INTEGER || r.reply->integer != 1) {
      if (reply_is_error(r.reply.get())) why = Status::error("redis EXISTS: " + reply_text(r.reply.get()));
      break;
    }
    ++held;
  }
  responses_.clear();
  done.completion.num_ok = held;
  done.completion.status = std::move(why);
  counters_->lookup_hit_blocks += held;
}

void RedisTier::run_put(Job& job, Done& done) {
  done.completion.kind = kvcache::TierOpKind::kPut;
  const size_t n = job.puts.size();
  std::vector<char> ok(n, 0);
  Status why;
  // 1. Which blocks does Redis hold already? Those are refreshed, not sent again.
  keys_.clear();
  for (const PutItem& item : job.puts) keys_.push_back(key_of(item.meta.block_hash));
  requests_.clear();
  std::vector<size_t> asked;  // item per request
  for (size_t i = 0; i < n; ++i) {
    if (job.puts[i].skipped) continue;
    RedisRequest& r = requests_.emplace_back();
    r.shard = job.puts[i].shard;
    r.key = keys_[i];
    r.args.add("EXISTS").add(keys_[i]);
    asked.push_back(i);
  }
  responses_.resize(requests_.size());
  shards_.execute(requests_, responses_);
  std::vector<char> present(n, 0), reachable(n, 0);
  for (size_t k = 0; k < asked.size(); ++k) {
    const RedisResponse& r = responses_[k];
    if (r.reply == nullptr) {
      note(why, r.status);
      continue;
    }
    reachable[asked[k]] = 1;
    present[asked[k]] = r.reply->type == REDIS_REPLY_INTEGER && r.reply->integer == 1;
  }
  responses_.clear();
  // 2. SET the absent ones (TOUCH / EXPIRE the present ones), one window of values at a time.
  const std::string ttl = std::to_string(config_.ttl_seconds);
  const kvcache::BlockRecordMeta shape = kvcache::record_meta_for(config_.layout);
  const size_t token_bytes = static_cast<size_t>(shape.block_size) * 4;
  size_t i = 0;
  while (i < n) {
    requests_.clear();
    asked.clear();
    int64_t window_bytes = 0;
    size_t num_values = 0;
    for (; i < n && (window_bytes < config_.pipeline_window_bytes || num_values == 0); ++i) {
      if (!reachable[i]) continue;
      PutItem& item = job.puts[i];
      RedisRequest& r = requests_.emplace_back();
      r.shard = item.shard;
      r.key = keys_[i];
      asked.push_back(i);
      if (present[i]) {
        if (config_.ttl_seconds > 0) {
          r.args.add("EXPIRE").add(keys_[i]).add(ttl);
        } else {
          r.args.add("TOUCH").add(keys_[i]);
        }
        continue;
      }
      if (window_values_.size() <= num_values) window_values_.resize(num_values + 1);
      RecordScratch& value_buf = window_values_[num_values++];
      RecordScratch& record = config_.compression == RedisCompression::kNone ? value_buf : record_scratch_;
      const std::span<const int32_t> tokens(reinterpret_cast<const int32_t*>(item.bytes.data()),
                                            static_cast<size_t>(shape.block_size));
      const kvcache::ConstByteSpan payload[1] = {{item.bytes.data() + token_bytes, item.bytes.size() - token_bytes}};
      record.resize(record_bytes_);
      kvcache::encode_block_record(item.meta, tokens, payload, {record.data(), static_cast<size_t>(record_bytes_)});
      const int64_t cpu0 = thread_cpu_ns();
      kvcache::ConstByteSpan value = codec_.encode(record.span(), value_buf);
      if (config_.compression != RedisCompression::kNone) counters_->compress_ns += thread_cpu_ns() - cpu0;
      if (value.data() == record_scratch_.data()) {  // incompressible: the plain record, which the
        std::memcpy(value_buf.resize(record_bytes_), value.data(), value.size());  // next item reuses
        value = value_buf.span();
      }
      r.args.add("SET").add(keys_[i]).add({reinterpret_cast<const char*>(value.data()), value.size()});
      if (config_.ttl_seconds > 0) r.args.add("EX").add(ttl);
      window_bytes += static_cast<int64_t>(value.size());
    }
    responses_.resize(requests_.size());
    shards_.execute(requests_, responses_);
    for (size_t k = 0; k < asked.size(); ++k) {
      const size_t item = asked[k];
      const RedisResponse& r = responses_[k];
      if (r.reply == nullptr) {
        note(why, r.status);
        continue;
      }
      if (reply_is_error(r.reply.get())) {
        if (is_oom(r.reply.get())) counters_->put_rejected_full += 1;
        note(why, Status::unavailable("redis " + std::string(present[item] ? "refresh" : "SET") + ": " + reply_text(r.reply.get())));
        continue;
      }
      ok[item] = 1;
      if (present[item]) {
        counters_->put_skipped_existing += 1;
      } else {
        const int64_t wire = static_cast<int64_t>(requests_[k].args.len[2]);
        done.completion.bytes += wire;
        counters_->bytes_written += wire;
        counters_->raw_bytes_written += record_bytes_;
      }
    }
    responses_.clear();
  }
  int64_t num_ok = 0;
  while (num_ok < static_cast<int64_t>(n) && ok[num_ok]) ++num_ok;
  int64_t stored = 0;
  for (char c : ok) stored += c;
  counters_->put_blocks += stored;
  counters_->put_failures += static_cast<int64_t>(n) - stored;
  if (num_ok < static_cast<int64_t>(n)) note(why, Status::unavailable("redis tier: the block's server was down"));
  done.completion.num_ok = num_ok;
  done.completion.status = num_ok == static_cast<int64_t>(n) ? Status::ok() : std::move(why);
}

void RedisTier::run_get(Job& job, Done& done) {
  done.completion.kind = kvcache::TierOpKind::kGet;
  const size_t n = job.gets.size();
  const size_t per_window =
      static_cast<size_t>(std::max<int64_t>(1, config_.pipeline_window_bytes / std::max<int64_t>(1, record_bytes_)));
  keys_.clear();
  for (const kvcache::TierGet& g : job.gets) keys_.push_back(key_of(g.hash));
  std::vector<size_t> corrupt;  // items whose record failed: deleted from Redis
  Status why;
  int64_t num_ok = 0;
  bool alive = true;  // a chain: after the first miss nothing later is usable, so it is not read
  for (size_t first = 0; alive && first < n; first += per_window) {
    const size_t last = std::min(n, first + per_window);
    requests_.assign(last - first, RedisRequest{});
    for (size_t i = first; i < last; ++i) {
      RedisRequest& r = requests_[i - first];
      r.shard = shards_.shard_of(job.gets[i].hash);
      r.key = keys_[i];
      r.args.add("GET").add(keys_[i]);
    }
    responses_.resize(requests_.size());
    shards_.execute(requests_, responses_);
    for (size_t i = first; alive && i < last; ++i) {
      const RedisResponse& r = responses_[i - first];
      const kvcache::TierGet& g = job.gets[i];
      if (r.reply == nullptr) {
        note(why, r.status);
        alive = false;
        break;
      }
      if (r.reply->type == REDIS_REPLY_NIL) {  // evicted or expired since a lookup saw it
        counters_->missing_records += 1;
        alive = false;
        break;
      }
      if (r.reply->type != REDIS_REPLY_STRING) {
        note(why, Status::error("redis GET " + keys_[i] + ": " + (reply_is_error(r.reply.get()) ? reply_text(r.reply.get()) : "not a string")));
        alive = false;
        break;
      }
      const kvcache::ConstByteSpan value(reinterpret_cast<const uint8_t*>(r.reply->str), r.reply->len);
      const int64_t cpu0 = thread_cpu_ns();
      Result<kvcache::ConstByteSpan> record = codec_.decode(value, record_bytes_, record_scratch_);
      if (record.is_ok() && record->data() != value.data()) counters_->decompress_ns += thread_cpu_ns() - cpu0;
      Status bad = record.status();
      Result<kvcache::BlockRecordView> view = Status::error("unread");
      if (bad.is_ok()) {
        view = kvcache::decode_block_record(*record);
        bad = view.status();
      }
      if (bad.is_ok()) bad = kvcache::check_block_record(view->meta, config_.layout, g.ns, g.hash);
      if (!bad.is_ok()) {
        counters_->corrupt_records += 1;
        corrupt.push_back(i);
        note(why, bad.with_context("redis " + keys_[i]));
        alive = false;
        break;
      }
      std::memcpy(g.tokens_out.data(), view->tokens.data(), view->tokens.size_bytes());
      kvcache::copy_record_payload(*view, g.dest);
      ++num_ok;
      done.completion.bytes += static_cast<int64_t>(value.size());
      counters_->bytes_read += static_cast<int64_t>(value.size());
      counters_->raw_bytes_read += record_bytes_;
    }
    responses_.clear();
  }
  if (!corrupt.empty()) {  // never read again: drop what failed its checks
    requests_.assign(corrupt.size(), RedisRequest{});
    for (size_t k = 0; k < corrupt.size(); ++k) {
      requests_[k].shard = shards_.shard_of(job.gets[corrupt[k]].hash);
      requests_[k].key = keys_[corrupt[k]];
      requests_[k].args.add("DEL").add(keys_[corrupt[k]]);
    }
    responses_.resize(requests_.size());
    shards_.execute(requests_, responses_);
    responses_.clear();
  }
  counters_->get_blocks += num_ok;
  counters_->get_failures += static_cast<int64_t>(n) - num_ok;
  if (num_ok < job.num_items && why.is_ok() && static_cast<size_t>(num_ok) == n) {
    why = Status::unavailable("redis tier: the block's server was down");
  }
  done.completion.num_ok = num_ok;
  done.completion.status = std::move(why);
}

void RedisTier::run_erase(Job& job) {
  keys_.clear();
  for (kvcache::BlockHash h : job.hashes) keys_.push_back(key_of(h));
  requests_.assign(job.hashes.size(), RedisRequest{});
  for (size_t i = 0; i < job.hashes.size(); ++i) {
    requests_[i].shard = shards_.shard_of(job.hashes[i]);
    requests_[i].key = keys_[i];
    requests_[i].args.add("DEL").add(keys_[i]);
  }
  responses_.resize(requests_.size());
  shards_.execute(requests_, responses_);
  responses_.clear();
}

void RedisTier::run_probe(Job& job, Done& done) {
  done.is_op = false;
  done.probe_shard = job.probe_shard;
  // Bytes that differ on every probe (and between instances): an old value cannot pass. One
  // record's size, so that the probe also times what a block costs to move (take_transfer_sample).
  const uint64_t seed = config_.instance_nonce ^ static_cast<uint64_t>(steady_ns());
  std::string value(static_cast<size_t>(std::max<int64_t>(64, record_bytes_)), '\0');
  for (size_t i = 0; i + 8 <= value.size(); i += 8) {
    const uint64_t word = kvcache::xxhash64(&seed, sizeof(seed), i);
    std::memcpy(value.data() + i, &word, 8);
  }
  done.probe_status = shards_.probe(job.probe_shard, value, config_.instance_nonce);
  // Timed on the driving thread (apply(): now - submit_ns), whose clock this is.
  done.probe_bytes = 2 * static_cast<int64_t>(value.size());
  done.probe_submit_ns = job.submit_ns;
}

}  // namespace pagoda::store
