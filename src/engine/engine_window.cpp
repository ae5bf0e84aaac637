// Engine windows: StreamingLLM (EngineConfig::kv_window / kv_sinks) and freeing blocks outside
// a sliding-window model's window. Rules: EngineConfig in engine/engine.h and the top of
// kvcache/block_manager.h.
#include <algorithm>

#include "engine/engine.h"
#include "kernels/rope_shift.h"

namespace pagoda::engine {

kvcache::SequenceOptions Engine::sequence_options(const kvcache::KvNamespace& ns, int32_t priority,
                                                  const kvcache::KvSelectParams& select, int64_t n_prompt) const {
  kvcache::SequenceOptions o;
  o.ns = ns;
  o.priority = priority;
  o.cacheable = !windowed_seqs() && !select.on();
  o.select = select;
  o.select_prompt = n_prompt;
  return o;
}

int64_t Engine::prefill_chunk() const {
  return streaming() ? std::min(max_batch_tokens_, kv_window_ - pool_->layout().block_size) : max_batch_tokens_;
}

int64_t Engine::kv_tokens_needed(int64_t total_tokens) const {
  const int64_t B = pool_->layout().block_size;
  if (streaming()) return std::min(total_tokens, kv_sinks_ + kv_window_);
  // Blocks covering [L + 1 - W, L + chunk) at the widest, each partly filled at both ends.
  if (frees_window_blocks()) return std::min(total_tokens, model_window_ + max_batch_tokens_ + 2 * B);
  return total_tokens;
}

void Engine::make_room(kvcache::SeqId seq, int64_t n_new) {
  const int64_t B = pool_->layout().block_size;
  const int64_t first = kv_sinks_ / B;  // table index of the oldest non-sink block
  CHECK_LE(n_new, kv_window_ - B) << "a streaming step larger than one chunk";
  while (blocks_->length(seq) + n_new > kv_sinks_ + kv_window_) {
    blocks_->drop_block(seq, first);
    // Positions after the dropped block moved down by B: rotate their K back by B positions.
    const std::vector<int32_t>& table = blocks_->block_table(seq);
    const std::span<const int32_t> moved(table.data() + first, table.size() - static_cast<size_t>(first));
    for (int64_t l = 0; l < pool_->layout().n_layer; ++l) {  // each cache layer once (CLA shares views)
      kernels::rope_shift_k(pool_->layer_view(l), moved, static_cast<int32_t>(-B), model_->config().rope, config_.isa);
    }
  }
}

void Engine::release_out_of_window(kvcache::SeqId seq) {
  const int64_t B = pool_->layout().block_size;
  // The next row, at position length, attends to positions >= length + 1 - window.
  const int64_t first_needed = blocks_->length(seq) + 1 - model_window_;
  const std::vector<int32_t>& table = blocks_->block_table(seq);
  for (int64_t j = 0; j + 1 < static_cast<int64_t>(table.size()) && (j + 1) * B <= first_needed; ++j) {
    if (table[j] >= 0) blocks_->release_block(seq, j);
  }
}

}  // namespace pagoda::engine
