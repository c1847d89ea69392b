#ifndef GPUFED_API_QUOTA_SERVICE_H_
#define GPUFED_API_QUOTA_SERVICE_H_

#include "api/context.h"
#include "gpufed/v1/quota_service.grpc.pb.h"

namespace gpufed::api {

// gpufed.v1.QuotaService: tenant and project quotas (federation/quota.h).
class QuotaServiceImpl final : public v1::QuotaService::CallbackService {
 public:
  explicit QuotaServiceImpl(ApiContext context) : ctx_(context) {}

  grpc::ServerUnaryReactor* SetQuota(grpc::CallbackServerContext* context,
                                     const v1::SetQuotaRequest* request,
                                     v1::Quota* response) override;
  grpc::ServerUnaryReactor* DeleteQuota(grpc::CallbackServerContext* context,
                                        const v1::DeleteQuotaRequest* request,
                                        v1::DeleteQuotaResponse* response) override;
  grpc::ServerUnaryReactor* ListQuotas(grpc::CallbackServerContext* context,
                                       const v1::ListQuotasRequest* request,
                                       v1::ListQuotasResponse* response) override;
  grpc::ServerUnaryReactor* GetQuotaUsage(grpc::CallbackServerContext* context,
                                          const v1::GetQuotaUsageRequest* request,
                                          v1::GetQuotaUsageResponse* response) override;
  grpc::ServerUnaryReactor* SetShareWeight(grpc::CallbackServerContext* context,
                                           const v1::SetShareWeightRequest* request,
                                           v1::ShareWeight* response) override;
  grpc::ServerUnaryReactor* ListPreemptions(grpc::CallbackServerContext* context,
                                            const v1::ListPreemptionsRequest* request,
                                            v1::ListPreemptionsResponse* response) override;

 private:
  ApiContext ctx_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_QUOTA_SERVICE_H_
