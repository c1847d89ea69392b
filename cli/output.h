#ifndef GPUFED_CLI_OUTPUT_H_
#define GPUFED_CLI_OUTPUT_H_

// What gpufedctl prints: aligned human tables (the default) and JSON for scripts.
//
// JSON is the protobuf JSON mapping with the .proto field names (snake_case), enums by their
// full names, and every field present even when zero, so scripts can rely on keys existing.
// Each document is written on one line: a command that makes one call prints one document,
// `submit -f` with several workloads and `watch` print one document per line (JSON Lines).
//
// Text that came from elsewhere (names, reasons, backend messages) is sanitised before it
// reaches a terminal: control characters are escaped so a workload message cannot move the
// cursor or change the terminal's settings.
//
// Thread safety: stateless functions; Table is not thread-safe.

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "google/protobuf/timestamp.pb.h"
#include "gpufed/v1/cluster_service.pb.h"
#include "gpufed/v1/quota_service.pb.h"
#include "gpufed/v1/tenant_service.pb.h"
#include "gpufed/v1/workload_service.pb.h"

namespace gpufed::cli {

enum class OutputFormat { kTable, kJson, kCsv };

// "table", "json" or "csv" (only gpufedctl report writes CSV).
std::optional<OutputFormat> ParseOutputFormat(absl::string_view name);

// Columns padded to their widest cell, separated by three spaces; the last column is not
// padded. Widths count UTF-8 code points. Cells are sanitised.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);

  // Missing trailing cells print empty; extra cells are an error in the caller and dropped.
  void AddRow(std::vector<std::string> cells);
  [[nodiscard]] size_t rows() const { return rows_.size(); }

