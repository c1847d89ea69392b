#include "api/report_service.h"

#include "api/convert.h"
#include "api/workload_service.h"
#include "federation/status_macros.h"

namespace gpufed::api {

grpc::ServerUnaryReactor* ReportServiceImpl::GetUsageReport(
    grpc::CallbackServerContext* context, const v1::GetUsageReportRequest* request,
    v1::GetUsageReportResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(UsageQuery query, UsageQueryFromProto(*request));
                 ASSIGN_OR_RETURN(std::vector<UsageLine> lines,
                                  ctx_.plane->UsageReport(who, std::move(query)));
                 for (const UsageLine& line : lines) {
                   *response->add_lines() = UsageLineToProto(line);
                 }
                 return absl::OkStatus();
               });
}

}  // namespace gpufed::api
