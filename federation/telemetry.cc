#include "federation/telemetry.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "federation/mig.h"
#include "federation/status_macros.h"
#include "federation/usage_report.h"

namespace gpufed {
namespace {

constexpr size_t kMaxUuidBytes = 128;
constexpr size_t kMaxProfileBytes = 32;

absl::Status CheckReading(const std::string& at, absl::string_view field,
                          const std::optional<double>& value, double lo, double hi) {
  if (!value) return absl::OkStatus();
  if (!std::isfinite(*value) || *value < lo || *value > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, field, ": must be a finite number in [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckMinute(const std::string& at, const TelemetryMinute& m) {
  if (m.gpu_uuid.empty() || m.gpu_uuid.size() > kMaxUuidBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, "gpu_uuid: must be 1..", kMaxUuidBytes, " bytes"));
  }
  if (m.mig_profile.size() > kMaxProfileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, "mig_profile: at most ", kMaxProfileBytes, " bytes"));
  }
  if (!m.mig_profile.empty() && m.mig_start >= 8) {
    return absl::InvalidArgumentError(absl::StrCat(at, "mig_start: must be 0..7"));
  }
  if (std::chrono::floor<std::chrono::minutes>(m.minute) != m.minute) {
    return absl::InvalidArgumentError(absl::StrCat(at, "minute: must be a whole minute"));
  }
  if (m.covered_seconds < 1 || m.covered_seconds > 60) {
    return absl::InvalidArgumentError(absl::StrCat(at, "covered_seconds: must be 1..60"));
  }
  if (m.workload == 0) return absl::InvalidArgumentError(absl::StrCat(at, "workload_id: required"));
  if (m.attempt == 0) return absl::InvalidArgumentError(absl::StrCat(at, "attempt: must be >= 1"));
  const GpuMetrics& g = m.metrics;
  for (const auto& [field, value] : {std::pair<absl::string_view, const std::optional<double>&>{
                                         "gr_engine_active", g.gr_engine_active},
                                     {"sm_active", g.sm_active},
                                     {"sm_occupancy", g.sm_occupancy},
                                     {"pipe_tensor_active", g.pipe_tensor_active},
                                     {"dram_active", g.dram_active}}) {
    RETURN_IF_ERROR(CheckReading(at, field, value, 0.0, kMaxActivityReading));
  }
  RETURN_IF_ERROR(CheckReading(at, "gpu_util", g.gpu_util, 0.0, 100.0));
  RETURN_IF_ERROR(CheckReading(at, "fb_used_mib", g.fb_used_mib, 0.0, kMaxFbUsedMib));
  RETURN_IF_ERROR(CheckReading(at, "power_watts", g.power_watts, 0.0, kMaxPowerWatts));
  return CheckReading(at, "gpu_temp_celsius", g.gpu_temp_celsius, kMinTempCelsius, kMaxTempCelsius);
}

double Clamp01(double v) { return std::clamp(v, 0.0, 1.0); }

// The replica of `run` holding `uuid` (and, for a MIG minute, that instance); nullopt if none.
std::optional<size_t> HoldingReplica(const Workload& run, const TelemetryMinute& m) {
  const std::vector<ReplicaAssignment>& replicas = run.assignment.replicas;
  for (size_t i = 0; i < replicas.size(); ++i) {
    const ReplicaAssignment& r = replicas[i];
    if (std::find(r.gpu_uuids.begin(), r.gpu_uuids.end(), m.gpu_uuid) == r.gpu_uuids.end()) {
      continue;
    }
    if (r.mig_profile != m.mig_profile) continue;
    if (!r.mig_profile.empty() && r.mig_start != m.mig_start) continue;
    return i;
  }
  return std::nullopt;
}

// The instance's compute share (k/7) for a MIG minute on `model`; nullopt for a whole GPU or a
// share, and for a profile the catalogue does not know on that model.
std::optional<Fraction> ComputeShare(absl::string_view model, absl::string_view profile) {
  if (profile.empty()) return std::nullopt;
  const MigGeometry* geo = FindMigGeometry(model);
  const MigProfile* p = geo == nullptr ? nullptr : geo->Find(profile);
  if (p == nullptr) return std::nullopt;
  return MigFraction(*geo, *p, MigBasis::kCompute);
}

}  // namespace

