#include "federation/validation.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "federation/gpu_catalog.h"

namespace gpufed {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool IsNameChar(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; }

// Quote a user value for an error message without echoing something enormous.
std::string Quote(absl::string_view value) {
  if (value.size() > 40) return absl::StrCat("\"", value.substr(0, 40), "...\"");
  return absl::StrCat("\"", value, "\"");
}

// Workload names allow a little more than resource names: dots and underscores.
absl::Status ValidateWorkloadName(absl::string_view field, absl::string_view value) {
  if (value.empty()) return Invalid(field, "must not be empty");
  if (value.size() > kMaxNameLength) {
    return Invalid(field, absl::StrFormat("must be at most %d characters, got %d", kMaxNameLength,
                                          value.size()));
  }
  for (char c : value) {
    if (!IsNameChar(c) && c != '.' && c != '_') {
      return Invalid(
          field, absl::StrCat("may contain only a-z, 0-9, '-', '_' and '.', got ", Quote(value)));
    }
  }
  if (value.front() == '-' || value.front() == '.' || value.front() == '_') {
    return Invalid(field, "must start with a letter or digit");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateName(absl::string_view field, absl::string_view value) {
  if (value.empty()) return Invalid(field, "must not be empty");
  if (value.size() > kMaxNameLength) {
    return Invalid(field, absl::StrFormat("must be at most %d characters, got %d", kMaxNameLength,
                                          value.size()));
  }
  for (char c : value) {
    if (!IsNameChar(c)) {
      return Invalid(field, absl::StrCat("may contain only a-z, 0-9 and '-', got ", Quote(value)));
    }
  }
  if (value.front() == '-') return Invalid(field, "must start with a letter or digit");
  return absl::OkStatus();
}

absl::Status ValidateSpec(const WorkloadSpec& spec) {
  if (auto s = ValidateName("spec.tenant", spec.tenant); !s.ok()) return s;
  if (auto s = ValidateName("spec.project", spec.project); !s.ok()) return s;
  if (auto s = ValidateWorkloadName("spec.name", spec.name); !s.ok()) return s;
  if (spec.idempotency_key.size() > kMaxIdempotencyKeyLength) {
    return Invalid("spec.idempotency_key",
                   absl::StrFormat("must be at most %d characters", kMaxIdempotencyKeyLength));
  }
  for (char c : spec.idempotency_key) {
    if (static_cast<unsigned char>(c) < 0x21 || static_cast<unsigned char>(c) > 0x7e) {
      return Invalid("spec.idempotency_key", "must be printable ASCII without spaces");
    }
  }
  if (spec.priority < -kMaxPriority || spec.priority > kMaxPriority) {
    return Invalid("spec.priority", absl::StrFormat("must be -%d..%d, got %d", kMaxPriority,
                                                    kMaxPriority, spec.priority));
  }
  if (spec.replicas < 1 || spec.replicas > kMaxReplicas) {
    return Invalid("spec.replicas",
                   absl::StrFormat("must be 1..%d, got %d", kMaxReplicas, spec.replicas));
  }
  if (spec.gpus_per_replica < 1 || spec.gpus_per_replica > kMaxGpusPerReplica) {
    return Invalid(
        "spec.per_replica.gpus",
        absl::StrFormat("must be 1..%d, got %d", kMaxGpusPerReplica, spec.gpus_per_replica));
  }
  std::set<absl::string_view> seen;
  for (size_t i = 0; i < spec.gpu_models.size(); ++i) {
    const std::string& model = spec.gpu_models[i];
    std::string field = absl::StrCat("spec.gpu_models[", i, "]");
    if (!FindGpuModel(model)) {
      return Invalid(field, absl::StrCat("unknown GPU model ", Quote(model),
                                         " (known: ", KnownGpuModelNames(), ")"));
    }
    if (!seen.insert(model).second) return Invalid(field, absl::StrCat("duplicate ", Quote(model)));
  }
  if (spec.min_gpu_memory_mib > 0) {
    bool any = false;
    for (const GpuModel& m : GpuCatalog()) {
      bool allowed = spec.gpu_models.empty() || seen.contains(m.name);
      if (allowed && m.memory_mib >= spec.min_gpu_memory_mib) any = true;
    }
    if (!any) {
      return Invalid("spec.min_gpu_memory_mib",
                     absl::StrFormat("no allowed GPU model has %d MiB", spec.min_gpu_memory_mib));
    }
  }
  if (spec.estimated_duration_ms < 0) {
    return Invalid("spec.estimated_duration", "must not be negative");
  }
  size_t command_bytes = 0;
  for (const std::string& arg : spec.run.command) command_bytes += arg.size();
  if (command_bytes > kMaxCommandBytes) {
    return Invalid("spec.run.command",
                   absl::StrFormat("must be at most %d bytes", kMaxCommandBytes));
  }
  if (spec.run.env.size() > kMaxEnvEntries) {
    return Invalid("spec.run.env", absl::StrFormat("at most %d entries", kMaxEnvEntries));
  }
  for (const auto& [key, value] : spec.run.env) {
    if (key.empty() || key.find('=') != std::string::npos || key.find('\0') != std::string::npos) {
      return Invalid("spec.run.env", absl::StrCat("invalid variable name ", Quote(key)));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateInventory(const ClusterInfo& info, const std::vector<NodeInfo>& nodes) {
  if (auto s = ValidateName("register.cluster", info.name); !s.ok()) return s;
  std::set<absl::string_view> node_names;
  std::set<absl::string_view> uuids;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const NodeInfo& node = nodes[n];
    std::string field = absl::StrCat("register.inventory.nodes[", n, "]");
    if (node.name.empty() || node.name.size() > 253) {
      return Invalid(absl::StrCat(field, ".name"), "must be 1..253 characters");
    }
    if (!node_names.insert(node.name).second) {
      return Invalid(absl::StrCat(field, ".name"), absl::StrCat("duplicate ", Quote(node.name)));
    }
    std::set<uint32_t> indices;
    for (size_t g = 0; g < node.gpus.size(); ++g) {
      const GpuInfo& gpu = node.gpus[g];
      std::string gfield = absl::StrCat(field, ".gpus[", g, "]");
      if (gpu.uuid.empty()) return Invalid(absl::StrCat(gfield, ".uuid"), "must not be empty");
      if (!uuids.insert(gpu.uuid).second) {
        return Invalid(absl::StrCat(gfield, ".uuid"), absl::StrCat("duplicate ", Quote(gpu.uuid)));
      }
      if (!indices.insert(gpu.index).second) {
        return Invalid(absl::StrCat(gfield, ".index"),
                       absl::StrCat("duplicate index ", gpu.index, " on node ", node.name));
      }
      if (!FindGpuModel(gpu.model)) {
        return Invalid(absl::StrCat(gfield, ".model"),
                       absl::StrCat("unknown GPU model ", Quote(gpu.model),
                                    " (known: ", KnownGpuModelNames(), ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace gpufed
