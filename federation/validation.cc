#include "federation/validation.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "federation/gpu_catalog.h"
#include "federation/mig.h"
#include "federation/status_macros.h"

namespace gpufed {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameChar(char c) { return IsLower(c) || IsDigit(c) || c == '-'; }

// Quote a user value for an error message: at most 40 bytes, anything but printable ASCII
// escaped, so a message never carries a NUL, a control character or broken UTF-8.
std::string Quote(absl::string_view value) {
  if (value.size() > 40) return absl::StrCat("\"", absl::CHexEscape(value.substr(0, 40)), "...\"");
  return absl::StrCat("\"", absl::CHexEscape(value), "\"");
}

// The next code point of well-formed UTF-8 at s[*i] (advancing *i), or nullopt: bad lead or
// continuation byte, truncated, overlong, surrogate, or above U+10FFFF.
std::optional<char32_t> NextCodePoint(absl::string_view s, size_t* i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(*i);
  if (lead < 0x80) {
    ++*i;
    return lead;
  }
  // Lead byte -> continuation bytes, the bits it carries, and the smallest code point that
  // needs that many bytes (anything smaller is an overlong encoding).
  int extra = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    extra = 1;
    cp = lead & 0x1F;
    min = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    extra = 2;
    cp = lead & 0x0F;
    min = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    extra = 3;
    cp = lead & 0x07;
    min = 0x10000;
  } else {
    return std::nullopt;
  }
  if (*i + extra >= s.size()) return std::nullopt;
  for (int k = 1; k <= extra; ++k) {
    const unsigned char c = byte(*i + k);
    if ((c & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (c & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  *i += extra + 1;
  return cp;
}

// Why `value` is not IsText, or empty when it is.
std::string TextProblem(absl::string_view value, size_t max_bytes, bool allow_newlines) {
  if (value.size() > max_bytes) {
    return absl::StrFormat("must be at most %d bytes, got %d", max_bytes, value.size());
  }
  for (size_t i = 0; i < value.size();) {
    const size_t at = i;
    std::optional<char32_t> cp = NextCodePoint(value, &i);
    if (!cp.has_value()) return absl::StrFormat("is not valid UTF-8 (byte %d)", at);
    const bool control = *cp < 0x20 || (*cp >= 0x7F && *cp <= 0x9F);
    if (control && !(allow_newlines && (*cp == '\t' || *cp == '\n'))) {
      return absl::StrFormat("must not contain control characters (U+%04X at byte %d)",
                             static_cast<uint32_t>(*cp), at);
    }
  }
  return "";
}

// Why `value` is not a name (letter_first) or label, or empty when it is.
std::string NameProblem(absl::string_view value, bool letter_first) {
  if (value.empty()) return "must not be empty";
  if (value.size() > kMaxNameLength) {
    return absl::StrFormat("must be at most %d characters, got %d", kMaxNameLength, value.size());
  }
  for (char c : value) {
    if (!IsNameChar(c)) {
      return absl::StrCat("may contain only a-z, 0-9 and '-', got ", Quote(value));
    }
  }
  if (letter_first && !IsLower(value.front())) {
    return absl::StrCat("must start with a letter, got ", Quote(value));
  }
  if (value.front() == '-') return "must start with a letter or digit";
  return "";
}

absl::Status Check(absl::string_view field, const std::string& problem) {
  if (problem.empty()) return absl::OkStatus();
  return Invalid(field, problem);
}

// Workload names allow a little more than resource names: dots and underscores.
absl::Status ValidateWorkloadName(absl::string_view field, absl::string_view value) {
  if (value.empty()) return Invalid(field, "must not be empty");
  if (value.size() > kMaxWorkloadNameLength) {
    return Invalid(field, absl::StrFormat("must be at most %d characters, got %d",
                                          kMaxWorkloadNameLength, value.size()));
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

absl::Status ValidateRun(const RunSpec& run) {
  RETURN_IF_ERROR(Check("spec.run.image", TextProblem(run.image, kMaxImageBytes, false)));
  if (run.command.size() > kMaxCommandArgs) {
    return Invalid("spec.run.command", absl::StrFormat("at most %d arguments, got %d",
                                                       kMaxCommandArgs, run.command.size()));
  }
  size_t command_bytes = 0;
  for (size_t i = 0; i < run.command.size(); ++i) {
    command_bytes += run.command[i].size();
    if (command_bytes > kMaxCommandBytes) {
      return Invalid("spec.run.command",
                     absl::StrFormat("at most %d bytes together", kMaxCommandBytes));
    }
    RETURN_IF_ERROR(Check(absl::StrCat("spec.run.command[", i, "]"),
                          TextProblem(run.command[i], kMaxCommandBytes, true)));
  }
  if (run.env.size() > kMaxEnvEntries) {
    return Invalid("spec.run.env",
                   absl::StrFormat("at most %d variables, got %d", kMaxEnvEntries, run.env.size()));
  }
  for (const auto& [key, value] : run.env) {
    if (!IsEnvKey(key)) {
      return Invalid(
          "spec.run.env",
          absl::StrFormat("variable names must be 1..%d bytes of [A-Za-z_][A-Za-z0-9_]*, "
                          "got %s (%d bytes)",
                          kMaxEnvKeyBytes, Quote(key), key.size()));
    }
    if (std::string problem = TextProblem(value, kMaxEnvValueBytes, true); !problem.empty()) {
      return Invalid("spec.run.env", absl::StrCat("value of ", key, " ", problem));
    }
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

bool IsName(absl::string_view value) { return NameProblem(value, true).empty(); }

bool IsLabel(absl::string_view value) { return NameProblem(value, false).empty(); }

bool IsToken(absl::string_view value, size_t max_bytes) {
  if (value.empty() || value.size() > max_bytes) return false;
  for (char c : value) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

bool IsText(absl::string_view value, size_t max_bytes, bool allow_newlines) {
  return TextProblem(value, max_bytes, allow_newlines).empty();
}

bool IsEnvKey(absl::string_view value) {
  if (value.empty() || value.size() > kMaxEnvKeyBytes || IsDigit(value.front())) return false;
  for (char c : value) {
    if (!(IsLower(c) || (c >= 'A' && c <= 'Z') || IsDigit(c) || c == '_')) return false;
  }
  return true;
}

absl::Status ValidateName(absl::string_view field, absl::string_view value) {
  return Check(field, NameProblem(value, /*letter_first=*/true));
}

absl::Status ValidateLabel(absl::string_view field, absl::string_view value) {
  return Check(field, NameProblem(value, /*letter_first=*/false));
}

absl::Status ValidateText(absl::string_view field, absl::string_view value, size_t max_bytes) {
  return Check(field, TextProblem(value, max_bytes, /*allow_newlines=*/false));
}

absl::Status ValidateSubject(absl::string_view value) {
  if (value.empty()) return Invalid("subject", "must not be empty");
  return ValidateText("subject", value, kMaxSubjectBytes);
}

size_t SpecTextBytes(const WorkloadSpec& spec) {
  size_t bytes = spec.tenant.size() + spec.project.size() + spec.name.size() +
                 spec.idempotency_key.size() + spec.mig_profile.size() + spec.run.image.size();
  for (const std::string& model : spec.gpu_models) bytes += model.size();
  for (const std::string& arg : spec.run.command) bytes += arg.size();
  for (const auto& [key, value] : spec.run.env) bytes += key.size() + value.size();
  const PlacementConstraints& p = spec.placement;
  for (const auto* list : {&p.jurisdictions, &p.compliance_labels, &p.providers, &p.regions,
                           &p.clusters, &p.denied_clusters}) {
    for (const std::string& item : *list) bytes += item.size();
  }
  bytes += p.client_region.size() + p.min_driver_version.size() + p.min_cuda_version.size();
  return bytes;
}

namespace {

// A list of labels (or, with `names`, resource names): each valid, none twice, at most
// kMaxPlacementListEntries.
absl::Status ValidateLabelList(absl::string_view field, const std::vector<std::string>& list,
                               bool names = false) {
  if (list.size() > kMaxPlacementListEntries) {
    return Invalid(field, absl::StrFormat("at most %d entries, got %d", kMaxPlacementListEntries,
                                          list.size()));
  }
  std::set<absl::string_view> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = absl::StrCat(field, "[", i, "]");
    RETURN_IF_ERROR(names ? ValidateName(item, list[i]) : ValidateLabel(item, list[i]));
    if (!seen.insert(list[i]).second)
      return Invalid(item, absl::StrCat("duplicate ", Quote(list[i])));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidatePlacement(const PlacementConstraints& p) {
  RETURN_IF_ERROR(ValidateLabelList("spec.placement.jurisdictions", p.jurisdictions));
  RETURN_IF_ERROR(ValidateLabelList("spec.placement.compliance_labels", p.compliance_labels));
  RETURN_IF_ERROR(ValidateLabelList("spec.placement.providers", p.providers));
  RETURN_IF_ERROR(ValidateLabelList("spec.placement.regions", p.regions));
  RETURN_IF_ERROR(ValidateLabelList("spec.placement.clusters", p.clusters, /*names=*/true));
  RETURN_IF_ERROR(
      ValidateLabelList("spec.placement.denied_clusters", p.denied_clusters, /*names=*/true));
  for (size_t i = 0; i < p.denied_clusters.size(); ++i) {
    if (std::find(p.clusters.begin(), p.clusters.end(), p.denied_clusters[i]) != p.clusters.end()) {
      return Invalid(absl::StrCat("spec.placement.denied_clusters[", i, "]"),
                     absl::StrCat(Quote(p.denied_clusters[i]), " is also allowed"));
    }
  }
  if (p.max_price_per_gpu_hour_micros < 0 || p.max_price_per_gpu_hour_micros > kMaxPriceMicros) {
    return Invalid("spec.placement.max_price_per_gpu_hour",
                   absl::StrFormat("must be 0..%d micro-units, got %d", kMaxPriceMicros,
                                   p.max_price_per_gpu_hour_micros));
  }
  if (!p.client_region.empty()) {
    RETURN_IF_ERROR(ValidateLabel("spec.placement.client_region", p.client_region));
  }
  if (p.max_rtt_micros < 0 || p.max_rtt_micros > kMaxRttMicros) {
    return Invalid("spec.placement.max_rtt", "must be 0..10 s");
  }
  if (p.max_rtt_micros > 0 && p.client_region.empty()) {
    return Invalid("spec.placement.client_region", "required with max_rtt");
  }
  if ((p.objective == Objective::kLatency || p.objective == Objective::kBalanced) &&
      p.client_region.empty()) {
    return Invalid("spec.placement.client_region",
                   absl::StrCat("required with objective ", ObjectiveName(p.objective)));
  }
  for (const auto& [name, value] : {std::pair<absl::string_view, const std::string*>{
                                        "min_driver_version", &p.min_driver_version},
                                    {"min_cuda_version", &p.min_cuda_version}}) {
    if (!value->empty() && !PackVersion(*value)) {
      return Invalid(
          absl::StrCat("spec.placement.", name),
          absl::StrCat(Quote(*value), " is not a version of one to three numbers (\"550.54.15\")"));
    }
  }
  if (static_cast<int>(p.objective) > static_cast<int>(Objective::kBalanced)) {
    return Invalid("spec.placement.objective", "unknown");
  }
  return absl::OkStatus();
}

absl::Status ValidateDeclaration(absl::string_view field, const ClusterDeclaration& d) {
  RETURN_IF_ERROR(ValidateName(absl::StrCat(field, ".cluster"), d.cluster));
  for (const auto& [name, value] :
       {std::pair<absl::string_view, const std::string*>{"provider", &d.provider},
        {"region", &d.region},
        {"zone", &d.zone},
        {"jurisdiction", &d.jurisdiction}}) {
    if (!value->empty()) RETURN_IF_ERROR(ValidateLabel(absl::StrCat(field, ".", name), *value));
  }
  if (d.compliance_labels) {
    const std::string labels = absl::StrCat(field, ".compliance_labels");
    if (d.compliance_labels->size() > kMaxLabels) {
      return Invalid(
          labels, absl::StrFormat("at most %d, got %d", kMaxLabels, d.compliance_labels->size()));
    }
    std::set<absl::string_view> seen;
    for (size_t i = 0; i < d.compliance_labels->size(); ++i) {
      const std::string item = absl::StrCat(labels, "[", i, "]");
      RETURN_IF_ERROR(ValidateLabel(item, (*d.compliance_labels)[i]));
      if (!seen.insert((*d.compliance_labels)[i]).second) {
        return Invalid(item, absl::StrCat("duplicate ", Quote((*d.compliance_labels)[i])));
      }
    }
  }
  if (static_cast<int>(d.default_capacity) >= kCapacityTypes) {
    return Invalid(absl::StrCat(field, ".default_capacity"), "unknown capacity type");
  }
  if (d.prices.size() > kMaxPriceEntries) {
    return Invalid(absl::StrCat(field, ".prices"),
                   absl::StrFormat("at most %d lines, got %d", kMaxPriceEntries, d.prices.size()));
  }
  std::set<std::tuple<absl::string_view, absl::string_view, int, int64_t>> keys;
  for (size_t i = 0; i < d.prices.size(); ++i) {
    const PriceEntry& e = d.prices[i];
    const std::string line = absl::StrCat(field, ".prices[", i, "]");
    if (!FindGpuModel(e.gpu_model)) {
      return Invalid(absl::StrCat(line, ".gpu_model"),
                     absl::StrCat("unknown GPU model ", Quote(e.gpu_model),
                                  " (known: ", KnownGpuModelNames(), ")"));
    }
    if (!e.mig_profile.empty()) {
      const MigGeometry* geo = FindMigGeometry(e.gpu_model);
      if (geo == nullptr || geo->Find(e.mig_profile) == nullptr) {
        return Invalid(
            absl::StrCat(line, ".mig_profile"),
            absl::StrCat(Quote(e.mig_profile), " is not a MIG profile of ", e.gpu_model));
      }
    }
    if (static_cast<int>(e.capacity) >= kCapacityTypes) {
      return Invalid(absl::StrCat(line, ".capacity"), "unknown capacity type");
    }
    if (e.micros_per_hour < 0 || e.micros_per_hour > kMaxPriceMicros) {
      return Invalid(
          absl::StrCat(line, ".per_hour"),
          absl::StrFormat("must be 0..%d micro-units, got %d", kMaxPriceMicros, e.micros_per_hour));
    }
    if (e.effective_from == Timestamp{}) {
      return Invalid(absl::StrCat(line, ".effective_from"), "required");
    }
    const int64_t from =
        std::chrono::duration_cast<std::chrono::microseconds>(e.effective_from.time_since_epoch())
            .count();
    if (!keys.emplace(e.gpu_model, e.mig_profile, static_cast<int>(e.capacity), from).second) {
      return Invalid(line, "a second line for the same model, profile, capacity and date");
    }
  }
  if (d.rtt_micros.size() > kMaxRttEntries) {
    return Invalid(
        absl::StrCat(field, ".latency"),
        absl::StrFormat("at most %d regions, got %d", kMaxRttEntries, d.rtt_micros.size()));
  }
  for (const auto& [region, rtt] : d.rtt_micros) {
    const std::string item = absl::StrCat(field, ".latency[", Quote(region), "]");
    RETURN_IF_ERROR(ValidateLabel(item, region));
    if (rtt < 0 || rtt > kMaxRttMicros) return Invalid(item, "must be 0..10 s");
  }
  return absl::OkStatus();
}

absl::Status ValidateSpec(const WorkloadSpec& spec) {
  RETURN_IF_ERROR(ValidateName("spec.tenant", spec.tenant));
  RETURN_IF_ERROR(ValidateName("spec.project", spec.project));
  RETURN_IF_ERROR(ValidateWorkloadName("spec.name", spec.name));
  if (spec.idempotency_key.size() > kMaxIdempotencyKeyLength) {
    return Invalid("spec.idempotency_key",
                   absl::StrFormat("must be at most %d characters", kMaxIdempotencyKeyLength));
  }
  if (!spec.idempotency_key.empty() && !IsToken(spec.idempotency_key, kMaxIdempotencyKeyLength)) {
    return Invalid("spec.idempotency_key", "must be printable ASCII without spaces");
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
  RETURN_IF_ERROR(ValidateGpuShare(spec));
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
  if (spec.estimated_duration_ms > kMaxEstimatedDurationSeconds * 1000) {
    return Invalid("spec.estimated_duration", "must be at most one year");
  }
  if (spec.checkpoint_interval_ms < 0) {
    return Invalid("spec.checkpoint_interval", "must not be negative");
  }
  if (spec.checkpoint_interval_ms > kMaxEstimatedDurationSeconds * 1000) {
    return Invalid("spec.checkpoint_interval", "must be at most one year");
  }
  RETURN_IF_ERROR(ValidateRun(spec.run));
  RETURN_IF_ERROR(ValidatePlacement(spec.placement));
  if (spec.retry.max_attempts < 1 || spec.retry.max_attempts > RetryPolicy::kMaxAttemptsLimit) {
    return Invalid("spec.retry.max_attempts",
                   absl::StrFormat("must be 1..%d, got %d", RetryPolicy::kMaxAttemptsLimit,
                                   spec.retry.max_attempts));
  }
  if (const size_t bytes = SpecTextBytes(spec); bytes > kMaxSpecBytes) {
    return Invalid("spec", absl::StrFormat("its strings together must be at most %d bytes, got %d",
                                           kMaxSpecBytes, bytes));
  }
  return absl::OkStatus();
}

namespace {

// An optional fabric id (rack, block, NVLink domain, PCIe switch).
absl::Status ValidateFabricId(absl::string_view field, absl::string_view value) {
  if (value.empty() || IsToken(value, kMaxFabricIdBytes)) return absl::OkStatus();
  return Invalid(field, absl::StrFormat("must be at most %d printable characters without spaces",
                                        kMaxFabricIdBytes));
}

absl::Status ValidateClusterInfo(const ClusterInfo& info) {
  RETURN_IF_ERROR(ValidateName("register.cluster", info.name));
  for (const auto& [field, value] :
       {std::pair<absl::string_view, const std::string*>{"register.info.provider", &info.provider},
        {"register.info.region", &info.region},
        {"register.info.zone", &info.zone},
        {"register.info.jurisdiction", &info.jurisdiction}}) {
    if (!value->empty()) RETURN_IF_ERROR(ValidateLabel(field, *value));
  }
  if (info.compliance_labels.size() > kMaxLabels) {
    return Invalid("register.info.compliance_labels",
                   absl::StrFormat("at most %d labels", kMaxLabels));
  }
  std::set<absl::string_view> seen;
  for (size_t i = 0; i < info.compliance_labels.size(); ++i) {
    const std::string field = absl::StrCat("register.info.compliance_labels[", i, "]");
    RETURN_IF_ERROR(ValidateLabel(field, info.compliance_labels[i]));
    if (!seen.insert(info.compliance_labels[i]).second) {
      return Invalid(field, absl::StrCat("duplicate ", Quote(info.compliance_labels[i])));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateNodeLabels(const NodeInfo& node, const std::string& field) {
  const std::string lfield = absl::StrCat(field, ".labels");
  if (node.labels.size() > kMaxLabels) {
    return Invalid(lfield, absl::StrFormat("at most %d labels", kMaxLabels));
  }
  for (const auto& [key, value] : node.labels) {
    if (!IsToken(key, kMaxNodeLabelBytes)) {
      return Invalid(lfield, absl::StrFormat("keys must be 1..%d printable characters without "
                                             "spaces, got %s",
                                             kMaxNodeLabelBytes, Quote(key)));
    }
    RETURN_IF_ERROR(ValidateText(absl::StrCat(lfield, ".", key), value, kMaxNodeLabelBytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateInventory(const ClusterInfo& info, const std::vector<NodeInfo>& nodes) {
  RETURN_IF_ERROR(ValidateClusterInfo(info));
  std::set<absl::string_view> node_names;
  std::set<absl::string_view> uuids;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const NodeInfo& node = nodes[n];
    std::string field = absl::StrCat("register.inventory.nodes[", n, "]");
    RETURN_IF_ERROR(ValidateLabel(absl::StrCat(field, ".name"), node.name));
    if (!node_names.insert(node.name).second) {
      return Invalid(absl::StrCat(field, ".name"), absl::StrCat("duplicate ", Quote(node.name)));
    }
    RETURN_IF_ERROR(ValidateFabricId(absl::StrCat(field, ".rack"), node.rack));
    RETURN_IF_ERROR(ValidateFabricId(absl::StrCat(field, ".block"), node.block));
    RETURN_IF_ERROR(ValidateNodeLabels(node, field));
    if (node.gpus.size() > kMaxGpusPerNode) {
      return Invalid(absl::StrCat(field, ".gpus"),
                     absl::StrFormat("at most %d GPUs per node", kMaxGpusPerNode));
    }
    std::set<uint32_t> indices;
    for (size_t g = 0; g < node.gpus.size(); ++g) {
      const GpuInfo& gpu = node.gpus[g];
      std::string gfield = absl::StrCat(field, ".gpus[", g, "]");
      if (!IsToken(gpu.uuid, kMaxGpuUuidBytes)) {
        return Invalid(
            absl::StrCat(gfield, ".uuid"),
            absl::StrFormat("must be 1..%d printable characters without spaces", kMaxGpuUuidBytes));
      }
      if (!uuids.insert(gpu.uuid).second) {
        return Invalid(absl::StrCat(gfield, ".uuid"), absl::StrCat("duplicate ", Quote(gpu.uuid)));
      }
      if (gpu.index >= kMaxGpusPerNode) {
        return Invalid(absl::StrCat(gfield, ".index"),
                       absl::StrFormat("must be below %d, got %d", kMaxGpusPerNode, gpu.index));
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
      RETURN_IF_ERROR(ValidateFabricId(absl::StrCat(gfield, ".nvlink_domain"), gpu.nvlink_domain));
      RETURN_IF_ERROR(ValidateFabricId(absl::StrCat(gfield, ".pcie_switch"), gpu.pcie_switch));
      if (gpu.numa_node < 0 || static_cast<uint32_t>(gpu.numa_node) >= kMaxNumaNodes) {
        return Invalid(absl::StrCat(gfield, ".numa_node"),
                       absl::StrFormat("must be 0..%d, got %d", kMaxNumaNodes - 1, gpu.numa_node));
      }
      RETURN_IF_ERROR(ValidateGpuMig(gpu, gfield));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFitsInt64(absl::string_view field, uint64_t value) {
  if (value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": too large"));
  }
  return absl::OkStatus();
}

absl::Status ValidateStorableInventory(const ClusterInfo& info,
                                       const std::vector<NodeInfo>& nodes) {
  RETURN_IF_ERROR(ValidateInventory(info, nodes));
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeInfo& node = nodes[i];
    const std::string field = absl::StrCat("register.inventory.nodes[", i, "]");
    RETURN_IF_ERROR(ValidateFitsInt64(field + ".cpu_millis", node.cpu_millis));
    RETURN_IF_ERROR(ValidateFitsInt64(field + ".memory_mib", node.memory_mib));
    for (size_t j = 0; j < node.gpus.size(); ++j) {
      RETURN_IF_ERROR(ValidateFitsInt64(absl::StrCat(field, ".gpus[", j, "].memory_mib"),
                                        node.gpus[j].memory_mib));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTransition(const Transition& t, size_t i) {
  const std::string field = absl::StrCat("transitions[", i, "]");
  if (t.id <= 0) return absl::InvalidArgumentError(absl::StrCat(field, ".id: required"));
  if (t.from == WorkloadState::kUnspecified) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".from: required"));
  }
  if (t.to == WorkloadState::kUnspecified) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".to: required"));
  }
  if (t.from == t.to) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".to: equals from (", std::string(StateName(t.from)), ")"));
  }
  if (t.pending_reason && t.to != WorkloadState::kPending && t.to != WorkloadState::kAdmitted) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".pending_reason: only when to is PENDING or ADMITTED"));
  }
  if (t.to == WorkloadState::kPlaced && (!t.assignment || t.assignment->cluster.empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".assignment: required (with a cluster) when to is PLACED"));
  }
  if (t.assignment) {
    RETURN_IF_ERROR(ValidateFitsInt64(field + ".assignment.epoch", t.assignment->epoch));
  }
  return absl::OkStatus();
}

absl::Status ValidateEviction(const WorkloadStore::Eviction& e, size_t i) {
  const std::string field = absl::StrCat("evictions[", i, "]");
  if (e.id <= 0) return absl::InvalidArgumentError(absl::StrCat(field, ".id: required"));
  if (e.cluster.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".cluster: required"));
  }
  return ValidateText(field + ".message", e.message, kMaxReasonBytes);
}

absl::Status ValidatePreemption(const WorkloadStore::Preemption& p, size_t i) {
  const std::string field = absl::StrCat("preemptions[", i, "]");
  const PreemptionRecord& r = p.record;
  if (r.preemptor <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".record.preemptor: required"));
  }
  for (const auto& [name, value] : {std::pair<const char*, const std::string*>{"tenant", &r.tenant},
                                    {"resource", &r.resource},
                                    {"cluster", &r.cluster}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".record.", name, ": required"));
    }
  }
  if (PreemptionCauseName(r.cause).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".record.cause: unknown"));
  }
  if (r.victims.size() != p.victims.size()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".victims: ", p.victims.size(),
                                                   " evictions for ", r.victims.size(),
                                                   " victims in the record"));
  }
  for (size_t v = 0; v < p.victims.size(); ++v) {
    if (p.victims[v].id != r.victims[v].id) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".victims[", v, "].id: ", p.victims[v].id,
                       " is not the record's victim ", r.victims[v].id));
    }
    RETURN_IF_ERROR(ValidateEviction(p.victims[v], v));
  }
  return absl::OkStatus();
}