absl::Status ValidateTelemetry(const std::vector<TelemetryMinute>& minutes) {
  if (minutes.size() > static_cast<size_t>(kMaxTelemetryMinutes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("minutes: at most ", kMaxTelemetryMinutes, " per report"));
  }
  for (size_t i = 0; i < minutes.size(); ++i) {
    RETURN_IF_ERROR(CheckMinute(absl::StrCat("minutes[", i, "]."), minutes[i]));
  }
  return absl::OkStatus();
}

absl::string_view ActivitySourceName(ActivitySource source) {
  switch (source) {
    case ActivitySource::kNone:
      return "none";
    case ActivitySource::kSmActive:
      return "sm_active";
    case ActivitySource::kEngineActive:
      return "gr_engine_active";
    case ActivitySource::kCoarse:
      return "gpu_util";
  }
  return "none";
}

std::optional<ActivitySource> ParseActivitySource(absl::string_view name) {
  for (ActivitySource s : {ActivitySource::kNone, ActivitySource::kSmActive,
                           ActivitySource::kEngineActive, ActivitySource::kCoarse}) {
    if (ActivitySourceName(s) == name) return s;
  }
  return std::nullopt;
}

Activity EffectiveActivity(const GpuMetrics& metrics, std::optional<Fraction> mig_compute) {
  if (metrics.sm_active) return {Clamp01(*metrics.sm_active), ActivitySource::kSmActive};
  if (metrics.gr_engine_active) {
    double v = *metrics.gr_engine_active;
    // Reported against the whole GPU: a 1g instance of 7 reads at most 1/7 when fully busy.
    if (mig_compute && mig_compute->num > 0) {
      v = v * static_cast<double>(mig_compute->den) / static_cast<double>(mig_compute->num);
    }
    return {Clamp01(v), ActivitySource::kEngineActive};
  }
  if (metrics.gpu_util && !mig_compute) {
    return {Clamp01(*metrics.gpu_util / 100.0), ActivitySource::kCoarse};
  }
  return {};
}

TelemetryRow RowOf(const std::string& cluster, const TelemetryUse& use) {
  TelemetryRow row;
  row.cluster = cluster;
  row.minute = use.minute;
  row.tenant = use.usage.tenant;
  row.project = use.usage.project;
  row.activity = use.activity;
  row.measured_gpu_us = use.measured_gpu_us;
  row.effective_gpu_us = use.effective_gpu_us;
  row.coarse_gpu_us = use.coarse_gpu_us;
  return row;
}

std::optional<TelemetryUse> AttributeMinute(const TelemetryMinute& minute, const Workload& run,
                                            const Cluster& cluster, const MeteringPolicy& policy) {
  if (run.id != minute.workload || run.attempts != minute.attempt ||
      run.assignment.cluster != cluster.info.name) {
    return std::nullopt;
  }
  const std::optional<size_t> replica = HoldingReplica(run, minute);
  if (!replica || !run.start_time) return std::nullopt;
  Timestamp from = std::max(minute.minute, *run.start_time);
  Timestamp to = minute.minute + std::chrono::seconds(minute.covered_seconds);
  if (run.end_time) to = std::min(to, *run.end_time);
  if (to <= from) return std::nullopt;

  std::vector<UsageRecord> span;
  MeterGpu(run, *replica, minute.gpu_uuid, cluster, from, to, policy, span);
  if (span.empty()) return std::nullopt;
  TelemetryUse use;
  use.minute = minute;
  use.usage = span.front();
  use.usage.to = span.back().to;
  use.activity =
      EffectiveActivity(minute.metrics, ComputeShare(use.usage.gpu_model, minute.mig_profile));
  if (use.activity.source == ActivitySource::kNone) return use;
  for (const UsageRecord& r : span) use.measured_gpu_us += GpuMicroseconds(r);
  use.effective_gpu_us =
      std::llround(static_cast<double>(use.measured_gpu_us) * use.activity.value);
  if (use.activity.source == ActivitySource::kCoarse) use.coarse_gpu_us = use.measured_gpu_us;
  return use;
}

}  // namespace gpufed
