#include "store/redis_shards.h"

#include <hiredis/hiredis.h>

namespace pagoda::store {
namespace {

// Error replies that mean "this server cannot serve now" rather than "no" to the command.
bool server_unavailable(std::string_view text) {
  return text.starts_with("CLUSTERDOWN") || text.starts_with("LOADING") || text.starts_with("MASTERDOWN") ||
         text.starts_with("NOAUTH") || text.starts_with("MISCONF");
}

}  // namespace

int jump_hash(uint64_t key, int num_buckets) {
  CHECK_GT(num_buckets, 0);
  int64_t b = -1, j = 0;
  while (j < num_buckets) {
    b = j;
    key = key * 2862933555777941757ULL + 1;
    j = static_cast<int64_t>(static_cast<double>(b + 1) * (static_cast<double>(int64_t{1} << 31) / static_cast<double>((key >> 33) + 1)));
  }
  return static_cast<int>(b);
}

RedisShards::RedisShards(RedisTopology topology, RedisTimeouts timeouts, int max_redirects)
    : topology_(std::move(topology)), timeouts_(timeouts), max_redirects_(max_redirects) {
  CHECK(!topology_.endpoints.empty()) << "no Redis endpoints";
  down_.assign(static_cast<size_t>(num_shards()), 0);
  if (topology_.cluster) {
    for (const RedisEndpoint& seed : topology_.endpoints) slot_map_.node_index(seed.host, seed.port);
  }
  conns_.resize(topology_.cluster ? slot_map_.nodes().size() : topology_.endpoints.size());
}

std::string RedisShards::shard_name(int shard) const {
  if (topology_.cluster) return "cluster " + topology_.endpoints[0].address();
  return topology_.endpoints[static_cast<size_t>(shard)].address();
}

Result<RedisConnection*> RedisShards::connection(int shard, int node) {
  const size_t at = static_cast<size_t>(topology_.cluster ? node : shard);
  if (conns_.size() <= at) conns_.resize(at + 1);  // unique_ptrs: earlier pointers stay valid
  std::unique_ptr<RedisConnection>& conn = conns_[at];
  if (conn != nullptr && !conn->broken()) return conn.get();
  if (conn != nullptr && in_execute_) return Status::unavailable(conn->broken_reason());  // dropped after the call
  conn.reset();
  RedisEndpoint ep = topology_.cluster ? slot_map_.nodes()[at] : topology_.endpoints[at];
  if (topology_.cluster) ep.password = topology_.endpoints[0].password;
  ++stats_.connects;
  PAGODA_ASSIGN_OR_RETURN(RedisConnection fresh, RedisConnection::connect(ep, timeouts_));
  conn = std::make_unique<RedisConnection>(std::move(fresh));
  return conn.get();
}

void RedisShards::drop_connections(int shard) {
  if (topology_.cluster) {
    for (auto& c : conns_) c.reset();
  } else {
    conns_[static_cast<size_t>(shard)].reset();
  }
}

void RedisShards::mark_down(int shard, const std::string& why) {
  if (down_[shard] != 0) return;
  down_[shard] = 1;
  ++stats_.faults;
  if (why.find("timed out") != std::string::npos) ++stats_.timeouts;
  if (!in_execute_) drop_connections(shard);
  if (topology_.cluster) refresh_needed_ = true;
  faults_.emplace_back(shard, why);
}

std::vector<std::pair<int, std::string>> RedisShards::take_faults() {
  std::vector<std::pair<int, std::string>> out;
  out.swap(faults_);
  return out;
}

Status RedisShards::refresh_slot_map() {
  ++stats_.slot_map_refreshes;
  std::string last_error = "no cluster node answered";
  const size_t num_nodes = slot_map_.nodes().size();
  for (size_t node = 0; node < num_nodes; ++node) {
    auto conn = connection(0, static_cast<int>(node));
    if (!conn.is_ok()) {
      last_error = conn.status().message();
      continue;
    }
    RedisArgv args;
    args.add("CLUSTER").add("SLOTS");
    auto reply = (*conn)->command(args);
    if (!reply.is_ok()) {
      last_error = reply.status().message();
      continue;
    }
    if (reply_is_error(reply->get())) {
      last_error = "CLUSTER SLOTS: " + reply_text(reply->get());
      continue;
    }
    auto ranges = parse_cluster_slots(reply->get(), slot_map_.nodes()[node].host);
    if (!ranges.is_ok()) {
      last_error = ranges.status().message();
      continue;
    }
    slot_map_.assign(*ranges);
    refresh_needed_ = false;
    return Status::ok();
  }
  return Status::unavailable("redis cluster " + topology_.endpoints[0].address() + ": slot map: " + last_error);
}

struct RedisShards::Target {
  int shard = 0, node = 0;
  std::vector<size_t> pending;  // indices into the round's work
};

namespace {
struct Work {
  size_t request = 0;
  int node = 0;
  bool asking = false;
  int redirects = 0;
};
}  // namespace

void RedisShards::execute(std::span<const RedisRequest> requests, std::span<RedisResponse> responses) {
  CHECK_EQ(requests.size(), responses.size());
  std::vector<Work> work;
  work.reserve(requests.size());
  in_execute_ = true;
  if (topology_.cluster && refresh_needed_ && down_[0] == 0) {
    if (Status s = refresh_slot_map(); !s.is_ok()) mark_down(0, s.message());
  }
  for (size_t i = 0; i < requests.size(); ++i) {
    const int shard = requests[i].shard;
    CHECK(shard >= 0 && shard < num_shards()) << "shard " << shard;
    responses[i] = RedisResponse{};
    if (down_[shard] != 0) {
      responses[i].status = Status::unavailable("redis " + shard_name(shard) + " is down");
      continue;
    }
    int node = shard;
    if (topology_.cluster) {
      node = slot_map_.node_of(key_slot(requests[i].key));
      if (node < 0) {
        responses[i].status = Status::unavailable("redis cluster: slot " + std::to_string(key_slot(requests[i].key)) + " has no master");
        refresh_needed_ = true;
        continue;
      }
    }
    work.push_back(Work{i, node, false, 0});
  }
  while (!work.empty()) {
    std::vector<Target> targets;
    for (size_t w = 0; w < work.size(); ++w) {
      const int shard = requests[work[w].request].shard;
      Target* t = nullptr;
      for (Target& cand : targets) {
        if (cand.shard == shard && cand.node == work[w].node) t = &cand;
      }
      if (t == nullptr) t = &targets.emplace_back(Target{shard, work[w].node, {}});
      t->pending.push_back(w);
    }
    std::vector<RedisConnection*> conns(targets.size(), nullptr);
    const auto fail_target = [&](size_t ti, size_t from, const Status& why) {
      for (size_t k = from; k < targets[ti].pending.size(); ++k) responses[work[targets[ti].pending[k]].request].status = why;
      mark_down(targets[ti].shard, why.message());
      conns[ti] = nullptr;
    };
    for (size_t ti = 0; ti < targets.size(); ++ti) {
      if (down_[targets[ti].shard] != 0) {
        fail_target(ti, 0, Status::unavailable("redis " + shard_name(targets[ti].shard) + " is down"));
        continue;
      }
      auto conn = connection(targets[ti].shard, targets[ti].node);
      if (!conn.is_ok()) {
        fail_target(ti, 0, conn.status());
        continue;
      }
      conns[ti] = *conn;
      conns[ti]->begin_call();
      static constexpr std::string_view kAsking = "ASKING";
      for (size_t w : targets[ti].pending) {
        if (work[w].asking) conns[ti]->append(RedisArgv().add(kAsking));
        conns[ti]->append(requests[work[w].request].args);
      }
    }
    for (size_t ti = 0; ti < targets.size(); ++ti) {
      if (conns[ti] == nullptr) continue;
      if (Status s = conns[ti]->flush(); !s.is_ok()) fail_target(ti, 0, s);
    }
    std::vector<Work> again;
    for (size_t ti = 0; ti < targets.size(); ++ti) {
      for (size_t k = 0; conns[ti] != nullptr && k < targets[ti].pending.size(); ++k) {
        Work& w = work[targets[ti].pending[k]];
        if (w.asking) {
          auto asked = conns[ti]->read_reply();
          if (!asked.is_ok()) {
            fail_target(ti, k, asked.status());
            break;
          }
        }
        auto reply = conns[ti]->read_reply();
        if (!reply.is_ok()) {
          fail_target(ti, k, reply.status());
          break;
        }
        RedisResponse& out = responses[w.request];
        std::optional<Redirect> redirect;
        if (reply_is_error(reply->get())) {
          const std::string text = reply_text(reply->get());
          if (server_unavailable(text)) {  // the server answers but cannot serve: a fault
            out.status = Status::unavailable("redis " + conns[ti]->endpoint().address() + ": " + text);
            mark_down(targets[ti].shard, out.status.message());
            continue;
          }
          if (topology_.cluster) redirect = parse_redirect(text);
        }
        if (!redirect.has_value()) {
          out.reply = std::move(*reply);
          continue;
        }
        if (w.redirects + 1 > max_redirects_) {
          out.status = Status::unavailable("redis cluster: more than " + std::to_string(max_redirects_) + " redirects for one key");
          continue;
        }
        if (redirect->kind == Redirect::Kind::kMoved) {
          ++stats_.moved_redirects;
          slot_map_.set(redirect->slot, redirect->host, redirect->port);
          refresh_needed_ = true;
        } else {
          ++stats_.ask_redirects;
        }
        again.push_back(Work{w.request, slot_map_.node_index(redirect->host, redirect->port),
                             redirect->kind == Redirect::Kind::kAsk, w.redirects + 1});
      }
    }
    work = std::move(again);
  }
  in_execute_ = false;
  for (int shard = 0; shard < num_shards(); ++shard) {
    if (down_[shard] != 0) drop_connections(shard);
  }
}

Status RedisShards::probe_server(RedisConnection& conn, const std::string& key, std::string_view value) {
  RedisArgv set;
  set.add("SET").add(key).add(value).add("PX").add("60000");
  RedisArgv get;
  get.add("GET").add(key);
  RedisArgv del;
  del.add("DEL").add(key);
  conn.begin_call();
  conn.append(set);
  conn.append(get);
  conn.append(del);
  PAGODA_ASSIGN_OR_RETURN(RedisReplyPtr set_reply, conn.read_reply());
  PAGODA_ASSIGN_OR_RETURN(RedisReplyPtr get_reply, conn.read_reply());
  PAGODA_ASSIGN_OR_RETURN(RedisReplyPtr del_reply, conn.read_reply());
  const std::string where = "redis " + conn.endpoint().address() + ": probe: ";
  if (reply_is_error(set_reply.get())) return Status::unavailable(where + "SET: " + reply_text(set_reply.get()));
  if (get_reply->type != REDIS_REPLY_STRING || std::string_view(get_reply->str, get_reply->len) != value) {
    return Status::unavailable(where + "GET did not return the bytes just SET" +
                               (reply_is_error(get_reply.get()) ? ": " + reply_text(get_reply.get()) : std::string()));
  }
  return Status::ok();
}

Status RedisShards::probe(int shard, std::string_view value, uint64_t nonce) {
  drop_connections(shard);
  char nonce_hex[17];
  std::snprintf(nonce_hex, sizeof(nonce_hex), "%016llx", static_cast<unsigned long long>(nonce));
  const std::string prefix = std::string("pagoda@probe@") + nonce_hex + "@";
  Status result = Status::ok();
  if (!topology_.cluster) {
    auto conn = connection(shard, shard);
    result = conn.is_ok() ? probe_server(**conn, prefix + "0", value) : conn.status();
  } else {
    result = refresh_slot_map();
    if (result.is_ok() && slot_map_.num_assigned() != kClusterSlots) {
      result = Status::unavailable("redis cluster " + topology_.endpoints[0].address() + ": the masters serve " +
                                   std::to_string(slot_map_.num_assigned()) + " of 16384 slots");
    }
    for (const auto& [node, slot] : result.is_ok() ? slot_map_.masters() : std::vector<std::pair<int, int>>{}) {
      std::string key;  // a key of a slot this master serves
      for (int i = 0; key.empty(); ++i) {
        std::string cand = prefix + std::to_string(i);
        if (slot_map_.node_of(key_slot(cand)) == node) key = std::move(cand);
      }
      auto conn = connection(0, node);
      result = conn.is_ok() ? probe_server(**conn, key, value) : conn.status();
      if (!result.is_ok()) break;
    }
  }
  if (!result.is_ok()) {
    drop_connections(shard);
    down_[shard] = 1;
    return result;
  }
  down_[shard] = 0;
  return Status::ok();
}

}  // namespace pagoda::store
