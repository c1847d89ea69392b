#ifndef GPUFED_API_REPORT_CSV_H_
#define GPUFED_API_REPORT_CSV_H_

// A usage report as CSV (RFC 4180, every field quoted by libcsv): what `gpufedctl report -o csv`
// prints and the server's HTTP download sends, byte for byte the same for the same report.
//
//   period_start,tenant,gpu_model,gpu_hours,unpriced_gpu_hours,cost,records
//   "2026-11-01T00:00:00Z","acme","H100-80GB","12.500000","0.000000","50.000000","25"
//
// GPU-hours and cost have six decimals, exact (integers of the API scaled, never a float).

#include <string>

#include "gpufed/v1/report_service.pb.h"

namespace gpufed::api {

std::string UsageReportCsv(const v1::GetUsageReportRequest& request,
                           const v1::GetUsageReportResponse& response);

// A report's idle guarantees as CSV, in the same encoding:
//
//   period_start,tenant,project,resource,reserved_unit_hours,idle_unit_hours,idle_share
std::string IdleGuaranteeCsv(const v1::GetUsageReportResponse& response);

// The column name of a dimension ("tenant", "gpu_model", ...); "unknown" for others.
std::string DimensionColumn(v1::ReportDimension d);

// `value` / `scale` with six decimals, rounded half away from zero: (1500000, 1000000) ->
// "1.500000".
std::string SixDecimals(int64_t value, int64_t scale);

}  // namespace gpufed::api

#endif  // GPUFED_API_REPORT_CSV_H_
