#include "sim/headroom.h"

#include <algorithm>

namespace gpufed::sim {

Headroom SliverBound(const std::vector<OpenbPod>& pods, const std::vector<uint32_t>& arrivals,
                     uint64_t capacity_milli, const std::vector<bool>* failed) {
  Headroom h;
  if (capacity_milli == 0) return h;
  // The prefix: pods that arrive while requested GPUs have not passed capacity.
  uint64_t requested = 0;
  std::vector<uint32_t> slivers;  // 1000 - milli of each large share in the prefix
  for (uint32_t i : arrivals) {
    const OpenbPod& pod = pods[i];
    if (requested + pod.GpuMilli() > capacity_milli) break;
    requested += pod.GpuMilli();
    const bool counted = failed == nullptr || !(*failed)[h.prefix_pods];
    ++h.prefix_pods;
    if (IsLargeShare(pod) && counted) slivers.push_back(1000 - pod.gpu_milli);
  }
  h.large_shares = slivers.size();
  // What could fill them: every share of the whole stream small enough for some sliver.
  std::vector<uint32_t> fillers;
  for (uint32_t i : arrivals) {
    const OpenbPod& pod = pods[i];
    if (pod.SharesGpu() && pod.gpu_milli < 500) fillers.push_back(pod.gpu_milli);
  }
  std::sort(slivers.begin(), slivers.end());
  std::sort(fillers.begin(), fillers.end());
  // For each threshold t (a sliver size): slivers of at most t, less fillers of at most t.
  uint64_t sliver_sum = 0;
  uint64_t filler_sum = 0;
  size_t f = 0;
  for (size_t s = 0; s < slivers.size(); ++s) {
    sliver_sum += slivers[s];
    if (s + 1 < slivers.size() && slivers[s + 1] == slivers[s]) continue;
    const uint32_t t = slivers[s];
    while (f < fillers.size() && fillers[f] <= t) filler_sum += fillers[f++];
    if (sliver_sum > filler_sum && sliver_sum - filler_sum > h.stranded_milli) {
      h.stranded_milli = sliver_sum - filler_sum;
      h.threshold = t;
    }
  }
  h.allocation_bound =
      1.0 - static_cast<double>(h.stranded_milli) / static_cast<double>(capacity_milli);
  return h;
}

}  // namespace gpufed::sim
