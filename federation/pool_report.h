#ifndef GPUFED_FEDERATION_POOL_REPORT_H_
#define GPUFED_FEDERATION_POOL_REPORT_H_

// What the active scheduler reports about its pool and queue for monitoring (the gpufed_pool_*
// and gpufed_scheduler_pending_workloads series, docs/operations.md#health-readiness-and-metrics):
// GPUs by cluster and model, how fragmented the free capacity is, and the queue by reason code.
// Plain figures; the metrics port (federation/ports.h) turns them into series.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "federation/pending_reason.h"
#include "federation/policy.h"
#include "federation/pool.h"

namespace gpufed {

// One GPU model in one cluster.
struct PoolModelReport {
  std::string cluster;
  std::string model;
  ModelCount gpus;  // total, allocated and free GPUs (Pool::CapacityOf)
  // Free capacity the typical workloads cannot use, in milli-GPUs: NodeFragmentation (FGD,
  // Weng et al., ATC '23; host memory not counted, as in the paper) summed over the cluster's
  // schedulable nodes, each node's healthy GPUs of this model without MIG taken as one view.
  double fragmented_milli = 0;
  // The free milli-GPUs the measure is taken over (same GPUs), so that fragmented_milli /
  // free_milli is the paper's fragmentation rate.
  uint64_t free_milli = 0;
};

struct PoolReport {
  // Every (cluster, model) the pool holds, by cluster name then model name.
  std::vector<PoolModelReport> models;
  // The scheduler's queue (PENDING and ADMITTED workloads) by the code of each one's latest
  // reason, in code order; codes no queued workload has are absent.
  std::vector<std::pair<ReasonCode, int64_t>> pending;
};

// The per-model figures of `pool`, fragmentation measured against `mix` (the typical workloads,
// whose model ids are `pool`'s; an empty mix measures no fragmentation). Reads every node: call
// it now and then, not per placement.
std::vector<PoolModelReport> ReportPool(const Pool& pool, const WorkloadMix& mix);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_POOL_REPORT_H_
