#include "server/kv_json.h"

#include <cstdio>

namespace pagoda::server {

using nlohmann::json;

std::string hash_hex(uint64_t hash) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

namespace {

json histogram_json(const engine::Histogram& h) {
  const engine::HistogramSummary s = engine::summarize(h);
  return json{{"count", s.count}, {"sum", s.sum}, {"p50", s.p50}, {"p90", s.p90}, {"p99", s.p99}};
}

json request_json(const engine::RequestSnapshot& r) {
  return json{{"id", r.id},
              {"state", r.state},
              {"prompt_tokens", r.prompt_tokens},
              {"cached_tokens", r.cached_tokens},
              {"computed_tokens", r.computed_tokens},
              {"generated_tokens", r.generated_tokens},
              {"blocks_held", r.blocks_held},
              {"priority", r.priority},
              {"n", r.n},
              {"preemptions", r.preemptions},
              {"age_s", r.age_s}};
}

}  // namespace

json snapshot_json(const engine::KvSnapshot& s) {
  const engine::ServingMetrics& m = s.metrics;
  json pool{{"num_blocks", s.num_blocks},
            {"block_size", s.block_size},
            {"bytes_per_block", s.bytes_per_block},
            {"kv_dtype", s.kv_dtype},
            {"kv_layout", s.kv_layout},
            {"free", s.blocks_free},
            {"in_use", s.blocks_in_use},
            {"cached", s.blocks_cached},
            {"pinned", s.blocks_pinned},
            {"loading", s.blocks_loading},
            {"pins", m.pins},
            {"pinned_by_pins", m.kv_blocks_pinned},
            {"usage_ratio", s.num_blocks > 0 ? static_cast<double>(s.blocks_in_use) / static_cast<double>(s.num_blocks) : 0.0}};
  if (!s.block_map.empty()) pool["block_map"] = s.block_map;
  json tiers = json::array();
  for (size_t i = 0; i < s.tiers.size(); ++i) {
    const engine::TierSnapshot& t = s.tiers[i];
    json row{{"tier", t.tier},
             {"medium", t.medium},
             {"memory", t.memory},
             {"enabled", t.enabled},
             {"capacity_blocks", t.capacity_blocks},
             {"used_blocks", t.used_blocks},
             {"hit_blocks", t.hit_blocks},
             {"hit_tokens", t.hit_blocks * s.block_size},
             {"evictions", t.evictions}};
    if (i > 0) {  // a tier below the pool
      row["lookups"] = t.lookups;
      row["lookup_hit_blocks"] = t.lookup_hit_blocks;
      row["offloaded_blocks"] = t.offloaded_blocks;
      row["demoted_blocks"] = t.demoted_blocks;
      row["bytes_read"] = t.bytes_read;
      row["bytes_written"] = t.bytes_written;
      row["failed_loads"] = t.failed_loads;
      row["corrupt_records"] = t.corrupt_records;
      row["faults"] = t.faults;
    }
    tiers.push_back(std::move(row));
  }
  const double hit_rate = m.prefix_queried_tokens > 0
                              ? static_cast<double>(m.prefix_hit_tokens) / static_cast<double>(m.prefix_queried_tokens)
                              : 0.0;
  json prefix{{"enabled", s.prefix_caching},
              {"policy", s.eviction_policy},
              {"queried_tokens", m.prefix_queried_tokens},
              {"hit_tokens", m.prefix_hit_tokens},
              {"hit_rate", hit_rate},
              {"lookups", s.lookups},
              {"committed_blocks", s.committed_blocks},
              {"cow_copies", s.cow_copies},
              {"blocks_allocated", s.blocks_allocated},
              {"evicted_blocks", m.evicted_blocks}};
  json active = json::array();
  for (const engine::RequestSnapshot& r : s.requests) active.push_back(request_json(r));
  json prefixes = json::array();
  for (const engine::CachedPrefix& p : s.top_prefixes) {
    prefixes.push_back(json{{"tokens", p.num_tokens},
                            {"blocks", p.num_blocks},
                            {"hits", p.hits},
                            {"last_use_age_s", p.last_use_age_s >= 0 ? json(p.last_use_age_s) : json(nullptr)},
                            {"in_use", p.in_use},
                            {"preview", p.preview}});
  }
  return json{{"object", "kv.stats"},
              {"model", s.model},
              {"uptime_s", s.uptime_s},
              {"steps", s.steps},
              {"pool", pool},
              {"tiers", tiers},
              {"tier_loads",
               {{"load_decisions", s.tier_load_decisions},
                {"recompute_decisions", s.tier_recompute_decisions},
                {"in_flight", s.tier_loads_in_flight}}},
              {"prefix_cache", prefix},
              {"requests",
               {{"running", m.running},
                {"waiting", m.waiting},
                {"preemptions", m.preemptions},
                {"preemption", s.preemption},
                {"swap",
                 {{"swapped_out_blocks", m.swapped_out_blocks},
                  {"swapped_in_blocks", m.swapped_in_blocks},
                  {"fallbacks", m.swap_fallbacks}}}}},
              {"latency",
               {{"ttft", histogram_json(m.ttft)},
                {"inter_token", histogram_json(m.inter_token)},
                {"e2e", histogram_json(m.e2e)},
                {"queue", histogram_json(m.queue)}}},
              {"tokens", {{"prompt", m.prompt_tokens}, {"generation", m.generation_tokens}}},
              {"finished",
               {{"stop", m.finished_stop}, {"length", m.finished_length}, {"abort", m.finished_abort}, {"error", m.finished_error}}},
              {"active", active},
              {"top_prefixes", prefixes}};
}

json request_kv_json(const engine::RequestKv& kv) {
  json sequences = json::array();
  for (const engine::SequenceKv& s : kv.sequences) {
    json blocks = json::array();
    for (const engine::BlockSnapshot& b : s.blocks) {
      blocks.push_back(json{{"index", b.index},
                            {"block", b.block},
                            {"ref_count", b.ref_count},
                            {"state", b.state},
                            {"tier", b.tier},
                            {"copies", b.copies},
                            {"loaded_from", b.loaded_from.empty() ? json(nullptr) : json(b.loaded_from)},
                            {"hash", b.hash != 0 ? json(hash_hex(b.hash)) : json(nullptr)},
                            {"tokens", b.num_tokens},
                            {"shared", b.shared}});
    }
    json seq{{"choice", s.choice}, {"running", s.running}, {"length", s.length}, {"blocks", blocks}};
    if (!s.kv_select.empty()) {
      seq["kv_select"] = s.kv_select;
      seq["kv_evicted"] = s.kv_evicted;
    }
    sequences.push_back(std::move(seq));
  }
  json out = request_json(kv.request);
  out["object"] = "kv.request";
  out["sequences"] = sequences;
  return out;
}

json explain_json(const engine::KvExplanation& e) {
  json tiers = json::array();
  for (const engine::TierHit& t : e.tiers) tiers.push_back(json{{"tier", t.tier}, {"blocks", t.blocks}, {"tokens", t.tokens}});
  json blocks = json::array();
  for (const engine::ExplainBlock& b : e.blocks) {
    blocks.push_back(json{{"index", b.index}, {"hash", hash_hex(b.hash)}, {"where", b.where}});
  }
  json out{{"object", "kv.explain"},
           {"prompt_tokens", e.prompt_tokens},
           {"block_size", e.block_size},
           {"cacheable_tokens", e.cacheable_tokens},
           {"hit_tokens", e.hit_tokens},
           {"compute_tokens", e.compute_tokens},
           {"partial_tail_tokens", e.partial_tail_tokens},
           {"tiers", tiers},
           {"cause", engine::explain_cause_name(e.cause)},
           {"detail", e.detail},
           {"break_block", e.break_block >= 0 ? json(e.break_block) : json(nullptr)},
           {"blocks", blocks}};
  if (e.evicted_age_s >= 0) out["evicted_age_s"] = e.evicted_age_s;
  if (e.diverge_token >= 0) out["diverge_token"] = e.diverge_token;
  if (e.other_ns_hit_tokens > 0) out["other_namespace_hit_tokens"] = e.other_ns_hit_tokens;
  return out;
}

}  // namespace pagoda::server
