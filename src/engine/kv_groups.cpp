#include "engine/kv_groups.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace pagoda::engine {

Result<kvcache::KvCacheSpec> kv_cache_spec_of(const model::ModelConfig& c, int64_t block_size, kernels::KvDType dtype) {
  std::vector<kvcache::KvLayerSpec> layers(static_cast<size_t>(c.n_layer));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    kvcache::KvLayerSpec& s = layers[static_cast<size_t>(l)];
    s.dtype = dtype;
    if (!c.owns_kv(l)) {
      s.kind = kvcache::KvGroupKind::kShared;
      s.source_layer = c.kv_source_layer[static_cast<size_t>(l)];
      continue;
    }
    s.n_kv_head = c.kv_cache_heads();
    s.head_dim = c.kv_cache_head_dim();
    if (c.is_mla()) {
      s.kind = kvcache::KvGroupKind::kLatent;
    } else if (c.window_of(l) > 0) {
      s.kind = kvcache::KvGroupKind::kSliding;
      s.window = c.window_of(l);
    }
  }
  return kvcache::make_kv_cache_spec(block_size, layers);
}

Result<std::unique_ptr<GroupedKv>> GroupedKv::create(const model::LlamaModel& model, ThreadPool& pool,
                                                     const kvcache::KvCacheSpec& spec, int64_t num_pages,
                                                     int64_t max_tokens, int64_t max_seqs, int64_t max_context,
                                                     kernels::Isa isa) {
  if (spec.n_layer != model.config().n_layer) return Status::invalid_argument("the KV cache spec has another layer count");
  if (max_tokens < 1 || max_seqs < 1 || max_context < 1) return Status::invalid_argument("GroupedKv needs positive sizes");
  PAGODA_ASSIGN_OR_RETURN(kvcache::KvPageLayout layout, kvcache::plan_page_layout(spec));
  PAGODA_ASSIGN_OR_RETURN(kvcache::KvPagePool pages, kvcache::KvPagePool::create(spec, layout, num_pages));
  auto kv = std::make_unique<kvcache::KvCoordinator>(spec, layout, num_pages);
  return std::unique_ptr<GroupedKv>(
      new GroupedKv(model, pool, std::move(pages), std::move(kv), max_tokens, max_seqs, max_context, isa));
}

GroupedKv::GroupedKv(const model::LlamaModel& model, ThreadPool& pool, kvcache::KvPagePool pages,
                     std::unique_ptr<kvcache::KvCoordinator> kv, int64_t max_tokens, int64_t max_seqs,
                     int64_t max_context, kernels::Isa isa)
    : model_(model),
      pages_(std::move(pages)),
      kv_(std::move(kv)),
      forward_(model, pool, max_tokens, max_context, isa),
      max_tokens_(max_tokens),
      max_seqs_(max_seqs),
      max_blocks_((max_context + kv_->spec().block_size - 1) / kv_->spec().block_size) {
  const kvcache::KvCacheSpec& spec = kv_->spec();
  const kvcache::KvPageLayout& layout = kv_->layout();
  std::vector<int64_t> first_part(spec.groups.size(), 0);
  for (size_t g = 0; g < spec.groups.size(); ++g) {
    first_part[g] = static_cast<int64_t>(part_group_.size());
    for (int64_t part = 0; part < layout.parts[g]; ++part) {
      part_group_.push_back(static_cast<int64_t>(g));
      part_part_.push_back(part);
    }
  }
  part_index_.resize(static_cast<size_t>(spec.n_layer));
  for (int64_t l = 0; l < spec.n_layer; ++l) {
    int64_t owner = l;
    const kvcache::KvGroupSpec& g = spec.groups[static_cast<size_t>(spec.group_of(l))];
    if (!g.has_blocks()) owner = g.layer.source_layer;
    const kvcache::KvLayerPlace& place = layout.places[static_cast<size_t>(owner)];
    part_index_[static_cast<size_t>(l)] = first_part[static_cast<size_t>(place.group)] + place.part;
  }
  const size_t parts = part_group_.size();
  tokens_.resize(static_cast<size_t>(max_tokens));
  positions_.resize(static_cast<size_t>(max_tokens));
  logit_rows_.resize(static_cast<size_t>(max_tokens));
  slots_.resize(parts * static_cast<size_t>(max_tokens));
  tables_.resize(parts * static_cast<size_t>(max_seqs * max_blocks_));
  spans_.resize(parts * static_cast<size_t>(max_seqs));
  layer_kv_.resize(static_cast<size_t>(spec.n_layer));
  copies_.reserve(static_cast<size_t>(max_seqs) * spec.groups.size());
}

