#include "api/report_csv.h"

#include <csv.h>

#include <cstdlib>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "federation/usage_report.h"

namespace gpufed::api {
namespace {

// One field, quoted (quotes inside doubled) by libcsv.
void AppendField(std::string& line, const std::string& value) {
  if (!line.empty() && line.back() != '\n') line.push_back(',');
  std::string quoted(2 * value.size() + 2, '\0');
  const size_t n = csv_write(quoted.data(), quoted.size(), value.data(), value.size());
  quoted.resize(n);
  line += quoted;
}

}  // namespace

std::string DimensionColumn(v1::ReportDimension d) {
  // The proto's numbering is the domain's, plus one (0 is UNSPECIFIED).
  if (d < v1::REPORT_DIMENSION_TENANT || d > v1::REPORT_DIMENSION_CAPACITY) return "unknown";
  return std::string(ReportDimensionName(static_cast<ReportDimension>(d - 1)));
}

std::string SixDecimals(int64_t value, int64_t scale) {
  // value x 10^6 / scale, rounded, then split into whole and fraction.
  const absl::int128 n = absl::int128(value) * 1'000'000;
  const absl::int128 half = scale / 2;
  const absl::int128 q = n >= 0 ? (n + half) / scale : -((-n + half) / scale);
  const bool negative = q < 0;
  const absl::uint128 magnitude = static_cast<absl::uint128>(negative ? -q : q);
  const auto whole = static_cast<uint64_t>(magnitude / 1'000'000);
  const auto fraction = static_cast<uint64_t>(magnitude % 1'000'000);
  return absl::StrFormat("%s%d.%06d", negative ? "-" : "", whole, fraction);
}

std::string UsageReportCsv(const v1::GetUsageReportRequest& request,
                           const v1::GetUsageReportResponse& response) {
  std::string out;
  std::string line;
  AppendField(line, "period_start");
  for (int d : request.group_by()) AppendField(line, DimensionColumn(v1::ReportDimension(d)));
  for (const char* column :
       {"gpu_hours", "unpriced_gpu_hours", "cost", "records", "measured_gpu_hours",
        "effective_gpu_hours", "coarse_gpu_hours", "utilisation"}) {
    AppendField(line, column);
  }
  out += line + "\r\n";
  constexpr int64_t kGpuMicrosPerHour = 3'600'000'000;
  for (const v1::UsageReportLine& l : response.lines()) {
    line.clear();
    const absl::Time start = absl::FromUnixSeconds(l.period_start().seconds()) +
                             absl::Nanoseconds(l.period_start().nanos());
    AppendField(line, absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", start, absl::UTCTimeZone()));
    for (const std::string& key : l.keys()) AppendField(line, key);
    AppendField(line, SixDecimals(l.gpu_microseconds(), kGpuMicrosPerHour));
    AppendField(line, SixDecimals(l.unpriced_gpu_microseconds(), kGpuMicrosPerHour));
    AppendField(line, SixDecimals(l.cost_micros(), 1'000'000));
    AppendField(line, absl::StrCat(l.records()));
    AppendField(line, SixDecimals(l.measured_gpu_microseconds(), kGpuMicrosPerHour));
    AppendField(line, SixDecimals(l.effective_gpu_microseconds(), kGpuMicrosPerHour));
    AppendField(line, SixDecimals(l.coarse_gpu_microseconds(), kGpuMicrosPerHour));
    // Effective over measured; empty when nothing was measured.
    AppendField(line,
                l.measured_gpu_microseconds() > 0
                    ? SixDecimals(l.effective_gpu_microseconds(), l.measured_gpu_microseconds())
                    : std::string());
    out += line + "\r\n";
  }
  return out;
}

std::string IdleGuaranteeCsv(const v1::GetUsageReportResponse& response) {
  std::string out;
  std::string line;
  for (const char* column : {"period_start", "tenant", "project", "resource", "reserved_unit_hours",
                             "idle_unit_hours", "idle_share"}) {
    AppendField(line, column);
  }
  out += line + "\r\n";
  constexpr int64_t kUnitMicrosPerHour = 3'600'000'000;
  for (const v1::IdleGuaranteeLine& g : response.guarantees()) {
    line.clear();
    const absl::Time start = absl::FromUnixSeconds(g.period_start().seconds()) +
                             absl::Nanoseconds(g.period_start().nanos());
    AppendField(line, absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", start, absl::UTCTimeZone()));
    AppendField(line, g.tenant());
    AppendField(line, g.project());
    AppendField(line, g.resource());
    AppendField(line, SixDecimals(g.reserved_unit_microseconds(), kUnitMicrosPerHour));
    AppendField(line, SixDecimals(g.idle_unit_microseconds(), kUnitMicrosPerHour));
    // Idle over reserved; empty when nothing was reserved.
    AppendField(line, g.reserved_unit_microseconds() > 0
                          ? SixDecimals(g.idle_unit_microseconds(), g.reserved_unit_microseconds())
                          : std::string());
    out += line + "\r\n";
  }
  return out;
}

}  // namespace gpufed::api
