// UcxAgent: UCX set-up and tear-down, the progress thread, the server side (handshake and
// confirms) and the UCX callbacks. Pulls (the client side) are in ucx_pull.cpp.
#include <arpa/inet.h>
#include <netinet/in.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "core/check.h"
#include "transfer/ucx_agent_impl.h"

namespace pagoda::transfer {

namespace {

Status ucx_error(const std::string& what, ucs_status_t s) {
  return Status::unavailable("UCX " + what + ": " + ucs_status_string(s) +
                             " (check UCX_TLS / UCX_NET_DEVICES; see README, P/D disaggregation)");
}

// What `print` writes to a FILE (UCX's introspection prints only to streams); "" if none opens.
std::string printed_by(const std::function<void(FILE*)>& print) {
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (out == nullptr) return "";
  print(out);
  std::fclose(out);
  std::string printed(text, size);
  std::free(text);
  return printed;
}

// UCX_TLS as `config` holds it (its environment's, or as modified), e.g. "tcp,self" or "all".
std::string configured_tls(const ucp_config_t* config) {
  const std::string printed =
      printed_by([&](FILE* out) { ucp_config_print(config, out, nullptr, UCS_CONFIG_PRINT_CONFIG); });
  const size_t at = printed.find("UCX_TLS=");
  if (at == std::string::npos) return "all";
  const size_t end = printed.find('\n', at);
  return printed.substr(at + 8, (end == std::string::npos ? printed.size() : end) - at - 8);
}

// Whether a UCX_TLS value can select posix/sysv: "all", an exclusion list ("^tcp"), or one
// that names sm/shm/mm/posix/sysv.
bool may_use_shared_memory(const std::string& tls) {
  if (tls.empty() || tls == "all" || tls[0] == '^') return true;
  size_t begin = 0;
  while (begin <= tls.size()) {
    size_t end = tls.find(',', begin);
    if (end == std::string::npos) end = tls.size();
    const std::string name = tls.substr(begin, end - begin);
    if (name == "sm" || name == "shm" || name == "mm" || name == "posix" || name == "sysv") return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace

std::string rma_transports(ucp_ep_h ep) {
  // ucp_ep_print_info names each lane ("lane[3]:  1:tcp/lo.0 md[1] -> ... rma_bw#0 wireup") and
  // lists the lanes gets use ("get[1]: 0..<bcopy>..(inf)"). The transports of those lanes, else
  // (no get lines) of the rma_bw lanes. Checked on UCX 1.13.
  const std::string info = printed_by([&](FILE* out) { ucp_ep_print_info(ep, out); });
  std::map<int, std::string> lane_tl;
  std::vector<int> get_lanes, bw_lanes;
  size_t begin = 0;
  while (begin < info.size()) {
    size_t end = info.find('\n', begin);
    if (end == std::string::npos) end = info.size();
    const std::string line = info.substr(begin, end - begin);
    begin = end + 1;
    if (const size_t at = line.find("lane["); at != std::string::npos) {
      const int lane = std::atoi(line.c_str() + at + 5);
      // "N:tl/dev.I" is the first word with a '/' before "->".
      const size_t arrow = line.find("->"), slash = line.find('/');
      if (slash == std::string::npos || (arrow != std::string::npos && slash > arrow)) continue;
      const size_t colon = line.rfind(':', slash);
      const size_t from = colon == std::string::npos ? 0 : colon + 1;
      const size_t to = line.find_first_of(" .", slash);
      lane_tl[lane] = line.substr(from, (to == std::string::npos ? line.size() : to) - from);
      if (line.find("rma_bw", arrow == std::string::npos ? 0 : arrow) != std::string::npos) bw_lanes.push_back(lane);
    } else if (const size_t g = line.find("get["); g != std::string::npos) {
      get_lanes.push_back(std::atoi(line.c_str() + g + 4));
    }
  }
  std::string found;
  for (int lane : get_lanes.empty() ? bw_lanes : get_lanes) {
    auto it = lane_tl.find(lane);
    if (it == lane_tl.end() || found.find(it->second) != std::string::npos) continue;
    found += (found.empty() ? "" : " ") + it->second;
  }
  return found;
}

Result<std::unique_ptr<UcxAgent>> UcxAgent::create(const UcxAgentConfig& config, PoolMemory memory,
                                                   LeaseTable* leases, const Clock& clock, const Logger& logger) {
  in_addr addr{};
  if (inet_pton(AF_INET, config.host.c_str(), &addr) != 1) {
    return Status::invalid_argument("KV transfer host must be an IPv4 address, not '" + config.host + "'");
  }
  if (config.port < 0 || config.port > 65535) return Status::invalid_argument("KV transfer port out of range");
  if (memory.region == nullptr || memory.region_bytes == 0) return Status::invalid_argument("no KV pool to register");
  auto agent = std::make_unique<UcxAgentImpl>(config, std::move(memory), leases, clock, logger);
  PAGODA_RETURN_IF_ERROR(agent->init());
  return std::unique_ptr<UcxAgent>(std::move(agent));
}

UcxAgentImpl::UcxAgentImpl(const UcxAgentConfig& config, PoolMemory memory, LeaseTable* leases, const Clock& clock,
                           const Logger& logger)
    : config_(config), memory_(std::move(memory)), leases_(leases), clock_(clock), logger_(logger) {}

Status UcxAgentImpl::init() {
  ucp_config_t* ucp_config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &ucp_config);
  if (s != UCS_OK) return ucx_error("config", s);
  auto modify = [&](const std::string& name, const std::string& value) {
    s = ucp_config_modify(ucp_config, name.c_str(), value.c_str());
    if (s != UCS_OK) ucp_config_release(ucp_config);
    return s == UCS_OK ? Status::ok() : ucx_error("setting UCX_" + name + "=" + value, s);
  };
  bool own_error_handling = false;
  for (const auto& [name, value] : config_.ucx_options) {
    PAGODA_RETURN_IF_ERROR(modify(name, value));
    own_error_handling |= name.find("ERROR_HANDLING") != std::string::npos;
  }
  // Every endpoint here asks for peer failure handling (a dead peer must fail a pull, not hang
  // it), and UCX 1.13 leaves its shared-memory transports (posix, sysv) out of such endpoints
  // unless their own error handling is on (UCX_POSIX_/UCX_SYSV_ERROR_HANDLING, off by default;
  // "MM_ERROR_HANDLING" is their common name for ucp_config_modify): without it
  // UCX_TLS=sm,self,tcp moved every byte of the gets over tcp. With it the gets take the
  // sysv/posix lanes (PullResult::rma_transports says which; only control messages stay on tcp)
  // and a peer's death is seen by UCX's keepalive on them. Only when the transports include
  // shared memory (else UCX warns that the setting is invalid), and not over the caller's own.
  if (!own_error_handling && may_use_shared_memory(configured_tls(ucp_config))) {
    PAGODA_RETURN_IF_ERROR(modify("MM_ERROR_HANDLING", "y"));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_AM;
  s = ucp_init(&params, ucp_config, &context_);
  ucp_config_release(ucp_config);
  if (s != UCS_OK) return ucx_error("init", s);

  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = memory_.region;
  mp.length = memory_.region_bytes;
  s = ucp_mem_map(context_, &mp, &memh_);
  if (s != UCS_OK) return ucx_error("registering the KV pool", s);
  void* rkey = nullptr;
  size_t rkey_size = 0;
  s = ucp_rkey_pack(context_, memh_, &rkey, &rkey_size);
  if (s != UCS_OK) return ucx_error("packing the pool's rkey", s);
  memory_.descriptor.rkey.assign(static_cast<uint8_t*>(rkey), static_cast<uint8_t*>(rkey) + rkey_size);
  ucp_rkey_buffer_release(rkey);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // the progress thread makes every call
  s = ucp_worker_create(context_, &wp, &worker_);
  if (s != UCS_OK) return ucx_error("worker", s);
  const MessageId ids[] = {MessageId::kHello, MessageId::kDescriptor, MessageId::kConfirm, MessageId::kConfirmReply};
  for (size_t i = 0; i < handlers_.size(); ++i) {
    const MessageId id = ids[i];
    handlers_[i] = {this, id};
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = static_cast<unsigned>(id);
    hp.cb = &UcxAgentImpl::on_am;
    hp.arg = &handlers_[i];
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    s = ucp_worker_set_am_recv_handler(worker_, &hp);
    if (s != UCS_OK) return ucx_error("active message handler", s);
  }

  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(config_.port));
  inet_pton(AF_INET, config_.host.c_str(), &sa.sin_addr);
  ucp_listener_params_t lp{};
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = reinterpret_cast<const sockaddr*>(&sa);
  lp.sockaddr.addrlen = sizeof(sa);
  lp.conn_handler.cb = &UcxAgentImpl::on_conn_request;
  lp.conn_handler.arg = this;
  s = ucp_listener_create(worker_, &lp, &listener_);
  if (s != UCS_OK) return ucx_error("listening on " + config_.host + ":" + std::to_string(config_.port), s);
  ucp_listener_attr_t la{};
  la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  s = ucp_listener_query(listener_, &la);
  if (s != UCS_OK) return ucx_error("listener address", s);
  port_ = ntohs(reinterpret_cast<const sockaddr_in*>(&la.sockaddr)->sin_port);
  thread_ = std::thread([this] { run(); });
  return Status::ok();
}

UcxAgentImpl::~UcxAgentImpl() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (listener_ != nullptr) ucp_listener_destroy(listener_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

UcxAgentStats UcxAgentImpl::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void UcxAgentImpl::run() {
  int64_t last_event_ns = 0;
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      stopping = stopping_;
      for (auto& op : inbox_) ops_.emplace(op->id, std::move(op));
      inbox_.clear();
    }
    if (stopping) break;
    const bool worked = progress_once();
    const int64_t now = clock_.now_ns();
    if (worked || !ops_.empty()) last_event_ns = now;
    // Spin while work is in flight (or just was: a peer's gets are served by this thread on
    // tcp); otherwise poll every millisecond.
    if (now - last_event_ns > 5'000'000) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(1), [&] { return stopping_ || !inbox_.empty(); });
    }
  }
  // Fail what is queued or running; the endpoints' force-close completes every get in flight.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& op : inbox_) ops_.emplace(op->id, std::move(op));
    inbox_.clear();
  }
  for (auto& [id, op] : ops_) {
    if (op->status.is_ok()) op->status = Status::unavailable("the KV transfer agent is shutting down");
  }
  shutdown_endpoints();
}

