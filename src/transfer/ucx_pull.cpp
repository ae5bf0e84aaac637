// UcxAgent, client side: pulls (handshake per peer, gets per run of blocks, the confirm), the
// messages both sides receive, and endpoint failure and tear-down.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/check.h"
#include "transfer/ucx_agent_impl.h"

namespace pagoda::transfer {

PullResult UcxAgentImpl::pull(const PullRequest& request) {
  auto op = std::make_unique<Op>();
  op->request = request;
  op->start_ns = clock_.now_ns();
  op->deadline_ns = op->start_ns + static_cast<int64_t>(request.timeout_s * 1e9);
  std::future<PullResult> result = op->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return PullResult{Status::unavailable("the KV transfer agent is shutting down")};
    op->id = next_op_id_++;
    inbox_.push_back(std::move(op));
  }
  wake_.notify_all();
  return result.get();
}

UcxAgentImpl::Peer* UcxAgentImpl::peer_for(const std::string& host, int port) {
  const std::string key = host + ":" + std::to_string(port);
  auto it = peers_.find(key);
  if (it != peers_.end()) return it->second.get();
  auto peer = std::make_unique<Peer>();
  peer->key = key;
  Peer* p = peer.get();
  peers_.emplace(key, std::move(peer));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (port <= 0 || port > 65535 || inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    fail_peer(*p, Status::invalid_argument("KV transfer peer address '" + key + "' is not IPv4 host:port"));
    return p;
  }
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  ep.sockaddr.addrlen = sizeof(sa);
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = &UcxAgentImpl::on_ep_error;
  ep.err_handler.arg = this;
  const ucs_status_t s = ucp_ep_create(worker_, &ep, &p->ep);
  if (s != UCS_OK) {
    p->ep = nullptr;
    fail_peer(*p, Status::unavailable("KV transfer: cannot connect to " + key + ": " + ucs_status_string(s)));
    return p;
  }
  p->hello_id = next_request_id_++;
  send(p->ep, MessageId::kHello, encode_hello(p->hello_id), /*reply=*/true);
  return p;
}

ucs_status_ptr_t UcxAgentImpl::close_ep(ucp_ep_h ep) {
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  rp.flags = UCP_EP_CLOSE_FLAG_FORCE;  // completes every request in flight on it (with an error)
  const ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &rp);
  return UCS_PTR_IS_PTR(r) ? r : nullptr;
}

void UcxAgentImpl::fail_peer(Peer& peer, Status status) {
  if (peer.state == Peer::State::kFailed) return;
  peer.state = Peer::State::kFailed;
  peer.failure = std::move(status);
  if (peer.ep != nullptr) peer.close_request = close_ep(peer.ep);
  peer.ep = nullptr;
  auto it = peers_.find(peer.key);
  if (it != peers_.end() && it->second.get() == &peer) {  // later pulls connect afresh
    dead_peers_.push_back(std::move(it->second));
    peers_.erase(it);
  }
}

void UcxAgentImpl::handle_ep_errors() {
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> errors = std::move(ep_errors_);
  ep_errors_.clear();
  for (const auto& [ep, status] : errors) {
    bool found = false;
    for (auto& [key, peer] : peers_) {
      if (peer->ep == ep) {
        fail_peer(*peer, Status::unavailable("KV transfer peer " + key + " failed: " + ucs_status_string(status)));
        found = true;
        break;
      }
    }
    if (found) continue;
    auto it = std::find(server_eps_.begin(), server_eps_.end(), ep);
    if (it != server_eps_.end()) {
      server_eps_.erase(it);
      if (ucs_status_ptr_t r = close_ep(ep); r != nullptr) closing_.push_back(r);
    }
  }
}

void UcxAgentImpl::reap_dead_peers() {
  std::erase_if(dead_peers_, [](std::unique_ptr<Peer>& p) {
    if (p->num_ops > 0) return false;
    if (p->close_request != nullptr) {
      if (ucp_request_check_status(p->close_request) == UCS_INPROGRESS) return false;
      ucp_request_free(p->close_request);
      p->close_request = nullptr;
    }
    if (p->rkey != nullptr) ucp_rkey_destroy(p->rkey);
    return true;
  });
}

void UcxAgentImpl::start_ops() {
  for (auto it = ops_.begin(); it != ops_.end();) {
    Op& op = *it->second;
    advance(op);
    if (op.peer == nullptr) {  // finished
      it = ops_.erase(it);
    } else {
      ++it;
    }
  }
}

