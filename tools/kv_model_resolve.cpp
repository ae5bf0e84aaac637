#include "tools/kv_model_resolve.h"

#include <cstdio>
#include <filesystem>

#include "model/kv_spec.h"

namespace pagoda::tools {

namespace {

kvcache::KvModelSpec to_planner_spec(const model::KvSpec& m) {
  kvcache::KvModelSpec s;
  s.name = m.name;
  s.n_layer = m.n_layer;
  s.n_head = m.n_head;
  s.n_kv_head = m.n_kv_head;
  s.head_dim = m.head_dim;
  s.kv_lora_rank = m.kv_lora_rank;
  s.qk_rope_head_dim = m.qk_rope_head_dim;
  s.sliding_window = m.sliding_window;
  s.layer_is_sliding = m.layer_is_sliding;
  s.max_context = m.max_context;
  s.weight_bytes = m.weight_bytes;
  s.n_kv_layers = m.n_kv_layers;
  return s;
}

}  // namespace

std::string preset_names() {
  std::string names;
  for (const auto& p : kvcache::kv_model_presets()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

Result<ResolvedModel> resolve_model(const std::string& what) {
  ResolvedModel r;
  std::error_code ec;
  if (std::filesystem::exists(what, ec)) {
    PAGODA_ASSIGN_OR_RETURN(model::KvSpec m, model::read_kv_spec(what));
    r.spec = to_planner_spec(m);
    r.source = m.format;
    r.weight_source = m.weight_source;
    r.weights_known = r.source == "GGUF" || m.weight_bytes > 0;
    r.active_weight_bytes = m.active_weight_bytes;
    r.n_expert = m.n_expert;
    r.n_expert_used = m.n_expert_used;
    return r;
  }
  auto preset = kvcache::find_kv_model_preset(what);
  const auto ends_with = [&](std::string_view suffix) { return std::string_view(what).ends_with(suffix); };
  if (!preset.has_value() && (what.find('/') != std::string::npos || ends_with(".json") || ends_with(".gguf"))) {
    return Status::error(what + ": no such file");
  }
  if (!preset.has_value()) {
    return Status::error("'" + what + "' is neither a file nor a preset (presets: " + preset_names() + ")");
  }
  r.spec = std::move(*preset);
  r.source = "preset";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "preset: %.2fB parameters x 2 B", static_cast<double>(r.spec.weight_bytes) / 2e9);
  r.weight_source = buf;
  r.weights_known = true;
  return r;
}

}  // namespace pagoda::tools
