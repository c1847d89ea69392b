#ifndef GPUFED_FEDERATION_MIG_H_
#define GPUFED_FEDERATION_MIG_H_

// NVIDIA MIG geometry per GPU product (reference/nvidia-gpus.md §1, copied into this file's
// tables). A GPU has 8 memory slots (4 on A30); a GPU instance of a profile occupies
// [start, start + memory_slices) for one of the profile's allowed starts. A layout is valid when
// no two instances overlap, each profile stays within its maximum count, at most one instance
// carries media extensions (+me), and compute slices add up to at most the GPU's.
//
// Profile names are not portable between products: "1g.10gb" is one memory slot on A100-80GB and
// H100-80GB but two on A100-40GB. Everything here is keyed by (GPU model, profile name).

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "federation/types.h"

namespace gpufed {

struct MigProfile {
  absl::string_view name;   // e.g. "3g.40gb"
  int id;                   // nvidia-smi GPU instance profile ID on this product
  int compute_slices;       // the N of "Ng"
  int memory_slices;        // placement size, in memory slots
  int max_count;            // most instances of this profile on one GPU
  std::vector<int> starts;  // allowed start slots
  bool media_extensions;    // "+me" profiles
};

struct MigGeometry {
  absl::string_view model;  // catalogue name, e.g. "H100-80GB"
  int memory_slots;         // 8, or 4 on A30
  int compute_slices;       // 7, or 4 on A30
  std::vector<MigProfile> profiles;

  [[nodiscard]] const MigProfile* Find(absl::string_view profile) const;
};

// The geometry of a MIG-capable catalogue model; nullptr for others (or unknown ones).
const MigGeometry* FindMigGeometry(absl::string_view model);
// Models with MIG geometry, for messages and tests.
std::vector<absl::string_view> MigModels();

// OK, or INVALID_ARGUMENT saying what is wrong ("3g.40gb at slot 2: allowed starts are 0, 4").
absl::Status ValidateMigLayout(const MigGeometry& geometry, std::span<const MigInstance> layout);

// The starts where one more instance of `profile` fits into a valid `layout`, lowest first.
// Empty if the profile is unknown for the product or no room is left.
std::vector<int> FreeMigStarts(const MigGeometry& geometry, std::span<const MigInstance> layout,
                               absl::string_view profile);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_MIG_H_