  void Render(std::ostream& out) const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// Control characters become visible escapes (\n, \t, \x1b, ...); everything else is kept.
std::string SanitizeForTerminal(absl::string_view text);

// Coarse age as kubectl shows it: "45s", "12m", "5h", "3d". Negative ages (clock skew) are "0s".
std::string FormatAge(absl::Duration age);

// Whether a Timestamp was set (the API leaves unset times at the epoch).
bool IsSet(const google::protobuf::Timestamp& t);
absl::Time TimeFromProto(const google::protobuf::Timestamp& t);
// RFC 3339 in UTC to the second, e.g. "2026-11-21T10:00:03Z"; "-" when unset.
std::string FormatTimestamp(const google::protobuf::Timestamp& t);

// One JSON document on one line. INTERNAL if the message cannot be converted.
absl::Status WriteJson(const google::protobuf::Message& message, std::ostream& out);

// ID NAME TENANT/PROJECT STATE GPUS CLUSTER AGE REASON. GPUS is replicas x what each takes:
// "2x8" (whole GPUs), "4x3g.40gb" (a MIG instance), "4x0.25" (a share of one GPU).
void WriteWorkloadTable(const google::protobuf::RepeatedPtrField<v1::Workload>& workloads,
                        absl::Time now, std::ostream& out);

// "Key: value" lines describing one workload; empty fields are left out. Each replica line
// names its MIG instance ("MIG 3g.40gb at slot 4") or share ("share 0.25 (250m)"), and each
// repartition of the assignment gets a line ("dgx-01 GPU-x MIG on: 3g.40gb@0,3g.40gb@4 (why)").
// A spec with placement rules gets a line per rule given (Jurisdictions, Compliance labels,
// Providers, Regions, Allowed clusters, Denied clusters, Max price, Spot) and its Objective
// ("cost (clients in eu-west, max RTT 30ms)").
void WriteWorkloadDetail(const v1::Workload& workload, absl::Time now, std::ostream& out);

// One line per submitted workload: "workload/42 train-llm created".
void WriteSubmitResult(const v1::SubmitResponse& response, std::ostream& out);

// One line: "workload/42 cancelled" or "workload/42 cancel requested (RUNNING)".
void WriteCancelResult(const v1::Workload& workload, std::ostream& out);

// One line per event: "<time>  <id>  <name>  <FROM> -> <TO>  [cluster=<c>]  [reason]".
void WriteWatchEvent(const v1::WorkloadEvent& event, std::ostream& out);

// Every candidate cluster of an explain or a what-if, one row per offer (a cluster without
// offers gets one row): CLUSTER ALLOWED CHOSEN RULES MODEL CAPACITY PRICE/H RTT KEY REFUSED
// FITS-NOW. The cluster's cells are on its first row only. RULES lists each rule with what the
// cluster has and "ok" or "FAIL" ("jurisdiction=eu ok; max RTT=12 ms from eu-west FAIL"), "-"
// when the workload sets none. PRICE/H is one replica's price per hour ("unpriced" when the
// book has none), RTT "-" when none is declared, KEY the offer's place under `objective` (cost:
// a price, latency: an RTT, balanced: the weighted sum, pack: "-"; "last" when unpriced or
// undeclared), REFUSED the GPU rule it breaks, FITS-NOW "yes" or "no".
void WriteCandidateTable(v1::Objective objective,
                         const google::protobuf::RepeatedPtrField<v1::ClusterCandidate>& candidates,
                         std::ostream& out);

// What a what-if found for `spec`: "Key: value" lines (Workload, Would go to, a line per replica
// and repartition, Price per hour, Estimated cost over the estimated hours, or Why and a
// never-fits line), the Objective, then the candidate table after a blank line.
void WriteWhatIf(const v1::WorkloadSpec& spec, const v1::WhatIfResponse& response,
                 std::ostream& out);

// NAME PROVIDER REGION STATE NODES GPUS FREE MODELS, where MODELS lists "<model>:<free>/<total>".
void WriteClusterTable(const google::protobuf::RepeatedPtrField<v1::Cluster>& clusters,
                       std::ostream& out);

// One row per GPU: CLUSTER NODE RACK GPU MODEL MEMORY NVLINK MIG STATUS ALLOCATED_TO. MIG is "-"
// (not MIG-capable), "off", "on" (no instances yet) or the layout as profile@start, e.g.
// "3g.40gb@0,2g.20gb@4"; ALLOCATED_TO lists every workload on a shared GPU.
void WriteGpuTable(const google::protobuf::RepeatedPtrField<v1::Cluster>& clusters,
                   std::ostream& out);

// What `apply` did: CLUSTER RESULT CHANGES, one row per change line (a cluster's name and result
// on its first), "-" for a cluster left unchanged; then a summary line, "3 cluster(s): 1
// added, 2 unchanged", which says "(dry run: nothing was stored)" when that was so.
void WriteApplyResult(const v1::ApplyClustersResponse& response, std::ostream& out);

// Declarations: CLUSTER PROVIDER REGION ZONE JURISDICTION LABELS DEFAULT-CAPACITY RTT (LABELS
// "-" when not declared, "(none)" when declared empty; RTT "eu-west=12ms,us-east=80ms"), then,
// when any cluster has a price book, CLUSTER MODEL MIG CAPACITY PER-HOUR EFFECTIVE-FROM.
void WriteDeclarationTables(
    const google::protobuf::RepeatedPtrField<v1::ClusterDeclaration>& declarations,
    std::ostream& out);

// NAME DISPLAY NAME AGE
void WriteTenantTable(const google::protobuf::RepeatedPtrField<v1::Tenant>& tenants, absl::Time now,
                      std::ostream& out);

// TENANT NAME AGE
// TENANT PROJECT RESOURCE GUARANTEED LIMIT NOTE; amounts in GPUs (instances for MIG profiles),
// LIMIT "-" for no borrowing.
void WriteQuotaTable(const google::protobuf::RepeatedPtrField<v1::Quota>& quotas,
                     std::ostream& out);
// TENANT PROJECT RESOURCE USED GUARANTEED LIMIT BORROWED; "-" where there is no quota.
void WriteQuotaUsageTable(const google::protobuf::RepeatedPtrField<v1::QuotaUsage>& usage,
                          std::ostream& out);
void WriteProjectTable(const google::protobuf::RepeatedPtrField<v1::Project>& projects,
                       absl::Time now, std::ostream& out);
// ID SUBJECT ROLE SCOPE AGE EXPIRES LAST-USED STATE; SCOPE "platform", "TENANT" or
// "TENANT/PROJECT" (agents: "cluster C"); EXPIRES and LAST-USED as ages ("-": never).
// Role bindings: subject, role, scope (platform, tenant or tenant/project), age, last change.
void WriteMemberTable(const google::protobuf::RepeatedPtrField<v1::RoleBinding>& bindings,
                      absl::Time now, std::ostream& out);
void WriteTokenTable(const google::protobuf::RepeatedPtrField<v1::TokenInfo>& tokens,
                     absl::Time now, std::ostream& out);
// TENANT PROJECT WEIGHT SHARE HELD DECAYED-GPU-H WAITING; SHARE in percent of the pool, HELD in
// GPUs.
void WriteFairShareTable(const google::protobuf::RepeatedPtrField<v1::FairShare>& shares,
                         std::ostream& out);
// ID AGE REASON BY RESOURCE CLUSTER NEEDED EVICTED VICTIMS; BY is "tenant/project workload",
// VICTIMS "tenant:workload" each (another tenant's without its workload); amounts in GPUs.
void WritePreemptionTable(const google::protobuf::RepeatedPtrField<v1::Preemption>& preemptions,
                          absl::Time now, std::ostream& out);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_OUTPUT_H_
