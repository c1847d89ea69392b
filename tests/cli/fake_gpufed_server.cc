#include "tests/cli/fake_gpufed_server.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/server_builder.h"

namespace gpufed::cli::testing {
namespace {

bool IsTerminal(v1::WorkloadState s) {
  return s == v1::WORKLOAD_STATE_SUCCEEDED || s == v1::WORKLOAD_STATE_FAILED ||
         s == v1::WORKLOAD_STATE_CANCELLED;
}

v1::WorkloadEvent Event(const v1::Workload& w, v1::WorkloadState from) {
  v1::WorkloadEvent event;
  *event.mutable_workload() = w;
  event.set_from_state(from);
  event.set_to_state(w.state());
  event.mutable_time()->set_seconds(kFakeCreateSeconds + static_cast<int64_t>(w.version()));
  *event.mutable_resume_after() = event.time();
  return event;
}

}  // namespace

std::unique_ptr<FakeGpufedServer> FakeGpufedServer::Start() {
  std::unique_ptr<FakeGpufedServer> fake(new FakeGpufedServer());
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(static_cast<v1::WorkloadService::Service*>(fake.get()));
  builder.RegisterService(static_cast<v1::ClusterService::Service*>(fake.get()));
  builder.RegisterService(static_cast<v1::TenantService::Service*>(fake.get()));
  builder.RegisterService(static_cast<v1::QuotaService::Service*>(fake.get()));
  fake->server_ = builder.BuildAndStart();
  if (fake->server_ == nullptr || port == 0) return nullptr;
  fake->address_ = absl::StrCat("127.0.0.1:", port);
  return fake;
}

FakeGpufedServer::~FakeGpufedServer() {
  if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
}

void FakeGpufedServer::RequireToken(std::string token) {
  absl::MutexLock lock(&mu_);
  required_token_ = std::move(token);
}

void FakeGpufedServer::FailNextSubmits(std::vector<grpc::Status> statuses, bool commit_first) {
  absl::MutexLock lock(&mu_);
  submit_failures_.assign(statuses.begin(), statuses.end());
  commit_before_failing_ = commit_first;
}

std::string FakeGpufedServer::AddWorkload(v1::Workload workload) {
  absl::MutexLock lock(&mu_);
  const int64_t id = next_id_++;
  workload.set_id(absl::StrCat(id));
  if (workload.version() == 0) workload.set_version(1);  // as stored: versions start at 1
  if (workload.create_time().seconds() == 0) {
    workload.mutable_create_time()->set_seconds(kFakeCreateSeconds);
  }
  workloads_[id] = workload;
  return workload.id();
}

void FakeGpufedServer::SetWatchScript(std::vector<v1::WorkloadState> states) {
  absl::MutexLock lock(&mu_);
  watch_script_.assign(states.begin(), states.end());
}

void FakeGpufedServer::DropNextWatches(std::vector<WatchDrop> drops) {
  absl::MutexLock lock(&mu_);
  watch_drops_.assign(drops.begin(), drops.end());
}

std::vector<v1::WatchRequest> FakeGpufedServer::watch_requests() const {
  absl::MutexLock lock(&mu_);
  return watch_requests_;
}

void FakeGpufedServer::SetClusters(std::vector<v1::Cluster> clusters) {
  absl::MutexLock lock(&mu_);
  clusters_ = std::move(clusters);
}

void FakeGpufedServer::SetExplanation(const std::string& id, std::string explanation,
                                      bool never_fits, std::string fits_now_on) {
  absl::MutexLock lock(&mu_);
  v1::ExplainResponse& r = explanations_[id];
  r.set_explanation(std::move(explanation));
  r.set_never_fits(never_fits);
  r.set_fits_now_on(std::move(fits_now_on));
}

void FakeGpufedServer::SetExplainCandidates(const std::string& id, v1::Objective objective,
                                            std::vector<v1::ClusterCandidate> candidates) {
  absl::MutexLock lock(&mu_);
  v1::ExplainResponse& r = explanations_[id];
  r.set_objective(objective);
  r.mutable_candidates()->Assign(candidates.begin(), candidates.end());
}

void FakeGpufedServer::SetWhatIf(v1::WhatIfResponse response) {
  absl::MutexLock lock(&mu_);
  what_if_ = std::move(response);
}

std::vector<v1::SubmitRequest> FakeGpufedServer::what_ifs() const {
  absl::MutexLock lock(&mu_);
  return what_ifs_;
}

void FakeGpufedServer::SetMaxPageSize(size_t size) {
  absl::MutexLock lock(&mu_);
  max_page_size_ = size;
}

std::vector<std::chrono::system_clock::time_point> FakeGpufedServer::deadlines() const {
  absl::MutexLock lock(&mu_);
  return deadlines_;
}

int FakeGpufedServer::watch_all_cancelled() const {
  absl::MutexLock lock(&mu_);
  return watch_all_cancelled_;
}

std::vector<v1::SubmitRequest> FakeGpufedServer::submits() const {
  absl::MutexLock lock(&mu_);
  return submits_;
}

std::vector<v1::ListWorkloadsRequest> FakeGpufedServer::list_requests() const {
  absl::MutexLock lock(&mu_);
  return list_requests_;
}

std::vector<v1::ListClustersRequest> FakeGpufedServer::cluster_requests() const {
  absl::MutexLock lock(&mu_);
  return cluster_requests_;
}

std::vector<v1::CreateTokenRequest> FakeGpufedServer::token_requests() const {
  absl::MutexLock lock(&mu_);
  return token_requests_;
}

std::vector<int64_t> FakeGpufedServer::revoked_tokens() const {
  absl::MutexLock lock(&mu_);
  return revoked_tokens_;
}

std::vector<v1::DrainRequest> FakeGpufedServer::drain_requests() const {
  absl::MutexLock lock(&mu_);
  return drain_requests_;
}

std::vector<v1::ApplyClustersRequest> FakeGpufedServer::apply_requests() const {
  absl::MutexLock lock(&mu_);
  return apply_requests_;
}

void FakeGpufedServer::FailNextApply(grpc::Status status) {
  absl::MutexLock lock(&mu_);
  apply_failure_ = std::move(status);
}

std::vector<std::string> FakeGpufedServer::authorizations() const {
  absl::MutexLock lock(&mu_);
  return authorizations_;
}

int FakeGpufedServer::workload_count() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(workloads_.size());
}

