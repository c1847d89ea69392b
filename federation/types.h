#ifndef GPUFED_FEDERATION_TYPES_H_
#define GPUFED_FEDERATION_TYPES_H_

// The nouns of the domain (DESIGN.md §4) as plain structs. No gRPC, protobuf or SQL here:
// api/ converts to and from protos, storage/ to and from rows.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace gpufed {

using Timestamp = std::chrono::system_clock::time_point;

// Workload id: the PostgreSQL sequence value; shown to users as decimal digits.
using WorkloadId = int64_t;

enum class WorkloadState {
  kUnspecified = 0,
  kPending = 1,
  kAdmitted = 2,
  kPlaced = 3,
  kRunning = 4,
  kSucceeded = 5,
  kFailed = 6,
  kCancelled = 7,
  kPreempted = 8,
  kLost = 9,
};

// "PENDING", "RUNNING", ... (the names stored in PostgreSQL and shown to people).
absl::string_view StateName(WorkloadState state);
std::optional<WorkloadState> ParseState(absl::string_view name);
bool IsTerminal(WorkloadState state);
// PLACED or RUNNING: the workload holds capacity on a cluster.
bool HoldsCapacity(WorkloadState state);

enum class WorkloadClass { kUnspecified = 0, kTraining, kInference, kBatch, kInteractive };
absl::string_view ClassName(WorkloadClass c);
std::optional<WorkloadClass> ParseClass(absl::string_view name);

enum class Topology { kNone = 0, kSameNode, kSameNvlinkDomain, kSameRack };
absl::string_view TopologyName(Topology t);
std::optional<Topology> ParseTopology(absl::string_view name);

enum class SimOutcome { kSucceed = 0, kFail };

struct RunSpec {
  std::string image;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  SimOutcome sim_outcome = SimOutcome::kSucceed;
  int sim_exit_code = 0;

  bool operator==(const RunSpec&) const = default;
};

// What a user asks for; immutable once submitted.
struct WorkloadSpec {
  std::string tenant;
  std::string project;
  std::string name;
  std::string idempotency_key;  // empty: no deduplication
  WorkloadClass workload_class = WorkloadClass::kUnspecified;
  int32_t priority = 0;
  uint32_t replicas = 1;
  uint32_t gpus_per_replica = 1;
  std::vector<std::string> gpu_models;  // allowed models; empty: any
  uint64_t min_gpu_memory_mib = 0;
  Topology topology = Topology::kNone;
  int64_t estimated_duration_ms = 0;
  RunSpec run;

  uint32_t TotalGpus() const { return replicas * gpus_per_replica; }
  bool operator==(const WorkloadSpec&) const = default;
};

struct ReplicaAssignment {
  std::string node;
  std::vector<std::string> gpu_uuids;
  std::vector<uint32_t> gpu_indices;  // node-local, same order as gpu_uuids

  bool operator==(const ReplicaAssignment&) const = default;
};

// Workload -> cluster (+ epoch) -> per replica the node and GPUs.
struct Assignment {
  std::string cluster;
  uint64_t epoch = 0;
  std::vector<ReplicaAssignment> replicas;

  bool empty() const { return cluster.empty(); }
  bool operator==(const Assignment&) const = default;
};

struct Workload {
  WorkloadId id = 0;
  WorkloadSpec spec;
  WorkloadState state = WorkloadState::kPending;
  std::string pending_reason;
  Assignment assignment;
  bool cancel_requested = false;
  int32_t exit_code = 0;
  std::string message;
  Timestamp create_time{};
  Timestamp update_time{};
  std::optional<Timestamp> start_time;
  std::optional<Timestamp> end_time;
  uint64_t version = 0;
};

// A committed state change, as Watch streams it.
struct WorkloadEvent {
  Workload workload;  // after the change
  WorkloadState from = WorkloadState::kUnspecified;
  WorkloadState to = WorkloadState::kUnspecified;
  Timestamp time{};
};

// ---- Inventory (reported by agents) ----

struct GpuInfo {
  std::string uuid;
  uint32_t index = 0;  // node-local CUDA ordinal
  std::string model;   // catalogue name, e.g. "H100-80GB"
  uint64_t memory_mib = 0;
  std::string nvlink_domain;  // unique within the cluster; empty: no NVLink peers
  int32_t numa_node = 0;
  std::string pcie_switch;
  bool mig_capable = false;
  bool healthy = true;

  bool operator==(const GpuInfo&) const = default;
};

struct NodeInfo {
  std::string name;
  std::string rack;
  std::string block;
  uint64_t cpu_millis = 0;
  uint64_t memory_mib = 0;
  std::map<std::string, std::string> labels;
  bool schedulable = true;
  std::vector<GpuInfo> gpus;

  bool operator==(const NodeInfo&) const = default;
};

struct ClusterInfo {
  std::string name;
  std::string provider;
  std::string region;
  std::string zone;
  std::string jurisdiction;
  std::vector<std::string> compliance_labels;

  bool operator==(const ClusterInfo&) const = default;
};

enum class ClusterState { kUnspecified = 0, kReady, kDegraded, kUnreachable, kDraining };
absl::string_view ClusterStateName(ClusterState s);
std::optional<ClusterState> ParseClusterState(absl::string_view name);

// A cluster as the store holds it.
struct Cluster {
  ClusterInfo info;
  ClusterState state = ClusterState::kReady;
  uint64_t epoch = 1;  // bumped when the cluster is declared lost; fences stale agents
  std::optional<Timestamp> last_heartbeat;
  std::vector<NodeInfo> nodes;
};

// ---- Tenancy ----

struct Tenant {
  std::string name;
  std::string display_name;
  Timestamp create_time{};
};

struct Project {
  std::string tenant;
  std::string name;
  Timestamp create_time{};
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_TYPES_H_
