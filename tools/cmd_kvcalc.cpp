// pagoda kvcalc: the KV capacity planner. For a model (GGUF file, config.json or preset) and
// each KV element format: bytes per token and per block, and with --mem how many tokens and
// concurrent sequences fit. The arithmetic is kvcache::plan_capacity (see kvcache/kv_planner.h),
// sized by the same kernels/kv_format.h functions the engine sizes its pool with.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvcache/kv_layout.h"
#include "kvcache/kv_planner.h"
#include "model/kv_spec.h"
#include "tools/commands.h"
#include "tools/kv_model_resolve.h"

namespace pagoda::tools {

namespace {

using nlohmann::json;

struct KvcalcOptions {
  std::string model;      // file, directory or preset name
  std::string mem, weights, overhead;
  std::string kv_dtypes;  // comma-separated; "" = all that fit the model
  int64_t context = 0;
  int64_t block_size = 16;
  bool json = false;
  bool list_presets = false;
};

// "5%" of `mem`, or a byte size.
Result<int64_t> parse_overhead(const std::string& text, int64_t mem) {
  if (!text.empty() && text.back() == '%') {
    char* end = nullptr;
    const double pct = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size() - 1 || !(pct >= 0) || pct >= 100) {
      return Status::error("bad --overhead '" + text + "' (a byte size like 1G, or a percentage of --mem like 5%)");
    }
    return static_cast<int64_t>(static_cast<double>(mem) * pct / 100.0);
  }
  return kvcache::parse_bytes(text);
}

struct DTypeChoice {
  std::vector<kernels::KvDType> dtypes;
  std::vector<std::pair<kernels::KvDType, std::string>> skipped;  // default list only
};

Result<DTypeChoice> choose_dtypes(const std::string& list, const kvcache::KvModelSpec& spec) {
  DTypeChoice c;
  if (list.empty()) {
    for (kernels::KvDType d : kvcache::all_kv_dtypes()) {
      Status s = kvcache::check_kv_dtype(spec, d);
      if (s.is_ok()) c.dtypes.push_back(d);
      else c.skipped.emplace_back(d, s.message());
    }
    return c;
  }
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    auto d = kernels::kv_dtype_from_name(name);
    if (!d.has_value()) {
      return Status::error("unknown KV dtype '" + name + "' (f32, f16, bf16, fp8-e4m3, fp8-e5m2, int8, int4)");
    }
    c.dtypes.push_back(*d);
  }
  return c;
}

json bytes_per_token_json(double v) {
  if (v == std::floor(v)) return static_cast<int64_t>(v);
  return v;
}