grpc::Status FakeGpufedServer::Authorize(grpc::ServerContext* context) {
  std::string authorization;
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    authorization.assign(it->second.data(), it->second.size());
  }
  absl::MutexLock lock(&mu_);
  authorizations_.push_back(authorization);
  deadlines_.push_back(context->deadline());
  if (!required_token_.empty() && authorization != "Bearer " + required_token_) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or invalid token");
  }
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::Submit(grpc::ServerContext* context,
                                      const v1::SubmitRequest* request,
                                      v1::SubmitResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  submits_.push_back(*request);
  std::optional<grpc::Status> failure;
  if (!submit_failures_.empty()) {
    failure = submit_failures_.front();
    submit_failures_.pop_front();
    if (!commit_before_failing_) return *failure;
  }
  const v1::WorkloadSpec& spec = request->spec();
  if (spec.name().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec.name: must not be empty");
  }
  if (auto it = by_key_.find(spec.idempotency_key());
      !spec.idempotency_key().empty() && it != by_key_.end()) {
    const v1::Workload& existing = workloads_[it->second];
    if (!google::protobuf::util::MessageDifferencer::Equals(existing.spec(), spec)) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          "spec.idempotency_key: used by another workload");
    }
    *response->mutable_workload() = existing;
    response->set_created(false);
    return failure.value_or(grpc::Status::OK);
  }
  const int64_t id = next_id_++;
  v1::Workload& w = workloads_[id];
  w.set_id(absl::StrCat(id));
  *w.mutable_spec() = spec;
  w.set_state(v1::WORKLOAD_STATE_PENDING);
  w.set_pending_reason("waiting for the scheduler");
  w.mutable_create_time()->set_seconds(kFakeCreateSeconds);
  w.set_version(1);
  if (!spec.idempotency_key().empty()) by_key_[spec.idempotency_key()] = id;
  *response->mutable_workload() = w;
  response->set_created(true);
  return failure.value_or(grpc::Status::OK);
}

