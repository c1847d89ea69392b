#include "sim/trace_pool.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "federation/gpu_catalog.h"

namespace gpufed::sim {

uint64_t TraceModelMemoryMib(absl::string_view model) {
  // The trace's own spellings of catalogue models.
  if (model == "V100M16") model = "V100-16GB";
  if (model == "V100M32") model = "V100-32GB";
  std::optional<GpuModel> known = FindGpuModel(model);
  return known ? known->memory_mib : 0;
}

Cluster ClusterOf(const std::vector<OpenbNode>& nodes) {
  Cluster cluster;
  cluster.info.name = kTraceCluster;
  cluster.info.provider = "trace";
  cluster.state = ClusterState::kReady;
  cluster.nodes.reserve(nodes.size());
  for (const OpenbNode& row : nodes) {
    NodeInfo node;
    node.name = row.sn;
    node.cpu_millis = row.cpu_milli;
    node.memory_mib = row.memory_mib;
    const uint64_t memory = TraceModelMemoryMib(row.model);
    node.gpus.reserve(row.gpus);
    for (uint32_t i = 0; i < row.gpus; ++i) {
      GpuInfo gpu;
      gpu.uuid = absl::StrCat(row.sn, "-gpu", i);
      gpu.index = i;
      gpu.model = row.model;
      gpu.memory_mib = memory;
      gpu.healthy = true;
      node.gpus.push_back(std::move(gpu));
    }
    cluster.nodes.push_back(std::move(node));
  }
  return cluster;
}

WorkloadSpec SpecOf(const OpenbPod& pod) {
  WorkloadSpec spec;
  spec.tenant = "trace";
  spec.project = "trace";
  spec.name = pod.name;
  spec.replicas = 1;
  if (pod.num_gpu == 0) {
    spec.gpus_per_replica = 0;
  } else if (pod.SharesGpu()) {
    spec.gpus_per_replica = 1;
    spec.gpu_milli = pod.gpu_milli;
  } else {
    spec.gpus_per_replica = pod.num_gpu;
  }
  spec.gpu_models = pod.gpu_spec;
  spec.cpu_millis = pod.cpu_milli;
  spec.memory_mib = pod.memory_mib;
  return spec;
}

}  // namespace gpufed::sim
