#ifndef GPUFED_API_AUDIT_SERVICE_H_
#define GPUFED_API_AUDIT_SERVICE_H_

#include "api/context.h"
#include "gpufed/v1/audit_service.grpc.pb.h"

namespace gpufed::api {

// gpufed.v1.AuditService: the audit trail, read and verified (docs/security.md#audit).
class AuditServiceImpl final : public v1::AuditService::CallbackService {
 public:
  explicit AuditServiceImpl(ApiContext context) : ctx_(context) {}

  grpc::ServerUnaryReactor* ListAuditEvents(grpc::CallbackServerContext* context,
                                            const v1::ListAuditEventsRequest* request,
                                            v1::ListAuditEventsResponse* response) override;
  grpc::ServerUnaryReactor* VerifyAudit(grpc::CallbackServerContext* context,
                                        const v1::VerifyAuditRequest* request,
                                        v1::VerifyAuditResponse* response) override;

 private:
  ApiContext ctx_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_AUDIT_SERVICE_H_
