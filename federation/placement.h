#ifndef GPUFED_FEDERATION_PLACEMENT_H_
#define GPUFED_FEDERATION_PLACEMENT_H_

#include <optional>
#include <string>

#include "federation/pool.h"
#include "federation/types.h"

namespace gpufed {

struct PlacementDecision {
  // Set when the whole gang fits now.
  std::optional<Assignment> assignment;
  // When it does not fit: why, in words a person can act on.
  std::string reason;
  // True when no cluster could hold it even if it were empty: waiting will not help.
  bool never_fits = false;
};

// Scheduler v0: best-fit gang placement. Every replica's GPUs sit on one node; all replicas sit in
// one cluster (all or nothing) and, if the spec asks, on one node / NVLink domain / rack. Among
// all clusters and groups that hold the gang, picks the one leaving the fewest eligible GPUs free
// on the nodes it touches (tightest fit), which keeps whole nodes free for big gangs. Only READY
// clusters take new work. Deterministic: ties go to the first cluster by name, then node order.
// Does not modify the pool.
PlacementDecision PlaceBestFit(const Pool& pool, const WorkloadSpec& spec);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_PLACEMENT_H_
