#ifndef GPUFED_FEDERATION_TELEMETRY_H_
#define GPUFED_FEDERATION_TELEMETRY_H_

// GPU telemetry and effective utilisation (docs/chargeback.md#telemetry). Agents send, per GPU
// or MIG instance and per minute, the means of the DCGM fields they sampled while a workload held
// it. The server turns each minute into GPU-time measured and effective -- allocated GPU-time x
// what the hardware says the workload did with it -- and adds both to the usage report's sums.
// Plain functions, so both stores and the simulator compute the same figures.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "federation/metering.h"
#include "federation/types.h"

namespace gpufed {

// Means over a minute's samples; nullopt: the device did not report the field. Named after
// DCGM's fields (the number is the field id).
struct GpuMetrics {
  std::optional<double> gr_engine_active;    // DCGM_FI_PROF_GR_ENGINE_ACTIVE (1001), 0..1
  std::optional<double> sm_active;           // DCGM_FI_PROF_SM_ACTIVE (1002), 0..1
  std::optional<double> sm_occupancy;        // DCGM_FI_PROF_SM_OCCUPANCY (1003), 0..1
  std::optional<double> pipe_tensor_active;  // DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (1004), 0..1
  std::optional<double> dram_active;         // DCGM_FI_PROF_DRAM_ACTIVE (1005), 0..1
  std::optional<double> gpu_util;            // DCGM_FI_DEV_GPU_UTIL (203), percent 0..100
  std::optional<double> fb_used_mib;         // DCGM_FI_DEV_FB_USED (252), MiB
  std::optional<double> power_watts;         // DCGM_FI_DEV_POWER_USAGE (155), W
  std::optional<double> gpu_temp_celsius;    // DCGM_FI_DEV_GPU_TEMP (150), degrees C
  bool operator==(const GpuMetrics&) const = default;
};

// One GPU's (or MIG instance's) minute, as an agent sends it.
struct TelemetryMinute {
  std::string gpu_uuid;
  std::string mig_profile;      // set: the samples are of this MIG instance
  uint32_t mig_start = 0;       // its first memory slot
  Timestamp minute{};           // a whole UTC minute
  int32_t covered_seconds = 0;  // 1..60: the part of the minute the samples stand for
  WorkloadId workload = 0;      // who held it, and which attempt
  uint32_t attempt = 0;
  GpuMetrics metrics;
  bool operator==(const TelemetryMinute&) const = default;
};

// Minutes older than this, or further ahead of the server's clock than kTelemetryMaxAhead, are
// ignored: a report over a window that ended longer ago than kTelemetryMaxAge never changes.
inline constexpr std::chrono::hours kTelemetryMaxAge{1};
inline constexpr std::chrono::minutes kTelemetryMaxAhead{2};
// The most minutes one report may carry.
inline constexpr int kMaxTelemetryMinutes = 10000;
// Bounds on what a field may read; past them a report is refused as garbage. Activity fields may
// read above 1 on MIG instances (a known DCGM behaviour, clamped later), not above this.
inline constexpr double kMaxActivityReading = 16.0;
inline constexpr double kMaxFbUsedMib = 16.0 * 1024 * 1024;  // 16 TiB
inline constexpr double kMaxPowerWatts = 100000.0;
inline constexpr double kMinTempCelsius = -60.0;
inline constexpr double kMaxTempCelsius = 200.0;

// OK, or INVALID_ARGUMENT naming the field ("minutes[3].sm_active: ..."): too many minutes, an
// empty or over-long uuid or profile, a minute that is not a whole minute, covered_seconds
// outside 1..60, no workload or attempt, a reading that is not finite or is out of its bounds.
absl::Status ValidateTelemetry(const std::vector<TelemetryMinute>& minutes);

// Which field an activity figure came from, best first.
enum class ActivitySource : uint8_t {
  kNone = 0,      // no activity field: the minute measures nothing
  kSmActive,      // DCGM_FI_PROF_SM_ACTIVE
  kEngineActive,  // DCGM_FI_PROF_GR_ENGINE_ACTIVE
  kCoarse,        // DCGM_FI_DEV_GPU_UTIL: any kernel reads 100 %; flagged in reports
};
absl::string_view ActivitySourceName(ActivitySource source);  // "none", "sm_active", ...
std::optional<ActivitySource> ParseActivitySource(absl::string_view name);

struct Activity {
  double value = 0;  // 0..1 of what was held
  ActivitySource source = ActivitySource::kNone;
  bool operator==(const Activity&) const = default;
};

// What the workload did with what it held, 0..1. SM activity first, clamped to [0, 1] (it reads
// above 1 on MIG instances); else engine activity, which on a MIG instance is reported as a part of
// the whole GPU and so cannot exceed the instance's compute share: it is divided by that share
// (`mig_compute`, k/7) before clamping; else NVML's coarse utilisation (percent / 100). A MIG
// instance has no coarse figure (NVML does not attribute utilisation to MIG devices): one that
// reports only gpu_util measures nothing.
Activity EffectiveActivity(const GpuMetrics& metrics, std::optional<Fraction> mig_compute);

// A minute attributed to the run that held the GPU: the span it measures, metered as usage is
// (the record's dimensions and the part of the GPU charged), and the GPU-time it adds to reports.
struct TelemetryUse {
  TelemetryMinute minute;
  // The minute's span of the run, metered (federation/metering.h's MeterGpu): the dimensions
  // (tenant, project, class, cluster, model, profile, capacity) and `from` give the report line.
  UsageRecord usage;
  Activity activity;
  int64_t measured_gpu_us = 0;   // allocated GPU-time the minute covers (0 when source kNone)
  int64_t effective_gpu_us = 0;  // measured x activity, rounded
  int64_t coarse_gpu_us = 0;     // measured, when only the coarse counter measured it
  bool operator==(const TelemetryUse&) const = default;
};

// A minute as the stores keep it.
struct TelemetryRow {
  std::string cluster;
  TelemetryMinute minute;
  std::string tenant;
  std::string project;
  Activity activity;
  int64_t measured_gpu_us = 0;
  int64_t effective_gpu_us = 0;
  int64_t coarse_gpu_us = 0;
  bool operator==(const TelemetryRow&) const = default;
};
TelemetryRow RowOf(const std::string& cluster, const TelemetryUse& use);

// Attributes `minute`, sent by `cluster`'s agent, to `run` (the workload it names, as stored):
// nullopt unless `run` is placed on `cluster` at the minute's attempt, holds the minute's GPU (the
// same MIG instance when the minute names one), and ran during the minute. The span measured is
// the minute's covered part from its start, inside the run's start and end.
std::optional<TelemetryUse> AttributeMinute(const TelemetryMinute& minute, const Workload& run,
                                            const Cluster& cluster, const MeteringPolicy& policy);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_TELEMETRY_H_
