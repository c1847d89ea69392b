#ifndef GPUFED_API_REPORT_SERVICE_H_
#define GPUFED_API_REPORT_SERVICE_H_

#include "api/context.h"
#include "gpufed/v1/report_service.grpc.pb.h"

namespace gpufed::api {

// gpufed.v1.ReportService: usage and cost reports (docs/chargeback.md#reports).
class ReportServiceImpl final : public v1::ReportService::CallbackService {
 public:
  explicit ReportServiceImpl(ApiContext context) : ctx_(context) {}

  grpc::ServerUnaryReactor* GetUsageReport(grpc::CallbackServerContext* context,
                                           const v1::GetUsageReportRequest* request,
                                           v1::GetUsageReportResponse* response) override;
  grpc::ServerUnaryReactor* ListWorkloadTelemetry(
      grpc::CallbackServerContext* context, const v1::ListWorkloadTelemetryRequest* request,
      v1::ListWorkloadTelemetryResponse* response) override;
  grpc::ServerUnaryReactor* GetCostAllocation(grpc::CallbackServerContext* context,
                                              const v1::GetCostAllocationRequest* request,
                                              v1::GetCostAllocationResponse* response) override;

 private:
  ApiContext ctx_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_REPORT_SERVICE_H_
