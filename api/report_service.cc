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
                 ASSIGN_OR_RETURN(UsageReportResult report,
                                  ctx_.plane->UsageReport(who, std::move(query)));
                 *response = UsageReportToProto(report);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ReportServiceImpl::ListWorkloadTelemetry(
    grpc::CallbackServerContext* context, const v1::ListWorkloadTelemetryRequest* request,
    v1::ListWorkloadTelemetryResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(TelemetryWindow window, TelemetryWindowFromProto(*request));
                 ASSIGN_OR_RETURN(std::vector<TelemetryRow> rows,
                                  ctx_.plane->WorkloadTelemetry(who, window.workload, window.from,
                                                                window.to, window.limit));
                 for (const TelemetryRow& row : rows) {
                   *response->add_minutes() = TelemetryRowToProto(row);
                 }
                 response->set_truncated(rows.size() == static_cast<size_t>(window.limit));
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ReportServiceImpl::GetCostAllocation(
    grpc::CallbackServerContext* context, const v1::GetCostAllocationRequest* request,
    v1::GetCostAllocationResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(CostQuery query, CostQueryFromProto(*request));
                 ASSIGN_OR_RETURN(CostReport report, ctx_.plane->CostAllocationReport(who, query));
                 *response = CostAllocationToProto(report);
                 return absl::OkStatus();
               });
}

}  // namespace gpufed::api
