#include "api/quota_service.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "api/workload_service.h"
#include "federation/status_macros.h"

namespace gpufed::api {

grpc::ServerUnaryReactor* QuotaServiceImpl::SetQuota(grpc::CallbackServerContext* context,
                                                     const v1::SetQuotaRequest* request,
                                                     v1::Quota* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 if (!request->has_quota()) return absl::InvalidArgumentError("quota: required");
                 ASSIGN_OR_RETURN(Quota set,
                                  ctx_.plane->SetQuota(who, QuotaFromProto(request->quota()),
                                                       request->overcommit()));
                 *response = QuotaToProto(set);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* QuotaServiceImpl::DeleteQuota(grpc::CallbackServerContext* context,
                                                        const v1::DeleteQuotaRequest* request,
                                                        v1::DeleteQuotaResponse* /*response*/) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request](const auth::Principal& who) -> absl::Status {
                 return ctx_.plane->DeleteQuota(
                     who, QuotaKey{request->tenant(), request->project(), request->resource()});
               });
}

grpc::ServerUnaryReactor* QuotaServiceImpl::ListQuotas(grpc::CallbackServerContext* context,
                                                       const v1::ListQuotasRequest* request,
                                                       v1::ListQuotasResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(std::vector<Quota> quotas,
                                  ctx_.plane->ListQuotas(who, request->tenant()));
                 for (const Quota& q : quotas) *response->add_quotas() = QuotaToProto(q);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* QuotaServiceImpl::GetQuotaUsage(grpc::CallbackServerContext* context,
                                                          const v1::GetQuotaUsageRequest* request,
                                                          v1::GetQuotaUsageResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(std::vector<QuotaUsage> usage,
                                  ctx_.plane->QuotaUsageOf(who, request->tenant()));
                 for (const QuotaUsage& u : usage) *response->add_usage() = QuotaUsageToProto(u);
                 ASSIGN_OR_RETURN(std::vector<FairShare> shares,
                                  ctx_.plane->FairSharesOf(who, request->tenant()));
                 for (const FairShare& f : shares)
                   *response->add_fair_shares() = FairShareToProto(f);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* QuotaServiceImpl::ListPreemptions(
    grpc::CallbackServerContext* context, const v1::ListPreemptionsRequest* request,
    v1::ListPreemptionsResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 int64_t before = 0;
                 if (!request->page_token().empty() &&
                     (!absl::SimpleAtoi(request->page_token(), &before) || before <= 0)) {
                   return absl::InvalidArgumentError("page_token: not a token this server issued");
                 }
                 ASSIGN_OR_RETURN(PreemptionPage page,
                                  ctx_.plane->ListPreemptions(who, request->tenant(), before,
                                                              request->page_size()));
                 for (const PreemptionRecord& r : page.records) {
                   *response->add_preemptions() = PreemptionToProto(r);
                 }
                 if (page.next_before > 0)
                   response->set_next_page_token(absl::StrCat(page.next_before));
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* QuotaServiceImpl::SetShareWeight(grpc::CallbackServerContext* context,
                                                           const v1::SetShareWeightRequest* request,
                                                           v1::ShareWeight* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(
                     ShareWeight stored,
                     ctx_.plane->SetShareWeight(who, ShareWeightFromProto(request->weight())));
                 *response = ShareWeightToProto(stored);
                 return absl::OkStatus();
               });
}

}  // namespace gpufed::api