std::string bytes_per_token_text(double v) {
  char buf[48];
  if (v == std::floor(v)) std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
  else std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

void print_json(const ResolvedModel& m, const kvcache::CapacityPlan& plan, const DTypeChoice& choice) {
  const kvcache::KvModelSpec& s = m.spec;
  json j;
  j["model"] = {{"name", s.name}, {"source", m.source}, {"attention", std::string(s.attention_kind())},
                {"n_layer", s.n_layer}, {"n_kv_layers", s.kv_layers()}, {"n_head", s.n_head}, {"n_kv_head", s.n_kv_head}, {"head_dim", s.head_dim},
                {"kv_lora_rank", s.kv_lora_rank}, {"qk_rope_head_dim", s.qk_rope_head_dim},
                {"sliding_window", s.sliding_window}, {"num_sliding_layers", s.num_sliding_layers()},
                {"max_context", s.max_context}, {"weight_bytes", s.weight_bytes}};
  if (m.active_weight_bytes > 0) {
    j["model"]["experts"] = {{"n_expert", m.n_expert}, {"n_expert_used", m.n_expert_used},
                             {"active_weight_bytes", m.active_weight_bytes}};
  }
  j["block_size"] = plan.block_size;
  j["context"] = plan.context;
  if (plan.mem_bytes > 0) {
    j["budget"] = {{"mem_bytes", plan.mem_bytes}, {"weight_bytes", plan.weight_bytes},
                   {"weight_source", m.weight_source}, {"overhead_bytes", plan.overhead_bytes},
                   {"available_bytes", plan.available_bytes}};
  } else {
    j["budget"] = nullptr;
  }
  j["rows"] = json::array();
  for (const kvcache::KvPlanRow& r : plan.rows) {
    json row = {{"dtype", std::string(kernels::kv_dtype_name(r.dtype))},
                {"bytes_per_token", bytes_per_token_json(r.bytes_per_token)},
                {"bytes_per_block", r.bytes_per_block},
                {"bytes_per_sequence", r.bytes_per_sequence}};
    if (r.stage_bytes > 0) row["stage_bytes"] = r.stage_bytes;
    if (r.has_capacity) {
      row["num_blocks"] = r.num_blocks;
      row["max_cached_tokens"] = r.max_cached_tokens;
      row["max_sequences"] = r.max_sequences;
    }
    j["rows"].push_back(row);
  }
  j["skipped"] = json::array();
  for (const auto& [d, why] : choice.skipped) {
    j["skipped"].push_back({{"dtype", std::string(kernels::kv_dtype_name(d))}, {"reason", why}});
  }
  std::printf("%s\n", j.dump(2).c_str());
}

void print_header(const ResolvedModel& m, const kvcache::CapacityPlan& plan, bool overhead_defaulted) {
  const kvcache::KvModelSpec& s = m.spec;
  std::printf("model     %s (%s)\n", s.name.c_str(), m.source.c_str());
  if (s.is_mla()) {
    std::printf("shape     %lld layers, %lld query heads, MLA: latent %lld + rope %lld cached per token and layer\n",
                (long long)s.n_layer, (long long)s.n_head, (long long)s.kv_lora_rank, (long long)s.qk_rope_head_dim);
  } else {
    std::printf("shape     %lld layers, %lld query heads, %lld kv heads (%s), head dim %lld\n", (long long)s.n_layer,
                (long long)s.n_head, (long long)s.n_kv_head, std::string(s.attention_kind()).c_str(), (long long)s.head_dim);
  }
  if (m.active_weight_bytes > 0) {
    std::printf("experts   %lld of %lld per token: weights %s resident, %s read per token (the decode floor)\n",
                (long long)m.n_expert_used, (long long)m.n_expert, kvcache::format_bytes(s.weight_bytes).c_str(),
                kvcache::format_bytes(m.active_weight_bytes).c_str());
  }
  if (s.kv_layers() < s.n_layer) {
    std::printf("sharing   cross-layer KV: %lld of %lld layers own K/V blocks (saves %.0f%% of the KV)\n",
                (long long)s.kv_layers(), (long long)s.n_layer, 100.0 * (1.0 - double(s.kv_layers()) / double(s.n_layer)));
  }
  if (s.num_sliding_layers() > 0) {
    std::printf("window    %lld tokens on %lld of %lld layers\n", (long long)s.sliding_window,
                (long long)s.num_sliding_layers(), (long long)s.n_layer);
  }
  std::printf("context   %lld tokens per sequence%s, block %lld tokens\n", (long long)plan.context,
              s.max_context > 0 && plan.context > s.max_context ? " (beyond the model's context)" : "",
              (long long)plan.block_size);
  if (plan.mem_bytes > 0) {
    std::printf("budget    %s - weights %s (%s) - overhead %s%s = %s for KV\n",
                kvcache::format_bytes(plan.mem_bytes).c_str(), kvcache::format_bytes(plan.weight_bytes).c_str(),
                m.weight_source.c_str(), kvcache::format_bytes(plan.overhead_bytes).c_str(),
                overhead_defaulted ? " (default 5%)" : "", kvcache::format_bytes(plan.available_bytes).c_str());
  }
  std::printf("\n");
}

void print_table(const ResolvedModel& m, const kvcache::CapacityPlan& plan, const DTypeChoice& choice,
                 bool overhead_defaulted) {
  print_header(m, plan, overhead_defaulted);
  const std::string seq_col = "KV/seq@" + std::to_string(plan.context);
  const bool cap = plan.mem_bytes > 0;
  std::printf("%-9s %12s %12s %14s", "dtype", "bytes/token", "bytes/block", seq_col.c_str());
  if (cap) std::printf(" %10s %12s %9s", "blocks", "max tokens", "max seqs");
  std::printf("\n");
  for (const kvcache::KvPlanRow& r : plan.rows) {
    const std::string name = std::string(kernels::kv_dtype_name(r.dtype)) + (r.dtype == kernels::KvDType::kF16 ? "*" : "");
    std::printf("%-9s %12s %12lld %14s", name.c_str(),
                bytes_per_token_text(r.bytes_per_token).c_str(), (long long)r.bytes_per_block,
                kvcache::format_bytes(r.bytes_per_sequence).c_str());
    if (cap) {
      std::printf(" %10lld %12lld %9lld", (long long)r.num_blocks, (long long)r.max_cached_tokens,
                  (long long)r.max_sequences);
    }
    std::printf("\n");
  }
  for (const kvcache::KvPlanRow& r : plan.rows) {
    if (r.stage_bytes > 0 && cap) {
      std::printf("(%s: %s of the budget first goes to f32 staging of partial K blocks)\n",
                  std::string(kernels::kv_dtype_name(r.dtype)).c_str(), kvcache::format_bytes(r.stage_bytes).c_str());
    }
  }
  for (const auto& [d, why] : choice.skipped) {
    std::printf("(%s skipped: %s)\n", std::string(kernels::kv_dtype_name(d)).c_str(), why.c_str());
  }
  std::printf("(* the default of pagoda run and serve: --kv-dtype f16)\n");
  if (!cap) std::printf("\n(add --mem BYTES for token and sequence capacity)\n");
}

int list_presets(bool as_json) {
  json j = json::array();
  if (!as_json) {
    std::printf("%-14s %6s %8s %8s %-5s %-16s %8s %12s\n", "preset", "layers", "heads", "head dim", "attn",
                "window", "context", "weights f16");
  }
  for (const kvcache::KvModelSpec& s : kvcache::kv_model_presets()) {
    std::string window = "-";
    if (s.num_sliding_layers() > 0) {
      window = std::to_string(s.sliding_window) + " (" + std::to_string(s.num_sliding_layers()) + "/" +
               std::to_string(s.n_layer) + ")";
    }
    const std::string heads = std::to_string(s.n_head) + "/" + (s.is_mla() ? "-" : std::to_string(s.n_kv_head));
    const std::string hd = s.is_mla() ? std::to_string(s.kv_lora_rank) + "+" + std::to_string(s.qk_rope_head_dim)
                                      : std::to_string(s.head_dim);
    if (as_json) {
      j.push_back({{"name", s.name}, {"n_layer", s.n_layer}, {"n_head", s.n_head}, {"n_kv_head", s.n_kv_head},
                   {"head_dim", s.head_dim}, {"attention", std::string(s.attention_kind())},
                   {"kv_lora_rank", s.kv_lora_rank}, {"qk_rope_head_dim", s.qk_rope_head_dim},
                   {"sliding_window", s.sliding_window}, {"num_sliding_layers", s.num_sliding_layers()},
                   {"max_context", s.max_context}, {"weight_bytes", s.weight_bytes}});
    } else {
      std::printf("%-14s %6lld %8s %8s %-5s %-16s %8lld %12s\n", s.name.c_str(), (long long)s.n_layer, heads.c_str(),
                  hd.c_str(), std::string(s.attention_kind()).c_str(), window.c_str(), (long long)s.max_context,
                  kvcache::format_bytes(s.weight_bytes).c_str());
    }
  }
  if (as_json) std::printf("%s\n", j.dump(2).c_str());
  return 0;
}

Result<kvcache::KvPlanOptions> plan_options(const KvcalcOptions& o, const ResolvedModel& m) {
  kvcache::KvPlanOptions p;
  p.block_size = o.block_size;
  p.context = o.context;
  if (o.mem.empty()) return p;
  PAGODA_ASSIGN_OR_RETURN(p.mem_bytes, kvcache::parse_bytes(o.mem));
  if (p.mem_bytes <= 0) return Status::error("--mem must be positive");
  if (!o.weights.empty()) {
    PAGODA_ASSIGN_OR_RETURN(int64_t w, kvcache::parse_bytes(o.weights));
    p.weight_bytes = w;
  } else if (!m.weights_known) {
    return Status::error("the weight size of " + m.spec.name + " is unknown (" + m.weight_source +
                         "); pass --weights BYTES (--weights 0 to give --mem to the KV cache alone)");
  }
  if (!o.overhead.empty()) {
    PAGODA_ASSIGN_OR_RETURN(int64_t ov, parse_overhead(o.overhead, p.mem_bytes));
    p.overhead_bytes = ov;
  }
  return p;
}

int kvcalc(const KvcalcOptions& o) {
  if (o.list_presets) return list_presets(o.json);
  if (o.model.empty()) {
    return fail(Status::error("give a model: a GGUF file, a config.json (or its directory), or a preset "
                              "(pagoda kvcalc --list-presets)"));
  }
  auto model = resolve_model(o.model);
  if (!model.is_ok()) return fail(model.status());
  auto options = plan_options(o, *model);
  if (!options.is_ok()) return fail(options.status());
  auto choice = choose_dtypes(o.kv_dtypes, model->spec);
  if (!choice.is_ok()) return fail(choice.status());
  auto plan = kvcache::plan_capacity(model->spec, *options, choice->dtypes);
  if (!plan.is_ok()) return fail(plan.status());
  if (o.json) print_json(*model, *plan, *choice);
  else print_table(*model, *plan, *choice, o.overhead.empty());
  return 0;
}

}  // namespace

void register_kvcalc(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<KvcalcOptions>();
  CLI::App* cmd = app.add_subcommand("kvcalc", "plan KV cache capacity: bytes per token and block, tokens and sequences that fit");
  cmd->add_option("model", o->model, "GGUF file, HF config.json (or its directory), or a preset name");
  cmd->add_option("--mem", o->mem, "memory budget for weights + KV + overhead (e.g. 24G); without it, sizes only");
  cmd->add_option("--weights", o->weights, "weight bytes (default: GGUF tensor bytes, preset size, or estimated from config.json)");
  cmd->add_option("--overhead", o->overhead, "reserve for activations and slack: bytes or a % of --mem (default 5%)");
  cmd->add_option("--context", o->context, "tokens per sequence for the sequence count (default: the model's context, else 4096)");
  cmd->add_option("--block-size", o->block_size, "tokens per KV block (default 16)");
  cmd->add_option("--kv-dtype", o->kv_dtypes, "comma-separated: f32,f16,bf16,fp8-e4m3,fp8-e5m2,int8,int4 (default: all)");
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->add_flag("--list-presets", o->list_presets, "list the built-in model presets");
  cmd->callback([o, &exit_code] { exit_code = kvcalc(*o); });
}

}  // namespace pagoda::tools
