#ifndef GPUFED_TESTS_UNIT_FEDERATION_PLACEMENT_FIXTURES_H_
#define GPUFED_TESTS_UNIT_FEDERATION_PLACEMENT_FIXTURES_H_

// Small hand-made pools and helpers for the placement engine's tests: nodes and GPUs spelled out
// so that the right answer can be worked out by hand.

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/placement.h"
#include "federation/pool.h"
#include "federation/types.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed::testing {

// `count` GPUs named "GPU-<node>-<i>", all in NVLink domain `domain` (empty: no NVLink peers).
inline std::vector<GpuInfo> Gpus(const std::string& node, int count, const std::string& model,
                                 const std::string& domain = "", bool mig_capable = false,
                                 uint64_t memory_mib = 81559) {
  std::vector<GpuInfo> gpus;
  for (int g = 0; g < count; ++g) {
    GpuInfo gpu;
    gpu.uuid = Uuid(node, g);
    gpu.index = static_cast<uint32_t>(g);
    gpu.model = model;
    gpu.memory_mib = memory_mib;
    gpu.nvlink_domain = domain;
    gpu.mig_capable = mig_capable;
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

inline NodeInfo Node(const std::string& name, std::vector<GpuInfo> gpus,
                     const std::string& rack = "", const std::string& block = "",
                     uint64_t cpu_millis = 0, uint64_t memory_mib = 0) {
  NodeInfo node;
  node.name = name;
  node.rack = rack;
  node.block = block;
  node.cpu_millis = cpu_millis;
  node.memory_mib = memory_mib;
  node.gpus = std::move(gpus);
  return node;
}

inline Cluster ClusterOf(const std::string& name, std::vector<NodeInfo> nodes) {
  Cluster c;
  c.info.name = name;
  c.info.provider = "onprem";
  c.state = ClusterState::kReady;
  c.nodes = std::move(nodes);
  return c;
}

// Whole GPUs `gpus` of `node` for one replica.
inline Assignment WholeOn(const std::string& cluster, const std::string& node,
                          const std::vector<int>& gpus) {
  Assignment a;
  a.cluster = cluster;
  a.replicas.push_back(WholeGpus(node, {gpus.begin(), gpus.end()}));
  return a;
}

inline ReplicaAssignment ShareReplica(const std::string& node, int gpu, uint32_t milli) {
  ReplicaAssignment r;
  r.node = node;
  r.gpu_uuids = {Uuid(node, gpu)};
  r.gpu_indices = {static_cast<uint32_t>(gpu)};
  r.gpu_milli = milli;
  return r;
}

inline Assignment ShareOn(const std::string& cluster, const std::string& node, int gpu,
                          uint32_t milli) {
  Assignment a;
  a.cluster = cluster;
  a.replicas.push_back(ShareReplica(node, gpu, milli));
  return a;
}

inline ReplicaAssignment MigReplica(const std::string& node, int gpu, const std::string& profile,
                                    int start) {
  ReplicaAssignment r;
  r.node = node;
  r.gpu_uuids = {Uuid(node, gpu)};
  r.gpu_indices = {static_cast<uint32_t>(gpu)};
  r.mig_profile = profile;
  r.mig_start = start;
  return r;
}

inline WorkloadSpec Spec(uint32_t replicas, uint32_t gpus) {
  WorkloadSpec s;
  s.tenant = "acme";
  s.project = "p";
  s.name = "job";
  s.replicas = replicas;
  s.gpus_per_replica = gpus;
  return s;
}

inline WorkloadSpec ShareSpec(uint32_t milli, uint32_t replicas = 1) {
  WorkloadSpec s = Spec(replicas, 1);
  s.gpu_milli = milli;
  return s;
}

inline WorkloadSpec MigSpec(const std::string& profile, uint32_t replicas = 1) {
  WorkloadSpec s = Spec(replicas, 1);
  s.mig_profile = profile;
  return s;
}

inline PlacementOptions Options(const std::string& policy, uint64_t seed = 1,
                                bool random_ties = false) {
  PlacementOptions o;
  o.policy = policy;
  o.seed = seed;
  o.random_ties = random_ties;
  return o;
}

inline PlacementDecision PlaceWith(const Pool& pool, const WorkloadSpec& spec,
                                   const PlacementOptions& options, WorkloadId id = 0,
                                   const MigQueue& queue = {}) {
  auto engine = PlacementEngine::Create(options);
  EXPECT_OK(engine);
  return (*engine)->Place(pool, spec, id, queue);
}

inline HostDemand HostOf(const WorkloadSpec& spec) { return {spec.cpu_millis, spec.memory_mib}; }

// The nodes an assignment's replicas sit on.
inline std::set<std::string> NodesOf(const Assignment& a) {
  std::set<std::string> nodes;
  for (const ReplicaAssignment& r : a.replicas) nodes.insert(r.node);
  return nodes;
}

inline const GpuInfo& GpuOf(const Pool& pool, const std::string& cluster, const std::string& node,
                            int gpu) {
  return pool.FindCluster(cluster)->FindNode(node)->info.gpus[gpu];
}
inline const GpuSlot& SlotOf(const Pool& pool, const std::string& cluster, const std::string& node,
                             int gpu) {
  return pool.FindCluster(cluster)->FindNode(node)->gpus[gpu];
}

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_UNIT_FEDERATION_PLACEMENT_FIXTURES_H_
