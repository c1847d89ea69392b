#ifndef GPUFED_SIM_HEADROOM_H_
#define GPUFED_SIM_HEADROOM_H_

// How much of the cluster any policy could allocate in a snapshot replay: an upper bound from a
// counting argument, so that every table shows the distance to the best possible
// (docs/simulator.md#headroom).
//
// A GPU share above 500 milli ("large") cannot share its GPU with another large share, so it
// leaves a sliver of 1000 - milli that only shares of at most that size can fill. For any
// threshold t, the slivers of at most t left by placed large shares, less everything the whole
// arrival stream asks for in shares of at most t, stay free to the end: a lower bound on free
// capacity, so an upper bound on allocation. Which large shares count:
//   - the policy-independent bound: every large share of the pods that arrive before requested
//     GPUs reach the cluster's capacity ("the prefix"). It holds for any run that places all of
//     them. A policy may pass it by failing some: once no GPU has room for a large share, later
//     ones fail, and a policy that filled GPUs so that none has room never pays their slivers.
//     Runs report how many of the prefix's large shares they failed.
//   - the run's own bound: only the prefix's large shares the run placed. It always holds for
//     that run.
//
// Thread safety: stateless functions.

#include <cstdint>
#include <vector>

#include "sim/openb.h"

namespace gpufed::sim {

struct Headroom {
  double allocation_bound = 1;  // the bound on the allocation ratio, 0..1
  uint64_t stranded_milli = 0;  // capacity that stays free, at least (0: no bound below 1)
  uint32_t threshold = 0;       // the t that gives it (milli)
  uint64_t large_shares = 0;    // large shares in the prefix
  uint64_t prefix_pods = 0;     // pods in the prefix: arrivals[0, prefix_pods)
};

// `arrivals` are indices into `pods` in arrival order; `capacity_milli` the cluster's GPUs x 1000.
// With `failed` (by arrival position, at least prefix long), the large shares it marks do not
// count: the run's own bound.
Headroom SliverBound(const std::vector<OpenbPod>& pods, const std::vector<uint32_t>& arrivals,
                     uint64_t capacity_milli, const std::vector<bool>* failed = nullptr);

// Whether `pod` is a large share (its GPU can hold no other large share).
inline bool IsLargeShare(const OpenbPod& pod) { return pod.SharesGpu() && pod.gpu_milli > 500; }

}  // namespace gpufed::sim

#endif  // GPUFED_SIM_HEADROOM_H_
