#ifndef GPUFED_API_RPC_METRICS_H_
#define GPUFED_API_RPC_METRICS_H_

// RPC counts and latency for every service, in one place instead of in each handler: a server
// interceptor that, when a call sends its status, counts it in gpufed_grpc_server_handled_total
// and, for a unary call, observes the time since the call arrived in
// gpufed_grpc_server_handling_seconds (a stream's lifetime is no latency), both labelled
// grpc_service, grpc_method and grpc_code (api/metrics.h). It sees the status the client gets:
// registered after ParseErrorInterceptorFactory, it sees that one's rewrite too.
//
// Label values stay bounded whatever clients send: a method the generated descriptor pool does
// not know (nor gRPC's health service) is counted as service and method "unknown".

#include <array>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "api/metrics.h"
#include "grpcpp/support/server_interceptor.h"
#include "grpcpp/support/status.h"

namespace gpufed::api {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators. `metrics` outlives the server.
// Thread-safe.
class RpcMetricsInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RpcMetricsInterceptorFactory(Metrics& metrics);
  ~RpcMetricsInterceptorFactory() override;

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // The series of one method, made when first needed.
  struct Method;
  // Counts one call of `method` that ended with `code`; observes `seconds` when `unary`.
  void Record(Method& method, grpc::StatusCode code, double seconds, bool unary);

 private:
  // The method at `path` ("/gpufed.v1.WorkloadService/Submit"); the "unknown" one for a path that
  // names no known method.
  Method& Find(absl::string_view path);

  Metrics& metrics_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<Method>> methods_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Method> unknown_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_RPC_METRICS_H_
