#include "federation/agent_registry.h"

#include <utility>

namespace gpufed {

void AgentLink::Assign(const std::vector<Workload>& workloads) {
  if (workloads.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    for (const Workload& w : workloads) assigned_.insert(w.id);
  }
  channel_->SendAssignments(workloads);
}

void AgentLink::Expect(const std::vector<WorkloadId>& ids) {
  absl::MutexLock lock(&mu_);
  assigned_.insert(ids.begin(), ids.end());
}

void AgentLink::Cancel(const std::vector<WorkloadId>& ids) {
  if (!ids.empty()) channel_->SendCancels(ids);
}

bool AgentLink::IsAssigned(WorkloadId id) const {
  absl::MutexLock lock(&mu_);
  return assigned_.contains(id);
}

void AgentLink::Forget(WorkloadId id) {
  absl::MutexLock lock(&mu_);
  assigned_.erase(id);
}

bool AgentLink::HeartbeatWriteDue(MonotonicTime now, std::chrono::nanoseconds every) {
  absl::MutexLock lock(&mu_);
  if (heartbeat_written_ && now - last_heartbeat_write_ < every) return false;
  heartbeat_written_ = true;
  last_heartbeat_write_ = now;
  return true;
}

void AgentRegistry::Seed(const std::vector<std::string>& clusters) {
  const MonotonicTime now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  for (const std::string& c : clusters) {
    Entry& e = clusters_[c];
    if (e.last_heard == MonotonicTime{}) e.last_heard = now;
  }
}

void AgentRegistry::Attach(const std::shared_ptr<AgentLink>& link) {
  std::shared_ptr<AgentLink> old;
  const MonotonicTime now = clock_->Monotonic();
  {
    absl::MutexLock lock(&mu_);
    Entry& e = clusters_[link->cluster()];
    old = std::exchange(e.link, link);
    e.last_heard = now;
    e.reported_lost = false;
  }
  if (old && old != link)
    old->Close(AgentChannel::CloseReason::kReplaced,
               "another agent stream registered for this cluster");
}

void AgentRegistry::Detach(const AgentLink* link) {
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(link->cluster());
  if (it != clusters_.end() && it->second.link.get() == link) it->second.link.reset();
}

void AgentRegistry::Heard(const std::string& cluster) {
  const MonotonicTime now = clock_->Monotonic();
  absl::MutexLock lock(&mu_);
  Entry& e = clusters_[cluster];
  e.last_heard = now;
  e.reported_lost = false;
}

std::shared_ptr<AgentLink> AgentRegistry::LinkOf(const std::string& cluster) const {
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  return it == clusters_.end() ? nullptr : it->second.link;
}

void AgentRegistry::Dispatch(const std::vector<Workload>& placed) {
  absl::flat_hash_map<std::string, std::vector<Workload>> by_cluster;
  for (const Workload& w : placed) by_cluster[w.assignment.cluster].push_back(w);
  for (auto& [cluster, workloads] : by_cluster) {
    if (std::shared_ptr<AgentLink> link = LinkOf(cluster)) link->Assign(workloads);
  }
}

void AgentRegistry::SendCancel(const std::string& cluster, WorkloadId id) {
  // An agent not connected learns of the cancel when it registers again.
  if (std::shared_ptr<AgentLink> link = LinkOf(cluster)) link->Cancel({id});
}

void AgentRegistry::Forget(const std::string& cluster, WorkloadId id) {
  if (std::shared_ptr<AgentLink> link = LinkOf(cluster)) link->Forget(id);
}

void AgentRegistry::ForgetAnywhere(WorkloadId id) {
  std::vector<std::shared_ptr<AgentLink>> links;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [cluster, e] : clusters_) {
      if (e.link) links.push_back(e.link);
    }
  }
  for (const auto& link : links) link->Forget(id);
}

void AgentRegistry::Fence(const std::string& cluster, uint64_t epoch) {
  std::shared_ptr<AgentLink> stale;
  {
    absl::MutexLock lock(&mu_);
    auto it = clusters_.find(cluster);
    if (it == clusters_.end() || !it->second.link || it->second.link->epoch() >= epoch) return;
    stale = std::exchange(it->second.link, nullptr);
  }
  stale->Close(AgentChannel::CloseReason::kFenced,
               "the cluster was declared lost and moved to a new epoch; register again");
}

void AgentRegistry::Remove(const std::string& cluster) {
  std::shared_ptr<AgentLink> open;
  {
    absl::MutexLock lock(&mu_);
    auto it = clusters_.find(cluster);
    if (it == clusters_.end()) return;
    open = std::move(it->second.link);
    clusters_.erase(it);
  }
  if (open != nullptr) open->Close(AgentChannel::CloseReason::kRevoked, "the cluster was deleted");
}

std::vector<std::string> AgentRegistry::CloseCredential(int64_t token_id) {
  std::vector<std::shared_ptr<AgentLink>> closed;
  std::vector<std::string> out;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [cluster, e] : clusters_) {
      if (e.link == nullptr || token_id == 0 || e.link->token_id() != token_id) continue;
      closed.push_back(std::exchange(e.link, nullptr));
      out.push_back(cluster);
    }
  }
  for (const std::shared_ptr<AgentLink>& link : closed) {
    link->Close(AgentChannel::CloseReason::kRevoked, "credential revoked");
  }
  return out;
}

void AgentRegistry::CloseCluster(const std::string& cluster) {
  std::shared_ptr<AgentLink> closed;
  {
    absl::MutexLock lock(&mu_);
    auto it = clusters_.find(cluster);
    if (it == clusters_.end()) return;
    closed = std::exchange(it->second.link, nullptr);
  }
  if (closed != nullptr) {
    closed->Close(AgentChannel::CloseReason::kRevoked, "cluster credentials revoked");
  }
}

std::vector<std::string> AgentRegistry::TakeTimedOut(MonotonicTime now,
                                                     std::chrono::nanoseconds timeout) {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (auto& [cluster, e] : clusters_) {
    if (!e.reported_lost && now - e.last_heard > timeout) {
      e.reported_lost = true;
      e.link.reset();  // a frozen agent that wakes must register again
      out.push_back(cluster);
    }
  }
  return out;
}

void AgentRegistry::Unreport(const std::string& cluster) {
  absl::MutexLock lock(&mu_);
  if (auto it = clusters_.find(cluster); it != clusters_.end()) it->second.reported_lost = false;
}

bool AgentRegistry::IsCurrent(const AgentLink& link) const {
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(link.cluster());
  return it != clusters_.end() && it->second.link.get() == &link;
}

int AgentRegistry::connected() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [cluster, e] : clusters_) n += e.link ? 1 : 0;
  return n;
}

}  // namespace gpufed
