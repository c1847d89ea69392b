#include "federation/validation.h"

#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "federation/gpu_catalog.h"
#include "federation/mig.h"

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

std::string ProfileNames(const MigGeometry& geometry) {
  return absl::StrJoin(geometry.profiles, ", ",
                       [](std::string* out, const MigProfile& p) { absl::StrAppend(out, p.name); });
}

// A MIG profile must name an instance on at least one GPU model the spec allows; profile names
// are per product (mig.h), so the message lists what each allowed model offers.
absl::Status ValidateMigProfile(const WorkloadSpec& spec) {
  constexpr absl::string_view kField = "spec.per_replica.mig_profile";
  std::vector<const MigGeometry*> geometries;
  if (spec.gpu_models.empty()) {
    for (absl::string_view model : MigModels()) geometries.push_back(FindMigGeometry(model));
  } else {
    for (const std::string& model : spec.gpu_models) {
      if (const MigGeometry* g = FindMigGeometry(model)) geometries.push_back(g);
    }
    if (geometries.empty()) {
      return Invalid(
          kField,
          absl::StrCat("none of spec.gpu_models (", absl::StrJoin(spec.gpu_models, ", "),
                       ") supports MIG (MIG models: ", absl::StrJoin(MigModels(), ", "), ")"));
    }
  }
  std::vector<std::string> offers;
  for (const MigGeometry* g : geometries) {
    if (g->Find(spec.mig_profile) != nullptr) return absl::OkStatus();
    offers.push_back(absl::StrCat(g->model, " (valid: ", ProfileNames(*g), ")"));
  }
  if (spec.gpu_models.empty()) {
    return Invalid(kField,
                   absl::StrCat(Quote(spec.mig_profile), " is not a MIG profile of any GPU model: ",
                                absl::StrJoin(offers, "; ")));
  }
  return Invalid(kField, absl::StrCat(Quote(spec.mig_profile), " is not a MIG profile of ",
                                      absl::StrJoin(offers, " or ")));
}

// The part of a replica that is less than a GPU: a fraction or a MIG instance.
absl::Status ValidateGpuShare(const WorkloadSpec& spec) {
  if (!spec.mig_profile.empty() && spec.gpu_milli > 0) {
    return Invalid("spec.per_replica", "give at most one of mig_profile and gpu_milli");
  }
  if (!spec.SharesGpu()) return absl::OkStatus();
  if (spec.gpus_per_replica != 1) {
    return Invalid("spec.per_replica.gpus",
                   absl::StrFormat("must be 1 when a replica takes part of a GPU (mig_profile or "
                                   "gpu_milli), got %d",
                                   spec.gpus_per_replica));
  }
  if (spec.gpu_milli > kMaxGpuMilli) {
    return Invalid("spec.per_replica.gpu_milli",
                   absl::StrFormat("must be 1..%d, got %d (a whole GPU is gpus: 1)", kMaxGpuMilli,
                                   spec.gpu_milli));
  }
  if (!spec.mig_profile.empty()) return ValidateMigProfile(spec);
  return absl::OkStatus();
}

absl::Status ValidateGpuMig(const GpuInfo& gpu, const std::string& gfield) {
  if (!gpu.mig_enabled) {
    if (!gpu.mig_layout.empty()) {
      return Invalid(absl::StrCat(gfield, ".mig_layout"), "a MIG layout needs mig_enabled: true");
    }
    return absl::OkStatus();
  }
  const std::string efield = absl::StrCat(gfield, ".mig_enabled");
  std::optional<GpuModel> model = FindGpuModel(gpu.model);
  if (!model->mig_capable || !gpu.mig_capable) {
    return Invalid(efield, absl::StrCat(gpu.model, gpu.mig_capable ? "" : " (mig_capable: false)",
                                        " does not support MIG"));
  }
  const MigGeometry* geometry = FindMigGeometry(gpu.model);
  if (geometry == nullptr) {
    return Invalid(efield, absl::StrCat("gpufed has no MIG geometry for ", gpu.model,
                                        " (MIG models: ", absl::StrJoin(MigModels(), ", "), ")"));
  }
  if (absl::Status s = ValidateMigLayout(*geometry, gpu.mig_layout); !s.ok()) {
    return Invalid(absl::StrCat(gfield, ".mig_layout"), s.message());
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
  if (auto s = ValidateGpuShare(spec); !s.ok()) return s;
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
      if (auto s = ValidateGpuMig(gpu, gfield); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace gpufed