void UcxAgentImpl::advance(Op& op) {
  const int64_t now = clock_.now_ns();
  if (op.stage == Op::Stage::kWaitPeer) {
    if (op.peer == nullptr) {
      op.peer = peer_for(op.request.host, op.request.port);
      ++op.peer->num_ops;
    }
    if (op.peer->state == Peer::State::kFailed) {
      op.status = op.peer->failure;
      return finish(op);
    }
    if (op.peer->state == Peer::State::kHello) {
      if (now < op.deadline_ns) return;
      op.status = Status::unavailable("KV transfer: no handshake from " + op.peer->key + " in time");
      fail_peer(*op.peer, op.status);  // the next pull connects afresh
      return finish(op);
    }
    issue_gets(op);
    op.stage = Op::Stage::kGets;
  }
  if (op.stage == Op::Stage::kGets) {
    if (op.outstanding > 0) {
      if (now >= op.deadline_ns && !op.timed_out) {  // force-close: the gets complete with errors
        op.timed_out = true;
        op.status = Status::unavailable("KV transfer from " + op.peer->key + " timed out");
        fail_peer(*op.peer, op.status);
      }
      return;
    }
    if (!op.status.is_ok()) return finish(op);
    if (op.peer->state == Peer::State::kFailed) {
      op.status = op.peer->failure;
      return finish(op);
    }
    ConfirmMessage m;
    m.request_id = op.id;
    m.lease_id = op.request.lease_id;
    for (const BlockPull& b : op.request.blocks) m.refs.push_back(b.remote);
    send(op.peer->ep, MessageId::kConfirm, encode_confirm(m), /*reply=*/true);
    op.stage = Op::Stage::kConfirm;
    return;
  }
  // kConfirm
  if (op.replied) return finish(op);
  if (op.peer->state == Peer::State::kFailed) {
    op.status = op.peer->failure;
    return finish(op);
  }
  if (now >= op.deadline_ns) {
    op.status = Status::unavailable("KV transfer: no confirmation from " + op.peer->key + " in time");
    finish(op);
  }
}

void UcxAgentImpl::issue_gets(Op& op) {
  const Peer& peer = *op.peer;
  const PoolDescriptor& mine = memory_.descriptor;
  const PoolDescriptor& theirs = peer.remote;
  const auto& blocks = op.request.blocks;
  for (const BlockPull& b : blocks) {
    if (b.remote.block < 0 || b.remote.block >= theirs.num_blocks || b.local_block < 0 ||
        b.local_block >= mine.num_blocks) {
      op.status = Status::invalid_argument("KV transfer: block id out of range (remote " +
                                           std::to_string(b.remote.block) + ", local " + std::to_string(b.local_block) + ")");
      return;
    }
  }
  const uint64_t kbb = static_cast<uint64_t>(mine.k_block_bytes), vbb = static_cast<uint64_t>(mine.v_block_bytes);
  size_t i = 0;
  while (i < blocks.size() && op.status.is_ok()) {
    size_t n = 1;  // a run: consecutive ids on both sides move as one get per layer and K/V
    while (i + n < blocks.size() && blocks[i + n].remote.block == blocks[i].remote.block + static_cast<int32_t>(n) &&
           blocks[i + n].local_block == blocks[i].local_block + static_cast<int32_t>(n)) {
      ++n;
    }
    const uint64_t r0 = static_cast<uint64_t>(blocks[i].remote.block), l0 = static_cast<uint64_t>(blocks[i].local_block);
    for (int64_t l = 0; l < mine.layout.n_layer && op.status.is_ok(); ++l) {
      const uint64_t local[2] = {mine.k_base[l] + l0 * kbb, mine.v_base[l] + l0 * vbb};
      const uint64_t remote[2] = {theirs.k_base[l] + r0 * kbb, theirs.v_base[l] + r0 * vbb};
      const uint64_t len[2] = {n * kbb, n * vbb};
      for (int kv = 0; kv < 2; ++kv) {
        ucp_request_param_t rp{};
        rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_MEMH;
        rp.cb.send = &UcxAgentImpl::on_get_done;
        rp.user_data = &op;
        rp.memh = memh_;
        const ucs_status_ptr_t p = ucp_get_nbx(peer.ep, reinterpret_cast<void*>(local[kv]), len[kv], remote[kv],
                                               peer.rkey, &rp);
        if (UCS_PTR_IS_ERR(p)) {
          op.status = Status::unavailable(std::string("KV transfer get: ") + ucs_status_string(UCS_PTR_STATUS(p)));
          break;
        }
        if (UCS_PTR_IS_PTR(p)) ++op.outstanding;
        op.bytes += static_cast<int64_t>(len[kv]);
        ++op.num_gets;
      }
    }
    i += n;
  }
}

