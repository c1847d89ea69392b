#ifndef GPUFED_FEDERATION_VALIDATION_H_
#define GPUFED_FEDERATION_VALIDATION_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "federation/types.h"

namespace gpufed {

// Limits a submission must respect; exposed so clients and tests can quote them.
inline constexpr size_t kMaxNameLength = 63;
inline constexpr size_t kMaxIdempotencyKeyLength = 128;
inline constexpr uint32_t kMaxReplicas = 1024;
inline constexpr uint32_t kMaxGpusPerReplica = 64;
inline constexpr int32_t kMaxPriority = 1000;
inline constexpr size_t kMaxCommandBytes = 64 * 1024;
inline constexpr size_t kMaxEnvEntries = 256;
// gpu_milli is a share of one GPU in milli-GPUs: 1..999 (1000 would be the whole GPU).
inline constexpr uint32_t kMaxGpuMilli = 999;

// A DNS-label-like name: 1..63 of [a-z0-9-], starting with a letter or digit.
// Returns INVALID_ARGUMENT naming `field` otherwise.
absl::Status ValidateName(absl::string_view field, absl::string_view value);

// Checks everything a spec can get wrong on its own (not whether tenant/project exist).
// INVALID_ARGUMENT naming the field, e.g. "spec.replicas: must be 1..1024, got 0". A replica
// takes at most one of mig_profile and gpu_milli, and then gpus_per_replica is 1; the MIG profile
// must exist on at least one allowed model (any MIG model when gpu_models is empty):
//   spec.per_replica.mig_profile: "3g.41gb" is not a MIG profile of H100-80GB (valid: ...)
absl::Status ValidateSpec(const WorkloadSpec& spec);

// An agent's inventory: names, unique node names and GPU uuids, known models, and MIG: a
// mig_enabled GPU is mig_capable with a model whose geometry mig.h knows, and its mig_layout is
// valid for that geometry; a layout without mig_enabled is refused.
absl::Status ValidateInventory(const ClusterInfo& info, const std::vector<NodeInfo>& nodes);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_VALIDATION_H_
