#ifndef GPUFED_TESTS_CLI_FAKE_GPUFED_SERVER_H_
#define GPUFED_TESTS_CLI_FAKE_GPUFED_SERVER_H_

// A small in-memory gpufed server for the command-line tests: a real gRPC server on
// 127.0.0.1 (port 0) implementing WorkloadService, ClusterService and TenantService with just
// enough behaviour to check the client side: idempotent submit, paging, cancel, watch, explain,
// clusters and tenants, plus scripted failures and a record of every request and its authorization.
// The real server's behaviour is tested by the service and end-to-end tests.
//
// Thread safety: all members may be called from any thread.

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/quota_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/server.h"

namespace gpufed::cli::testing {

class FakeGpufedServer final : public v1::WorkloadService::Service,
                               public v1::ClusterService::Service,
                               public v1::TenantService::Service,
                               public v1::QuotaService::Service {
 public:
  // Starts listening; the server stops when the object is destroyed.
  static std::unique_ptr<FakeGpufedServer> Start();
  ~FakeGpufedServer() override;

  [[nodiscard]] std::string address() const { return address_; }

  // When set, calls without "authorization: Bearer <token>" get UNAUTHENTICATED.
  void RequireToken(std::string token);

  // The next Submit calls answer these statuses, in order, before normal service resumes.
  // With `commit_first`, each is returned after the workload was committed (a lost reply).
  void FailNextSubmits(std::vector<grpc::Status> statuses, bool commit_first = false);

  // Adds a stored workload (state as given) and returns its id.
  std::string AddWorkload(v1::Workload workload);

  // States that Watch on one workload walks through after its current state, the last of which
  // should be terminal. Each step is also applied to the stored workload.
  void SetWatchScript(std::vector<v1::WorkloadState> states);
  // The next Watch calls each end with one of these statuses, in order: a watch of one workload
  // after `steps` more steps of its script, a watch of every workload after its events. Like
  // the real server, a watch of one workload resumed with after_version sends the workload's
  // current state only if its version is greater, then the rest of the script.
  struct WatchDrop {
    int steps = 0;
    grpc::Status status;
  };
  void DropNextWatches(std::vector<WatchDrop> drops);

  void SetClusters(std::vector<v1::Cluster> clusters);

  // What Explain answers for workload `id` (besides the stored workload). Without a script,
  // Explain answers the stored pending reason.
  void SetExplanation(const std::string& id, std::string explanation, bool never_fits,
                      std::string fits_now_on = "");

  // The objective and candidate clusters Explain answers for workload `id` (with or without a
  // SetExplanation).
  void SetExplainCandidates(const std::string& id, v1::Objective objective,
                            std::vector<v1::ClusterCandidate> candidates);

  // What WhatIf answers for a valid spec (one with a name); an empty response until set.
  void SetWhatIf(v1::WhatIfResponse response);

  // The next ApplyClusters call answers this status (once) instead of applying.
  void FailNextApply(grpc::Status status);

  // List answers at most this many workloads per page, whatever the client asks (default 1000).
  void SetMaxPageSize(size_t size);

  // Watch without an id sends one event per stored workload, then waits for the client to
  // cancel. How many such streams saw a cancellation:
  [[nodiscard]] int watch_all_cancelled() const;

  // What the server saw.
  [[nodiscard]] std::vector<v1::SubmitRequest> submits() const;
  [[nodiscard]] std::vector<v1::SubmitRequest> what_ifs() const;
  [[nodiscard]] std::vector<v1::ListWorkloadsRequest> list_requests() const;
  [[nodiscard]] std::vector<v1::ListClustersRequest> cluster_requests() const;
  [[nodiscard]] std::vector<v1::CreateTokenRequest> token_requests() const;
  [[nodiscard]] std::vector<int64_t> revoked_tokens() const;
  [[nodiscard]] std::vector<v1::DrainRequest> drain_requests() const;
  [[nodiscard]] std::vector<v1::ApplyClustersRequest> apply_requests() const;
  [[nodiscard]] std::vector<v1::WatchRequest> watch_requests() const;
  // The authorization metadata of every call, in order ("" when absent).
  [[nodiscard]] std::vector<std::string> authorizations() const;
  // The deadline of every call, in order (time_point::max() when it had none).
  [[nodiscard]] std::vector<std::chrono::system_clock::time_point> deadlines() const;
  // Workloads stored (created by Submit or AddWorkload).
  [[nodiscard]] int workload_count() const;

  // WorkloadService
  grpc::Status Submit(grpc::ServerContext* context, const v1::SubmitRequest* request,
                      v1::SubmitResponse* response) override;
  grpc::Status Get(grpc::ServerContext* context, const v1::GetWorkloadRequest* request,
                   v1::Workload* response) override;
  grpc::Status List(grpc::ServerContext* context, const v1::ListWorkloadsRequest* request,
                    v1::ListWorkloadsResponse* response) override;
  grpc::Status Cancel(grpc::ServerContext* context, const v1::CancelRequest* request,
                      v1::Workload* response) override;
  grpc::Status Watch(grpc::ServerContext* context, const v1::WatchRequest* request,
                     grpc::ServerWriter<v1::WorkloadEvent>* writer) override;
  grpc::Status Explain(grpc::ServerContext* context, const v1::ExplainRequest* request,
                       v1::ExplainResponse* response) override;
  // Records the request; INVALID_ARGUMENT for a spec without a name, else the SetWhatIf answer.
  // Stores nothing.
  grpc::Status WhatIf(grpc::ServerContext* context, const v1::SubmitRequest* request,
                      v1::WhatIfResponse* response) override;

  // ClusterService
  grpc::Status ListClusters(grpc::ServerContext* context, const v1::ListClustersRequest* request,
                            v1::ListClustersResponse* response) override;
  grpc::Status GetCluster(grpc::ServerContext* context, const v1::GetClusterRequest* request,
                          v1::Cluster* response) override;
  // A cluster set by SetClusters: its workloads (by assignment) with more than one attempt are
  // evicted when asked, the rest stay; else NOT_FOUND.
  grpc::Status Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                     v1::DrainResponse* response) override;
  // Declarations kept by cluster name: ADDED for a new name, UNCHANGED for an equal one, else
  // CHANGED with one change line; nothing is kept on a dry run.
  grpc::Status ApplyClusters(grpc::ServerContext* context, const v1::ApplyClustersRequest* request,
                             v1::ApplyClustersResponse* response) override;
  grpc::Status ListDeclarations(grpc::ServerContext* context,
                                const v1::ListDeclarationsRequest* request,
                                v1::ListDeclarationsResponse* response) override;

