#ifndef GPUFED_SIM_TRACE_POOL_H_
#define GPUFED_SIM_TRACE_POOL_H_

// From openb rows to the federation's own types: the node list becomes one cluster of a Pool,
// each pod a WorkloadSpec the placement engine takes as it would take a submitted workload.
//
// Thread safety: stateless functions.

#include <string>
#include <vector>

#include "federation/pool.h"
#include "federation/types.h"
#include "sim/openb.h"

namespace gpufed::sim {

// The one cluster a trace's nodes form.
inline constexpr char kTraceCluster[] = "openb";

// One NodeInfo per row, in file order: its CPU and memory, and `gpus` GPUs of the row's model
// named "<sn>-gpu<i>", healthy, without NVLink peers (the trace does not say) and without MIG
// (the trace shares GPUs by fraction only). GPU memory comes from the catalogue
// (federation/gpu_catalog.h) when it knows the model, also under the trace's spellings
// V100M16 / V100M32; 0 otherwise (G1, G2, G3 are undisclosed). Model names are kept as the
// trace spells them so that pods' gpu_spec lists match.
Cluster ClusterOf(const std::vector<OpenbNode>& nodes);

// GPU memory per GPU of a trace model, MiB; 0 if unknown.
uint64_t TraceModelMemoryMib(absl::string_view model);

// One replica: num_gpu == 0 is CPU-only (gpus_per_replica 0), num_gpu == 1 with gpu_milli below
// 1000 a share of one GPU (gpu_milli), anything else num_gpu whole GPUs; gpu_spec becomes the
// allowed models; CPU and memory per replica as requested.
WorkloadSpec SpecOf(const OpenbPod& pod);

}  // namespace gpufed::sim

#endif  // GPUFED_SIM_TRACE_POOL_H_
