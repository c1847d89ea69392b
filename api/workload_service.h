#ifndef GPUFED_API_WORKLOAD_SERVICE_H_
#define GPUFED_API_WORKLOAD_SERVICE_H_

#include "api/context.h"
#include "gpufed/v1/workload_service.grpc.pb.h"

namespace gpufed::api {

// gpufed.v1.WorkloadService on the gRPC callback API. Each handler authenticates, converts,
// calls a ControlPlane use case on the executor (which authorises), converts back, maps the
// status. Tenant-scoped callers see only their tenant; another tenant's workload is NOT_FOUND,
// never PERMISSION_DENIED with details.
class WorkloadServiceImpl final : public v1::WorkloadService::CallbackService {
 public:
  explicit WorkloadServiceImpl(ApiContext context) : ctx_(context) {}

  grpc::ServerUnaryReactor* Submit(grpc::CallbackServerContext* context,
                                   const v1::SubmitRequest* request,
                                   v1::SubmitResponse* response) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext* context,
                                const v1::GetWorkloadRequest* request,
                                v1::Workload* response) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* context,
                                 const v1::ListWorkloadsRequest* request,
                                 v1::ListWorkloadsResponse* response) override;
  grpc::ServerUnaryReactor* Cancel(grpc::CallbackServerContext* context,
                                   const v1::CancelRequest* request,
                                   v1::Workload* response) override;
  grpc::ServerUnaryReactor* Explain(grpc::CallbackServerContext* context,
                                    const v1::ExplainRequest* request,
                                    v1::ExplainResponse* response) override;
  grpc::ServerUnaryReactor* WhatIf(grpc::CallbackServerContext* context,
                                   const v1::SubmitRequest* request,
                                   v1::WhatIfResponse* response) override;
  grpc::ServerWriteReactor<v1::WorkloadEvent>* Watch(grpc::CallbackServerContext* context,
                                                     const v1::WatchRequest* request) override;

 private:
  ApiContext ctx_;
};

// Runs `fn` (returning absl::Status) on the executor and finishes the reactor with its status;
// UNAVAILABLE at once when the executor is saturated. A call whose client went away or whose
// deadline passed while it was queued is answered without running; while `fn` runs, the call's
// deadline bounds the stores' waits (federation/request_deadline.h).
template <typename Fn>
grpc::ServerUnaryReactor* RunOnExecutor(const ApiContext& ctx, grpc::CallbackServerContext* context,
                                        Fn fn);

// The same for calls that complete later: `fn(done)` calls `done(status)` once, from any thread.
template <typename Fn>
grpc::ServerUnaryReactor* RunOnExecutorAsync(const ApiContext& ctx,
                                             grpc::CallbackServerContext* context, Fn fn);

}  // namespace gpufed::api

#include "api/run_on_executor.inc"

#endif  // GPUFED_API_WORKLOAD_SERVICE_H_
