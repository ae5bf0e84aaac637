// The model behind a KV geometry, for kvcalc and replay: a GGUF file, an HF config.json (or its
// directory) or a kvcalc preset, resolved into the planner's KvModelSpec (kvcache/kv_planner.h)
// with where its weight size came from.
#pragma once

#include <string>

#include "core/status.h"
#include "kvcache/kv_planner.h"

namespace pagoda::tools {

struct ResolvedModel {
  kvcache::KvModelSpec spec;
  std::string source;         // "preset", "GGUF", "config.json"
  std::string weight_source;  // how spec.weight_bytes was found, or why it is unknown
  bool weights_known = false;
  int64_t active_weight_bytes = 0;  // mixture of experts: bytes a decode token reads (0: dense)
  int64_t n_expert = 0, n_expert_used = 0;
};

std::string preset_names();  // "LLaMA3-8B, ..." for messages
// A file (GGUF, config.json or its directory) when `what` exists, else a preset by name.
Result<ResolvedModel> resolve_model(const std::string& what);

}  // namespace pagoda::tools
