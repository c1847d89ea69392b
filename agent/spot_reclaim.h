#ifndef GPUFED_AGENT_SPOT_RECLAIM_H_
#define GPUFED_AGENT_SPOT_RECLAIM_H_

// Simulated spot reclaims (docs/agent.md#spot-reclaims-simulated): the pieces of the agent's
// schedule that need no thread, so that they are tested alone. The agent (agent.h) runs the
// schedule.
//
// Thread safety: stateless functions.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "federation/clock.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::agent {

// Every `every` (zero: never) the provider takes back every spot node for `duration`.
struct SpotReclaimSchedule {
  absl::Duration every = absl::ZeroDuration();
  absl::Duration duration = absl::ZeroDuration();  // --spot-reclaim-for

  [[nodiscard]] bool enabled() const { return every > absl::ZeroDuration(); }
};

// OK when disabled (every zero, duration zero or not), or when every is finite and
// 0 < duration < every (the nodes are back before the next reclaim is due). INVALID_ARGUMENT
// naming the flag otherwise.
absl::Status ValidateSpotReclaimSchedule(const SpotReclaimSchedule& schedule);

// Reclaims are due at origin + k * every, k = 1, 2, ...: the first one due strictly after
// `after`. (A reclaim whose nodes came back late, past the next slot, skips that slot rather
// than taking them again the moment they return.) `every` must be > 0.
MonotonicTime NextSpotReclaim(MonotonicTime origin, absl::Duration every, MonotonicTime after);

// The names of `inventory`'s spot nodes (label gpufed.io/capacity-type: spot), in inventory
// order. Capacity a cluster's declaration makes spot by default is not seen here: the agent
// knows only its nodes' labels.
std::vector<std::string> SpotNodes(const v1::Inventory& inventory);

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_SPOT_RECLAIM_H_
