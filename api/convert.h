#ifndef GPUFED_API_CONVERT_H_
#define GPUFED_API_CONVERT_H_

// Conversions between gpufed.v1 protos and the domain structs. Only the api layer sees both.

#include <chrono>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "auth/principal.h"
#include "federation/control_plane.h"
#include "federation/pool.h"
#include "federation/quota.h"
#include "federation/types.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/timestamp.pb.h"
#include "gpufed/v1/agent_service.pb.h"
#include "gpufed/v1/cluster_service.pb.h"
#include "gpufed/v1/quota_service.pb.h"
#include "gpufed/v1/report_service.pb.h"
#include "gpufed/v1/tenant_service.pb.h"
#include "gpufed/v1/types.pb.h"
#include "gpufed/v1/workload_service.pb.h"

namespace gpufed::api {

google::protobuf::Timestamp ToProto(Timestamp t);
Timestamp FromProto(const google::protobuf::Timestamp& t);
// `t` when a Timestamp can hold it (nanoseconds in an int64: years 1678 to 2262, narrower than
// the protobuf's 1 to 9999) and its nanos are 0..999,999,999; INVALID_ARGUMENT naming `field`
// otherwise (FromProto would overflow on it).
absl::StatusOr<Timestamp> CheckedFromProto(absl::string_view field,
                                           const google::protobuf::Timestamp& t);

// INVALID_ARGUMENT naming the field for values the domain cannot represent (unknown enum
// numbers, a missing per_replica kind, a negative or unnormalised duration). The rules a
// representable spec must follow are ValidateSpec's (federation/validation.h).
absl::StatusOr<WorkloadSpec> SpecFromProto(const v1::WorkloadSpec& proto);
v1::WorkloadSpec SpecToProto(const WorkloadSpec& spec);

v1::Assignment AssignmentToProto(const Assignment& a);
Assignment AssignmentFromProto(const v1::Assignment& proto);

// A workload id as the API carries it: the canonical decimal spelling of 1..2^63-1 (no sign,
// spaces or leading zeros); INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<WorkloadId> WorkloadIdFromProto(absl::string_view field, absl::string_view text);

v1::WorkloadState StateToProto(WorkloadState s);
// UNSPECIFIED and unknown numbers are INVALID_ARGUMENT naming `field`.
absl::StatusOr<WorkloadState> StateFromProto(v1::WorkloadState s, absl::string_view field);

// A token's role as CreateToken receives it; UNSPECIFIED and unknown numbers are
// INVALID_ARGUMENT naming `field`.
absl::StatusOr<auth::Role> RoleFromProto(v1::Role role, absl::string_view field);
v1::Role RoleToProto(auth::Role role);

// A whole number of seconds (nanos must be 0; negative is left to the use case to refuse).
absl::StatusOr<std::chrono::seconds> SecondsFromProto(absl::string_view field,
                                                      const google::protobuf::Duration& d);

// A token as ListTokens shows it (no secret, no hash).
v1::TokenInfo TokenToProto(const TokenRecord& t);
v1::RoleBinding RoleBindingToProto(const RoleBinding& b);
// subject, role, tenant and project of `b` ("binding.<field>" in errors); the times are ignored.
absl::StatusOr<RoleBinding> RoleBindingFromProto(const v1::RoleBinding& b);

v1::Workload WorkloadToProto(const Workload& w);
v1::WorkloadEvent EventToProto(const WorkloadEvent& e);

// Inventory as an agent reports it.
absl::StatusOr<ClusterInfo> ClusterInfoFromProto(absl::string_view name,
                                                 const v1::ClusterInfo& proto);
std::vector<NodeInfo> NodesFromProto(const v1::Inventory& proto);

v1::ClusterState ClusterStateToProto(ClusterState s);
// A cluster as stored, with allocation and free capacity taken from the scheduler's pool
// snapshot when it knows the cluster. `info` is the agent's report with the declaration laid
// over it (EffectiveInfo), `reported_info` the report alone, `declaration` set when there is one.
// `visible`: whether the caller may see a workload named on a GPU (Gpu.allocated_to); every GPU
// shows whether something holds it (Gpu.allocated).
v1::Cluster ClusterToProto(const Cluster& cluster, const ClusterSlots* slots, bool include_nodes,
                           absl::FunctionRef<bool(WorkloadId)> visible);

// ---- Routing: placement rules, declarations, price books ----

// A workload's placement rules (SpecFromProto reads them as "spec.placement"). INVALID_ARGUMENT
// naming the field under `field` for an unknown objective, or a max_rtt that is negative,
// unnormalised or not whole microseconds; the rules are ValidatePlacement's.
absl::StatusOr<PlacementConstraints> PlacementFromProto(absl::string_view field,
                                                        const v1::PlacementConstraints& proto);
v1::PlacementConstraints PlacementToProto(const PlacementConstraints& placement);

v1::CapacityType CapacityTypeToProto(CapacityType t);
// UNSPECIFIED is `unspecified` when given, else INVALID_ARGUMENT naming `field`, as are
// numbers this server does not know.
absl::StatusOr<CapacityType> CapacityTypeFromProto(v1::CapacityType t, absl::string_view field,
                                                   std::optional<CapacityType> unspecified);

// An admin's declaration, fields named under `field` (e.g. "declarations[1]"): INVALID_ARGUMENT
// for an unknown capacity type (UNSPECIFIED in a price line, too), a price line without
// effective_from or with a timestamp outside 1970..2200, and an RTT that is negative,
// unnormalised or not whole microseconds. Price lines keep their order. The rules of a
// representable declaration are ValidateDeclaration's.
absl::StatusOr<ClusterDeclaration> DeclarationFromProto(absl::string_view field,
                                                        const v1::ClusterDeclaration& proto);
v1::ClusterDeclaration DeclarationToProto(const ClusterDeclaration& declaration);
// Every declaration of the request, named "declarations[i]".
absl::StatusOr<std::vector<ClusterDeclaration>> DeclarationsFromProto(
    const v1::ApplyClustersRequest& request);
v1::ApplyClustersResponse DiffsToProto(const std::vector<DeclarationDiff>& diffs, bool dry_run);
v1::ListDeclarationsResponse DeclarationsToProto(
    const std::vector<ClusterDeclaration>& declarations);

v1::Tenant TenantToProto(const Tenant& t);
v1::Project ProjectToProto(const Project& p);
v1::Quota QuotaToProto(const Quota& q);
// update_time and overcommitted are not read.
Quota QuotaFromProto(const v1::Quota& q);
v1::QuotaUsage QuotaUsageToProto(const QuotaUsage& u);
v1::Preemption PreemptionToProto(const PreemptionRecord& r);
v1::FairShare FairShareToProto(const FairShare& f);
v1::ShareWeight ShareWeightToProto(const ShareWeight& w);
ShareWeight ShareWeightFromProto(const v1::ShareWeight& w);

// ---- Use-case inputs and outputs ----

// Filters, page size (1..1000; 0: 100) and the page token of a List call. INVALID_ARGUMENT
// naming the field.
absl::StatusOr<ListFilter> ListFilterFromProto(const v1::ListWorkloadsRequest& request);
// A page as a response of at most about `max_bytes`: when the workloads would not fit, the
// response stops early and its token continues where it stopped, so that no response grows
// with the size of what other callers submitted.
v1::ListWorkloadsResponse WorkloadPageToProto(const WorkloadPage& page, size_t max_bytes);
// The workload, the words and the code; with `e.routing`, its objective and every candidate
// cluster (else the spec's objective and no candidates).
v1::ExplainResponse ExplanationToProto(const Explanation& e);
// One cluster as a workload meets it: its rules, its offers (an unpriced offer has no
// price_per_hour_micros, an undeclared distance no rtt) and the choice.
v1::ClusterCandidate CandidateToProto(const ClusterCandidate& c);
// Where a spec would go now and what it would cost. When it does not fit: no assignment, the
// reason's words (RenderReason) and code, and whether waiting will not help.
v1::WhatIfResponse WhatIfToProto(const RoutingExplanation& e);

// ---- The agent protocol ----

// One status report of an agent. INVALID_ARGUMENT naming the field (a time before 1970 or from
// 2200 on, or with nanos outside 0..999999999, too).
absl::StatusOr<AgentReport> AgentReportFromProto(const v1::WorkloadStatus& status);

// Assignments as AssignBatch messages of at most `max_bytes` each (one assignment larger than
// that goes alone), so that no message grows with the number of workloads a cluster holds.
std::vector<v1::ServerMessage> AssignMessages(const std::vector<Workload>& workloads,
                                              size_t max_bytes);
// Cancellations as CancelBatch messages of at most `max_ids` ids each.
std::vector<v1::ServerMessage> CancelMessages(const std::vector<WorkloadId>& ids, size_t max_ids);

// ---- Reports ----

// A report request as a query: the window, period and dimensions converted (INVALID_ARGUMENT
// naming the field for a missing or out-of-range time, an unknown period or dimension, more
// dimensions than there are); the rest is ValidateUsageQuery's and the use case's.
absl::StatusOr<UsageQuery> UsageQueryFromProto(const v1::GetUsageReportRequest& request);
v1::UsageReportLine UsageLineToProto(const UsageLine& line);
v1::GetUsageReportResponse UsageReportToProto(const UsageReportResult& report);
// A cost-allocation request as a query: INVALID_ARGUMENT naming the field for a missing or
// out-of-range time or an unknown idle policy; the rest is the use case's.
absl::StatusOr<CostQuery> CostQueryFromProto(const v1::GetCostAllocationRequest& request);
v1::GetCostAllocationResponse CostAllocationToProto(const CostReport& report);
// A ListWorkloadTelemetry request: which workload, the window and how many minutes at most.
struct TelemetryWindow {
  WorkloadId workload = 0;
  Timestamp from{};
  Timestamp to{};
  int limit = 1000;
};
// INVALID_ARGUMENT naming the field: a bad workload id, a missing or out-of-range time, end not
// after start, page_size outside 0..10000.
absl::StatusOr<TelemetryWindow> TelemetryWindowFromProto(
    const v1::ListWorkloadTelemetryRequest& request);
// An agent's telemetry report. INVALID_ARGUMENT naming the field ("telemetry.minutes[2].sm_active")
// for a bad workload id or minute, and whatever ValidateTelemetry refuses.
absl::StatusOr<std::vector<TelemetryMinute>> TelemetryFromProto(const v1::TelemetryReport& report);
// A minute as an agent sends it (TelemetryFromProto's inverse).
v1::GpuMinute GpuMinuteToProto(const TelemetryMinute& minute);
v1::TelemetryMinuteView TelemetryRowToProto(const TelemetryRow& row);

}  // namespace gpufed::api

#endif  // GPUFED_API_CONVERT_H_