grpc::Status FakeGpufedServer::Get(grpc::ServerContext* context,
                                   const v1::GetWorkloadRequest* request, v1::Workload* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  if (!absl::SimpleAtoi(request->id(), &id) || !workloads_.contains(id)) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("workload ", request->id(), " not found"));
  }
  *response = workloads_[id];
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::List(grpc::ServerContext* context,
                                    const v1::ListWorkloadsRequest* request,
                                    v1::ListWorkloadsResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  list_requests_.push_back(*request);
  std::vector<const v1::Workload*> matching;
  for (const auto& [id, w] : workloads_) {
    if (!request->tenant().empty() && w.spec().tenant() != request->tenant()) continue;
    if (!request->states().empty() && std::find(request->states().begin(), request->states().end(),
                                                w.state()) == request->states().end()) {
      continue;
    }
    matching.push_back(&w);
  }
  // Newest first. (Not std::views::reverse: clang-tidy 14 cannot parse libstdc++ 12's ranges.)
  std::reverse(matching.begin(), matching.end());
  size_t offset = 0;
  if (!request->page_token().empty() && !absl::SimpleAtoi(request->page_token(), &offset)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "page_token: malformed");
  }
  const size_t page_size =
      std::min<size_t>(request->page_size() == 0 ? 100 : request->page_size(), max_page_size_);
  for (size_t i = offset; i < matching.size() && i < offset + page_size; ++i) {
    *response->add_workloads() = *matching[i];
  }
  if (offset + page_size < matching.size()) {
    response->set_next_page_token(absl::StrCat(offset + page_size));
  }
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::Cancel(grpc::ServerContext* context,
                                      const v1::CancelRequest* request, v1::Workload* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  if (!absl::SimpleAtoi(request->id(), &id) || !workloads_.contains(id)) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("workload ", request->id(), " not found"));
  }
  v1::Workload& w = workloads_[id];
  if (IsTerminal(w.state())) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        absl::StrCat("workload ", w.id(), " already ended"));
  }
  if (w.state() == v1::WORKLOAD_STATE_PENDING) {
    w.set_state(v1::WORKLOAD_STATE_CANCELLED);
    w.clear_pending_reason();
  } else {
    w.set_cancel_requested(true);
  }
  w.set_message(request->reason());
  w.set_version(w.version() + 1);
  *response = w;
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::Watch(grpc::ServerContext* context, const v1::WatchRequest* request,
                                     grpc::ServerWriter<v1::WorkloadEvent>* writer) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  std::optional<WatchDrop> drop;
  {
    absl::MutexLock lock(&mu_);
    watch_requests_.push_back(*request);
    if (!watch_drops_.empty()) {
      drop = watch_drops_.front();
      watch_drops_.pop_front();
    }
  }
  if (request->workload_id().empty()) {
    std::vector<v1::Workload> all;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, w] : workloads_) all.push_back(w);
    }
    for (const v1::Workload& w : all) writer->Write(Event(w, v1::WORKLOAD_STATE_UNSPECIFIED));
    if (drop) return drop->status;
    // Like the real server: the stream stays open until the client goes away.
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!context->IsCancelled() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(5));
    absl::MutexLock lock(&mu_);
    if (context->IsCancelled()) ++watch_all_cancelled_;
    return grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
  }
  int64_t id = 0;
  v1::Workload w;
  {
    absl::MutexLock lock(&mu_);
    if (!absl::SimpleAtoi(request->workload_id(), &id) || !workloads_.contains(id)) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("workload ", request->workload_id(), " not found"));
    }
    w = workloads_[id];
  }
  if (request->after_version() == 0 || w.version() > request->after_version()) {
    writer->Write(Event(w, v1::WORKLOAD_STATE_UNSPECIFIED));
  }
  for (int step = 0;; ++step) {
    if (drop && step == drop->steps) return drop->status;
    const v1::WorkloadState from = w.state();
    {
      absl::MutexLock lock(&mu_);
      if (watch_script_.empty()) break;
      w.set_state(watch_script_.front());
      watch_script_.pop_front();
      w.set_version(w.version() + 1);
      if (w.state() == v1::WORKLOAD_STATE_PLACED) w.mutable_assignment()->set_cluster("sim-a");
      if (w.state() != v1::WORKLOAD_STATE_PENDING) w.clear_pending_reason();
      workloads_[id] = w;
    }
    writer->Write(Event(w, from));
  }
  return drop ? drop->status : grpc::Status::OK;
}

