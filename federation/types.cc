#include "federation/types.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace gpufed {
namespace {

template <typename E, size_t N>
std::optional<E> Lookup(const std::array<std::pair<E, absl::string_view>, N>& table,
                        absl::string_view name) {
  for (const auto& [value, text] : table) {
    if (text == name) return value;
  }
  return std::nullopt;
}

template <typename E, size_t N>
absl::string_view NameOf(const std::array<std::pair<E, absl::string_view>, N>& table, E value) {
  for (const auto& [v, text] : table) {
    if (v == value) return text;
  }
  return "UNSPECIFIED";
}

constexpr std::array<std::pair<WorkloadState, absl::string_view>, 9> kStates{{
    {WorkloadState::kPending, "PENDING"},
    {WorkloadState::kAdmitted, "ADMITTED"},
    {WorkloadState::kPlaced, "PLACED"},
    {WorkloadState::kRunning, "RUNNING"},
    {WorkloadState::kSucceeded, "SUCCEEDED"},
    {WorkloadState::kFailed, "FAILED"},
    {WorkloadState::kCancelled, "CANCELLED"},
    {WorkloadState::kPreempted, "PREEMPTED"},
    {WorkloadState::kLost, "LOST"},
}};

constexpr std::array<std::pair<WorkloadClass, absl::string_view>, 4> kClasses{{
    {WorkloadClass::kTraining, "training"},
    {WorkloadClass::kInference, "inference"},
    {WorkloadClass::kBatch, "batch"},
    {WorkloadClass::kInteractive, "interactive"},
}};

constexpr std::array<std::pair<Topology, absl::string_view>, 4> kTopologies{{
    {Topology::kNone, "none"},
    {Topology::kSameNode, "same_node"},
    {Topology::kSameNvlinkDomain, "same_nvlink_domain"},
    {Topology::kSameRack, "same_rack"},
}};

constexpr std::array<std::pair<ClusterState, absl::string_view>, 4> kClusterStates{{
    {ClusterState::kReady, "ready"},
    {ClusterState::kDegraded, "degraded"},
    {ClusterState::kUnreachable, "unreachable"},
    {ClusterState::kDraining, "draining"},
}};

constexpr std::array<std::pair<CapacityType, absl::string_view>, 3> kCapacityTypeNames{{
    {CapacityType::kOnDemand, "on-demand"},
    {CapacityType::kSpot, "spot"},
    {CapacityType::kCommitted, "committed"},
}};

constexpr std::array<std::pair<Objective, absl::string_view>, 4> kObjectives{{
    {Objective::kPack, "pack"},
    {Objective::kCost, "cost"},
    {Objective::kLatency, "latency"},
    {Objective::kBalanced, "balanced"},
}};

}  // namespace

absl::string_view CapacityTypeName(CapacityType t) { return NameOf(kCapacityTypeNames, t); }
std::optional<CapacityType> ParseCapacityType(absl::string_view name) {
  return Lookup(kCapacityTypeNames, name);
}

absl::string_view ObjectiveName(Objective o) { return NameOf(kObjectives, o); }
std::optional<Objective> ParseObjective(absl::string_view name) {
  return Lookup(kObjectives, name);
}

std::optional<uint64_t> PackVersion(absl::string_view version) {
  uint64_t packed = 0;
  int parts = 0;
  for (absl::string_view part : absl::StrSplit(version, '.')) {
    uint32_t n = 0;
    if (++parts > 3 || part.empty() || part.size() > 7 ||
        !std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !absl::SimpleAtoi(part, &n) || n >= (1U << 20)) {
      return std::nullopt;
    }
    packed = (packed << 20) | n;
  }
  if (parts == 0) return std::nullopt;
  for (; parts < 3; ++parts) packed <<= 20;
  return packed;
}

ClusterInfo EffectiveInfo(const ClusterInfo& reported, const ClusterDeclaration& declared) {
  ClusterInfo info = reported;
  auto lay = [](std::string& field, const std::string& value) {
    if (!value.empty()) field = value;
  };
  lay(info.provider, declared.provider);
  lay(info.region, declared.region);
  lay(info.zone, declared.zone);
  lay(info.jurisdiction, declared.jurisdiction);
  if (declared.compliance_labels) info.compliance_labels = *declared.compliance_labels;
  return info;
}

absl::string_view StateName(WorkloadState state) { return NameOf(kStates, state); }
std::optional<WorkloadState> ParseState(absl::string_view name) { return Lookup(kStates, name); }

bool IsTerminal(WorkloadState state) {
  return state == WorkloadState::kSucceeded || state == WorkloadState::kFailed ||
         state == WorkloadState::kCancelled || state == WorkloadState::kPreempted ||
         state == WorkloadState::kLost;
}

absl::string_view AttemptEndName(AttemptEnd why) {
  switch (why) {
    case AttemptEnd::kClusterLost:
      return "cluster_lost";
    case AttemptEnd::kPreempted:
      return "preemption";
    case AttemptEnd::kNodeFailure:
      return "node_failure";
  }
  return "";
}

std::optional<AttemptEnd> ParseAttemptEnd(absl::string_view name) {
  for (AttemptEnd why :
       {AttemptEnd::kClusterLost, AttemptEnd::kPreempted, AttemptEnd::kNodeFailure}) {
    if (AttemptEndName(why) == name) return why;
  }
  return std::nullopt;
}

bool Workload::MayRetry(AttemptEnd why) const {
  const RetryPolicy& p = spec.retry;
  const bool on = (why == AttemptEnd::kClusterLost && p.on_cluster_lost) ||
                  (why == AttemptEnd::kPreempted && p.on_preemption) ||
                  (why == AttemptEnd::kNodeFailure && p.on_node_failure);
  return on && attempts < p.max_attempts;
}

bool HoldsCapacity(WorkloadState state) {
  return state == WorkloadState::kPlaced || state == WorkloadState::kRunning;
}

absl::string_view ClassName(WorkloadClass c) {
  return c == WorkloadClass::kUnspecified ? "unspecified" : NameOf(kClasses, c);
}
std::optional<WorkloadClass> ParseClass(absl::string_view name) { return Lookup(kClasses, name); }

absl::string_view TopologyName(Topology t) { return NameOf(kTopologies, t); }
std::optional<Topology> ParseTopology(absl::string_view name) { return Lookup(kTopologies, name); }

absl::string_view ClusterStateName(ClusterState s) { return NameOf(kClusterStates, s); }
std::optional<ClusterState> ParseClusterState(absl::string_view name) {
  return Lookup(kClusterStates, name);
}

}  // namespace gpufed
