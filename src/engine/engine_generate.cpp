// Engine::generate and generate_parallel: admission through the prefix cache, chunked
// prefill, forks for parallel samples, the decode loop, and the KV dump.
#include <algorithm>
#include <cstdio>

#include "engine/engine.h"

namespace pagoda::engine {

Status Engine::validate_request(const GenerateRequest& request) const {
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  const int64_t n_vocab = model_->config().n_vocab;
  if (n_prompt == 0) return Status::error("empty prompt: at least one token (e.g. BOS) is needed");
  if (request.max_new_tokens < 0) return Status::error("max_new_tokens must be >= 0");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= n_vocab) return Status::error("prompt token id " + std::to_string(id) + " outside the vocabulary");
  }
  PAGODA_RETURN_IF_ERROR(request.sampling.validate());
  // The last generated token is returned, never fed back, so it needs no KV slot.
  const int64_t total = n_prompt + std::max<int64_t>(0, request.max_new_tokens - 1);
  kvcache::KvSelectParams select = kv_select_for(request);
  if (!select.on()) return check_fits(total);
  PAGODA_RETURN_IF_ERROR(check_kv_select(select));
  if (total > max_context_) {
    return Status::error("prompt + generation is " + std::to_string(total) + " tokens, more than the context of " +
                         std::to_string(max_context_) + " tokens");
  }
  // H2O holds at most its budget; SnapKV its whole prompt until the selection.
  const int64_t held = std::min(total, select.method == kvcache::KvSelectMethod::kSnapKv ? std::max(n_prompt, select.budget)
                                                                                         : select.budget);
  if (held > plan_.token_capacity) {
    return Status::error("KV selection holds up to " + std::to_string(held) + " tokens, more than the KV cache holds (" +
                         std::to_string(plan_.token_capacity) + " tokens; raise --kv-cache-mem)");
  }
  return Status::ok();
}

Result<kvcache::SeqId> Engine::admit_and_prefill(const GenerateRequest& request, GenerateStats& stats,
                                                 float* logits_out) {
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  const kvcache::KvNamespace ns = kv_namespace(request.cache_salt);
  kvcache::KvSelectParams select = kv_select_for(request);
  PAGODA_RETURN_IF_ERROR(check_kv_select(select));  // (normalizes)
  const bool cacheable = !windowed_seqs() && !select.on();
  kvcache::PrefixMatch hit;
  if (config_.enable_prefix_caching && cacheable) hit = blocks_->match_prefix(request.prompt, ns);
  // Windowed and H2O sequences never hold the whole prompt at once: step() reports a shortage.
  if (cacheable && !blocks_->plan(hit, n_prompt).fits()) {
    return Status::error("the prompt needs more KV blocks than are available (" +
                         std::to_string(blocks_->num_available_blocks()) + "; raise --kv-cache-mem)");
  }
  // Reserves the table once (holes keep their entries; streaming tables stay <= sinks + window).
  const int64_t total = n_prompt + request.max_new_tokens;
  const kvcache::SeqId seq = blocks_->add_sequence(streaming() ? kv_tokens_needed(total) : total,
                                                   sequence_options(ns, request.priority, select, n_prompt));
  if (!hit.empty()) blocks_->adopt(seq, std::move(hit));
  if (tiers_ != nullptr && config_.enable_prefix_caching && cacheable) {
    stats.loaded_tokens = load_from_tiers(seq, request.prompt, ns);
  }
  stats.cached_tokens = blocks_->length(seq);
  const int64_t chunk = chunk_for(select);
  for (int64_t begin = stats.cached_tokens; begin < n_prompt; begin += chunk) {
    const int64_t n = std::min(chunk, n_prompt - begin);
    const bool last = begin + n == n_prompt;
    const StepSeq chunk{seq, std::span<const int32_t>(request.prompt).subspan(begin, n)};
    Status s = step(std::span<const StepSeq>(&chunk, 1), false, last ? logits_out : nullptr);
    if (!s.is_ok()) {
      blocks_->free_sequence(seq);
      return s;
    }
  }
  return seq;
}

