#ifndef GPUFED_FEDERATION_GPU_CATALOG_H_
#define GPUFED_FEDERATION_GPU_CATALOG_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/string_view.h"

namespace gpufed {

// A GPU product the federation knows by name. Workload specs and agent inventories use these
// names; anything else is INVALID_ARGUMENT.
struct GpuModel {
  absl::string_view name;  // e.g. "H100-80GB"
  uint64_t memory_mib;     // what nvidia-smi reports as memory.total
  bool mig_capable;
};

// All known models, in a stable order.
std::span<const GpuModel> GpuCatalog();
std::optional<GpuModel> FindGpuModel(absl::string_view name);
// "A100-40GB, A100-80GB, ..." for error messages.
std::string KnownGpuModelNames();

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_GPU_CATALOG_H_
