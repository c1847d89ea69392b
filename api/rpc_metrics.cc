#include "api/rpc_metrics.h"

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "google/protobuf/descriptor.h"

namespace gpufed::api {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

// grpc::StatusCode OK (0) .. UNAUTHENTICATED (16); a code outside is counted as UNKNOWN.
constexpr int kCodes = 17;

const prometheus::Histogram::BucketBoundaries& Buckets() {
  static const auto* const buckets = new prometheus::Histogram::BucketBoundaries{
      0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  return *buckets;
}

// Whether `path` ("/package.Service/Method") names a method this server may serve: one the
// generated descriptor pool knows (gpufed's services, reflection), or gRPC's health service
// (which its library answers without the protobuf descriptors).
bool KnownMethod(absl::string_view path, std::string* service, std::string* method) {
  if (!absl::ConsumePrefix(&path, "/")) return false;
  const size_t slash = path.find('/');
  if (slash == absl::string_view::npos) return false;
  *service = std::string(path.substr(0, slash));
  *method = std::string(path.substr(slash + 1));
  if (*service == "grpc.health.v1.Health") return *method == "Check" || *method == "Watch";
  return google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(
             absl::StrReplaceAll(path, {{"/", "."}})) != nullptr;
}

}  // namespace

struct RpcMetricsInterceptorFactory::Method {
  std::string service;
  std::string name;
  // By code; null until a call ends with it.
  std::array<prometheus::Counter*, kCodes> handled{};
  std::array<prometheus::Histogram*, kCodes> seconds{};
};

namespace {

class RpcMetricsInterceptor final : public grpc::experimental::Interceptor {
 public:
  RpcMetricsInterceptor(RpcMetricsInterceptorFactory* factory,
                        RpcMetricsInterceptorFactory::Method* method, bool unary)
      : factory_(factory), method_(method), unary_(unary) {}

  // A call that ends without sending a status (the server shut down under it) counts as
  // CANCELLED.
  ~RpcMetricsInterceptor() override {
    if (!recorded_) factory_->Record(*method_, grpc::StatusCode::CANCELLED, Elapsed(), unary_);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (!recorded_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      recorded_ = true;
      factory_->Record(*method_, methods->GetSendStatus().error_code(), Elapsed(), unary_);
    }
    methods->Proceed();
  }

 private:
  [[nodiscard]] double Elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  RpcMetricsInterceptorFactory* const factory_;
  RpcMetricsInterceptorFactory::Method* const method_;
  const bool unary_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  bool recorded_ = false;
};

}  // namespace

RpcMetricsInterceptorFactory::RpcMetricsInterceptorFactory(Metrics& metrics)
    : metrics_(metrics), unknown_(std::make_unique<Method>()) {
  unknown_->service = "unknown";
  unknown_->name = "unknown";
}

RpcMetricsInterceptorFactory::~RpcMetricsInterceptorFactory() = default;

grpc::experimental::Interceptor* RpcMetricsInterceptorFactory::CreateServerInterceptor(
    ServerRpcInfo* info) {
  return new RpcMetricsInterceptor(this, &Find(info->method()),
                                   info->type() == ServerRpcInfo::Type::UNARY);
}

RpcMetricsInterceptorFactory::Method& RpcMetricsInterceptorFactory::Find(absl::string_view path) {
  absl::MutexLock lock(&mu_);
  if (auto it = methods_.find(path); it != methods_.end()) return *it->second;
  auto method = std::make_unique<Method>();
  // Only known methods get an entry: made-up names must not grow the map either.
  if (!KnownMethod(path, &method->service, &method->name)) return *unknown_;
  return *methods_.emplace(std::string(path), std::move(method)).first->second;
}

void RpcMetricsInterceptorFactory::Record(Method& method, grpc::StatusCode code, double seconds,
                                          bool unary) {
  int c = static_cast<int>(code);
  if (c < 0 || c >= kCodes) c = static_cast<int>(grpc::StatusCode::UNKNOWN);
  prometheus::Counter* handled = nullptr;
  prometheus::Histogram* histogram = nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (method.handled[c] == nullptr || (unary && method.seconds[c] == nullptr)) {
      const prometheus::Labels labels{
          {"grpc_service", method.service},
          {"grpc_method", method.name},
          {"grpc_code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}};
      method.handled[c] = &metrics_.rpcs_handled.Add(labels);
      if (unary) method.seconds[c] = &metrics_.rpc_seconds.Add(labels, Buckets());
    }
    handled = method.handled[c];
    histogram = unary ? method.seconds[c] : nullptr;
  }
  handled->Increment();
  if (histogram != nullptr) histogram->Observe(seconds);
}

}  // namespace gpufed::api
