// Tokenizers of two families, chosen by Vocab::model:
//   kSpm: SentencePiece-style (SPM) BPE with byte fallback, merging by token score, as
//         llama.cpp's llm_tokenizer_spm and llama2.c's run.c encode() behave (GGUF model "llama").
//   kBpe: BPE merging by merge rank (Hugging Face "BPE", GGUF model "gpt2"), either byte-level
//         (GPT-2 byte-to-unicode token texts, a regex pre-tokenizer, optional NFC; see bpe.cpp)
//         or, with byte_level = false, SentencePiece-style text ("▁" for spaces, byte fallback)
//         as Llama 2's tokenizer.json.
//
// Step 1 (special tokens) and decoding below hold for both; steps 2-4 are kSpm's, kBpe's are at
// the top of bpe.cpp. Byte-level kBpe pieces are the bytes the token's characters stand for.
//
// Encoding (Tokenizer::encode):
//   1. With parse_special, CONTROL and UNKNOWN token texts found in the text become those tokens;
//      USER_DEFINED token texts always do (as llama.cpp). Longer special texts win over shorter.
//   2. Each remaining raw fragment gets a leading space when add_space_prefix and it is the first
//      fragment or follows a special token; spaces become U+2581 "▁".
//   3. The fragment is split into UTF-8 characters (an invalid byte is a symbol of its own) and
//      adjacent symbols are merged, highest-score vocab token first (ties: leftmost), until no
//      adjacent pair forms a token. O(n log n) through a priority queue over a linked list.
//   4. A symbol that is a token maps to its id; otherwise each of its bytes maps to its byte
//      token "<0xNN>" (byte fallback), else to the single-byte token, else to unk.
// Decoding (decode, StreamDecoder) drops the leading space of the first piece of the sequence
// and of the first piece after each BOS when add_space_prefix (the dummy prefix that encode
// adds); CONTROL/UNKNOWN/UNUSED tokens print nothing. The output is always valid UTF-8: each
// maximal ill-formed subsequence becomes one U+FFFD (Unicode's "substitution of maximal
// subparts"), so decode(encode(s)) == s for valid UTF-8 s.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "model/text/pre_tokenizer.h"

namespace pagoda::model {

enum class TokenType : int32_t {
  kUndefined = 0,  // treated as kNormal
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,  // text is "<0xNN>"; stands for that raw byte
};

enum class VocabModel : int32_t {
  kSpm = 0,  // merges by score
  kBpe = 1,  // merges by rank (Vocab::merges)
};

// Plain data, filled from GGUF metadata, a llama2.c tokenizer.bin or a tokenizer.json.
struct Vocab {
  std::vector<std::string> tokens;  // [n_vocab] as in GGUF: "▁" for a space, "<0xNN>" bytes
  std::vector<float> scores;        // [n_vocab] merge priority, higher merges first
  std::vector<TokenType> types;     // [n_vocab]
  int32_t bos_id = 1, eos_id = 2, unk_id = 0;  // -1 = none
  bool add_bos = true, add_eos = false, add_space_prefix = true;
  // Which raw fragments (text between special tokens) add_space_prefix gives a "▁": by default
  // each one at the text's start or after a special token (llama.cpp; HF's Prepend normalizer).
  // Hugging Face's Metaspace pre-tokenizer: not when the fragment starts with a space (or "▁"),
  // and with prepend_scheme "first" only the fragment at the text's start.
  bool space_prefix_first_only = false;
  bool space_prefix_unless_space = false;

  VocabModel model = VocabModel::kSpm;
  // kBpe only. merges[r] = "left right" (two token texts), rank r: lower ranks merge first.
  std::vector<std::string> merges;
  bool byte_level = true;       // false: SentencePiece-style text, byte fallback ("<0xNN>")
  std::string pre = "default";  // tokenizer.ggml.pre name ("" = custom pre_regexes)
  std::vector<std::string> pre_regexes;  // the pre-tokenizer; empty = the whole text is a piece
  bool normalize_nfc = false;  // NFC before pre-tokenizing (Qwen2's normalizer)
  bool ignore_merges = false;  // a piece that is a token is taken whole (Llama 3)
};

// Ok when: tokens non-empty; scores/types the same length; no NaN score; types in range;
// bos/eos/unk ids in [-1, n_vocab) and present when add_bos/add_eos ask for them; BYTE tokens
// spelled "<0xNN>"; every byte value has a byte token (or single-byte token), or unk_id >= 0.
// Byte-level kBpe: every byte's byte-level character is a token, or unk_id >= 0.
// (Tokenizer::create also checks kBpe merges and pre-tokenizer regexes.)
Status validate_vocab(const Vocab& vocab);


class Tokenizer {
 public:
  // Validates the vocab and builds the lookup tables. kBpe: every merge must be two tokens
  // separated by one space whose concatenation is a token; pre_regexes must compile (when
  // empty, they come from pre_tokenizer_regexes(pre) if byte_level).
  static Result<Tokenizer> create(Vocab vocab);

