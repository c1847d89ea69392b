#ifndef GPUFED_FEDERATION_TYPES_H_
#define GPUFED_FEDERATION_TYPES_H_

// The nouns of the domain (docs/domain.md#nouns) as plain structs. No gRPC, protobuf or SQL here:
// api/ converts to and from protos, storage/ to and from rows.

#include <chrono>
#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "federation/pending_reason.h"

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
// SUCCEEDED, FAILED, CANCELLED, PREEMPTED or LOST: the workload has ended for good (a
// restartable one that is preempted or loses its cluster goes back to PENDING instead).
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

// How a node's GPUs are paid for (docs/routing.md#capacity-types). On-demand and spot are
// bought by the hour; committed capacity (owned, or reserved and already paid for) costs nothing
// more to use. Spot capacity may be reclaimed by its provider at any time: only workloads that
// tolerate it are placed there.
enum class CapacityType : uint8_t { kOnDemand = 0, kSpot = 1, kCommitted = 2 };
inline constexpr int kCapacityTypes = 3;
// "on-demand", "spot", "committed".
absl::string_view CapacityTypeName(CapacityType t);
std::optional<CapacityType> ParseCapacityType(absl::string_view name);
// The node label that says a node's capacity type ("spot", ...); nodes without it have their
// cluster's declared default.
inline constexpr absl::string_view kCapacityTypeLabel = "gpufed.io/capacity-type";
// The node labels an agent reports its GPUs' driver and CUDA versions under ("550.54.15",
// "12.4"), as nvidia-smi shows them.
inline constexpr absl::string_view kDriverVersionLabel = "gpufed.io/driver-version";
inline constexpr absl::string_view kCudaVersionLabel = "gpufed.io/cuda-version";
// A dotted version of up to three numbers below 2^20 ("550.54.15", "12.4") packed so that
// versions compare as integers (missing parts are 0); nullopt for anything else.
std::optional<uint64_t> PackVersion(absl::string_view version);

// What decides between the clusters a workload may use (docs/routing.md#objectives).
//  kPack: the tightest cluster that holds it (least free capacity first): the default, blind to
//         price and distance.
//  kCost: the lowest marginal price of the placement (committed capacity is free).
//  kLatency: the lowest round-trip time from the workload's client region.
//  kBalanced: the lowest cost_weight x price per hour + latency_weight x RTT.
enum class Objective : uint8_t { kPack = 0, kCost, kLatency, kBalanced };
absl::string_view ObjectiveName(Objective o);  // "pack", "cost", "latency", "balanced"
std::optional<Objective> ParseObjective(absl::string_view name);

// Where a workload may run and what it prefers (hard rules are never broken: at first placement,
// on every requeue and on spot recovery). Every list is empty for "any".
struct PlacementConstraints {
  std::vector<std::string> jurisdictions;      // allowed: the cluster's is one of these
  std::vector<std::string> compliance_labels;  // required: the cluster has every one
  std::vector<std::string> providers;          // allowed
  std::vector<std::string> regions;            // allowed
  std::vector<std::string> clusters;           // allowed cluster names
  std::vector<std::string> denied_clusters;    // never these
  // Most it may cost per GPU-hour, in micro-units of the price book's currency; 0: no cap.
  // Committed capacity (marginal price 0) always passes; capacity with no price never does.
  int64_t max_price_per_gpu_hour_micros = 0;
  bool spot_tolerated = false;  // may run on spot capacity
  Objective objective = Objective::kPack;
  // The region its clients are in (a name the clusters' latency tables use) and the most
  // round-trip time it accepts from there, in microseconds; 0: no bound. A bound needs a region,
  // and then a cluster with no declared RTT to that region is not allowed.
  std::string client_region;
  int64_t max_rtt_micros = 0;
  // Oldest NVIDIA driver and CUDA version it runs on ("550.54", "12.4"; empty: any), compared
  // with its nodes' kDriverVersionLabel / kCudaVersionLabel; a node that reports none fails.
  std::string min_driver_version;
  std::string min_cuda_version;

  [[nodiscard]] bool empty() const { return *this == PlacementConstraints{}; }
  bool operator==(const PlacementConstraints&) const = default;
  // clang-tidy 14 reads the literal 0 a defaulted <=> compares with as a null pointer.
  // NOLINTNEXTLINE(modernize-use-nullptr)
  auto operator<=>(const PlacementConstraints&) const = default;
};