std::vector<PreemptionRecord> RecordsOfMarked(
    const std::vector<WorkloadStore::Preemption>& preemptions,
    const std::vector<WorkloadId>& marked, Timestamp now) {
  std::vector<PreemptionRecord> out;
  for (const WorkloadStore::Preemption& p : preemptions) {
    PreemptionRecord r = p.record;
    std::erase_if(r.victims, [&](const PreemptionVictim& v) {
      return std::find(marked.begin(), marked.end(), v.id) == marked.end();
    });
    if (r.victims.empty()) continue;
    if (r.time == Timestamp{}) r.time = now;
    out.push_back(std::move(r));
  }
  return out;
}

absl::Status ValidateShareWeight(const ShareWeight& w) {
  RETURN_IF_ERROR(ValidateName("tenant", w.tenant));
  if (!w.project.empty()) RETURN_IF_ERROR(ValidateName("project", w.project));
  if (w.weight < 1 || w.weight > kMaxShareWeight) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight: must be 1 to ", kMaxShareWeight, ", got ", w.weight));
  }
  return absl::OkStatus();
}

absl::Status ValidateTokenRecord(absl::string_view token_hash, const TokenRecord& record) {
  if (token_hash.empty()) return absl::InvalidArgumentError("token_hash: required");
  return ValidateTokenBinding(record);
}

