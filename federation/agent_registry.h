#ifndef GPUFED_FEDERATION_AGENT_REGISTRY_H_
#define GPUFED_FEDERATION_AGENT_REGISTRY_H_

// Which agent connection speaks for which cluster, what each was handed, and when each cluster
// was last heard from. Plain C++: the transport supplies an AgentChannel per connection.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "federation/clock.h"
#include "federation/ports.h"
#include "federation/types.h"

namespace gpufed {

// One registered agent connection: its channel and the work handed to it. An agent reports
// only on work the server handed to its connection (the fence); everything else it says is
// acknowledged and ignored. Thread-safe.
class AgentLink {
 public:
  // `token_id`: the API token the agent registered with (0: none).
  AgentLink(Cluster cluster, std::shared_ptr<AgentChannel> channel, int64_t token_id = 0)
      : cluster_(std::move(cluster)), channel_(std::move(channel)), token_id_(token_id) {}

  const std::string& cluster() const { return cluster_.info.name; }
  const ClusterInfo& info() const { return cluster_.info; }
  uint64_t epoch() const { return cluster_.epoch; }
  int64_t token_id() const { return token_id_; }

  // Sends `workloads` and remembers them as handed to this connection.
  void Assign(const std::vector<Workload>& workloads);
  // Remembers `ids` as handed to this connection without sending anything (the agent already
  // has them, or they are re-sent through Assign).
  void Expect(const std::vector<WorkloadId>& ids);
  void Cancel(const std::vector<WorkloadId>& ids);
  bool IsAssigned(WorkloadId id) const;
  void Forget(WorkloadId id);
  void Close(AgentChannel::CloseReason reason, const std::string& why) {
    channel_->Close(reason, why);
  }
  AgentChannel& channel() { return *channel_; }

  // Heartbeats are written to the store at most this often (the store needs them coarsely).
  // Returns true when one is due at `now`, and notes it as written.
  bool HeartbeatWriteDue(MonotonicTime now, std::chrono::nanoseconds every);

 private:
  const Cluster cluster_;
  const std::shared_ptr<AgentChannel> channel_;
  const int64_t token_id_;
  mutable absl::Mutex mu_;
  absl::flat_hash_set<WorkloadId> assigned_ ABSL_GUARDED_BY(mu_);
  MonotonicTime last_heartbeat_write_ ABSL_GUARDED_BY(mu_){};
  bool heartbeat_written_ ABSL_GUARDED_BY(mu_) = false;
};

// Thread-safe. Lock order: the registry's mutex is never held while calling into a link.
class AgentRegistry {
 public:
  explicit AgentRegistry(const Clock* clock) : clock_(clock) {}

  // Clusters known at start; each gets a full heartbeat timeout to reconnect.
  void Seed(const std::vector<std::string>& clusters);

  // Makes `link` its cluster's connection; an older one for the cluster is closed.
  void Attach(const std::shared_ptr<AgentLink>& link);
  // Forgets `link` if it is still its cluster's connection.
  void Detach(const AgentLink* link);
  void Heard(const std::string& cluster);

  // Hands committed placements to their clusters' connections (one not connected gets them
  // when its agent registers again).
  void Dispatch(const std::vector<Workload>& placed);
  void SendCancel(const std::string& cluster, WorkloadId id);
  // The workload ended: its cluster's agent may no longer report on it.
  void Forget(const std::string& cluster, WorkloadId id);
  // The workload left whatever cluster held it (it went back to PENDING).
  void ForgetAnywhere(WorkloadId id);
  // The cluster moved on to `epoch` (it was declared lost): a connection registered under an
  // older epoch no longer speaks for it and is closed; its agent registers again and learns
  // the new epoch and what to stop.
  void Fence(const std::string& cluster, uint64_t epoch);
  // The cluster was deleted: forgets it (it is never reported timed out), and closes a
  // connection still open (kRevoked: the agent may not come back for it).
  void Remove(const std::string& cluster);
  // Closes every connection registered with API token `token_id` (it was revoked); each
  // cluster's agent must register again, with another credential. Returns the clusters.
  std::vector<std::string> CloseCredential(int64_t token_id);
  // Closes `cluster`'s connection, if it has one (its credentials were revoked).
  void CloseCluster(const std::string& cluster);

  // Clusters not heard from for longer than `timeout` at `now` and not already reported; each
  // is reported once until it is heard from again. A reported cluster's connection no longer
  // speaks for it (IsCurrent turns false): its agent must register again, at the epoch the
  // server moves on to when it marks the cluster unreachable.
  std::vector<std::string> TakeTimedOut(MonotonicTime now, std::chrono::nanoseconds timeout);
  // The loss of a cluster TakeTimedOut reported could not be committed: report it again on the
  // next call (unless it is heard from meanwhile).
  void Unreport(const std::string& cluster);

  // Whether `link` is still its cluster's connection (not replaced, detached or timed out).
  bool IsCurrent(const AgentLink& link) const;

  int connected() const;

 private:
  struct Entry {
    std::shared_ptr<AgentLink> link;
    MonotonicTime last_heard{};
    bool reported_lost = false;
  };
  std::shared_ptr<AgentLink> LinkOf(const std::string& cluster) const;

  const Clock* const clock_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Entry> clusters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_AGENT_REGISTRY_H_