struct RunSpec {
  std::string image;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  SimOutcome sim_outcome = SimOutcome::kSucceed;
  int sim_exit_code = 0;

  bool operator==(const RunSpec&) const = default;
};

// Whether, and how often, a workload may be started again elsewhere after an attempt ended
// through no fault of its own (docs/domain.md#retries). An attempt is one placement. The default
// is one attempt: the workload is never restarted, and ends LOST when its cluster is lost.
struct RetryPolicy {
  static constexpr uint32_t kMaxAttemptsLimit = 100;

  uint32_t max_attempts = 1;  // 1..kMaxAttemptsLimit
  bool on_cluster_lost = false;
  bool on_preemption = false;
  bool on_node_failure = false;

  bool operator==(const RetryPolicy&) const = default;
};

// Why an attempt ended through no fault of the workload.
enum class AttemptEnd { kClusterLost, kPreempted, kNodeFailure };
// "cluster_lost", "preemption", "node_failure": the retry policy's words, as stored.
absl::string_view AttemptEndName(AttemptEnd why);
std::optional<AttemptEnd> ParseAttemptEnd(absl::string_view name);

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
  // Checkpointable: the workload saves its progress this often (0: it does not), so a preemption
  // loses at most this much of its work. 0..1 year.
  int64_t checkpoint_interval_ms = 0;
  RunSpec run;
  // What one replica takes besides whole GPUs. At most one of these two is set, and then
  // gpus_per_replica is 1: a MIG instance of this profile (e.g. "3g.40gb"; the profile names the
  // product's geometry, federation/mig.h), or this share of one GPU in milli-GPUs (1..999),
  // shared with other workloads on the same GPU.
  std::string mig_profile;
  uint32_t gpu_milli = 0;
  // Host resources per replica; 0: not requested.
  uint64_t cpu_millis = 0;
  uint64_t memory_mib = 0;
  RetryPolicy retry;
  PlacementConstraints placement;

  [[nodiscard]] uint32_t TotalGpus() const { return replicas * gpus_per_replica; }
  // True when a replica takes part of one GPU (a fraction or a MIG instance).
  [[nodiscard]] bool SharesGpu() const { return gpu_milli > 0 || !mig_profile.empty(); }
  bool operator==(const WorkloadSpec&) const = default;
};

struct ReplicaAssignment {
  std::string node;
  std::vector<std::string> gpu_uuids;
  std::vector<uint32_t> gpu_indices;  // node-local, same order as gpu_uuids
  // 0: the listed GPUs are the replica's alone. Otherwise the replica holds this share of the
  // one listed GPU (milli-GPUs), next to other workloads.
  uint32_t gpu_milli = 0;
  // Set: the replica holds the MIG instance of this profile at memory slot `mig_start` on the
  // one listed GPU.
  std::string mig_profile;
  int32_t mig_start = -1;

  bool operator==(const ReplicaAssignment&) const = default;
};

// One GPU instance on a MIG-enabled GPU: a profile at a memory-slot start.
struct MigInstance {
  std::string profile;
  int start = 0;

  bool operator==(const MigInstance&) const = default;
};

// The control plane's decision to change a GPU's MIG layout (partitioning authority): made only
// for a GPU nothing runs on, carried with the assignment that needs it, applied by the agent
// before it starts the replicas. `mig_enabled` false turns MIG off (the whole GPU again).
struct Repartition {
  std::string node;
  std::string gpu_uuid;
  bool mig_enabled = false;
  std::vector<MigInstance> layout;
  std::string reason;  // why, in words: "3g.40gb for workload 17; queue wants 2x 1g.10gb"

  bool operator==(const Repartition&) const = default;
};

// Workload -> cluster (+ epoch) -> per replica the node and GPUs.
struct Assignment {
  std::string cluster;
  uint64_t epoch = 0;
  std::vector<ReplicaAssignment> replicas;
  // MIG layout changes the agent applies before starting the replicas; usually empty.
  std::vector<Repartition> repartitions;

  [[nodiscard]] bool empty() const { return cluster.empty(); }
  bool operator==(const Assignment&) const = default;
};

