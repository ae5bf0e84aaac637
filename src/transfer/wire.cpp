// Control messages of the KV transfer (transfer/wire.h).
#include "transfer/wire.h"

#include <cstring>

namespace pagoda::transfer {

namespace {

constexpr size_t kMaxVector = 1 << 20;  // elements: far above any pool (a hostile count fails)

class Writer {
 public:
  template <typename T>
  void put(T v) {
    uint8_t b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    out_.insert(out_.end(), b, b + sizeof(T));
  }
  void bytes(std::span<const uint8_t> b) {
    put<uint32_t>(static_cast<uint32_t>(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
  }
  void str(const std::string& s) { bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  bool get(T& v) {
    if (in_.size() - pos_ < sizeof(T)) return fail();
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool bytes(std::vector<uint8_t>& out) {
    uint32_t n = 0;
    if (!get(n) || n > in_.size() - pos_) return fail();
    out.assign(in_.begin() + pos_, in_.begin() + pos_ + n);
    pos_ += n;
    return true;
  }
  bool str(std::string& s) {
    std::vector<uint8_t> b;
    if (!bytes(b)) return false;
    s.assign(b.begin(), b.end());
    return true;
  }
  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && pos_ == in_.size(); }

 private:
  bool fail() {
    ok_ = false;
    return false;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

Status malformed(const char* what) { return Status::invalid_argument(std::string("malformed KV transfer ") + what); }

}  // namespace

std::vector<uint8_t> encode_hello(uint64_t request_id) {
  Writer w;
  w.put(request_id);
  return w.take();
}

Result<uint64_t> decode_hello(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  uint64_t id = 0;
  r.get(id);
  if (!r.at_end()) return malformed("hello");
  return id;
}

std::vector<uint8_t> encode_descriptor(uint64_t request_id, const PoolDescriptor& d) {
  Writer w;
  w.put(request_id);
  w.str(d.engine_id);
  w.put(d.model_fingerprint);
  w.put(d.kv_format_key);
  w.put<int64_t>(d.layout.n_layer);
  w.put<int64_t>(d.layout.n_kv_head);
  w.put<int64_t>(d.layout.head_dim);
  w.put<int64_t>(d.layout.block_size);
  w.put<uint8_t>(static_cast<uint8_t>(d.layout.dtype));
  w.put<uint8_t>(static_cast<uint8_t>(d.layout.layout));
  w.put<int64_t>(d.num_blocks);
  w.put<int64_t>(d.k_block_bytes);
  w.put<int64_t>(d.v_block_bytes);
  w.put<uint32_t>(static_cast<uint32_t>(d.k_base.size()));
  for (size_t l = 0; l < d.k_base.size(); ++l) {
    w.put(d.k_base[l]);
    w.put(d.v_base[l]);
  }
  w.bytes(d.rkey);
  return w.take();
}

Result<PoolDescriptor> decode_descriptor(std::span<const uint8_t> bytes, uint64_t* request_id) {
  Reader r(bytes);
  PoolDescriptor d;
  uint8_t dtype = 0, layout = 0;
  uint32_t n = 0;
  r.get(*request_id);
  r.str(d.engine_id);
  r.get(d.model_fingerprint);
  r.get(d.kv_format_key);
  r.get(d.layout.n_layer);
  r.get(d.layout.n_kv_head);
  r.get(d.layout.head_dim);
  r.get(d.layout.block_size);
  r.get(dtype);
  r.get(layout);
  r.get(d.num_blocks);
  r.get(d.k_block_bytes);
  r.get(d.v_block_bytes);
  if (!r.get(n) || n > kMaxVector) return malformed("descriptor");
  d.layout.dtype = static_cast<kernels::KvDType>(dtype);
  d.layout.layout = static_cast<kernels::KvLayoutKind>(layout);
  d.k_base.resize(n);
  d.v_base.resize(n);
  for (uint32_t l = 0; l < n && r.ok(); ++l) {
    r.get(d.k_base[l]);
    r.get(d.v_base[l]);
  }
  r.bytes(d.rkey);
  if (!r.at_end()) return malformed("descriptor");
  if (d.layout.n_layer != static_cast<int64_t>(n) || d.num_blocks < 0 || d.k_block_bytes <= 0 || d.v_block_bytes <= 0) {
    return malformed("descriptor (sizes)");
  }
  return d;
}

std::vector<uint8_t> encode_confirm(const ConfirmMessage& m) {
  Writer w;
  w.put(m.request_id);
  w.put(m.lease_id);
  w.put<uint32_t>(static_cast<uint32_t>(m.refs.size()));
  for (const BlockRef& ref : m.refs) {
    w.put(ref.block);
    w.put(ref.generation);
  }
  return w.take();
}

Result<ConfirmMessage> decode_confirm(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  ConfirmMessage m;
  uint32_t n = 0;
  r.get(m.request_id);
  r.get(m.lease_id);
  if (!r.get(n) || n > kMaxVector) return malformed("confirm");
  m.refs.resize(n);
  for (uint32_t i = 0; i < n && r.ok(); ++i) {
    r.get(m.refs[i].block);
    r.get(m.refs[i].generation);
  }
  if (!r.at_end()) return malformed("confirm");
  return m;
}

std::vector<uint8_t> encode_confirm_reply(const ConfirmReply& reply) {
  Writer w;
  w.put(reply.request_id);
  w.put<int32_t>(static_cast<int32_t>(reply.status.code()));
  w.str(reply.status.message());
  return w.take();
}

Result<ConfirmReply> decode_confirm_reply(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  ConfirmReply reply;
  int32_t code = 0;
  std::string message;
  r.get(reply.request_id);
  r.get(code);
  r.str(message);
  if (!r.at_end()) return malformed("confirm reply");
  reply.status = code == 0 ? Status::ok() : Status::error(static_cast<StatusCode>(code), message);
  return reply;
}

}  // namespace pagoda::transfer
