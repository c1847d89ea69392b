#ifndef GPUFED_FEDERATION_PENDING_REASON_H_
#define GPUFED_FEDERATION_PENDING_REASON_H_

// Why a workload waits, as data: a code (the nearest blocker) plus the figures that go with it.
// The words a person reads are made from these in one place, RenderReason. The API carries both
// the code (a CamelCase name, like a Kubernetes condition's `reason`) and the words (its
// `message`); the scheduler decides whether a reason changed by comparing codes and figures.
// The codes and their figures are listed in docs/placement.md ("Pending reasons").

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"

namespace gpufed {

// Stable: the names (ReasonCodeName) are stored in PostgreSQL and sent to clients. Add codes,
// never rename one.
enum class ReasonCode {
  kNone = 0,  // not waiting, or nothing known yet
  // Waiting will not help (PendingReason::never_fits):
  kNoClusters,                  // no cluster is registered at all
  kNoMatchingGpu,               // no GPU anywhere has the model and memory asked for
  kMigProfileUnavailable,       // no MIG-capable GPU offers the profile
  kGpuCountUnsatisfiable,       // no node (or NVLink domain) has that many matching GPUs
  kHostCpuUnsatisfiable,        // no node with matching GPUs has the CPU
  kHostMemoryUnsatisfiable,     // no node with matching GPUs has the host memory
  kHostResourcesUnsatisfiable,  // CPU and memory together do not fit any node (or group)
  kTopologyUnsatisfiable,       // the gang does not fit the topology group it must share
  // Waiting will help:
  kNoReadyCluster,      // it would fit, but no cluster is ready
  kHostResourcesBusy,   // the GPUs are there; the CPU and memory with them are taken
  kMigPartitioningOff,  // no free MIG instance, and the engine may not repartition
  kNothingFree,         // nothing that matches is free
  kGpusBusy,            // whole GPUs are free, but not enough on one node (or domain)
  kGpuShareBusy,        // no GPU has the share free
  kMigInstanceBusy,     // no free MIG instance and no idle GPU to repartition
  kGangBusy,            // no topology group holds all replicas now
  // Set by the scheduler or the store, not by the placement engine:
  kQueueDepth,         // beyond the per-cycle window: others are considered first
  kPlacementConflict,  // internal: the chosen placement conflicted with the pool
  kNotLoaded,          // Explain only: this server's scheduler has not loaded the pool
  kRequeued,           // returned to PENDING by a transition, with the actor's words
  kClusterLost,        // returned to PENDING: the cluster it ran on was lost (it may retry)
  kPreempted,          // returned to PENDING: its attempt was stopped to free its place
  kNodeFailed,         // returned to PENDING: a node or GPU it ran on failed
  kUnclassified,       // stored before reasons had codes (or by a newer server): words only
  // Quotas (docs/quotas.md), set by the scheduler:
  kQuotaLimit,       // admitting it would take its tenant or project past a limit
  kReclaiming,       // owned: borrowed work is stopping to free its guaranteed capacity
  kKeptForReclaim,   // borrowed: the capacity it would take is being reclaimed by an owner
  kReborrowBackoff,  // borrowed: its tenant may not borrow this resource again yet
  // No starvation (docs/quotas.md#no-starvation), set by the scheduler:
  kReserved,  // waited past the bound: GPUs are held for it as they free
  // Routing (docs/routing.md), set by the router; waiting will not help (a rule or a cluster's
  // declaration must change):
  kNoClusterAllowed,  // the workload's hard rules leave no cluster that offers what it needs
};

// "WaitingForCapacity"-style names: "NoClusters", "GpusBusy", ...; "" for kNone.
absl::string_view ReasonCodeName(ReasonCode code);
// The code with that name; nullopt for a name this build does not know. "" is kNone.
std::optional<ReasonCode> ParseReasonCode(absl::string_view name);
// True for the codes no amount of waiting resolves (kNoClusters .. kTopologyUnsatisfiable, and
// kNoClusterAllowed).
bool NeverFits(ReasonCode code);
// True for the quota codes (kQuotaLimit .. kReborrowBackoff): the scheduler's admission and
// reclaim verdicts, which placement alone cannot reproduce.
bool IsQuotaReason(ReasonCode code);
std::ostream& operator<<(std::ostream& os, ReasonCode code);

// The names of the figures. Which code carries which is listed in docs/placement.md.
namespace figure {
inline constexpr absl::string_view kNeeds = "needs";             // text: what the workload asks for
inline constexpr absl::string_view kNotReady = "not_ready";      // text: "a (unreachable), ..."
inline constexpr absl::string_view kPoolModels = "pool_models";  // text: models present
inline constexpr absl::string_view kProfile = "profile";         // text: MIG profile
inline constexpr absl::string_view kMigModels = "mig_models";    // text: models offering it
inline constexpr absl::string_view kLevel = "level";           // text: "node", "NVLink domain", ..
inline constexpr absl::string_view kGpus = "gpus";             // GPUs one replica needs
inline constexpr absl::string_view kLargest = "largest";       // most found in one place
inline constexpr absl::string_view kWhere = "where";           // text: that place
inline constexpr absl::string_view kCpuMillis = "cpu_millis";  // CPU one replica needs
inline constexpr absl::string_view kMemoryMib = "memory_mib";  // host memory one replica needs
inline constexpr absl::string_view kFit = "fit";               // replicas that fit in one group
inline constexpr absl::string_view kReplicas = "replicas";     // replicas asked for
inline constexpr absl::string_view kUnit = "unit";  // text: "GPU", "milli-GPU" or a MIG profile
inline constexpr absl::string_view kFree = "free";  // free units (of `unit`) that match
inline constexpr absl::string_view kFreeByModel = "free_by_model";  // text: "2 H100-80GB, .."
inline constexpr absl::string_view kClusters = "clusters";          // clusters with something free
inline constexpr absl::string_view kMilli = "milli";                // milli-GPU one replica needs
inline constexpr absl::string_view kMost = "most";  // most milli-GPU free on one GPU
inline constexpr absl::string_view kPartitioning = "partitioning";  // 1: may repartition
inline constexpr absl::string_view kConsidered = "considered";      // workloads per cycle
inline constexpr absl::string_view kText = "text";        // text: words given from elsewhere
inline constexpr absl::string_view kCluster = "cluster";  // text: a cluster's name
inline constexpr absl::string_view kLostAt = "lost_at";   // text: RFC 3339 time, UTC
inline constexpr absl::string_view kAttempt = "attempt";  // the attempt that ended
inline constexpr absl::string_view kMaxAttempts = "max_attempts";  // its retry policy's limit
inline constexpr absl::string_view kEndedAt = "ended_at";          // text: RFC 3339 time, UTC
inline constexpr absl::string_view kHolder = "holder";      // text: "tenant acme", "project a/b"
inline constexpr absl::string_view kResource = "resource";  // text: a quota resource
inline constexpr absl::string_view kHeld = "held";          // milli held of it now
inline constexpr absl::string_view kLimit = "limit";        // milli: the quota's limit
inline constexpr absl::string_view kAsked = "asked";        // milli the workload asks of it
inline constexpr absl::string_view kUntil = "until";        // text: RFC 3339 time, UTC
inline constexpr absl::string_view kReservedGpus = "reserved";  // GPUs held for it now
inline constexpr absl::string_view kTargetGpus = "target";      // GPUs it will be placed on
inline constexpr absl::string_view kRule = "rule";  // text: "in jurisdiction eu", a hard rule
}  // namespace figure

struct ReasonFigure {
  std::string name;
  std::variant<int64_t, std::string> value;

