#ifndef GPUFED_API_REPORT_HTTP_H_
#define GPUFED_API_REPORT_HTTP_H_

// GET /reports/usage.csv on the server's HTTP side (docs/chargeback.md#reports): the usage
// report as CSV, for spreadsheets and scripts that speak HTTP, not gRPC. The same bearer token
// as on gRPC (header `Authorization: Bearer ...`), the same use case (ControlPlane::UsageReport,
// so the same RBAC), the same CSV as `gpufedctl report -o csv` (api/report_csv.h).
//
// Parameters: from, to (a date "2026-11-01" or RFC 3339; UTC midnights), period (whole, day, week,
// month; default day), by (comma-separated dimensions), tenant, project, cluster.

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/context.h"
#include "google/protobuf/timestamp.pb.h"
#include "gpufed/v1/report_service.pb.h"

namespace gpufed::api {

struct HttpAnswer {
  int status = 200;
  std::string content_type;
  std::string body;
};

// Answers one request; never throws. 401 without a valid token, 400 naming the parameter, 403,
// 404, 409 (a report too big), 503 (the database), with the reason as text.
HttpAnswer UsageCsvOverHttp(const ApiContext& ctx, absl::string_view authorization,
                            const std::multimap<std::string, std::string>& params);

// The request the parameters describe. INVALID_ARGUMENT naming the parameter.
absl::StatusOr<v1::GetUsageReportRequest> UsageRequestFromParams(
    const std::multimap<std::string, std::string>& params);

// A date ("2026-11-01", its midnight UTC) or RFC 3339, as `gpufedctl report` and the HTTP
// download read --from/--to. INVALID_ARGUMENT naming `field`.
absl::StatusOr<google::protobuf::Timestamp> ReportTimeFromText(absl::string_view field,
                                                               absl::string_view text);

}  // namespace gpufed::api

#endif  // GPUFED_API_REPORT_HTTP_H_
