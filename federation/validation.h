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

// A DNS-label-like name: 1..63 of [a-z0-9-], starting with a letter or digit.
// Returns INVALID_ARGUMENT naming `field` otherwise.
absl::Status ValidateName(absl::string_view field, absl::string_view value);

// Checks everything a spec can get wrong on its own (not whether tenant/project exist).
// INVALID_ARGUMENT naming the field, e.g. "spec.replicas: must be 1..1024, got 0".
absl::Status ValidateSpec(const WorkloadSpec& spec);

// An agent's inventory: names, unique node names and GPU uuids, known models.
absl::Status ValidateInventory(const ClusterInfo& info, const std::vector<NodeInfo>& nodes);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_VALIDATION_H_
