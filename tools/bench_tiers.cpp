// pagoda bench --tiers: the design is at the top of tools/bench_tiers.h. Each repetition times,
// in this order: a recompute (a new cache salt, so nothing is cached anywhere), a pool hit, a
// load from the host tier (the pool emptied first: write-back puts the prefix into the host),
// and a load from the disk tier (the pool emptied and the prefix erased from the host). Loads
// are forced (--kv-load load is implied): the table measures what loading costs.
#include "tools/bench_tiers.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/rng.h"
#include "tools/commands.h"

namespace pagoda::tools {

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int tier_index(const kvcache::TierStack& tiers, std::string_view name) {
  for (int t = 0; t < tiers.num_tiers(); ++t) {
    if (tiers.tier(t).name() == name) return t;
  }
  return -1;
}

}  // namespace

int bench_tier_ttft(const TierTtftOptions& o, engine::Engine& eng, const model::Tokenizer& tok) {
  kvcache::TierStack* tiers = eng.tiers();
  const int host = tiers != nullptr ? tier_index(*tiers, "host") : -1;
  const int disk = tiers != nullptr ? tier_index(*tiers, "disk") : -1;
  if (host < 0 || disk < 0) return fail(Status::invalid_argument("--tiers needs --kv-host-mem and --kv-disk-dir"));
  const int64_t n_vocab = eng.model().config().n_vocab;
  Rng rng(44);
  auto random_tokens = [&](int64_t n) {
    std::vector<int32_t> out;
    while (static_cast<int64_t>(out.size()) < n) {
      const auto id = static_cast<int32_t>(rng.next_u64() % n_vocab);
      if (tok.vocab().types[id] == model::TokenType::kNormal) out.push_back(id);
    }
    return out;
  };
  std::vector<int32_t> prefix = {std::max(0, tok.bos_id())};
  const std::vector<int32_t> body = random_tokens(o.prefix_tokens - 1);
  prefix.insert(prefix.end(), body.begin(), body.end());
  auto make = [&](const std::string& salt) {
    engine::GenerateRequest r;
    r.prompt = prefix;
    const std::vector<int32_t> suffix = random_tokens(16);
    r.prompt.insert(r.prompt.end(), suffix.begin(), suffix.end());
    r.max_new_tokens = 1;
    r.cache_salt = salt;
    return r;
  };
  const int64_t bs = eng.kv_layout().block_size;
  std::vector<kvcache::BlockHash> hashes;
  kvcache::chain_hashes(&kvcache::hash_block, kvcache::kRootBlockHash,
                        std::span<const int32_t>(prefix).first(static_cast<size_t>(o.prefix_tokens / bs * bs)), bs,
                        eng.kv_namespace("warm").key(), hashes);
  if (auto warmup = eng.generate(make("warm")); !warmup.is_ok()) return fail(warmup.status());
  std::vector<double> cold, pool, from_host, from_disk;
  int64_t pool_cached = 0, host_loaded = 0, disk_loaded = 0;
  int64_t disk_bytes = 0, disk_ns = 0;
  for (int r = 0; r < o.reps; ++r) {
    auto c = eng.generate(make("cold-" + std::to_string(r)));
    if (!c.is_ok()) return fail(c.status());
    cold.push_back(c->stats.ttft_s * 1e3);
    auto p = eng.generate(make("warm"));
    if (!p.is_ok()) return fail(p.status());
    pool.push_back(p->stats.ttft_s * 1e3);
    pool_cached = p->stats.cached_tokens;
    eng.evict_cached_blocks();  // write-back: the prefix goes into the host tier
    auto h = eng.generate(make("warm"));
    if (!h.is_ok()) return fail(h.status());
    from_host.push_back(h->stats.ttft_s * 1e3);
    host_loaded = h->stats.loaded_tokens;
    eng.evict_cached_blocks();
    tiers->tier(host).erase(hashes);  // only the disk tier holds it now
    const int64_t bytes0 = tiers->counters(disk).loaded_bytes, ns0 = tiers->counters(disk).load_ns;
    auto d = eng.generate(make("warm"));
    if (!d.is_ok()) return fail(d.status());
    from_disk.push_back(d->stats.ttft_s * 1e3);
    disk_loaded = d->stats.loaded_tokens;
    disk_bytes += tiers->counters(disk).loaded_bytes - bytes0;
    disk_ns += tiers->counters(disk).load_ns - ns0;
  }
  const double cold_ms = median(cold), pool_ms = median(pool), host_ms = median(from_host), disk_ms = median(from_disk);
  const double disk_mbps = disk_ns > 0 ? static_cast<double>(disk_bytes) / (static_cast<double>(disk_ns) * 1e-9) / 1e6 : 0;
  if (o.json) {
    nlohmann::json j = {{"model", o.model_path},         {"prefix_tokens", o.prefix_tokens},
                        {"ttft_recompute_ms", cold_ms},  {"ttft_pool_ms", pool_ms},
                        {"ttft_host_ms", host_ms},       {"ttft_disk_ms", disk_ms},
                        {"pool_cached_tokens", pool_cached}, {"host_loaded_tokens", host_loaded},
                        {"disk_loaded_tokens", disk_loaded}, {"disk_read_mb_per_s", disk_mbps},
                        {"recompute_runs_ms", cold},     {"pool_runs_ms", pool},
                        {"host_runs_ms", from_host},     {"disk_runs_ms", from_disk}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("| prefix (+16 new tokens) | where | tokens from it | TTFT ms (median of %d) | vs recompute |\n", o.reps);
  std::printf("|---|---|---:|---:|---:|\n");
  const long long n = static_cast<long long>(o.prefix_tokens);
  std::printf("| %lld | recomputed | 0 | %.1f | 1.0x |\n", n, cold_ms);
  std::printf("| %lld | pool | %lld | %.1f | %.1fx |\n", n, static_cast<long long>(pool_cached), pool_ms, cold_ms / pool_ms);
  std::printf("| %lld | host tier | %lld | %.1f | %.1fx |\n", n, static_cast<long long>(host_loaded), host_ms, cold_ms / host_ms);
  std::printf("| %lld | disk tier | %lld | %.1f | %.1fx |\n", n, static_cast<long long>(disk_loaded), disk_ms, cold_ms / disk_ms);
  std::printf("disk tier read bandwidth while promoting: %.0f MB/s\n", disk_mbps);
  return 0;
}

}  // namespace pagoda::tools