Result<GenerateResult> Engine::generate(const GenerateRequest& request, const TokenCallback& on_token) {
  SampleCallback per_sample = nullptr;
  if (on_token) per_sample = [&](int, int32_t token) { return on_token(token); };
  PAGODA_ASSIGN_OR_RETURN(ParallelResult result, generate_parallel(request, 1, per_sample));
  return std::move(result.samples[0]);
}

Result<ParallelResult> Engine::generate_parallel(const GenerateRequest& request, int n, const SampleCallback& on_token) {
  if (n < 1 || n > max_batch_tokens_) {
    return Status::error("parallel samples must be in [1, " + std::to_string(max_batch_tokens_) + "]");
  }
  PAGODA_RETURN_IF_ERROR(validate_request(request));
  if (n > 1 && (windowed_seqs() || kv_select_for(request).on())) {
    return Status::error("parallel samples share blocks by forking, which windowed or selecting sequences (--kv-window, "
                         "sliding-window models, --kv-select) cannot do; serve them (each choice prefills on its own)");
  }
  const int64_t n_vocab = model_->config().n_vocab;
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  ParallelResult out;
  out.samples.resize(n);
  const int64_t t_start = clock_->now_ns();
  GenerateStats prompt_stats;
  prompt_stats.prompt_tokens = n_prompt;
  float* logits = logits_.data();  // [n, n_vocab]: row i is sample i's next-token logits
  PAGODA_ASSIGN_OR_RETURN(kvcache::SeqId first, admit_and_prefill(request, prompt_stats, logits));
  std::vector<SequenceGuard> guards;
  guards.emplace_back(*blocks_, first);
  for (int i = 1; i < n; ++i) {
    guards.emplace_back(*blocks_, blocks_->fork(first));
    std::copy(logits, logits + n_vocab, logits + i * n_vocab);
  }
  prompt_stats.prefill_s = (clock_->now_ns() - t_start) * 1e-9;
  prompt_stats.kv_blocks_used = blocks_->num_held_blocks(first);

  std::vector<Sampler> samplers;
  std::vector<std::vector<int32_t>> histories(n, request.prompt);
  for (int i = 0; i < n; ++i) {
    SamplingParams p = request.sampling;
    p.seed = request.sampling.seed + static_cast<uint64_t>(i);
    samplers.emplace_back(p, n_vocab);
    histories[i].reserve(n_prompt + request.max_new_tokens);
    out.samples[i].stats = prompt_stats;
  }
  std::vector<int> active(n);  // samples still decoding, in order
  for (int i = 0; i < n; ++i) active[i] = i;
  std::vector<int> still;  // next step's active samples (reused: no allocation per step)
  still.reserve(n);
  std::vector<StepSeq> step_seqs;
  step_seqs.reserve(n);
  int64_t t_first = 0;
  bool sampled_any = false;
  for (int64_t k = 0; k < request.max_new_tokens && !active.empty(); ++k) {
    still.clear();
    for (size_t a = 0; a < active.size(); ++a) {
      const int i = active[a];
      GenerateResult& r = out.samples[i];
      const int32_t token = samplers[i].sample(std::span<float>(logits + a * n_vocab, n_vocab), histories[i], r.tokens);
      if (!sampled_any) {
        t_first = clock_->now_ns();
        sampled_any = true;
      }
      if (k == 0) r.stats.ttft_s = (clock_->now_ns() - t_start) * 1e-9;
      r.tokens.push_back(token);
      histories[i].push_back(token);
      if (on_token && !on_token(i, token)) {
        for (GenerateResult& s : out.samples) s.finish_reason = FinishReason::kAborted;
        active.clear();
        still.clear();
        break;
      }
      const auto& stops = request.stop_token_ids;
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) {
        r.finish_reason = FinishReason::kStop;
      } else if (k + 1 < request.max_new_tokens) {
        still.push_back(i);
      }
    }
    std::swap(active, still);
    if (active.empty()) break;
    step_seqs.clear();
    for (int i : active) step_seqs.push_back({guards[i].seq(), std::span<const int32_t>(&histories[i].back(), 1)});
    PAGODA_RETURN_IF_ERROR(step(step_seqs, false, logits));
  }
  const double decode_s = sampled_any ? (clock_->now_ns() - t_first) * 1e-9 : 0.0;
  std::vector<char> seen(pool_->num_blocks(), 0);
  for (int i = 0; i < n; ++i) {
    GenerateResult& r = out.samples[i];
    r.stats.generated_tokens = static_cast<int64_t>(r.tokens.size());
    r.stats.decode_s = decode_s;
    const std::vector<int32_t>& table = blocks_->block_table(guards[i].seq());
    r.stats.kv_blocks_used = blocks_->num_held_blocks(guards[i].seq());
    out.kv_blocks_independent += r.stats.kv_blocks_used;
    for (int32_t b : table) {
      if (b < 0) continue;  // a hole (sliding window)
      if (!seen[b]) ++out.kv_blocks_shared;
      seen[b] = 1;
    }
    if (request.dump_kv) r.kv_dump = dump_sequence(guards[i].seq());
  }
  return out;
}

