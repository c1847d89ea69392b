#ifndef GPUFED_STORAGE_JSON_CODEC_H_
#define GPUFED_STORAGE_JSON_CODEC_H_

// The JSON shapes stored in jsonb columns: workloads.spec, workloads.assignment, nodes.labels,
// gpus.mig_layout, cluster_declarations.declaration. Enums are stored by name (not number) so the
// rows stay readable with psql and survive enum renumbering. Decoding tolerates missing keys
// (defaults) so that a later migration may add fields without rewriting old rows. Keys added later
// (the GPU-sharing fields of specs and assignments: mig_profile, gpu_milli, cpu_millis, memory_mib,
// mig_start, repartitions) are written only when set, so a spec that does not use them encodes
// exactly as it did before. So is spec.placement (issue #11), and inside it only the constraints
// that are set. Times inside documents are integers of microseconds since the epoch
// ("effective_from_us"), as PostgreSQL keeps them (epoch_us); finer parts of a Timestamp are
// dropped.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/types.h"

namespace gpufed::storage {

// Deterministic (keys sorted, no whitespace): equal specs give equal text.
std::string WorkloadSpecToJson(const WorkloadSpec& spec);
// INVALID_ARGUMENT (naming the key) if `json` is not a spec this code understands.
absl::StatusOr<WorkloadSpec> WorkloadSpecFromJson(std::string_view json);

std::string AssignmentToJson(const Assignment& assignment);
absl::StatusOr<Assignment> AssignmentFromJson(std::string_view json);

std::string LabelsToJson(const std::map<std::string, std::string>& labels);
absl::StatusOr<std::map<std::string, std::string>> LabelsFromJson(std::string_view json);

// A MIG layout, as in gpus.mig_layout: [{"profile":"3g.40gb","start":0}, ...].
std::string MigLayoutToJson(const std::vector<MigInstance>& layout);
absl::StatusOr<std::vector<MigInstance>> MigLayoutFromJson(std::string_view json);

// A cluster's declaration, as in cluster_declarations.declaration:
//   {"cluster":"dgx","provider":"aws","region":"us-east-1","zone":"","jurisdiction":"us",
//    "compliance_labels":["hipaa"],            // only when set: absent != [] (declares none)
//    "default_capacity":"on-demand",           // CapacityTypeName
//    "prices":[{"gpu_model":"H100-80GB","mig_profile":"","capacity":"spot",
//               "micros_per_hour":2100000,"effective_from_us":1717200000000000}],
//    "rtt_micros":{"eu-west":12000}}
// Deterministic as WorkloadSpecToJson. Decoding: INVALID_ARGUMENT (naming the key) for a
// document this code does not understand (an unknown capacity type, a non-integer figure).
std::string ClusterDeclarationToJson(const ClusterDeclaration& declaration);
absl::StatusOr<ClusterDeclaration> ClusterDeclarationFromJson(std::string_view json);

std::string StringsToJson(const std::vector<std::string>& values);

// The figures of a pending reason, as in workloads.pending_reason_figures: one key per figure,
// a number or a string ({"free":2,"needs":"4 GPUs",...}).
std::string ReasonFiguresToJson(const std::vector<ReasonFigure>& figures);
// INVALID_ARGUMENT if `json` is not an object of numbers and strings.
absl::StatusOr<std::vector<ReasonFigure>> ReasonFiguresFromJson(std::string_view json);

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_JSON_CODEC_H_
