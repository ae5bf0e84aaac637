// UcxAgentImpl: the UcxAgent of transfer/ucx_agent.h (include that one). Everything below
// `// Progress thread only` is touched by the progress thread alone; the inbox and the stats
// are shared under mutex_.
#pragma once

#include <ucp/api/ucp.h>

#include <array>
#include <condition_variable>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "transfer/ucx_agent.h"
#include "transfer/wire.h"

namespace pagoda::transfer {

// The transports of `ep`'s RMA lanes as UCX prints them ("sysv/memory posix/memory", "tcp/lo").
std::string rma_transports(ucp_ep_h ep);

class UcxAgentImpl final : public UcxAgent {
 public:
  UcxAgentImpl(const UcxAgentConfig& config, PoolMemory memory, LeaseTable* leases, const Clock& clock,
               const Logger& logger);
  ~UcxAgentImpl() override;
  Status init();  // context, registration, worker, listener, thread

  int port() const override { return port_; }
  const std::string& host() const override { return config_.host; }
  const PoolDescriptor& descriptor() const override { return memory_.descriptor; }
  PullResult pull(const PullRequest& request) override;
  UcxAgentStats stats() const override;

 private:
  // A peer we pull from (client side), one endpoint each.
  struct Peer {
    std::string key;              // "host:port"
    ucp_ep_h ep = nullptr;
    ucp_rkey_h rkey = nullptr;
    enum class State { kHello, kReady, kFailed } state = State::kHello;
    Status failure;
    uint64_t hello_id = 0;
    PoolDescriptor remote;
    std::string rma_transports;   // set when ready: the transports UCX chose for its gets
    int num_ops = 0;              // ops referring to it
    ucs_status_ptr_t close_request = nullptr;  // after the failure: the force-close in progress
  };
  struct Op {
    uint64_t id = 0;
    PullRequest request;
    std::promise<PullResult> done;
    Peer* peer = nullptr;
    enum class Stage { kWaitPeer, kGets, kConfirm } stage = Stage::kWaitPeer;
    int64_t outstanding = 0;      // gets in flight
    Status status;                // first failure
    int64_t deadline_ns = 0, start_ns = 0;
    int64_t bytes = 0, num_gets = 0;
    bool timed_out = false;
    bool replied = false;         // the confirm reply came
  };
  struct Send {                   // a control message in flight: its bytes live until completion
    std::vector<uint8_t> bytes;
    bool done = false;
  };
  struct Message {                // received by an AM callback, handled by the loop
    MessageId id;
    std::vector<uint8_t> bytes;
    ucp_ep_h reply_ep;
  };
  struct Reply {                  // produced by a message, sent by the loop
    ucp_ep_h ep;
    MessageId id;
    std::vector<uint8_t> bytes;
  };

  void run();
  bool progress_once();           // true when something happened
  void accept_pending();
  void start_ops();
  void advance(Op& op);
  void finish(Op& op);
  void issue_gets(Op& op);
  Peer* peer_for(const std::string& host, int port);
  void fail_peer(Peer& peer, Status status);
  void send(ucp_ep_h ep, MessageId id, std::vector<uint8_t> bytes, bool reply);
  void shutdown_endpoints();
  ucs_status_ptr_t close_ep(ucp_ep_h ep);
  void handle_ep_errors();
  void reap_dead_peers();
  uint64_t next_op_id_ = 1;       // under mutex_
  // UCX callbacks (static trampolines in ucx_agent.cpp).
  static void on_conn_request(ucp_conn_request_h request, void* arg);
  static void on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status);
  static ucs_status_t on_am(void* arg, const void* header, size_t header_length, void* data, size_t length,
                            const ucp_am_recv_param_t* param);
  void on_message(MessageId id, std::span<const uint8_t> bytes, ucp_ep_h reply_ep);
  static void on_get_done(void* request, ucs_status_t status, void* user_data);
  static void on_send_done(void* request, ucs_status_t status, void* user_data);

  struct Handler {                // the arg of one active message handler
    UcxAgentImpl* self = nullptr;
    MessageId id = MessageId::kHello;
  };

  UcxAgentConfig config_;
  PoolMemory memory_;
  std::array<Handler, 4> handlers_;
  LeaseTable* leases_;
  const Clock& clock_;
  const Logger& logger_;
  int port_ = 0;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_listener_h listener_ = nullptr;
  ucp_mem_h memh_ = nullptr;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::unique_ptr<Op>> inbox_;
  bool stopping_ = false;
  UcxAgentStats stats_;
  std::thread thread_;

  // Progress thread only.
  std::vector<ucp_conn_request_h> conn_requests_;
  std::vector<std::pair<ucp_ep_h, ucs_status_t>> ep_errors_;  // seen by callbacks, handled by the loop
  std::vector<ucs_status_ptr_t> closing_;                     // server endpoints being closed
  std::vector<ucp_ep_h> server_eps_;
  std::map<std::string, std::unique_ptr<Peer>> peers_;
  std::vector<std::unique_ptr<Peer>> dead_peers_;
  std::unordered_map<uint64_t, std::unique_ptr<Op>> ops_;
  std::list<Send> sends_;
  std::vector<Message> messages_;
  std::vector<Reply> replies_;
  uint64_t next_request_id_ = 1;
  bool events_ = false;           // a callback ran during the last progress call
};

}  // namespace pagoda::transfer