grpc::Status FakeGpufedServer::Explain(grpc::ServerContext* context,
                                       const v1::ExplainRequest* request,
                                       v1::ExplainResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  int64_t id = 0;
  if (!absl::SimpleAtoi(request->id(), &id) || id <= 0) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("id: not a workload id (expected digits, got \"", request->id(), "\")"));
  }
  if (!workloads_.contains(id)) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("workload ", request->id(), " not found"));
  }
  if (auto it = explanations_.find(request->id()); it != explanations_.end()) {
    *response = it->second;
  }
  if (response->explanation().empty()) {
    response->set_explanation(workloads_[id].pending_reason());
  }
  *response->mutable_workload() = workloads_[id];
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::WhatIf(grpc::ServerContext* context,
                                      const v1::SubmitRequest* request,
                                      v1::WhatIfResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  what_ifs_.push_back(*request);
  if (request->spec().name().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "spec.name: must not be empty");
  }
  *response = what_if_;
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::ListClusters(grpc::ServerContext* context,
                                            const v1::ListClustersRequest* request,
                                            v1::ListClustersResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  cluster_requests_.push_back(*request);
  for (v1::Cluster c : clusters_) {
    if (!request->include_nodes()) c.clear_nodes();
    *response->add_clusters() = std::move(c);
  }
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::GetCluster(grpc::ServerContext* context,
                                          const v1::GetClusterRequest* request,
                                          v1::Cluster* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const v1::Cluster& c : clusters_) {
    if (c.name() == request->name()) {
      *response = c;
      return grpc::Status::OK;
    }
  }
  return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such cluster");
}