bool UcxAgentImpl::progress_once() {
  events_ = false;
  unsigned n = 0;
  while (ucp_worker_progress(worker_) != 0) ++n;
  accept_pending();
  std::vector<Message> messages = std::move(messages_);
  messages_.clear();
  for (const Message& m : messages) on_message(m.id, m.bytes, m.reply_ep);
  std::vector<Reply> replies = std::move(replies_);
  replies_.clear();
  // Replies to an endpoint that failed meanwhile are dropped (the peer's op times out).
  std::erase_if(replies, [&](const Reply& r) {
    for (const auto& [ep, status] : ep_errors_) {
      if (ep == r.ep) return true;
    }
    return false;
  });
  handle_ep_errors();
  for (Reply& r : replies) send(r.ep, r.id, std::move(r.bytes), false);
  start_ops();
  reap_dead_peers();
  sends_.remove_if([](const Send& s) { return s.done; });
  std::erase_if(closing_, [](ucs_status_ptr_t r) {
    if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
    ucp_request_free(r);
    return true;
  });
  return n > 0 || events_ || !replies.empty() || !messages.empty();
}

void UcxAgentImpl::accept_pending() {
  for (ucp_conn_request_h request : conn_requests_) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLER |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.conn_request = request;
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxAgentImpl::on_ep_error;
    ep.err_handler.arg = this;
    ucp_ep_h h = nullptr;
    const ucs_status_t s = ucp_ep_create(worker_, &ep, &h);
    if (s != UCS_OK) {
      logger_.warn(std::string("KV transfer: could not accept a peer: ") + ucs_status_string(s));
      continue;
    }
    server_eps_.push_back(h);
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.peers_connected;
  }
  conn_requests_.clear();
}

