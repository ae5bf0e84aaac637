#include "model/format/llama2c.h"

#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "model/text/gguf_vocab.h"

namespace pagoda::model {

namespace {

constexpr uint64_t kHeaderBytes = 7 * 4;
constexpr uint32_t kVersionedMagic = 0x616b3432;    // "ak42": llama2.c export versions 1 and 2
constexpr uint64_t kMaxTokenizerBytes = 64u << 20;  // far above any real tokenizer.bin
// "<0xNN>": a byte-fallback token.
bool is_byte_token(const std::string& s) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return s.size() == 6 && s.compare(0, 3, "<0x") == 0 && hex(s[3]) && hex(s[4]) && s[5] == '>';
}

// An open file descriptor with its size, closed on scope exit.
class InputFile {
 public:
  ~InputFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status open(const std::string& path) {
    path_ = path;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return Status::error(path + ": cannot open: " + std::strerror(errno));
    struct stat st;
    if (fstat(fd_, &st) != 0) return Status::error(path + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) return Status::error(path + ": not a regular file");
    size_ = static_cast<uint64_t>(st.st_size);
    return Status::ok();
  }
  uint64_t size() const { return size_; }
  // Reads exactly `bytes` bytes at `offset` (the caller has checked they are in the file).
  Status pread_all(void* dst, uint64_t bytes, uint64_t offset) const {
    auto* p = static_cast<uint8_t*>(dst);
    while (bytes > 0) {
      size_t chunk = static_cast<size_t>(std::min<uint64_t>(bytes, 1u << 30));
      ssize_t n = ::pread(fd_, p, chunk, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::error(path_ + ": read error at byte " + std::to_string(offset) + ": " + std::strerror(errno));
      if (n == 0) return Status::error(path_ + ": file shrank while reading (at byte " + std::to_string(offset) + ")");
      p += n;
      bytes -= static_cast<uint64_t>(n);
      offset += static_cast<uint64_t>(n);
    }
    return Status::ok();
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// float counts of the checkpoint's arrays
struct Layout {
  uint64_t weights = 0;  // token_embedding .. rms_final
  uint64_t freq_cis = 0;  // freq_cis_real + freq_cis_imag
  uint64_t classifier = 0;  // wcls, 0 when shared
  bool has_freq_cis = true;
};

Status check_range(const std::string& path, const char* field, int64_t value, int64_t max) {
  if (value >= 1 && value <= max) return Status::ok();
  return Status::error(path + ": header field " + field + " = " + std::to_string(value) + " is not between 1 and " +
                       std::to_string(max) + " (not a llama2.c legacy checkpoint?)");
}

Result<Llama2cHeader> parse_header(const std::string& path, const int32_t raw[7]) {
  if (static_cast<uint32_t>(raw[0]) == kVersionedMagic) {
    return Status::error(path + ": llama2.c export version 1/2 (magic \"ak42\") is not supported; "
                         "export the legacy version 0 format");
  }
  Llama2cHeader h;
  h.dim = raw[0];
  h.hidden_dim = raw[1];
  h.n_layers = raw[2];
  h.n_heads = raw[3];
  h.n_kv_heads = raw[4];
  h.seq_len = raw[6];
  int64_t vocab = raw[5];
  h.shared_classifier = vocab > 0;
  PAGODA_RETURN_IF_ERROR(check_range(path, "dim", h.dim, 1 << 16));
  PAGODA_RETURN_IF_ERROR(check_range(path, "hidden_dim", h.hidden_dim, 1 << 18));
  PAGODA_RETURN_IF_ERROR(check_range(path, "n_layers", h.n_layers, 1 << 10));
  PAGODA_RETURN_IF_ERROR(check_range(path, "n_heads", h.n_heads, h.dim));
  PAGODA_RETURN_IF_ERROR(check_range(path, "n_kv_heads", h.n_kv_heads, h.n_heads));
  PAGODA_RETURN_IF_ERROR(check_range(path, "|vocab_size|", vocab < 0 ? -vocab : vocab, 1 << 22));
  PAGODA_RETURN_IF_ERROR(check_range(path, "seq_len", h.seq_len, 1 << 24));
  h.vocab_size = static_cast<int32_t>(vocab < 0 ? -vocab : vocab);
  if (h.dim % h.n_heads != 0) {
    return Status::error(path + ": dim " + std::to_string(h.dim) + " is not a multiple of n_heads " +
                         std::to_string(h.n_heads));
  }
  if (h.n_heads % h.n_kv_heads != 0) {
    return Status::error(path + ": n_heads " + std::to_string(h.n_heads) + " is not a multiple of n_kv_heads " +
                         std::to_string(h.n_kv_heads));
  }
  if (h.head_dim() % 2 != 0) {
    return Status::error(path + ": head_dim " + std::to_string(h.head_dim()) + " is odd (RoPE rotates pairs)");
  }
  return h;
}

// Matches the file size to the header, with or without the freq_cis tail.
Result<Layout> check_layout(const std::string& path, const Llama2cHeader& h, uint64_t file_size) {
  const uint64_t dim = h.dim, hidden = h.hidden_dim, layers = h.n_layers, kv_dim = h.kv_dim();
  const uint64_t vocab = h.vocab_size;
  Layout l;
  l.weights = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * hidden * dim) + dim;
  l.freq_cis = static_cast<uint64_t>(h.seq_len) * h.head_dim();
  l.classifier = h.shared_classifier ? 0 : vocab * dim;
  const uint64_t without = kHeaderBytes + 4 * (l.weights + l.classifier);
  const uint64_t with = without + 4 * l.freq_cis;
  if (file_size == with) return l;
  if (file_size == without) {
    l.has_freq_cis = false;
    return l;
  }
  return Status::error(path + ": file is " + std::to_string(file_size) + " bytes, but its header (dim " +
                       std::to_string(h.dim) + ", hidden_dim " + std::to_string(h.hidden_dim) + ", n_layers " +
                       std::to_string(h.n_layers) + ", n_heads " + std::to_string(h.n_heads) + ", n_kv_heads " +
                       std::to_string(h.n_kv_heads) + ", vocab_size " + std::to_string(h.vocab_size) +
                       (h.shared_classifier ? "" : " with its own classifier") + ", seq_len " +
                       std::to_string(h.seq_len) + ") needs " + std::to_string(with) + " bytes (or " +
                       std::to_string(without) + " without freq_cis): truncated or not a llama2.c checkpoint");
}

Result<Llama2cHeader> read_header(const InputFile& file, const std::string& path) {
  if (file.size() < kHeaderBytes) {
    return Status::error(path + ": " + std::to_string(file.size()) + " bytes is too small for a llama2.c header (" +
                         std::to_string(kHeaderBytes) + " bytes)");
  }
  int32_t raw[7];
  PAGODA_RETURN_IF_ERROR(file.pread_all(raw, kHeaderBytes, 0));
  return parse_header(path, raw);
}

void set_metadata(GgufFile& f, const Llama2cHeader& h, const std::string& model_path, const Vocab& vocab) {
  std::string name = model_path.substr(model_path.find_last_of('/') + 1);
  if (auto dot = name.find_last_of('.'); dot != std::string::npos && dot > 0) name.resize(dot);
  auto u32 = [](int64_t v) { return GgufValue::of_u32(static_cast<uint32_t>(v)); };
  f.set("general.architecture", GgufValue::of_string("llama"));
  f.set("general.name", GgufValue::of_string(name));
  f.set("llama.context_length", u32(h.seq_len));
  f.set("llama.embedding_length", u32(h.dim));
  f.set("llama.feed_forward_length", u32(h.hidden_dim));
  f.set("llama.attention.head_count", u32(h.n_heads));
  f.set("llama.attention.head_count_kv", u32(h.n_kv_heads));
  f.set("llama.block_count", u32(h.n_layers));
  f.set("llama.rope.dimension_count", u32(h.head_dim()));
  f.set("llama.attention.layer_norm_rms_epsilon", GgufValue::of_f32(1e-5f));
  vocab_to_gguf(vocab, f);
}

// One GGUF tensor and where its floats start in the checkpoint.
struct TensorSource {
  std::string name;
  std::vector<int64_t> dims;  // ne0 first
  uint64_t float_offset;      // from the end of the header
};

// In the converter's order: token_embd, output_norm, output, then per layer
// attn_q, attn_k, attn_v, attn_output, attn_norm, ffn_gate, ffn_down, ffn_up, ffn_norm.
std::vector<TensorSource> tensor_sources(const Llama2cHeader& h, const Layout& l) {
  const int64_t dim = h.dim, hidden = h.hidden_dim, kv_dim = h.kv_dim(), vocab = h.vocab_size;
  const uint64_t layers = h.n_layers;
  const uint64_t udim = dim, uhidden = hidden, ukv_dim = kv_dim, uvocab = vocab;
  // Start of each array (floats from the end of the header), in file order.
  const uint64_t emb = 0;
  const uint64_t rms_att = emb + uvocab * udim;
  const uint64_t wq = rms_att + layers * udim;
  const uint64_t wk = wq + layers * udim * udim;
  const uint64_t wv = wk + layers * ukv_dim * udim;
  const uint64_t wo = wv + layers * ukv_dim * udim;
  const uint64_t rms_ffn = wo + layers * udim * udim;
  const uint64_t w1 = rms_ffn + layers * udim;
  const uint64_t w2 = w1 + layers * uhidden * udim;
  const uint64_t w3 = w2 + layers * udim * uhidden;
  const uint64_t rms_final = w3 + layers * uhidden * udim;
  const uint64_t wcls = h.shared_classifier ? emb : rms_final + udim + (l.has_freq_cis ? l.freq_cis : 0);

  std::vector<TensorSource> out = {
      {"token_embd.weight", {dim, vocab}, emb},
      {"output_norm.weight", {dim}, rms_final},
      {"output.weight", {dim, vocab}, wcls},
  };
  for (uint64_t i = 0; i < layers; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    out.push_back({p + "attn_q.weight", {dim, dim}, wq + i * udim * udim});
    out.push_back({p + "attn_k.weight", {dim, kv_dim}, wk + i * ukv_dim * udim});
    out.push_back({p + "attn_v.weight", {dim, kv_dim}, wv + i * ukv_dim * udim});
    out.push_back({p + "attn_output.weight", {dim, dim}, wo + i * udim * udim});
    out.push_back({p + "attn_norm.weight", {dim}, rms_att + i * udim});
    out.push_back({p + "ffn_gate.weight", {dim, hidden}, w1 + i * uhidden * udim});
    out.push_back({p + "ffn_down.weight", {hidden, dim}, w2 + i * udim * uhidden});
    out.push_back({p + "ffn_up.weight", {dim, hidden}, w3 + i * uhidden * udim});
    out.push_back({p + "ffn_norm.weight", {dim}, rms_ffn + i * udim});
  }
  return out;
}

}  // namespace

Result<Llama2cHeader> read_llama2c_header(const std::string& model_path) {
  InputFile file;
  PAGODA_RETURN_IF_ERROR(file.open(model_path));
  PAGODA_ASSIGN_OR_RETURN(Llama2cHeader h, read_header(file, model_path));
  PAGODA_RETURN_IF_ERROR(check_layout(model_path, h, file.size()).status());
  return h;
}

Result<GgufFile> import_llama2c(const std::string& model_path, const std::string& tokenizer_path) {
  InputFile file;
  PAGODA_RETURN_IF_ERROR(file.open(model_path));
  PAGODA_ASSIGN_OR_RETURN(Llama2cHeader h, read_header(file, model_path));
  PAGODA_ASSIGN_OR_RETURN(Layout layout, check_layout(model_path, h, file.size()));
  PAGODA_ASSIGN_OR_RETURN(Vocab vocab, read_llama2c_vocab(tokenizer_path, h.vocab_size));

  GgufFile out;
  set_metadata(out, h, model_path, vocab);
  for (TensorSource& src : tensor_sources(h, layout)) {
    const std::string name = src.name;
    auto dst = out.add_tensor_uninitialized(std::move(src.name), std::move(src.dims), kGgmlTypeF32);
    if (!dst.is_ok()) return dst.status().with_context(model_path);
    const GgufTensorInfo& t = *out.find_tensor(name);
    PAGODA_RETURN_IF_ERROR(file.pread_all(dst.value(), t.bytes, kHeaderBytes + 4 * src.float_offset));
  }
  return out;
}

Result<Vocab> read_llama2c_vocab(const std::string& path, int32_t vocab_size) {
  if (vocab_size <= 0) {
    return Status::error(path + ": vocab_size must be positive, got " + std::to_string(vocab_size));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(path + ": cannot open tokenizer file");
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  if (!in || end < 0) return Status::error(path + ": cannot read tokenizer file size");
  const auto file_size = static_cast<uint64_t>(end);
  if (file_size > kMaxTokenizerBytes) {
    return Status::error(path + ": " + std::to_string(file_size) + " bytes is too large for a llama2.c tokenizer.bin");
  }
  in.seekg(0, std::ios::beg);
  uint64_t offset = 0;
  // Reads `size` bytes; false (and nothing read) when the file has fewer left.
  auto read_bytes = [&](void* dst, uint64_t size) {
    if (size > file_size - offset) return false;
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(size));
    offset += size;
    return static_cast<bool>(in);
  };
  auto truncated = [&](const std::string& what) {
    return Status::error(path + ": truncated: " + what + " at byte " + std::to_string(offset) +
                         " runs past the end of the file (" + std::to_string(file_size) +
                         " bytes); is this a llama2.c tokenizer.bin for a vocab of " +
                         std::to_string(vocab_size) + "?");
  };
  uint32_t max_token_length = 0;
  if (!read_bytes(&max_token_length, 4)) return truncated("the max_token_length header");

  Vocab vocab;
  const auto expected = static_cast<size_t>(vocab_size);
  const size_t reserve = std::min<uint64_t>(expected, file_size / 8 + 1);
  vocab.tokens.reserve(reserve);
  vocab.scores.reserve(reserve);
  vocab.types.reserve(reserve);
  for (size_t id = 0; id < expected; ++id) {
    const std::string what = "token " + std::to_string(id) + " of " + std::to_string(expected);
    float score = 0;
    uint32_t len = 0;
    if (!read_bytes(&score, 4) || !read_bytes(&len, 4)) return truncated("the header of " + what);
    if (len > max_token_length) {
      return Status::error(path + ": " + what + " has length " + std::to_string(len) +
                           ", more than the file's max_token_length " +
                           std::to_string(max_token_length));
    }
    if (len > file_size - offset) return truncated("the text of " + what);  // before allocating
    std::string text(len, '\0');
    if (!read_bytes(text.data(), len)) return truncated("the text of " + what);
    TokenType type = TokenType::kNormal;
    if (id == 0) {
      type = TokenType::kUnknown;
      text = "<unk>";  // as llama.cpp's converter names it
    } else if (id == 1 || id == 2) {
      type = TokenType::kControl;
      if (text == "\n<s>\n") text = "<s>";
      if (text == "\n</s>\n") text = "</s>";
    } else if (text.empty()) {
      type = TokenType::kControl;  // as llama.cpp's converter types an empty piece
    } else if (is_byte_token(text)) {
      type = TokenType::kByte;
    }
    std::string escaped;
    for (char c : text) {
      if (c == ' ') {
        escaped.append("\xE2\x96\x81");  // U+2581, SentencePiece's space
      } else {
        escaped.push_back(c);
      }
    }
    vocab.tokens.push_back(std::move(escaped));
    vocab.scores.push_back(score);
    vocab.types.push_back(type);
  }
  if (offset != file_size) {
    return Status::error(path + ": " + std::to_string(file_size - offset) + " bytes left after " +
                         std::to_string(expected) +
                         " tokens; the model's vocab_size does not match this tokenizer");
  }
  vocab.unk_id = 0;
  vocab.bos_id = vocab_size > 1 ? 1 : -1;
  vocab.eos_id = vocab_size > 2 ? 2 : -1;
  vocab.add_bos = vocab.bos_id >= 0;
  PAGODA_RETURN_IF_ERROR(validate_vocab(vocab).with_context(path));
  return vocab;
}

}  // namespace pagoda::model
