#ifndef GPUFED_TESTS_UNIT_FEDERATION_TEST_POOLS_H_
#define GPUFED_TESTS_UNIT_FEDERATION_TEST_POOLS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/pool.h"
#include "federation/types.h"

namespace gpufed::testing {

// The UUID these pools give GPU `g` of `node`.
inline std::string Uuid(const std::string& node, int g) {
  return absl::StrCat("GPU-", node, "-", g);
}

// A cluster of `nodes` identical nodes with `gpus` GPUs each; one NVLink domain per node when
// `nvlink` is set.
inline Cluster MakeCluster(const std::string& name, int nodes, int gpus, const std::string& model,
                           uint64_t memory_mib = 81559, bool nvlink = true) {
  Cluster c;
  c.info.name = name;
  c.info.provider = "onprem";
  c.state = ClusterState::kReady;
  for (int n = 0; n < nodes; ++n) {
    NodeInfo node;
    node.name = absl::StrCat(name, "-n", n);
    node.rack = absl::StrCat("r", n / 2);
    for (int g = 0; g < gpus; ++g) {
      GpuInfo gpu;
      gpu.uuid = Uuid(node.name, g);
      gpu.index = g;
      gpu.model = model;
      gpu.memory_mib = memory_mib;
      gpu.nvlink_domain = nvlink ? absl::StrCat(node.name, "-nvl") : "";
      node.gpus.push_back(gpu);
    }
    c.nodes.push_back(node);
  }
  return c;
}

// Whole GPUs of one node for one replica (GPU i of `node` is Uuid(node, i)).
inline ReplicaAssignment WholeGpus(const std::string& node, std::vector<uint32_t> indices) {
  ReplicaAssignment r;
  r.node = node;
  for (uint32_t g : indices) r.gpu_uuids.push_back(Uuid(node, static_cast<int>(g)));
  r.gpu_indices = std::move(indices);
  return r;
}

inline WorkloadSpec Gang(uint32_t replicas, uint32_t gpus, std::vector<std::string> models = {}) {
  WorkloadSpec s;
  s.tenant = "acme";
  s.project = "p";
  s.name = "job";
  s.replicas = replicas;
  s.gpus_per_replica = gpus;
  s.gpu_models = std::move(models);
  return s;
}

// A batch workload of tenant "acme", project "research" (what the scheduler and store tests
// create): `replicas` replicas of `gpus` whole GPUs of any model.
inline WorkloadSpec Gpus(const std::string& name, uint32_t gpus, uint32_t replicas = 1) {
  WorkloadSpec s;
  s.tenant = "acme";
  s.project = "research";
  s.name = name;
  s.workload_class = WorkloadClass::kBatch;
  s.replicas = replicas;
  s.gpus_per_replica = gpus;
  return s;
}

// The one node of the "dgx" cluster those tests register: "dgx-01" with 8 H100-80GB, GPU g
// being Uuid("dgx-01", g) at index g; no NVLink domain.
inline NodeInfo DgxNode() {
  NodeInfo node;
  node.name = "dgx-01";
  for (uint32_t g = 0; g < 8; ++g) {
    GpuInfo gpu;
    gpu.uuid = Uuid(node.name, static_cast<int>(g));
    gpu.index = g;
    gpu.model = "H100-80GB";
    gpu.memory_mib = 81559;
    node.gpus.push_back(gpu);
  }
  return node;
}

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_UNIT_FEDERATION_TEST_POOLS_H_
