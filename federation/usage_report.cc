#include "federation/usage_report.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"

namespace gpufed {
namespace {

constexpr std::pair<ReportDimension, absl::string_view> kDimensions[] = {
    {ReportDimension::kTenant, "tenant"},
    {ReportDimension::kProject, "project"},
    {ReportDimension::kCluster, "cluster"},
    {ReportDimension::kGpuModel, "gpu_model"},
    {ReportDimension::kMigProfile, "mig_profile"},
    {ReportDimension::kWorkloadClass, "workload_class"},
    {ReportDimension::kCapacity, "capacity"},
};

constexpr std::pair<ReportPeriod, absl::string_view> kPeriods[] = {
    {ReportPeriod::kWhole, "whole"},
    {ReportPeriod::kDay, "day"},
    {ReportPeriod::kWeek, "week"},
    {ReportPeriod::kMonth, "month"},
};

bool WholeDay(Timestamp t) { return std::chrono::floor<std::chrono::days>(t) == t; }

}  // namespace

absl::string_view ReportDimensionName(ReportDimension d) {
  for (const auto& [value, name] : kDimensions) {
    if (value == d) return name;
  }
  return "tenant";
}

std::optional<ReportDimension> ParseReportDimension(absl::string_view name) {
  for (const auto& [value, n] : kDimensions) {
    if (n == name) return value;
  }
  return std::nullopt;
}

absl::string_view ReportPeriodName(ReportPeriod p) {
  for (const auto& [value, name] : kPeriods) {
    if (value == p) return name;
  }
  return "whole";
}

std::optional<ReportPeriod> ParseReportPeriod(absl::string_view name) {
  for (const auto& [value, n] : kPeriods) {
    if (n == name) return value;
  }
  return std::nullopt;
}

absl::Status ValidateUsageQuery(const UsageQuery& query) {
  if (!WholeDay(query.from)) {
    return absl::InvalidArgumentError("start_time: must be a midnight (UTC): reports cover days");
  }
  if (!WholeDay(query.to)) {
    return absl::InvalidArgumentError("end_time: must be a midnight (UTC): reports cover days");
  }
  if (query.to <= query.from) {
    return absl::InvalidArgumentError("end_time: must be after start_time");
  }
  // In seconds: the difference of two far-apart Timestamps overflows their nanoseconds.
  const auto seconds = [](Timestamp t) {
    return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch());
  };
  if (seconds(query.to) - seconds(query.from) > kMaxReportWindow) {
    return absl::InvalidArgumentError(
        absl::StrCat("end_time: a report covers at most ", kMaxReportWindow.count() / 24, " days"));
  }
  std::set<ReportDimension> seen;
  for (size_t i = 0; i < query.group_by.size(); ++i) {
    if (!seen.insert(query.group_by[i]).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "group_by[", i, "]: ", ReportDimensionName(query.group_by[i]), " is asked for twice"));
    }
  }
  return absl::OkStatus();
}

int64_t GpuMicroseconds(const UsageRecord& record) {
  const int64_t us =
      std::chrono::duration_cast<std::chrono::microseconds>(record.to - record.from).count();
  if (record.fraction.den <= 0) return 0;
  const absl::int128 n = absl::int128(us) * record.fraction.num;
  const absl::int128 d = record.fraction.den;
  const absl::int128 q = n >= 0 ? (n + d / 2) / d : -((-n + d / 2) / d);
  return static_cast<int64_t>(q);
}

Timestamp PeriodStart(ReportPeriod period, Timestamp t, Timestamp window_from) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  const absl::CivilSecond civil = absl::ToCivilSecond(absl::FromChrono(t), utc);
  absl::CivilSecond start;
  switch (period) {
    case ReportPeriod::kWhole:
      return window_from;
    case ReportPeriod::kDay:
      start = absl::CivilDay(civil);
      break;
    case ReportPeriod::kWeek: {
      // ISO weeks start on Monday.
      absl::CivilDay day(civil);
      while (absl::GetWeekday(day) != absl::Weekday::monday) --day;
      start = day;
      break;
    }
    case ReportPeriod::kMonth:
      start = absl::CivilMonth(civil);
      break;
  }
  return absl::ToChronoTime(absl::FromCivil(start, utc));
}

std::string DimensionValue(const UsageRecord& record, ReportDimension d) {
  switch (d) {
    case ReportDimension::kTenant:
      return record.tenant;
    case ReportDimension::kProject:
      return record.project;
    case ReportDimension::kCluster:
      return record.cluster;
    case ReportDimension::kGpuModel:
      return record.gpu_model;
    case ReportDimension::kMigProfile:
      return record.mig_profile;
    case ReportDimension::kWorkloadClass:
      return std::string(ClassName(record.workload_class));
    case ReportDimension::kCapacity:
      return std::string(CapacityTypeName(record.capacity));
  }
  return "";
}

bool ReportOrder(const UsageLine& a, const UsageLine& b) {
  return std::tie(a.period_start, a.keys) < std::tie(b.period_start, b.keys);
}

std::vector<UsageLine> SumUsage(const UsageQuery& query, const std::vector<UsageRecord>& records,
                                const std::vector<TelemetryUse>& uses) {
  std::map<std::pair<Timestamp, std::vector<std::string>>, UsageLine> lines;
  auto line_of = [&](const UsageRecord& r) -> UsageLine& {
    std::vector<std::string> keys;
    keys.reserve(query.group_by.size());
    for (ReportDimension d : query.group_by) keys.push_back(DimensionValue(r, d));
    const Timestamp period = PeriodStart(query.period, r.from, query.from);
    UsageLine& line = lines[{period, keys}];
    line.period_start = period;
    line.keys = std::move(keys);
    return line;
  };
  for (const UsageRecord& r : records) {
    UsageLine& line = line_of(r);
    const int64_t gpu_us = GpuMicroseconds(r);
    line.gpu_microseconds += gpu_us;
    if (!r.price_micros_per_hour) line.unpriced_gpu_microseconds += gpu_us;
    line.cost_micros += r.cost_micros;
    ++line.records;
  }
  for (const TelemetryUse& u : uses) {
    if (u.measured_gpu_us == 0) continue;
    UsageLine& line = line_of(u.usage);
    line.measured_gpu_microseconds += u.measured_gpu_us;
    line.effective_gpu_microseconds += u.effective_gpu_us;
    line.coarse_gpu_microseconds += u.coarse_gpu_us;
  }
  std::vector<UsageLine> out;
  out.reserve(lines.size());
  for (auto& [key, line] : lines) out.push_back(std::move(line));
  return out;
}

}  // namespace gpufed
