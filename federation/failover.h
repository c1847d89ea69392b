#ifndef GPUFED_FEDERATION_FAILOVER_H_
#define GPUFED_FEDERATION_FAILOVER_H_

// What becomes of a workload whose attempt ends through no fault of its own: its cluster was
// lost (no heartbeat past the timeout, or its agent's lease ran out), and later its node failed
// or it was preempted. One rule, used by every use case that ends attempts
// (docs/domain.md#failover):
//   - a cancel was requested: CANCELLED (the user wanted it gone; nothing to restart);
//   - its retry policy retries on this end and attempts remain: back to PENDING with a reason
//     that names the cluster, the time and "attempt n of m"; the scheduler places it again as
//     attempt n + 1, on any cluster that satisfies it;
//   - otherwise it ends: LOST (PREEMPTED for a preemption).
// The transition is guarded by the cluster and the attempt, so that a late report of the
// attempt that ended, or a second declaration of the same loss, changes nothing.

#include <string>

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

// "2026-11-25T06:40:00Z": how reasons and messages name a moment.
std::string FormatTime(Timestamp t);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_FAILOVER_H_
