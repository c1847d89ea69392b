#ifndef GPUFED_API_AGENT_SERVICE_H_
#define GPUFED_API_AGENT_SERVICE_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "api/context.h"
#include "gpufed/v1/agent_service.grpc.pb.h"

namespace gpufed::api {

// The server's end of one agent stream; sends are thread-safe and never block.
class AgentSession {
 public:
  virtual ~AgentSession() = default;
  virtual void Send(v1::ServerMessage message) = 0;
  // Closes the stream (a newer stream for the same cluster took over).
  virtual void Close(const std::string& why) = 0;
};

// Which agent stream speaks for which cluster, and when each cluster was last heard from.
// Thread-safe.
class AgentHub {
 public:
  using Clock = std::chrono::steady_clock;

  // Clusters known at start; each gets a full heartbeat timeout to reconnect.
  void Seed(const std::vector<std::string>& clusters, Clock::time_point now);

  // Makes `session` the cluster's stream; an older stream for the cluster is closed.
  void Attach(const std::string& cluster, const std::shared_ptr<AgentSession>& session);
  void Detach(const std::string& cluster, const AgentSession* session);
  void Heard(const std::string& cluster, Clock::time_point now);

  // Hands committed placements to their clusters' agents (an agent that is not connected gets
  // them when it registers again).
  void Dispatch(const std::vector<Workload>& placed);
  void SendCancel(const std::string& cluster, WorkloadId id);

  // Clusters not heard from for `timeout` that were not already reported; each is reported once
  // until it is heard from again.
  std::vector<std::string> TakeTimedOut(Clock::time_point now, Clock::duration timeout);

  int connected() const;

 private:
  struct Entry {
    std::shared_ptr<AgentSession> session;
    Clock::time_point last_heard{};
    bool reported_lost = false;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> clusters_ ABSL_GUARDED_BY(mu_);
};

// gpufed.v1.AgentService: one bidirectional stream per agent (DESIGN.md §7).
class AgentServiceImpl final : public v1::AgentService::CallbackService {
 public:
  // How often agents must heartbeat; the server declares a cluster unreachable after the
  // heartbeat timeout (server flag).
  AgentServiceImpl(ApiContext context, std::chrono::milliseconds heartbeat_interval)
      : ctx_(std::move(context)), heartbeat_interval_(heartbeat_interval) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage>* Connect(
      grpc::CallbackServerContext* context) override;

 private:
  ApiContext ctx_;
  std::chrono::milliseconds heartbeat_interval_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_AGENT_SERVICE_H_
