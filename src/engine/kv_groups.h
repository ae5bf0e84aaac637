// Forward passes over a KV cache of layer groups (kvcache/kv_cache_spec.h): the model's spec
// from its config, and GroupedKv, which owns the coordinator (block tables per group) and the
// page pool (memory) and runs one ragged batch at a time as Engine::step does:
//
//   for each sequence: kv.append(tokens) -> copy-on-write copies done -> forward (every layer
//   reads and writes through its own (group, part)'s slot mapping and block tables: Batch::
//   layer_kv) -> kv.commit (registers full blocks, releases blocks out of a window)
//
// Scratch is sized once (max_tokens rows, max_seqs sequences, the context's blocks); step
// never allocates but for the coordinator's own tables.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kvcache/kv_coordinator.h"
#include "kvcache/kv_page_pool.h"
#include "model/llama_model.h"

namespace pagoda::engine {

// One spec per layer: kSliding W where config.window_of(l) = W > 0, kLatent for MLA, kShared
// for a layer that reads another layer's K/V (CLA), kFull otherwise; equal specs group.
Result<kvcache::KvCacheSpec> kv_cache_spec_of(const model::ModelConfig& config, int64_t block_size,
                                              kernels::KvDType dtype);

class GroupedKv {
 public:
  struct StepSeq {
    kvcache::KvSeqId seq;
    std::span<const int32_t> tokens;  // appended at the sequence's length
  };

  // A pool of num_pages pages for `model`; forward passes of up to max_tokens rows over up
  // to max_seqs sequences of up to max_context positions.
  static Result<std::unique_ptr<GroupedKv>> create(const model::LlamaModel& model, ThreadPool& pool,
                                                   const kvcache::KvCacheSpec& spec, int64_t num_pages,
                                                   int64_t max_tokens, int64_t max_seqs, int64_t max_context,
                                                   kernels::Isa isa = kernels::detect_isa());

  kvcache::KvCoordinator& kv() { return *kv_; }
  const kvcache::KvPagePool& pages() const { return pages_; }

  // One forward pass; logits_out: [rows, n_vocab] for every row (all_rows) or each sequence's
  // last row. Unavailable (changing nothing but window releases) when the pages do not fit.
  Status step(std::span<const StepSeq> seqs, bool all_rows, float* logits_out);

 private:
  GroupedKv(const model::LlamaModel& model, ThreadPool& pool, kvcache::KvPagePool pages,
            std::unique_ptr<kvcache::KvCoordinator> kv, int64_t max_tokens, int64_t max_seqs, int64_t max_context,
            kernels::Isa isa);

  const model::LlamaModel& model_;
  kvcache::KvPagePool pages_;
  std::unique_ptr<kvcache::KvCoordinator> kv_;
  model::ForwardPass forward_;
  int64_t max_tokens_, max_seqs_, max_blocks_;
  std::vector<int64_t> part_index_;       // [n_layer] index into parts (a shared layer: its source's)
  std::vector<int64_t> part_group_, part_part_;  // [parts] (group, part) of each
  std::vector<int32_t> tokens_, positions_;      // [max_tokens]
  std::vector<int64_t> logit_rows_;              // [max_tokens]
  std::vector<int64_t> slots_;                   // [parts, max_tokens]
  std::vector<int32_t> tables_;                  // [parts, max_seqs, max_blocks] page ids (-1: hole)
  std::vector<kernels::SeqSpan> spans_;          // [parts, max_seqs]
  std::vector<model::LayerKv> layer_kv_;         // [n_layer]
  std::vector<kvcache::KvGroupCopy> copies_;
};

}  // namespace pagoda::engine