grpc::Status FakeGpufedServer::Drain(grpc::ServerContext* context, const v1::DrainRequest* request,
                                     v1::DrainResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  drain_requests_.push_back(*request);
  for (const v1::Cluster& c : clusters_) {
    if (c.name() != request->name()) continue;
    *response->mutable_cluster() = c;
    response->mutable_cluster()->set_state(v1::CLUSTER_STATE_DRAINING);
    for (const auto& [id, w] : workloads_) {
      if (w.assignment().cluster() != c.name()) continue;
      if (request->evict() && w.spec().retry().max_attempts() > 1) {
        response->add_evicted_workload_ids(w.id());
      } else {
        response->add_staying_workload_ids(w.id());
      }
    }
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such cluster");
}

grpc::Status FakeGpufedServer::ApplyClusters(grpc::ServerContext* context,
                                             const v1::ApplyClustersRequest* request,
                                             v1::ApplyClustersResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  apply_requests_.push_back(*request);
  if (apply_failure_.has_value()) {
    grpc::Status failure = *std::move(apply_failure_);
    apply_failure_.reset();
    return failure;
  }
  for (const v1::ClusterDeclaration& d : request->declarations()) {
    v1::DeclarationDiff* diff = response->add_diffs();
    diff->set_cluster(d.cluster());
    const auto it = declarations_.find(d.cluster());
    if (it == declarations_.end()) {
      diff->set_kind(v1::DECLARATION_CHANGE_ADDED);
      diff->add_changes(absl::StrCat("+ ", d.prices_size(), " price line(s)"));
    } else if (google::protobuf::util::MessageDifferencer::Equals(it->second, d)) {
      diff->set_kind(v1::DECLARATION_CHANGE_UNCHANGED);
    } else {
      diff->set_kind(v1::DECLARATION_CHANGE_CHANGED);
      diff->add_changes("declaration replaced");
    }
    if (!request->dry_run()) declarations_[d.cluster()] = d;
  }
  response->set_dry_run(request->dry_run());
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::ListDeclarations(grpc::ServerContext* context,
                                                const v1::ListDeclarationsRequest* /*request*/,
                                                v1::ListDeclarationsResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, d] : declarations_) *response->add_declarations() = d;
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::CreateTenant(grpc::ServerContext* context,
                                            const v1::CreateTenantRequest* request,
                                            v1::Tenant* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const v1::Tenant& t : tenants_) {
    if (t.name() == request->name()) {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                          absl::StrCat("tenant ", request->name(), " already exists"));
    }
  }
  v1::Tenant& t = tenants_.emplace_back();
  t.set_name(request->name());
  t.set_display_name(request->display_name());
  t.mutable_create_time()->set_seconds(kFakeCreateSeconds);
  *response = t;
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::ListTenants(grpc::ServerContext* context,
                                           const v1::ListTenantsRequest* request,
                                           v1::ListTenantsResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const v1::Tenant& t : tenants_) *response->add_tenants() = t;
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::CreateProject(grpc::ServerContext* context,
                                             const v1::CreateProjectRequest* request,
                                             v1::Project* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  v1::Project& p = projects_.emplace_back();
  p.set_tenant(request->tenant());
  p.set_name(request->name());
  p.mutable_create_time()->set_seconds(kFakeCreateSeconds);
  *response = p;
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::ListProjects(grpc::ServerContext* context,
                                            const v1::ListProjectsRequest* request,
                                            v1::ListProjectsResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const v1::Project& p : projects_) {
    if (p.tenant() == request->tenant()) *response->add_projects() = p;
  }
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::SetQuota(grpc::ServerContext* context,
                                        const v1::SetQuotaRequest* request, v1::Quota* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  const v1::Quota& q = request->quota();
  auto same = [&](const v1::Quota& o) {
    return o.tenant() == q.tenant() && o.project() == q.project() && o.resource() == q.resource();
  };
  quotas_.erase(std::remove_if(quotas_.begin(), quotas_.end(), same), quotas_.end());
  quotas_.push_back(q);
  quotas_.back().set_overcommitted(request->overcommit());
  *response = quotas_.back();
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::DeleteQuota(grpc::ServerContext* context,
                                           const v1::DeleteQuotaRequest* request,
                                           v1::DeleteQuotaResponse* /*response*/) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  auto same = [&](const v1::Quota& o) {
    return o.tenant() == request->tenant() && o.project() == request->project() &&
           o.resource() == request->resource();
  };
  auto it = std::remove_if(quotas_.begin(), quotas_.end(), same);
  if (it == quotas_.end()) return grpc::Status(grpc::StatusCode::NOT_FOUND, "quota not found");
  quotas_.erase(it, quotas_.end());
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::ListQuotas(grpc::ServerContext* context,
                                          const v1::ListQuotasRequest* request,
                                          v1::ListQuotasResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const v1::Quota& q : quotas_) {
    if (request->tenant().empty() || q.tenant() == request->tenant()) *response->add_quotas() = q;
  }
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::GetQuotaUsage(grpc::ServerContext* context,
                                             const v1::GetQuotaUsageRequest* request,
                                             v1::GetQuotaUsageResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (const v1::Quota& q : quotas_) {
    if (!request->tenant().empty() && q.tenant() != request->tenant()) continue;
    v1::QuotaUsage* u = response->add_usage();
    u->set_tenant(q.tenant());
    u->set_project(q.project());
    u->set_resource(q.resource());
    *u->mutable_quota() = q;
    // As if each tenant held three quarters of its limit (or of its guarantee without one).
    const int64_t limit = q.has_limit_milli() ? q.limit_milli() : q.guaranteed_milli();
    u->set_used_milli(limit * 3 / 4);
    u->set_borrowed_milli(std::max<int64_t>(0, u->used_milli() - q.guaranteed_milli()));
  }
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::CreateToken(grpc::ServerContext* context,
                                           const v1::CreateTokenRequest* request,
                                           v1::CreateTokenResponse* response) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  token_requests_.push_back(*request);
  response->set_token(absl::StrCat("gpf_fake_", token_requests_.size()));
  response->set_token_id(static_cast<int64_t>(token_requests_.size()));
  return grpc::Status::OK;
}

grpc::Status FakeGpufedServer::RevokeToken(grpc::ServerContext* context,
                                           const v1::RevokeTokenRequest* request,
                                           v1::RevokeTokenResponse* /*response*/) {
  if (grpc::Status s = Authorize(context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  revoked_tokens_.push_back(request->token_id());
  return grpc::Status::OK;
}

}  // namespace gpufed::cli::testing
