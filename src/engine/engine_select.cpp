// Engine selection: attention-score KV eviction (H2O, SnapKV) per sequence. The kernels add
// each observed row's attention probabilities into scores_ (model::Batch::scores); here they
// are folded into the sequence's KvSelectState, and before each append the lowest-scored rows
// are evicted and the blocks compacted. Rules: kvcache/kv_select.h.
#include <algorithm>
#include <climits>

#include "engine/engine.h"

namespace pagoda::engine {

Status Engine::check_kv_select(kvcache::KvSelectParams& select) const {
  if (!select.on()) return Status::ok();
  PAGODA_RETURN_IF_ERROR(kvcache::normalize_kv_select(select));
  const model::ModelConfig& mc = model_->config();
  if (mc.is_mla()) return Status::invalid_argument("KV selection is not supported for MLA models (" + mc.arch_name + ")");
  if (windowed_seqs()) {
    return Status::invalid_argument("KV selection does not combine with a KV window (--kv-window or a sliding-window model)");
  }
  if (pool_->layout().dtype == kernels::KvDType::kInt4) {
    return Status::invalid_argument("KV selection moves rows between blocks, which int4 KV cannot (per-block K scales); "
                                    "use --kv-dtype f32, f16, bf16, int8 or fp8");
  }
  if (select.budget > max_context_) {
    return Status::invalid_argument("KV selection budget " + std::to_string(select.budget) + " exceeds the context of " +
                                    std::to_string(max_context_));
  }
  return Status::ok();
}

void Engine::reserve_kv_select(const kvcache::KvSelectParams& select, int64_t n_seqs) {
  if (select.method != kvcache::KvSelectMethod::kH2O) return;
  const model::ModelConfig& mc = model_->config();
  const size_t need = static_cast<size_t>(std::min(n_seqs, max_batch_tokens_) * mc.n_layer * mc.n_kv_head * select.budget);
  if (scores_.size() < need) scores_.resize(need);
}

int64_t Engine::chunk_for(const kvcache::KvSelectParams& select) const {
  if (select.method != kvcache::KvSelectMethod::kH2O) return prefill_chunk();
  return std::min(prefill_chunk(), kvcache::kv_select_max_chunk(select));
}

void Engine::select_before_append(kvcache::SeqId seq, int64_t n_new) {
  kvcache::KvSelectState& st = *blocks_->select_state(seq);
  const kvcache::KvSelectParams& p = st.params;
  if (p.method == kvcache::KvSelectMethod::kSnapKv && !st.evicting && st.next_position >= st.prompt) {
    // The prompt is in (and nothing was evicted yet: stored row = position): select once.
    const model::ModelConfig& mc = model_->config();
    const int64_t n_ctx = blocks_->length(seq);
    const int64_t n_heads = mc.n_layer * mc.n_kv_head;
    if (static_cast<int64_t>(st.observed.size()) != n_heads * n_ctx) st.observed.assign(n_heads * n_ctx, 0.0f);
    kvcache::snapkv_keys(st.observed, n_heads, n_ctx, std::max<int64_t>(0, n_ctx - p.observe), kvcache::kSnapKvPoolKernel,
                         st.scores);
    std::vector<float>().swap(st.observed);
    st.evicting = true;
    st.new_row_score = kvcache::kUnscoredRow;
  }
  const int64_t length = blocks_->length(seq);
  if (!st.evicting || length + n_new <= p.budget) return;
  CHECK_LE(n_new, p.budget - p.recent) << "a step of " << n_new << " rows for " << p.describe();
  kvcache::choose_victims(st.positions, st.scores, length + n_new - p.budget, p.recent, victims_);
  blocks_->compact(seq, victims_);
}

bool Engine::prepare_scores(std::span<const StepSeq> seqs) {
  const model::ModelConfig& mc = model_->config();
  int64_t stride = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    observe_from_[i] = INT32_MAX;
    const kvcache::KvSelectState* st = blocks_->select_state(seqs[i].seq);
    if (st == nullptr) continue;
    const int64_t length = blocks_->length(seqs[i].seq);
    if (st->params.method == kvcache::KvSelectMethod::kH2O) {
      observe_from_[i] = 0;
    } else if (!st->evicting && length > st->prompt - st->params.observe) {
      observe_from_[i] = static_cast<int32_t>(std::max<int64_t>(0, st->prompt - st->params.observe));
    } else {
      continue;
    }
    stride = std::max(stride, length);
  }
  if (stride == 0) return false;
  score_stride_ = stride;
  const int64_t per_seq = mc.n_layer * mc.n_kv_head * stride;
  if (static_cast<int64_t>(scores_.size()) < static_cast<int64_t>(seqs.size()) * per_seq) {
    scores_.resize(seqs.size() * per_seq);  // grows to the largest step seen, then stays
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (observe_from_[i] != INT32_MAX) std::fill_n(scores_.begin() + i * per_seq, per_seq, 0.0f);
  }
  return true;
}

