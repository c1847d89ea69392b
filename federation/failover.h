#ifndef GPUFED_FEDERATION_FAILOVER_H_
#define GPUFED_FEDERATION_FAILOVER_H_

// What becomes of a workload whose attempt ends through no fault of its own: its cluster was
// lost (no heartbeat past the timeout, or its agent's lease ran out), its node or GPU failed, or
// it was preempted (a drain's eviction). One rule, used by every use case that ends attempts
// (docs/domain.md#failover):
//   - a cancel was requested: CANCELLED (the user wanted it gone; nothing to restart);
//   - its retry policy retries on this end and attempts remain: back to PENDING with a reason
//     (ClusterLost, Preempted, NodeFailed) that names the cluster, the time and "attempt n of
//     m"; the scheduler places it again as attempt n + 1, on any cluster that satisfies it;
//   - otherwise it ends: LOST (PREEMPTED for a preemption).
// The transition is guarded by the cluster and the attempt, so that a late report of the
// attempt that ended, or a second declaration of the same loss, changes nothing.

#include <string>
#include <vector>

#include "federation/store.h"
#include "federation/types.h"

namespace gpufed {

struct AttemptEnded {
  AttemptEnd why = AttemptEnd::kClusterLost;
  std::string cluster;  // where the attempt ran
  Timestamp at{};       // when its end was declared
  std::string detail;   // words for the event and message: "no heartbeat for 20 s"
  std::string actor;    // recorded in the event row: "failover", "agent:<cluster>"
};

// The guarded transition that ends `w`'s current attempt (w holds capacity on end.cluster).
Transition EndAttempt(const Workload& w, const AttemptEnded& end);

// Evictions stop an attempt first and end it after (Workload::evicting): the agent is told to
// stop it, and its confirmed stop becomes EndAttempt's transition with the eviction's cause and
// message. Ending it first would let the next attempt start while this one still runs.
//
// Whether `w` has a replica on `node` (every workload does when `node` is empty).
bool RunsOnNode(const Workload& w, const std::string& node);

// A drain's evictions: each of `held` (holding capacity on `cluster`; with `node` set, only
// those with a replica there) that may retry after a preemption, with no cancel pending and no
// eviction already.
std::vector<WorkloadStore::Eviction> DrainEvictions(const std::string& cluster,
                                                    const std::string& node,
                                                    const std::vector<Workload>& held,
                                                    const std::string& message);
// The evictions `cluster`'s inventory calls for: each of `held` (on that cluster) with a replica
// on a node the inventory no longer has, or on a GPU it no longer has or reports unhealthy, and
// with no cancel pending. Cause kNodeFailure whatever the retry policy: the work cannot be
// running properly there, and EndAttempt requeues or ends it.
std::vector<WorkloadStore::Eviction> FailedHardwareEvictions(const Cluster& cluster,
                                                             const std::vector<Workload>& held);

// "2026-11-25T06:40:00Z": how reasons and messages name a moment.
std::string FormatTime(Timestamp t);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_FAILOVER_H_