absl::Status ValidateTokenBinding(const TokenRecord& record) {
  if (record.subject.empty()) return absl::InvalidArgumentError("subject: required");
  // The role is stored by its name (auth::RoleName), which a value outside the enum lacks.
  const std::string role(auth::RoleName(record.role));
  if (!auth::ParseRole(role)) {
    return absl::InvalidArgumentError(
        absl::StrCat("role: ", static_cast<int>(record.role),
                     " is not one of platform-admin, tenant-admin, tenant-user, viewer, agent"));
  }
  if ((record.role == auth::Role::kTenantAdmin || record.role == auth::Role::kTenantUser) &&
      record.tenant.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tenant: required for role ", role));
  }
  if (record.role == auth::Role::kAgent && record.cluster.empty()) {
    return absl::InvalidArgumentError("cluster: required for role agent");
  }
  if (record.role != auth::Role::kAgent && !record.cluster.empty()) {
    return absl::InvalidArgumentError("cluster: only for the agent role");
  }
  if (record.role == auth::Role::kAgent || record.role == auth::Role::kPlatformAdmin) {
    if (!record.tenant.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("tenant: not for role ", role));
    }
  }
  if (!record.tenant.empty()) RETURN_IF_ERROR(ValidateName("tenant", record.tenant));
  if (!record.project.empty()) {
    if (record.tenant.empty()) {
      return absl::InvalidArgumentError("project: needs the tenant it belongs to");
    }
    RETURN_IF_ERROR(ValidateName("project", record.project));
  }
  if (!record.cluster.empty()) RETURN_IF_ERROR(ValidateName("cluster", record.cluster));
  return absl::OkStatus();
}

absl::Status ValidateRoleBinding(const RoleBinding& binding) {
  RETURN_IF_ERROR(ValidateSubject(binding.subject));
  if (binding.role == auth::Role::kAgent) {
    return absl::InvalidArgumentError(
        "role: agents are bound to their cluster by a token or certificate, not by a role binding");
  }
  TokenRecord as_token;
  as_token.subject = binding.subject;
  as_token.role = binding.role;
  as_token.tenant = binding.tenant;
  as_token.project = binding.project;
  return ValidateTokenBinding(as_token);
}

absl::Status ValidateClusterCertificate(const ClusterCertificate& certificate) {
  const bool hex = !certificate.serial.empty() && certificate.serial.size() <= 40 &&
                   std::all_of(certificate.serial.begin(), certificate.serial.end(), [](char c) {
                     return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F');
                   });
  if (!hex) return absl::InvalidArgumentError("serial: must be upper-case hexadecimal");
  if (certificate.cluster.empty()) return absl::InvalidArgumentError("cluster: must not be empty");
  if (certificate.not_after <= certificate.not_before) {
    return absl::InvalidArgumentError("not_after: must be after not_before");
  }
  return absl::OkStatus();
}

}  // namespace gpufed