  // add_bos: prepend BOS (pass vocab().add_bos by default; requires bos_id >= 0).
  // parse_special: CONTROL/UNKNOWN token texts in `text` become those tokens.
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;

  // The raw bytes of one token: "▁" -> ' ', BYTE -> that byte, USER_DEFINED -> its text,
  // CONTROL/UNKNOWN/UNUSED -> "" (their text when `special`). Precondition: 0 <= id < n_vocab.
  std::string token_to_piece(int32_t id, bool special = false) const;

  // Ids to text (see the top of this file). Precondition: every id in [0, n_vocab).
  std::string decode(std::span<const int32_t> ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(vocab_.tokens.size()); }
  int32_t bos_id() const { return vocab_.bos_id; }
  int32_t eos_id() const { return vocab_.eos_id; }
  const Vocab& vocab() const { return vocab_; }

 private:
  friend class StreamDecoder;
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using PieceMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;
  struct Fragment {  // a raw text span [begin, end) of the input, or a special token
    size_t begin = 0, end = 0;
    int32_t special_id = -1;
  };

  struct MergeResult {
    int32_t rank, id;
  };
  using MergeMap = std::unordered_map<uint64_t, MergeResult>;  // (left id << 32 | right id)

  explicit Tokenizer(Vocab vocab);
  Status init_bpe();  // kBpe (bpe.cpp): merges_ and pre_ from the vocab, or why not
  std::vector<Fragment> split_special(std::string_view text, bool parse_special) const;
  void encode_fragment(std::string_view escaped, std::vector<int32_t>& out) const;
  // Whether the raw fragment [begin, end) of `text` gets the "▁" prefix (see Vocab).
  bool space_prefix(std::string_view text, size_t begin, bool after_special) const;
  // kBpe (bpe.cpp): one raw fragment (between special tokens); `prefix`: space_prefix().
  void encode_bpe_fragment(std::string_view raw, bool prefix, std::vector<int32_t>& out) const;
  // Merges `ids` (initial symbols; -1 = not a token) by rank, leftmost first, and appends the
  // result; a -1 left over is `fallback`'s bytes through byte fallback.
  void bpe_merge(std::vector<int32_t>& ids, std::span<const std::string_view> fallback,
                 std::vector<int32_t>& out) const;
  bool special_matches(int32_t id, bool parse_special) const;
  // Appends the piece of `id` to `out`, dropping its leading space when `strip_space`, and
  // updates `strip_space` for the next token (the leading-space rule of decode()).
  void append_piece(int32_t id, bool& strip_space, std::string& out) const;

  Vocab vocab_;
  PieceMap piece_to_id_;                 // token text -> id (last id wins on duplicates)
  std::array<int32_t, 256> byte_to_id_;  // byte fallback: byte token, single-byte token, or unk
  std::vector<std::string> pieces_;      // [n_vocab] token_to_piece(id, false), precomputed
  // Special tokens (CONTROL, UNKNOWN, USER_DEFINED with non-empty text) in match priority
  // order: longer text first, then lower id. special_rank_ is indexed like special_ids_.
  std::vector<int32_t> special_ids_;
  PieceMap special_rank_;                       // special text -> index into special_ids_
  std::vector<size_t> special_lengths_;         // distinct special text lengths, descending
  std::array<bool, 256> special_first_byte_{};  // some special text starts with this byte
  bool has_user_defined_ = false;
  // kBpe
  PreTokenizer pre_;
  MergeMap merges_;
};

// Streaming decode for generation. push() returns only complete UTF-8 characters and holds the
// bytes of an unfinished one; flush() returns what is held (ill-formed bytes as U+FFFD).
// Pushing ids one by one and then flushing yields exactly decode(ids). The Tokenizer must
// outlive the decoder.
class StreamDecoder {
 public:
  // previous: the token just before the first one pushed (a generation's last prompt token), or
  // -1 at the start of a sequence. The first piece's leading space is dropped only where
  // decode() would drop it: at the start, or after BOS (so a completion's text continues its
  // prompt: "The sun was" + " shining", as decoding prompt + completion gives).
  explicit StreamDecoder(const Tokenizer& tokenizer, int32_t previous = -1);
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool strip_space_;
  std::string pending_;  // bytes of a possibly incomplete UTF-8 character (at most 3)
};

}  // namespace pagoda::model