void Engine::collect_scores(std::span<const StepSeq> seqs) {
  const model::ModelConfig& mc = model_->config();
  const int64_t n_heads = mc.n_layer * mc.n_kv_head;
  const int64_t stride = score_stride_;
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (observe_from_[i] == INT32_MAX) continue;
    kvcache::KvSelectState& st = *blocks_->select_state(seqs[i].seq);
    const int64_t length = blocks_->length(seqs[i].seq);
    const float* base = scores_.data() + i * n_heads * stride;  // [n_heads, stride]
    if (st.params.method == kvcache::KvSelectMethod::kH2O) {
      for (int64_t h = 0; h < n_heads; ++h) {
        for (int64_t p = 0; p < length; ++p) st.scores[p] += base[h * stride + p];
      }
      continue;
    }
    // SnapKV, before its selection: rows are stored in position order, length <= prompt.
    const int64_t n_ctx = st.prompt;
    CHECK_LE(length, n_ctx);
    if (st.observed.empty()) st.observed.assign(n_heads * n_ctx, 0.0f);  // once per sequence
    for (int64_t h = 0; h < n_heads; ++h) {
      for (int64_t p = 0; p < length; ++p) st.observed[h * n_ctx + p] += base[h * stride + p];
    }
  }
}

Result<std::vector<float>> Engine::score(std::span<const int32_t> tokens, const kvcache::KvSelectParams& select_in,
                                         int64_t n_prompt) {
  if (!select_in.on()) return score(tokens);
  kvcache::KvSelectParams select = select_in;
  PAGODA_RETURN_IF_ERROR(check_kv_select(select));
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_vocab = model_->config().n_vocab;
  if (n == 0) return Status::error("nothing to score");
  if (n_prompt < 1 || n_prompt > n) return Status::error("the prompt must be 1.." + std::to_string(n) + " tokens");
  for (int32_t id : tokens) {
    if (id < 0 || id >= n_vocab) return Status::error("token id " + std::to_string(id) + " outside the vocabulary");
  }
  if (n > max_context_) return Status::error("more tokens than the context of " + std::to_string(max_context_));
  SequenceGuard guard(*blocks_, blocks_->add_sequence(n, sequence_options(kv_namespace(""), 0, select, n_prompt)));
  std::vector<float> out(n * n_vocab);
  const int64_t decode_chunk = std::min(prefill_chunk(), kvcache::kv_select_max_chunk(select));
  for (int64_t begin = 0; begin < n;) {
    const int64_t len = begin < n_prompt ? std::min(chunk_for(select), n_prompt - begin) : std::min(decode_chunk, n - begin);
    const StepSeq chunk{guard.seq(), tokens.subspan(begin, len)};
    PAGODA_RETURN_IF_ERROR(step(std::span<const StepSeq>(&chunk, 1), true, out.data() + begin * n_vocab));
    begin += len;
  }
  return out;
}

}  // namespace pagoda::engine
