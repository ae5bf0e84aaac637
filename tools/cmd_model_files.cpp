// pagoda info | make-model | convert: inspect and write model files.
#include <cstdio>
#include <map>

#include "kvcache/kv_layout.h"
#include "model/format/hf_checkpoint.h"
#include "model/format/hf_convert.h"
#include "model/kv_spec.h"
#include "model/model_config.h"
#include "model/model_factory.h"
#include "tools/commands.h"
#include "tools/model_source.h"
#include "tools/progress.h"

namespace pagoda::tools {

namespace {

void print_config(const model::ModelConfig& c) {
  std::printf("architecture    %s%s%s\n", c.arch_name.c_str(), c.name.empty() ? "" : "  name: ", c.name.c_str());
  std::printf("layers          %lld\n", (long long)c.n_layer);
  std::printf("width           %lld\n", (long long)c.n_embd);
  std::printf("heads           %lld query, %lld kv (%s), head dim %lld\n", (long long)c.n_head, (long long)c.n_kv_head,
              c.n_kv_head == c.n_head ? "MHA" : c.n_kv_head == 1 ? "MQA" : "GQA", (long long)c.head_dim);
  if (c.is_moe()) {
    const model::ExpertRouting& r = c.routing;
    std::string rule = r.gating == model::ExpertGating::kSigmoid ? "sigmoid" : "softmax";
    if (r.n_groups > 1) rule += ", best " + std::to_string(r.n_groups_used) + " of " + std::to_string(r.n_groups) + " groups";
    rule += std::string(" top-k, ") + (r.normalize ? "renormalized" : "not renormalized");
    if (r.scale != 1.0f) rule += ", x" + std::to_string(r.scale).substr(0, 4);
    std::printf("experts         %lld of width %lld, %lld per token (%s)\n", (long long)c.n_expert, (long long)c.n_ff_exp,
                (long long)c.n_expert_used, rule.c_str());
    if (c.n_expert_shared > 0) {
      std::printf("shared experts  %lld (width %lld, every token)\n", (long long)c.n_expert_shared, (long long)c.n_ff_shexp());
    }
    if (c.n_dense_lead > 0) {
      std::printf("dense layers    the first %lld (feed-forward %lld)\n", (long long)c.n_dense_lead, (long long)c.n_ff);
    }
  } else {
    std::printf("feed-forward    %lld\n", (long long)c.n_ff);
  }
  std::printf("vocab           %lld\n", (long long)c.n_vocab);
  std::printf("context         %lld (trained)\n", (long long)c.n_ctx_train);
  std::printf("rope            %s, %lld dims, base %g, scale %g\n",
              c.rope.style == kernels::RopeStyle::kAdjacentPairs ? "adjacent pairs" : "neox halves",
              (long long)c.rope.rot_dim, c.rope.freq_base, c.rope.freq_scale);
  if (!c.rope.freq_factors.empty()) {
    std::printf("rope scaling    per-pair frequency divisors %g .. %g (llama3 / rope_freqs)\n", c.rope.freq_factors.front(),
                c.rope.freq_factors.back());
  }
  if (c.has_qkv_bias || c.has_qk_norm) {
    std::printf("attention       %s%s\n", c.has_qkv_bias ? "q/k/v bias " : "", c.has_qk_norm ? "q/k norm" : "");
  }
  if (c.sliding_window > 0) std::printf("sliding window  %lld\n", (long long)c.sliding_window);
  if (c.has_layer_windows()) {
    std::string global;
    int64_t n_sliding = 0, window = 0;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      if (c.window_of(l) > 0) {
        ++n_sliding;
        window = c.window_of(l);
      } else {
        global += (global.empty() ? "" : ", ") + std::to_string(l);
      }
    }
    std::printf("sliding window  %lld on %lld of %lld layers (global: %s), their rope base %g; every layer's KV cached\n",
                (long long)window, (long long)n_sliding, (long long)c.n_layer, global.empty() ? "none" : global.c_str(),
                c.rope_local.freq_base);
  }
  if (c.geglu || c.post_norms || c.embed_scale > 0 || c.final_logit_softcap > 0) {
    std::printf("layer           %s%s%s", c.geglu ? "GeGLU FFN" : "SwiGLU FFN", c.post_norms ? ", post norms" : "",
                c.embed_scale > 0 ? ", embedding x sqrt(width)" : "");
    if (c.final_logit_softcap > 0) std::printf(", logits soft-capped at %g", c.final_logit_softcap);
    std::printf("\n");
  }
  std::printf("rms eps         %g\n", c.rms_eps);
  if (c.is_mla()) {
    std::printf("MLA             latent %lld + rope key %lld cached per token; q %s; heads qk %lld + %lld, v %lld\n",
                (long long)c.kv_lora_rank, (long long)c.qk_rope_dim,
                c.q_lora_rank > 0 ? ("LoRA rank " + std::to_string(c.q_lora_rank)).c_str() : "plain",
                (long long)c.qk_nope_dim, (long long)c.qk_rope_dim, (long long)c.v_head_dim);
    std::printf("KV bytes/token  %lld (f32), %lld (f16)  = %lld layers x %lld latent values x dtype (K only)\n",
                (long long)c.kv_bytes_per_token(4), (long long)c.kv_bytes_per_token(2), (long long)c.n_kv_layers(),
                (long long)c.kv_cache_head_dim());
    return;
  }
  if (c.n_kv_layers() < c.n_layer) {
    std::printf("KV sharing      %lld of %lld layers own K/V (attention.kv_source_layer)\n", (long long)c.n_kv_layers(),
                (long long)c.n_layer);
  }
  std::printf("KV bytes/token  %lld (f32), %lld (f16)  = 2 x %lld layers x %lld kv heads x %lld dims x dtype\n",
              (long long)c.kv_bytes_per_token(4), (long long)c.kv_bytes_per_token(2), (long long)c.n_kv_layers(),
              (long long)c.n_kv_head, (long long)c.head_dim);
}

// A Hugging Face folder: its config, safetensors files and tensor bytes per dtype.
int info_hf(const std::string& dir) {
  auto checkpoint = model::HfCheckpoint::open(dir);
  if (!checkpoint.is_ok()) return fail(checkpoint.status());
  std::printf("folder          %s (Hugging Face %s)\n", dir.c_str(), checkpoint->config().architecture.c_str());
  print_config(checkpoint->config().model);
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t total = 0;
  for (const model::SafetensorsFile& file : checkpoint->files()) {
    for (const model::SafetensorsTensor& t : file.tensors()) {
      auto& e = by_type[t.dtype_name];
      ++e.first;
      e.second += t.end - t.begin;
      total += t.end - t.begin;
    }
  }
  std::printf("safetensors     %zu file%s, %zu tensors used, %s\n", checkpoint->files().size(),
              checkpoint->files().size() == 1 ? "" : "s", checkpoint->tensors().size(),
              kvcache::format_bytes(static_cast<int64_t>(total)).c_str());
  for (const auto& [type, e] : by_type) {
    std::printf("  %-6s        %d tensors, %s\n", type.c_str(), e.first, kvcache::format_bytes(static_cast<int64_t>(e.second)).c_str());
  }
  return 0;
}

int info(const std::string& path, const std::string& tokenizer_path, bool all_keys) {
  if (model::is_hf_model_dir(path)) return info_hf(path);
  auto file = load_model_file(path, tokenizer_path);
  if (!file.is_ok()) return fail(file.status());
  const model::GgufFile& f = *file;
  std::printf("file            %s\n", path.empty() ? "(built-in default model)" : path.c_str());
  std::printf("gguf version    %u, %zu metadata keys, %zu tensors\n", f.version(), f.metadata().size(), f.tensors().size());
  auto config = model::config_from_gguf(f);
  if (config.is_ok()) {
    print_config(*config);
  } else if (!f.tensors().empty()) {
    std::printf("model           not runnable: %s\n", config.status().message().c_str());
  }
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t total = 0;
  for (const auto& t : f.tensors()) {
    auto& e = by_type[model::ggml_type_name(t.ggml_type)];
    ++e.first;
    e.second += t.bytes;
    total += t.bytes;
  }
  std::printf("tensor bytes    %s\n", kvcache::format_bytes(static_cast<int64_t>(total)).c_str());
  if (config.is_ok() && config->is_moe()) {
    if (const int64_t active = model::moe_active_bytes(f, config->n_expert, config->n_expert_used); active > 0) {
      std::printf("active bytes    %s per token (%lld of %lld experts; the decode floor)\n",
                  kvcache::format_bytes(active).c_str(), (long long)config->n_expert_used, (long long)config->n_expert);
    }
  }
  for (const auto& [type, e] : by_type) {
    std::printf("  %-6s        %d tensors, %s\n", type.c_str(), e.first, kvcache::format_bytes(static_cast<int64_t>(e.second)).c_str());
  }
  if (all_keys) {
    std::printf("metadata:\n");
    for (const auto& [key, value] : f.metadata()) std::printf("  %s = %s\n", key.c_str(), value.to_display_string().c_str());
    std::printf("tensors:\n");
    for (const auto& t : f.tensors()) {
      std::string dims;
      for (auto d : t.dims) dims += (dims.empty() ? "" : " x ") + std::to_string(d);
      std::printf("  %-32s %-6s [%s]\n", t.name.c_str(), model::ggml_type_name(t.ggml_type), dims.c_str());
    }
  }
  return 0;
}

int make_model(const std::string& shape_name, const std::string& dtype_name_str, const std::string& out, uint64_t seed,
               bool quiet, int64_t cla, double logit_scale, bool untied) {
  auto shape = model::find_model_shape(shape_name);
  if (!shape.is_ok()) return fail(shape.status());
  if (cla < 0 || cla == 1 || cla > shape->n_layer) {
    return fail(Status::invalid_argument("--cla must be >= 2 and at most the layer count (" +
                                         std::to_string(shape->n_layer) + ")"));
  }
  shape->cla = cla;
  if (!(logit_scale > 0) || logit_scale > 1000) return fail(Status::invalid_argument("--logit-scale must be in (0, 1000]"));
  shape->output_norm_scale = static_cast<float>(logit_scale);
  shape->untied_output = untied;
  auto mix = model::find_weight_mix(dtype_name_str);
  if (!mix.is_ok()) return fail(mix.status());
  ProgressBar bar("make-model " + shape_name + " layers", !quiet, /*bytes=*/false);
  auto file = model::make_random_model(*shape, *mix, seed, [&](int64_t done, int64_t total) { bar.update(done, total); });
  bar.finish();
  if (!file.is_ok()) return fail(file.status());
  Status s = file->write(out);
  if (!s.is_ok()) return fail(s);
  std::printf("wrote %s (%s, %s)\n", out.c_str(), shape_name.c_str(), dtype_name_str.c_str());
  return 0;
}

// A Hugging Face folder -> GGUF as llama.cpp's converter writes it (model/format/hf_convert.h).
int convert_hf(const std::string& in, const std::string& out, bool quiet) {
  auto checkpoint = model::HfCheckpoint::open(in);
  if (!checkpoint.is_ok()) return fail(checkpoint.status());
  auto tokenizer = tokenizer_from_hf_folder(in);
  if (!tokenizer.is_ok()) return fail(tokenizer.status());
  ProgressBar bar("converting", !quiet);
  auto file = model::gguf_from_hf(*checkpoint, *tokenizer, [&](int64_t done, int64_t total) { bar.update(done, total); });
  bar.finish();
  if (!file.is_ok()) return fail(file.status());
  Status s = file->write(out);
  if (!s.is_ok()) return fail(s);
  std::printf("wrote %s (%s, %zu tensors, from %s)\n", out.c_str(), checkpoint->config().model.arch_name.c_str(),
              file->tensors().size(), checkpoint->config().architecture.c_str());
  return 0;
}

int convert(const std::string& in, const std::string& tokenizer, const std::string& out, bool quiet) {
  if (model::is_hf_model_dir(in)) return convert_hf(in, out, quiet);
  auto file = load_model_file(in, tokenizer, !quiet);
  if (!file.is_ok()) return fail(file.status());
  if (auto config = model::config_from_gguf(*file); !config.is_ok()) return fail(config.status().with_context(in));
  Status s = file->write(out);
  if (!s.is_ok()) return fail(s);
  std::printf("wrote %s\n", out.c_str());
  return 0;
}

}  // namespace