  // TenantService
  grpc::Status CreateTenant(grpc::ServerContext* context, const v1::CreateTenantRequest* request,
                            v1::Tenant* response) override;
  grpc::Status ListTenants(grpc::ServerContext* context, const v1::ListTenantsRequest* request,
                           v1::ListTenantsResponse* response) override;
  // QuotaService: quotas kept by (tenant, project, resource); no checks against a pool.
  grpc::Status SetQuota(grpc::ServerContext* context, const v1::SetQuotaRequest* request,
                        v1::Quota* response) override;
  grpc::Status DeleteQuota(grpc::ServerContext* context, const v1::DeleteQuotaRequest* request,
                           v1::DeleteQuotaResponse* response) override;
  grpc::Status ListQuotas(grpc::ServerContext* context, const v1::ListQuotasRequest* request,
                          v1::ListQuotasResponse* response) override;
  // Each quota as if three quarters of its limit were held; borrowed above the guarantee.
  grpc::Status GetQuotaUsage(grpc::ServerContext* context, const v1::GetQuotaUsageRequest* request,
                             v1::GetQuotaUsageResponse* response) override;
  grpc::Status CreateProject(grpc::ServerContext* context, const v1::CreateProjectRequest* request,
                             v1::Project* response) override;
  grpc::Status ListProjects(grpc::ServerContext* context, const v1::ListProjectsRequest* request,
                            v1::ListProjectsResponse* response) override;
  grpc::Status CreateToken(grpc::ServerContext* context, const v1::CreateTokenRequest* request,
                           v1::CreateTokenResponse* response) override;
  grpc::Status RevokeToken(grpc::ServerContext* context, const v1::RevokeTokenRequest* request,
                           v1::RevokeTokenResponse* response) override;

 private:
  FakeGpufedServer() = default;

  // Records the call's authorization and checks it.
  grpc::Status Authorize(grpc::ServerContext* context);

  std::unique_ptr<grpc::Server> server_;
  std::string address_;

  mutable absl::Mutex mu_;
  std::string required_token_ ABSL_GUARDED_BY(mu_);
  std::deque<grpc::Status> submit_failures_ ABSL_GUARDED_BY(mu_);
  bool commit_before_failing_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // id -> workload, in creation order (ids grow).
  std::map<int64_t, v1::Workload> workloads_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> by_key_ ABSL_GUARDED_BY(mu_);
  // What is left of the script: each step taken is removed.
  std::deque<v1::WorkloadState> watch_script_ ABSL_GUARDED_BY(mu_);
  std::deque<WatchDrop> watch_drops_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::WatchRequest> watch_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Cluster> clusters_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::ExplainResponse> explanations_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Tenant> tenants_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Project> projects_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::Quota> quotas_ ABSL_GUARDED_BY(mu_);
  int watch_all_cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<v1::SubmitRequest> submits_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::SubmitRequest> what_ifs_ ABSL_GUARDED_BY(mu_);
  v1::WhatIfResponse what_if_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListWorkloadsRequest> list_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ListClustersRequest> cluster_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::DrainRequest> drain_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ApplyClustersRequest> apply_requests_ ABSL_GUARDED_BY(mu_);
  std::optional<grpc::Status> apply_failure_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::ClusterDeclaration> declarations_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::CreateTokenRequest> token_requests_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> revoked_tokens_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mu_);
  std::vector<std::chrono::system_clock::time_point> deadlines_ ABSL_GUARDED_BY(mu_);
  size_t max_page_size_ ABSL_GUARDED_BY(mu_) = 1000;
};

// A fixed creation time for fake workloads: 2026-01-02T03:04:05Z.
constexpr int64_t kFakeCreateSeconds = 1767323045;

}  // namespace gpufed::cli::testing

#endif  // GPUFED_TESTS_CLI_FAKE_GPUFED_SERVER_H_