struct Workload {
  WorkloadId id = 0;
  WorkloadSpec spec;
  WorkloadState state = WorkloadState::kPending;
  // Why it waits (PENDING only; empty otherwise): RenderReason gives the words.
  PendingReason pending_reason;
  Assignment assignment;
  bool cancel_requested = false;
  int32_t exit_code = 0;
  std::string message;
  Timestamp create_time{};
  Timestamp update_time{};
  std::optional<Timestamp> start_time;
  std::optional<Timestamp> end_time;
  uint64_t version = 0;
  // Placements so far: 0 until first PLACED, then 1, 2, ... (each requeue and placement adds one).
  uint32_t attempts = 0;
  // Set while the server waits for the agent to confirm it stopped this attempt, which then ends
  // by this cause (EndAttempt): kPreempted for a drain's eviction, kNodeFailure for a failed node
  // or GPU. Cleared when the workload leaves PLACED/RUNNING.
  std::optional<AttemptEnd> evicting;

  // Whether an attempt that ends by `why` sends the workload back to PENDING (its policy retries
  // on that and attempts remain) rather than ending it.
  [[nodiscard]] bool MayRetry(AttemptEnd why) const;
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
  // MIG mode and the GPU instances that exist (valid for the model's geometry). A MIG-enabled
  // GPU serves only MIG requests, one workload per instance.
  bool mig_enabled = false;
  std::vector<MigInstance> mig_layout;

  bool operator==(const GpuInfo&) const = default;
};

struct NodeInfo {
  std::string name;
  std::string rack;  // fabric location: rack, and the block (pod / spine group) the rack is in
  std::string block;
  uint64_t cpu_millis = 0;
  uint64_t memory_mib = 0;
  std::map<std::string, std::string> labels;
  // As stored: false when the agent reports it so or an operator cordoned it.
  bool schedulable = true;
  // An operator's cordon (ClusterStore::SetCordon); agents never set it.
  bool cordoned = false;
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

// One line of a cluster's price book: what one unit costs per hour from `effective_from` on, until
// a later line for the same (model, profile, capacity type) takes over. Lines are never edited
// once in force, so the book keeps its history (chargeback prices each moment by the line then in
// force).
struct PriceEntry {
  std::string gpu_model;    // catalogue name, e.g. "H100-80GB"
  std::string mig_profile;  // empty: a whole GPU; else one MIG instance of this profile
  CapacityType capacity = CapacityType::kOnDemand;
  int64_t micros_per_hour = 0;  // micro-units of the currency (1 USD = 1,000,000)
  Timestamp effective_from{};

  bool operator==(const PriceEntry&) const = default;
};

// What a platform admin declares about a cluster (`gpufedctl apply`), kept apart from what its
// agent reports: a registering agent never changes it. A declared attribute replaces the agent's;
// an empty one leaves the agent's in force. A declaration may exist before its cluster registers.
struct ClusterDeclaration {
  std::string cluster;
  std::string provider;
  std::string region;
  std::string zone;
  std::string jurisdiction;
  // Set: replaces the agent's labels (an empty set declares "none").
  std::optional<std::vector<std::string>> compliance_labels;
  // Capacity type of nodes without the kCapacityTypeLabel label.
  CapacityType default_capacity = CapacityType::kOnDemand;
  std::vector<PriceEntry> prices;  // sorted by (model, profile, capacity, effective_from)
  // Round-trip time from named client regions, in microseconds.
  std::map<std::string, int64_t> rtt_micros;

  bool operator==(const ClusterDeclaration&) const = default;
};

// The agent's ClusterInfo with the admin's declaration laid over it.
ClusterInfo EffectiveInfo(const ClusterInfo& reported, const ClusterDeclaration& declared);

enum class ClusterState { kUnspecified = 0, kReady, kDegraded, kUnreachable, kDraining };
absl::string_view ClusterStateName(ClusterState s);
std::optional<ClusterState> ParseClusterState(absl::string_view name);

// A cluster as the store holds it.
struct Cluster {
  ClusterInfo info;
  ClusterState state = ClusterState::kReady;
  uint64_t epoch = 1;  // bumped when the cluster is declared lost; fences stale agents
  std::optional<Timestamp> last_heartbeat;
  // An operator's cordon: no new placements; the cluster is `draining` unless unreachable.
  bool cordoned = false;
  std::vector<NodeInfo> nodes;
  // The admin's declaration (ClusterStore::ApplyDeclarations); cluster empty when there is none.
  // `info` stays what the agent reported; EffectiveInfo combines the two.
  ClusterDeclaration declared;
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