SequenceDump Engine::dump_sequence(kvcache::SeqId seq) {
  SequenceDump dump;
  dump.length = blocks_->length(seq);
  dump.next_position = blocks_->next_position(seq);
  if (const kvcache::KvSelectState* st = blocks_->select_state(seq); st != nullptr) {
    dump.kv_select = st->params.describe();
    dump.num_evicted = st->num_evicted;
  }
  const kernels::KvLayerView& layer0 = kv_views_[0];
  for (int32_t b : blocks_->block_table(seq)) {
    KvBlockDump d;
    d.block_id = b;
    if (b < 0) {  // a hole: released because it fell outside the attention window
      d.state = "released";
      dump.blocks.push_back(std::move(d));
      continue;
    }
    d.ref_count = pool_->ref_count(b);
    switch (pool_->state(b)) {
      case kvcache::BlockState::kFree: d.state = "free"; break;
      case kvcache::BlockState::kInUse: d.state = "in use"; break;
      case kvcache::BlockState::kCached: d.state = "cached"; break;
    }
    if (blocks_->index().contains(b)) d.hash = blocks_->index().hash(b);
    d.tiers = "pool";
    if (tiers_ != nullptr) {
      if (d.hash != 0) {
        const uint32_t held = tiers_->holders_now(d.hash);
        for (int t = 0; t < tiers_->num_tiers(); ++t) {
          if ((held >> t) & 1u) d.tiers += "+" + std::string(tiers_->tier(t).name());
        }
      }
      const int from = loaded_from(b, d.hash);
      if (from >= 0) d.loaded_from = std::string(tiers_->tier(from).name());
    }
    std::vector<float> row(layer0.head_dim);  // a partial int4 K block is read from its stage
    kernels::kv_load_row_reference(layer0, /*is_k=*/true, b, /*row=*/0, /*kv_head=*/0, /*from_stage=*/true, row.data());
    d.k_head0.assign(row.begin(), row.begin() + std::min<int64_t>(4, layer0.head_dim));
    dump.blocks.push_back(std::move(d));
  }
  return dump;
}

std::string format_kv_dump(const SequenceDump& dump) {
  std::string out = "length " + std::to_string(dump.length) + ", " + std::to_string(dump.blocks.size()) + " blocks\n";
  if (!dump.kv_select.empty()) {
    out += "kv select " + dump.kv_select + ": " + std::to_string(dump.num_evicted) + " rows evicted, next position " +
           std::to_string(dump.next_position) + "; not prefix-cached (selected rows are not a prompt prefix)\n";
  }
  char line[256];
  for (size_t i = 0; i < dump.blocks.size(); ++i) {
    const KvBlockDump& b = dump.blocks[i];
    std::snprintf(line, sizeof(line), "  [%zu] block %d  ref %d  %-7s hash %016llx  K[l0,h0,slot0] =", i, b.block_id,
                  b.ref_count, b.state.c_str(), static_cast<unsigned long long>(b.hash));
    out += line;
    for (float v : b.k_head0) {
      std::snprintf(line, sizeof(line), " %+.5f", v);
      out += line;
    }
    if (!b.tiers.empty() && b.tiers != "pool") out += "  tiers " + b.tiers;
    if (!b.loaded_from.empty()) out += "  loaded from " + b.loaded_from;
    out += "\n";
  }
  return out;
}

}  // namespace pagoda::engine