  bool operator==(const ReasonFigure&) const = default;
};

struct PendingReason {
  ReasonCode code = ReasonCode::kNone;
  // Sorted by name, each name once (Set keeps it so), so that == compares like with like.
  std::vector<ReasonFigure> figures;

  PendingReason() = default;
  explicit PendingReason(ReasonCode c) : code(c) {}

  // Adds or replaces a figure; returns *this for chaining.
  PendingReason& Set(absl::string_view name, int64_t value);
  PendingReason& Set(absl::string_view name, std::string value);
  // The figure's value; 0 / "" when absent or of the other kind.
  [[nodiscard]] int64_t Int(absl::string_view name) const;
  [[nodiscard]] const std::string& Text(absl::string_view name) const;
  [[nodiscard]] bool Has(absl::string_view name) const;

  [[nodiscard]] bool empty() const { return code == ReasonCode::kNone; }
  [[nodiscard]] bool never_fits() const { return NeverFits(code); }
  // Same code and same figures: the same reason, whatever the words.
  bool operator==(const PendingReason&) const = default;
};

// The one place a reason becomes words: "waiting for capacity: needs 4 GPUs; 2 free GPUs (2
// H100-80GB) across 1 cluster, but no node has 4 free (largest: 2 on c1/n1)". "" for kNone.
// A figure the code needs but the reason lacks reads as 0 or "".
std::string RenderReason(const PendingReason& reason);

// A reason carrying words that came from elsewhere (kRequeued, kUnclassified).
PendingReason ReasonWithText(ReasonCode code, std::string text);

// How a newly found reason differs from the stored one. The scheduler writes a new code at
// once, and new figures only now and then: figures move with every capacity change, and
// rewriting thousands of rows each time would cost more than the scheduling itself.
enum class ReasonChange { kNone, kFigures, kCode };
ReasonChange CompareReasons(const PendingReason& stored, const PendingReason& found);

// "GpusBusy: waiting for capacity: ..." (for logs and test failure messages).
std::ostream& operator<<(std::ostream& os, const PendingReason& reason);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_PENDING_REASON_H_
