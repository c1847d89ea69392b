#ifndef GPUFED_CLI_ENUM_NAMES_H_
#define GPUFED_CLI_ENUM_NAMES_H_

// The short names people type and read for the API's enums, derived from the proto enum
// descriptors so a value added to a .proto is picked up without touching this file:
//   WorkloadClass        WORKLOAD_CLASS_TRAINING              -> "training"
//   TopologyRequirement  TOPOLOGY_REQUIREMENT_SAME_NODE       -> "same_node"
//   SimOutcome           SIM_OUTCOME_FAIL                     -> "fail"
//   WorkloadState        WORKLOAD_STATE_PENDING               -> "PENDING" (docs/domain.md
//   spelling) ClusterState         CLUSTER_STATE_READY                  -> "ready"  (docs/domain.md
//   spelling) Role                 ROLE_PLATFORM_ADMIN                  -> "platform-admin"
//   CapacityType         CAPACITY_TYPE_ON_DEMAND              -> "on-demand"
//   Objective            OBJECTIVE_COST                       -> "cost"
// Parsing is case-insensitive and never yields the *_UNSPECIFIED value. Formatting a value this
// build does not know (a newer server) gives its number, so nothing is silently dropped.
//
// Thread safety: stateless functions.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "gpufed/v1/cluster_service.pb.h"
#include "gpufed/v1/tenant_service.pb.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::cli {

std::string WorkloadClassName(v1::WorkloadClass value);
std::optional<v1::WorkloadClass> ParseWorkloadClass(absl::string_view name);
std::vector<std::string> WorkloadClassNames();

std::string TopologyName(v1::TopologyRequirement value);
std::optional<v1::TopologyRequirement> ParseTopology(absl::string_view name);
std::vector<std::string> TopologyNames();

// RETRY_ON_CLUSTER_LOST -> "cluster_lost"
std::string RetryOnName(v1::RetryOn value);
std::optional<v1::RetryOn> ParseRetryOn(absl::string_view name);
std::vector<std::string> RetryOnNames();

std::string SimOutcomeName(v1::SimOutcome value);
std::optional<v1::SimOutcome> ParseSimOutcome(absl::string_view name);
std::vector<std::string> SimOutcomeNames();

std::string WorkloadStateName(v1::WorkloadState value);
std::optional<v1::WorkloadState> ParseWorkloadState(absl::string_view name);
std::vector<std::string> WorkloadStateNames();
// SUCCEEDED, FAILED, CANCELLED, PREEMPTED or LOST: the workload will not change again (a
// restartable one whose attempt ends goes back to PENDING instead of PREEMPTED or LOST).
bool IsTerminalState(v1::WorkloadState value);

std::string ClusterStateName(v1::ClusterState value);

// CAPACITY_TYPE_ON_DEMAND -> "on-demand" (the domain's spelling, and the node label's values)
std::string CapacityTypeName(v1::CapacityType value);
std::optional<v1::CapacityType> ParseCapacityType(absl::string_view name);
std::vector<std::string> CapacityTypeNames();

// OBJECTIVE_COST -> "cost"; UNSPECIFIED reads "pack", as the server takes it.
std::string ObjectiveName(v1::Objective value);
std::optional<v1::Objective> ParseObjective(absl::string_view name);
std::vector<std::string> ObjectiveNames();

// DECLARATION_CHANGE_ADDED -> "added"
std::string DeclarationChangeName(v1::DeclarationChange value);

std::string RoleName(v1::Role value);
std::optional<v1::Role> ParseRole(absl::string_view name);
std::vector<std::string> RoleNames();

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_ENUM_NAMES_H_
