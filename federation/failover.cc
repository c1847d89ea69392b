#include "federation/failover.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"

namespace gpufed {
namespace {

absl::string_view WhatEnded(AttemptEnd why) {
  switch (why) {
    case AttemptEnd::kClusterLost:
      return "lost its cluster";
    case AttemptEnd::kPreempted:
      return "was stopped on";
    case AttemptEnd::kNodeFailure:
      return "lost its hardware on";
  }
  return "ended";
}

}  // namespace

std::string FormatTime(Timestamp t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromChrono(t), absl::UTCTimeZone());
}

Transition EndAttempt(const Workload& w, const AttemptEnded& end) {
  Transition t;
  t.id = w.id;
  t.from = w.state;
  t.on_cluster = end.cluster;
  t.at_attempt = w.attempts;
  t.actor = end.actor;
  t.time = end.at;
  const std::string what =
      absl::StrCat("attempt ", w.attempts, " of ", w.spec.retry.max_attempts, " ",
                   WhatEnded(end.why), " ", end.cluster, " at ", FormatTime(end.at),
                   end.detail.empty() ? "" : absl::StrCat(" (", end.detail, ")"));
  if (w.cancel_requested) {
    t.to = WorkloadState::kCancelled;
    t.reason = absl::StrCat("cancelled: ", what, " before its stop was confirmed");
    t.message = t.reason;
    return t;
  }
  if (w.MayRetry(end.why)) {
    t.to = WorkloadState::kPending;
    // The event row and the pending reason say why; the message is left for how it ends.
    t.reason = absl::StrCat("requeued: ", what);
    PendingReason reason;
    switch (end.why) {
      case AttemptEnd::kClusterLost:
        reason = PendingReason(ReasonCode::kClusterLost);
        reason.Set(figure::kLostAt, FormatTime(end.at));
        break;
      case AttemptEnd::kPreempted:
        reason = PendingReason(ReasonCode::kPreempted);
        reason.Set(figure::kEndedAt, FormatTime(end.at)).Set(figure::kText, end.detail);
        break;
      case AttemptEnd::kNodeFailure:
        reason = PendingReason(ReasonCode::kNodeFailed);
        reason.Set(figure::kEndedAt, FormatTime(end.at)).Set(figure::kText, end.detail);
        break;
    }
    reason.Set(figure::kCluster, end.cluster)
        .Set(figure::kAttempt, int64_t{w.attempts})
        .Set(figure::kMaxAttempts, int64_t{w.spec.retry.max_attempts});
    t.pending_reason = std::move(reason);
    return t;
  }
  t.to = end.why == AttemptEnd::kPreempted ? WorkloadState::kPreempted : WorkloadState::kLost;
  t.reason = absl::StrCat(end.why == AttemptEnd::kPreempted ? "preempted: " : "lost: ", what,
                          "; its retry policy starts no other attempt");
  t.message = t.reason;
  return t;
}

bool RunsOnNode(const Workload& w, const std::string& node) {
  return node.empty() || std::any_of(w.assignment.replicas.begin(), w.assignment.replicas.end(),
                                     [&](const ReplicaAssignment& r) { return r.node == node; });
}

std::vector<WorkloadStore::Eviction> DrainEvictions(const std::string& cluster,
                                                    const std::string& node,
                                                    const std::vector<Workload>& held,
                                                    const std::string& message) {
  std::vector<WorkloadStore::Eviction> out;
  for (const Workload& w : held) {
    if (!HoldsCapacity(w.state) || w.assignment.cluster != cluster || w.cancel_requested ||
        w.evicting || !w.MayRetry(AttemptEnd::kPreempted)) {
      continue;
    }
    if (RunsOnNode(w, node))
      out.push_back({w.id, cluster, w.attempts, AttemptEnd::kPreempted, message});
  }
  return out;
}

namespace {

// Why `replica` cannot be running properly on `nodes` (by name): "" when its node and GPUs are
// there and healthy.
std::string HardwareGone(const ReplicaAssignment& replica,
                         const absl::flat_hash_map<std::string, const NodeInfo*>& nodes) {
  auto node = nodes.find(replica.node);
  if (node == nodes.end()) {
    return absl::StrCat("node ", replica.node, " left its agent's inventory");
  }
  for (const std::string& uuid : replica.gpu_uuids) {
    const std::vector<GpuInfo>& gpus = node->second->gpus;
    auto gpu =
        std::find_if(gpus.begin(), gpus.end(), [&](const GpuInfo& g) { return g.uuid == uuid; });
    if (gpu == gpus.end()) {
      return absl::StrCat("GPU ", uuid, " left node ", replica.node, "'s inventory");
    }
    if (!gpu->healthy) return absl::StrCat("GPU ", uuid, " on node ", replica.node, " failed");
  }
  return "";
}

}  // namespace

std::vector<WorkloadStore::Eviction> FailedHardwareEvictions(const Cluster& cluster,
                                                             const std::vector<Workload>& held) {
  absl::flat_hash_map<std::string, const NodeInfo*> nodes;
  for (const NodeInfo& n : cluster.nodes) nodes[n.name] = &n;
  std::vector<WorkloadStore::Eviction> out;
  for (const Workload& w : held) {
    if (!HoldsCapacity(w.state) || w.assignment.cluster != cluster.info.name ||
        w.cancel_requested || w.evicting) {
      continue;
    }
    for (const ReplicaAssignment& r : w.assignment.replicas) {
      std::string gone = HardwareGone(r, nodes);
      if (gone.empty()) continue;
      out.push_back(
          {w.id, cluster.info.name, w.attempts, AttemptEnd::kNodeFailure, std::move(gone)});
      break;
    }
  }
  return out;
}

}  // namespace gpufed
