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

// Whether a call changes state (a write: counted against its caller's write rate, ApiContext::
// writes) or only reads.
enum class CallKind { kRead, kWrite };

// Serves a unary call: refuses at once a request larger than its limit (api/limits.h: INVALID_
// ARGUMENT naming the field) and a write over its caller's rate (RESOURCE_EXHAUSTED), both on
// gRPC's thread when the caller is known without the store; otherwise runs, on the executor,
// `fn(const auth::Principal& who)` (returning absl::Status) for the authenticated caller and
// finishes the reactor with its status. UNAVAILABLE at once when the executor is saturated. A
// call whose client went away or whose deadline passed while it was queued is answered without
// running. The deadline is the client's, bounded by ApiContext::max_call_duration; while `fn`
// runs it bounds the stores' waits (federation/request_deadline.h).
template <typename Fn>
grpc::ServerUnaryReactor* Serve(const ApiContext& ctx, grpc::CallbackServerContext* context,
                                const google::protobuf::Message& request, CallKind kind, Fn fn);

// The same for calls that complete later: `fn(who, deadline, done)` calls `done(status)` once,
// from any thread. A known caller's `fn` runs on gRPC's thread (it must not block).
template <typename Fn>
grpc::ServerUnaryReactor* ServeAsync(const ApiContext& ctx, grpc::CallbackServerContext* context,
                                     const google::protobuf::Message& request, CallKind kind,
                                     Fn fn);

}  // namespace gpufed::api

#include "api/run_on_executor.inc"

#endif  // GPUFED_API_WORKLOAD_SERVICE_H_
