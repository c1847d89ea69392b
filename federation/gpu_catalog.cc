#include "federation/gpu_catalog.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpufed {
namespace {

// Memory figures: H100-80GB (81559 MiB) and H100-94GB / H100 NVL (95830 MiB) are verbatim
// nvidia-smi readings from reference/nvidia-gpus.md [V]. The others are the nominal capacity
// in GiB times 1024 minus the same ~0.4 % reserve [D]; placement only compares them with a
// workload's min_gpu_memory_mib, so a small error shifts nothing but edge cases.
constexpr std::array<GpuModel, 15> kModels{{
    {"A100-40GB", 40536, true},
    {"A100-80GB", 81153, true},
    {"H100-80GB", 81559, true},
    {"H100-94GB", 95830, true},
    {"H200", 143771, true},
    {"B200", 183359, true},
    {"A30", 24258, true},
    {"L4", 23034, false},
    {"L40S", 46068, false},
    {"A10", 23028, false},
    {"T4", 15360, false},
    {"V100-16GB", 16384, false},
    {"V100-32GB", 32768, false},
    {"P100", 16384, false},
    // GB200 (one Blackwell GPU of a GB200 superchip, e.g. in an NVL72 rack): 189471 MiB is the
    // memory.total commonly reported by nvidia-smi [U] (not in the reference). The MIG guide lists
    // GB200 as MIG-capable [V], but reference/nvidia-gpus.md has no placement table for it, so
    // gpufed treats it as not MIG-capable until federation/mig.h has its geometry.
    {"GB200", 189471, false},
}};

}  // namespace

std::span<const GpuModel> GpuCatalog() { return kModels; }

std::optional<GpuModel> FindGpuModel(absl::string_view name) {
  for (const GpuModel& m : kModels) {
    if (m.name == name) return m;
  }
  return std::nullopt;
}

std::string KnownGpuModelNames() {
  return absl::StrJoin(kModels, ", ",
                       [](std::string* out, const GpuModel& m) { absl::StrAppend(out, m.name); });
}

}  // namespace gpufed
