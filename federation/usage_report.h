#ifndef GPUFED_FEDERATION_USAGE_REPORT_H_
#define GPUFED_FEDERATION_USAGE_REPORT_H_

// Usage reports (docs/chargeback.md#reports): the usage records of a window summed by the
// dimensions asked for, per day, week or month. Windows are whole UTC days and no record crosses
// an hour (federation/metering.h), so every sum adds whole records and is exact: GPU-time in
// GPU-microseconds and cost in micro-units, both integers. The same query over a window that has
// ended gives the same answer every time.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "federation/metering.h"
#include "federation/telemetry.h"
#include "federation/types.h"

namespace gpufed {

enum class ReportDimension : uint8_t {
  kTenant = 0,
  kProject,  // project names are per tenant: group by tenant too unless the query has one
  kCluster,
  kGpuModel,
  kMigProfile,  // "" for whole GPUs and shares
  kWorkloadClass,
  kCapacity,  // on-demand, spot, committed
};
inline constexpr int kReportDimensions = 7;
// "tenant", "project", "cluster", "gpu_model", "mig_profile", "workload_class", "capacity".
absl::string_view ReportDimensionName(ReportDimension d);
std::optional<ReportDimension> ParseReportDimension(absl::string_view name);

// How the window is cut: not at all, or by UTC day, ISO week (from Monday) or month.
enum class ReportPeriod : uint8_t { kWhole = 0, kDay, kWeek, kMonth };
absl::string_view ReportPeriodName(ReportPeriod p);  // "whole", "day", "week", "month"
std::optional<ReportPeriod> ParseReportPeriod(absl::string_view name);

// The longest window one query may cover.
inline constexpr std::chrono::hours kMaxReportWindow{24 * 400};

struct UsageQuery {
  Timestamp from{};  // [from, to): whole days (UTC midnights)
  Timestamp to{};
  ReportPeriod period = ReportPeriod::kWhole;
  std::vector<ReportDimension> group_by;  // distinct; empty: one line per period
  // Filters; "" for all. A tenant's own callers always have their tenant (and project) set.
  std::string tenant;
  std::string project;
  std::string cluster;
};

// OK, or INVALID_ARGUMENT naming the field: from/to not whole days (UTC), to <= from, a window
// longer than kMaxReportWindow, a dimension asked for twice.
absl::Status ValidateUsageQuery(const UsageQuery& query);

// One line of a report.
struct UsageLine {
  Timestamp period_start{};  // the query's `from` for kWhole
  // The value of each dimension of the query's group_by, in its order.
  std::vector<std::string> keys;
  int64_t gpu_microseconds = 0;           // sum over records of fraction x duration
  int64_t unpriced_gpu_microseconds = 0;  // of which the price book had no price for
  int64_t cost_micros = 0;
  int64_t records = 0;
  // Telemetry (federation/telemetry.h): of the allocated GPU-time, the part measured, its
  // effective GPU-time, and the part only the coarse counter measured.
  int64_t measured_gpu_microseconds = 0;
  int64_t effective_gpu_microseconds = 0;
  int64_t coarse_gpu_microseconds = 0;

  [[nodiscard]] double GpuHours() const { return static_cast<double>(gpu_microseconds) / 3.6e9; }
  bool operator==(const UsageLine&) const = default;
};

// A record's GPU-time: fraction x duration, in GPU-microseconds, rounded to the nearest (halves
// away from zero) -- what PostgreSQL's round() of the exact quotient gives.
int64_t GpuMicroseconds(const UsageRecord& record);
// The start of the period `t` falls in (UTC).
Timestamp PeriodStart(ReportPeriod period, Timestamp t, Timestamp window_from);
// The value of `d` for `record`.
std::string DimensionValue(const UsageRecord& record, ReportDimension d);

// Sums `records` and the telemetry `uses` that measured something (both already the query's
// window and filters; a use counts by its usage record's dimensions and start) into lines, in
// ReportOrder. What the in-memory store does; PgStore does the same in SQL.
std::vector<UsageLine> SumUsage(const UsageQuery& query, const std::vector<UsageRecord>& records,
                                const std::vector<TelemetryUse>& uses = {});
// The order of a report's lines: by period, then keys (bytewise).
bool ReportOrder(const UsageLine& a, const UsageLine& b);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_USAGE_REPORT_H_