void UcxAgentImpl::on_get_done(void* request, ucs_status_t status, void* user_data) {
  Op& op = *static_cast<Op*>(user_data);
  --op.outstanding;
  if (status != UCS_OK && op.status.is_ok()) {
    op.status = Status::unavailable(std::string("KV transfer get failed: ") + ucs_status_string(status));
  }
  ucp_request_free(request);
}

void UcxAgentImpl::finish(Op& op) {
  CHECK(op.outstanding == 0);
  PullResult r;
  r.status = op.status;
  r.bytes = op.status.is_ok() ? op.bytes : 0;
  r.num_gets = op.num_gets;
  if (op.peer != nullptr) r.rma_transports = op.peer->rma_transports;
  r.seconds = static_cast<double>(clock_.now_ns() - op.start_ns) * 1e-9;
  if (op.peer != nullptr) --op.peer->num_ops;
  op.peer = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (r.status.is_ok()) {
      ++stats_.pulls_ok;
      stats_.bytes_pulled += r.bytes;
    } else {
      ++stats_.pulls_failed;
    }
  }
  op.done.set_value(std::move(r));
}

void UcxAgentImpl::on_message(MessageId id, std::span<const uint8_t> bytes, ucp_ep_h reply_ep) {
  switch (id) {
    case MessageId::kHello: {
      auto hello = decode_hello(bytes);
      if (!hello.is_ok() || reply_ep == nullptr) return;
      replies_.push_back({reply_ep, MessageId::kDescriptor, encode_descriptor(*hello, memory_.descriptor)});
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.descriptors_served;
      return;
    }
    case MessageId::kConfirm: {
      auto m = decode_confirm(bytes);
      if (!m.is_ok() || reply_ep == nullptr) return;
      ConfirmReply reply;
      reply.request_id = m->request_id;
      reply.status = leases_ != nullptr ? leases_->confirm(m->lease_id, m->refs)
                                        : Status::not_found("this instance lends no KV blocks");
      replies_.push_back({reply_ep, MessageId::kConfirmReply, encode_confirm_reply(reply)});
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.confirms_served;
      return;
    }
    case MessageId::kDescriptor: {
      uint64_t request_id = 0;
      auto d = decode_descriptor(bytes, &request_id);
      for (auto& [key, peer] : peers_) {
        if (peer->state != Peer::State::kHello || (d.is_ok() && peer->hello_id != request_id)) continue;
        if (!d.is_ok()) return fail_peer(*peer, d.status());
        Status ok = check_compatible(memory_.descriptor, *d);
        if (!ok.is_ok()) return fail_peer(*peer, ok.with_context("KV transfer refused"));
        peer->remote = std::move(d).value();
        const ucs_status_t s = ucp_ep_rkey_unpack(peer->ep, peer->remote.rkey.data(), &peer->rkey);
        if (s != UCS_OK) {
          return fail_peer(*peer, Status::unavailable(std::string("KV transfer: bad rkey from ") + key + ": " +
                                                      ucs_status_string(s)));
        }
        peer->rma_transports = rma_transports(peer->ep);
        logger_.info("KV transfer: peer " + key + " ready, gets over " + peer->rma_transports);
        peer->state = Peer::State::kReady;
        return;
      }
      return;
    }
    case MessageId::kConfirmReply: {
      auto reply = decode_confirm_reply(bytes);
      if (!reply.is_ok()) return;
      auto it = ops_.find(reply->request_id);
      if (it == ops_.end() || it->second->stage != Op::Stage::kConfirm) return;
      it->second->replied = true;
      if (!reply->status.is_ok()) it->second->status = reply->status.with_context("KV transfer refused by the peer");
      return;
    }
  }
}

void UcxAgentImpl::shutdown_endpoints() {
  std::vector<Peer*> live;
  for (auto& [key, peer] : peers_) live.push_back(peer.get());
  for (Peer* p : live) fail_peer(*p, Status::unavailable("the KV transfer agent is shutting down"));
  for (ucp_ep_h ep : server_eps_) {
    if (ucs_status_ptr_t r = close_ep(ep); r != nullptr) closing_.push_back(r);
  }
  server_eps_.clear();
  // Bounded: force-closes complete without the peer.
  const int64_t until = clock_.now_ns() + 2'000'000'000;
  for (;;) {
    ucp_worker_progress(worker_);
    handle_ep_errors();
    for (auto it = ops_.begin(); it != ops_.end();) {
      if (it->second->outstanding == 0) {
        finish(*it->second);
        it = ops_.erase(it);
      } else {
        ++it;
      }
    }
    reap_dead_peers();
    std::erase_if(closing_, [](ucs_status_ptr_t r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
    if ((ops_.empty() && dead_peers_.empty() && closing_.empty()) || clock_.now_ns() > until) break;
  }
  sends_.clear();
}

}  // namespace pagoda::transfer