void register_info(CLI::App& app, int& exit_code) {
  auto path = std::make_shared<std::string>();
  auto tok = std::make_shared<std::string>();
  auto all = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "describe a model file");
  cmd->add_option("model", *path, "GGUF file, llama2.c checkpoint or Hugging Face folder (default: the built-in model)");
  cmd->add_option("--tokenizer", *tok, "tokenizer.bin for a llama2.c checkpoint");
  cmd->add_flag("-a,--all", *all, "list every metadata key and tensor");
  cmd->callback([=, &exit_code] { exit_code = info(*path, *tok, *all); });
}

void register_make_model(CLI::App& app, int& exit_code) {
  struct Options {
    std::string shape = "tiny", dtype = "f32", out;
    uint64_t seed = 1234;
    bool quiet = false;
    int64_t cla = 0;
    double logit_scale = 1.0;
    bool untied = false;
  };
  auto o = std::make_shared<Options>();
  std::string shapes;
  for (const model::ModelShape& s : model::model_shapes()) shapes += (shapes.empty() ? "" : ", ") + s.name;
  CLI::App* cmd = app.add_subcommand("make-model", "write a random-weight GGUF of a named shape");
  cmd->add_option("--shape", o->shape, shapes);
  cmd->add_option("--dtype", o->dtype,
                  "weights: f32, f16, bf16, q8_0, q4_0, q4_k, q5_k, q6_k, or a llama.cpp mix: q4_k_m, q5_k_m");
  cmd->add_option("-o,--output", o->out, "output .gguf")->required();
  cmd->add_option("--seed", o->seed, "weights seed");
  cmd->add_flag("-q,--quiet", o->quiet, "no progress bar (drawn only when stderr is a terminal)");
  cmd->add_option("--cla", o->cla,
                  "cross-layer KV sharing: groups of N layers read the first one's K/V (attention.kv_source_layer)");
  cmd->add_option("--logit-scale", o->logit_scale,
                  "multiply output_norm's weights by X: peaked next-token distributions, so that greedy tokens "
                  "compared across engines do not part at near-ties (cross-checks)");
  cmd->add_flag("--untied-output", o->untied,
                "gemma3: its own output.weight instead of the tied embedding (greedy tokens of a tied random "
                "model repeat)");
  cmd->callback([o, &exit_code] {
    exit_code = make_model(o->shape, o->dtype, o->out, o->seed, o->quiet, o->cla, o->logit_scale, o->untied);
  });
}

void register_convert(CLI::App& app, int& exit_code) {
  struct Options {
    std::string in, tokenizer, out;
    bool quiet = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a Hugging Face folder or a llama2.c checkpoint to GGUF (llama.cpp loads it)");
  cmd->add_option("model", o->in, "Hugging Face folder (config.json, safetensors, tokenizer.json) or llama2.c .bin")->required();
  cmd->add_option("--tokenizer", o->tokenizer, "a llama2.c checkpoint's tokenizer.bin");
  cmd->add_option("-o,--output", o->out, "output .gguf")->required();
  cmd->add_flag("-q,--quiet", o->quiet, "no progress bar (drawn only when stderr is a terminal)");
  cmd->callback([o, &exit_code] { exit_code = convert(o->in, o->tokenizer, o->out, o->quiet); });
}

}  // namespace pagoda::tools