void UcxAgentImpl::send(ucp_ep_h ep, MessageId id, std::vector<uint8_t> bytes, bool reply) {
  Send& s = sends_.emplace_back();
  s.bytes = std::move(bytes);
  ucp_request_param_t rp{};
  rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS;
  rp.cb.send = &UcxAgentImpl::on_send_done;
  rp.user_data = &s;
  rp.flags = reply ? UCP_AM_SEND_FLAG_REPLY : 0;
  const ucs_status_ptr_t p =
      ucp_am_send_nbx(ep, static_cast<unsigned>(id), nullptr, 0, s.bytes.data(), s.bytes.size(), &rp);
  if (!UCS_PTR_IS_PTR(p)) s.done = true;  // done at once (or failed: the peer's error path reports it)
}

void UcxAgentImpl::on_send_done(void* request, ucs_status_t, void* user_data) {
  static_cast<Send*>(user_data)->done = true;
  ucp_request_free(request);
}

void UcxAgentImpl::on_conn_request(ucp_conn_request_h request, void* arg) {
  static_cast<UcxAgentImpl*>(arg)->conn_requests_.push_back(request);
}

void UcxAgentImpl::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  auto* self = static_cast<UcxAgentImpl*>(arg);
  self->events_ = true;
  self->ep_errors_.emplace_back(ep, status);  // handled by the loop, outside UCX's callback
}

ucs_status_t UcxAgentImpl::on_am(void* arg, const void*, size_t, void* data, size_t length,
                                 const ucp_am_recv_param_t* param) {
  const Handler* handler = static_cast<const Handler*>(arg);
  UcxAgentImpl* self = handler->self;
  self->events_ = true;
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0) return UCS_OK;  // never this large: dropped
  const ucp_ep_h reply_ep = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) != 0 ? param->reply_ep : nullptr;
  const auto* bytes = static_cast<const uint8_t*>(data);
  self->messages_.push_back({handler->id, std::vector<uint8_t>(bytes, bytes + length), reply_ep});
  return UCS_OK;
}

}  // namespace pagoda::transfer