Status GroupedKv::step(std::span<const StepSeq> seqs, bool all_rows, float* logits_out) {
  const int64_t n_seqs = static_cast<int64_t>(seqs.size());
  int64_t n = 0, need = 0;
  for (const StepSeq& s : seqs) {
    n += static_cast<int64_t>(s.tokens.size());
    need += kv_->plan(s.seq, static_cast<int64_t>(s.tokens.size())).num_new_pages;
  }
  CHECK(n > 0 && n <= max_tokens_ && n_seqs <= max_seqs_) << n << " rows, " << n_seqs << " sequences";
  if (need > kv_->num_available_pages()) {
    return Status::unavailable("out of KV pages (" + std::to_string(need) + " needed, " +
                               std::to_string(kv_->num_available_pages()) + " available)");
  }
  const int64_t B = kv_->spec().block_size;
  const size_t parts = part_group_.size();
  copies_.clear();
  int64_t row = 0, n_logit_rows = 0;
  for (int64_t i = 0; i < n_seqs; ++i) {
    const StepSeq& s = seqs[static_cast<size_t>(i)];
    const int64_t len = static_cast<int64_t>(s.tokens.size());
    const int64_t first = kv_->length(s.seq);
    CHECK_LE(first + len, max_blocks_ * B) << "a sequence past max_context";
    CHECK(kv_->append(s.seq, s.tokens, copies_)) << "an append the plan said fits";
    for (int64_t j = 0; j < len; ++j) {
      tokens_[static_cast<size_t>(row + j)] = s.tokens[static_cast<size_t>(j)];
      positions_[static_cast<size_t>(row + j)] = static_cast<int32_t>(first + j);
      for (size_t p = 0; p < parts; ++p) {
        slots_[p * static_cast<size_t>(max_tokens_) + static_cast<size_t>(row + j)] =
            kv_->slot(s.seq, part_group_[p], part_part_[p], first + j);
      }
      if (logits_out != nullptr && (all_rows || j == len - 1)) logit_rows_[static_cast<size_t>(n_logit_rows++)] = row + j;
    }
    for (size_t p = 0; p < parts; ++p) {
      spans_[p * static_cast<size_t>(max_seqs_) + static_cast<size_t>(i)] = kernels::SeqSpan{row, len, nullptr, 0};
    }
    row += len;
  }
  for (const kvcache::KvGroupCopy& c : copies_) pages_.copy_block(*kv_, c);
  // Tables are final after every append (a copy replaces a block id): each part's page ids.
  for (size_t p = 0; p < parts; ++p) {
    for (int64_t i = 0; i < n_seqs; ++i) {
      const std::vector<int32_t>& blocks = kv_->block_table(seqs[static_cast<size_t>(i)].seq, part_group_[p]);
      int32_t* table = tables_.data() + (p * static_cast<size_t>(max_seqs_) + static_cast<size_t>(i)) * static_cast<size_t>(max_blocks_);
      for (size_t j = 0; j < blocks.size(); ++j) {
        table[j] = blocks[j] < 0 ? -1 : kv_->page(part_group_[p], blocks[j], part_part_[p]);
      }
      kernels::SeqSpan& span = spans_[p * static_cast<size_t>(max_seqs_) + static_cast<size_t>(i)];
      span.block_table = table;
      span.num_blocks = static_cast<int64_t>(blocks.size());
    }
  }
  for (size_t l = 0; l < layer_kv_.size(); ++l) {
    const size_t p = static_cast<size_t>(part_index_[l]);
    layer_kv_[l].slot_mapping = std::span<const int64_t>(slots_.data() + p * static_cast<size_t>(max_tokens_), static_cast<size_t>(n));
    layer_kv_[l].seqs = std::span<const kernels::SeqSpan>(spans_.data() + p * static_cast<size_t>(max_seqs_), static_cast<size_t>(n_seqs));
  }
  model::Batch batch;
  batch.tokens = std::span<const int32_t>(tokens_.data(), static_cast<size_t>(n));
  batch.positions = std::span<const int32_t>(positions_.data(), static_cast<size_t>(n));
  batch.slot_mapping = layer_kv_[0].slot_mapping;
  batch.seqs = layer_kv_[0].seqs;
  batch.layer_kv = layer_kv_;
  batch.logit_rows = std::span<const int64_t>(logit_rows_.data(), static_cast<size_t>(n_logit_rows));
  forward_.forward(batch, pages_.layer_views(), logits_out);
  for (const StepSeq& s : seqs) kv_->commit(s.seq);
  return Status::ok();
}

}  // namespace pagoda::engine
