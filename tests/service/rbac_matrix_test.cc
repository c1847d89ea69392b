// The RBAC matrix: every RPC of gpufed.v1 × every role × the scopes it can be bound at, called
// on a real server through real gRPC channels, against objects in the caller's own project,
// another project of its tenant, another tenant, and the platform. What each call must answer is
// derived from the declared policy (auth/policy.h), never written here: an allowed call
// succeeds, a denied one gets PERMISSION_DENIED or NOT_FOUND, and no answer — allowed or not,
// message or payload — names anything of a scope the caller does not cover. An RPC without a
// policy row, or without a case here, fails the test.

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auth/policy.h"
#include "google/protobuf/descriptor.h"
#include "gpufed/v1/agent_service.grpc.pb.h"
#include "gpufed/v1/audit_service.grpc.pb.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/quota_service.grpc.pb.h"
#include "gpufed/v1/report_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/service/fake_agent.h"
#include "tests/service/in_process_server.h"
#include "tests/service/raw_calls.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_certs.h"

namespace gpufed {
namespace {

using auth::MethodPolicy;
using auth::Principal;
using auth::Role;
using auth::Target;

// What a call aims at: a tenant and project (empty: the platform, or a listing of everything), a
// cluster (agent calls), and for token creation the role handed out.
struct Aim {
  std::string label;
  std::string tenant;
  std::string project;
  std::string cluster;
  std::optional<Role> grant;
};

// The caller's own project, another project of its tenant, another tenant, the platform.
const Aim kOwnProject{"own project", "alpha", "owned"};
const Aim kOtherProject{"other project", "alpha", "sibling"};
const Aim kOtherTenant{"other tenant", "bravo", "rival"};
const Aim kOwnTenant{"own tenant", "alpha", ""};
const Aim kOtherTenantOnly{"other tenant", "bravo", ""};
const Aim kPlatform{"platform", "", ""};

// Whether the declared policy allows `who` the call `m` aimed at `aim`.
bool Expected(const MethodPolicy& m, const Principal& who, const Aim& aim) {
  const auth::Scope object{aim.tenant, aim.project};
  switch (m.target) {
    case Target::kPlatform:
      return auth::Allows(who, m.permission, {});
    case Target::kTenant:
      return auth::Allows(who, m.permission, {aim.tenant, ""});
    case Target::kProject:
    case Target::kWorkload:
      return auth::Allows(who, m.permission, object);
    case Target::kListing:
      return aim.tenant.empty() ? auth::Grants(who.role, m.permission)
                                : auth::AllowsSomeOf(who, m.permission, object);
    case Target::kShared:
      return auth::Grants(who.role, m.permission);
    case Target::kQuotaKey:
      return auth::Allows(who, m.permission,
                          aim.project.empty() ? auth::Scope{} : auth::Scope{aim.tenant, ""});
    case Target::kToken:
      return aim.grant ? auth::MayGrant(who, *aim.grant, object)
                       : auth::Allows(who, m.permission, object);
    case Target::kCluster:
      return auth::MaySpeakFor(who, aim.cluster);
  }
  return false;
}

// What came back: the status and every byte the caller received.
struct Outcome {
  grpc::Status status;
  std::string received;  // response payloads
  std::string sent;      // the request, whose own names an answer may echo
};

// Names that belong to one scope: an answer to a caller that does not cover the scope must not
// contain them (unless the caller sent them).
struct Secret {
  auth::Scope scope;
  std::string text;
};

class RbacMatrixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A cluster CA, so that EnrollCluster has one to issue with.
    ASSERT_OK_AND_ASSIGN(testing::TestCa cluster_ca, testing::MakeTestCa(dir_.path(), "clusters"));
    server::ServerConfig config;
    config.cluster_ca_cert_file = cluster_ca.cert_file;
    config.cluster_ca_key_file = dir_.path() + "/clusters-ca.key";
    ASSERT_OK(testing::WriteFileAtomically(config.cluster_ca_key_file, cluster_ca.key_pem));
    ASSERT_OK_AND_ASSIGN(testing::InProcessServer started,
                         testing::StartInProcessServer(dir_.path() + "/data", config));
    server_ = std::move(started.server);
    address_ = started.address;
    admin_ = started.admin_token;
    channel_ = testing::Connect(address_);
    for (const auto& [tenant, project] : std::vector<std::pair<std::string, std::string>>{
             {"alpha", "owned"}, {"alpha", "sibling"}, {"bravo", "rival"}}) {
      ASSERT_OK(testing::BootstrapTenant(address_, admin_, tenant, project));
    }
    // A cluster for the pool calls, connected by a credential outside the matrix.
    cluster_agent_ = RegisteredAgent(address_, admin_, "c1", 1, 2, "H100-80GB");
    ASSERT_NE(cluster_agent_, nullptr);
    // Work in every project that never fits (so nothing moves while the matrix runs).
    for (const Aim& aim : {kOwnProject, kOtherProject, kOtherTenant}) {
      Submitted(aim);
    }

    callers_.push_back({"platform-admin", {.role = Role::kPlatformAdmin}, admin_});
    AddCaller("platform-viewer", {.role = Role::kViewer});
    for (Role role : {Role::kTenantAdmin, Role::kTenantUser, Role::kViewer}) {
      AddCaller(absl::StrCat(auth::RoleName(role), "@alpha"), {.role = role, .tenant = "alpha"});
      AddCaller(absl::StrCat(auth::RoleName(role), "@alpha/owned"),
                {.role = role, .tenant = "alpha", .project = "owned"});
    }
    AddCaller("agent@c2", {.role = Role::kAgent, .cluster = "c2"});

    secrets_ = {{{"bravo", ""}, "bravo"},
                {{"bravo", "rival"}, "rival"},
                {{"bravo", "rival"}, "job-bravo-rival"},
                {{"alpha", "sibling"}, "sibling"},
                {{"alpha", "sibling"}, "job-alpha-sibling"},
                {{"alpha", "owned"}, "job-alpha-owned"}};
  }

  void TearDown() override {
    cluster_agent_.reset();
    if (server_) server_->Shutdown();
  }

  struct Caller {
    std::string label;
    Principal binding;
    std::string token;
  };

  void AddCaller(const std::string& label, Principal binding) {
    v1::CreateTokenRequest req;
    req.set_subject(absl::StrCat("matrix-", callers_.size()));
    switch (binding.role) {
      case Role::kPlatformAdmin:
        req.set_role(v1::ROLE_PLATFORM_ADMIN);
        break;
      case Role::kTenantAdmin:
        req.set_role(v1::ROLE_TENANT_ADMIN);
        break;
      case Role::kTenantUser:
        req.set_role(v1::ROLE_TENANT_USER);
        break;
      case Role::kViewer:
        req.set_role(v1::ROLE_VIEWER);
        break;
      case Role::kAgent:
        req.set_role(v1::ROLE_AGENT);
        break;
    }
    req.set_tenant(binding.tenant);
    req.set_project(binding.project);
    req.set_cluster(binding.cluster);
    v1::CreateTokenResponse resp;
    ASSERT_OK(AsAdmin("TenantService/CreateToken", req, &resp));
    callers_.push_back({label, std::move(binding), resp.token()});
  }

  // A unary call of "Service/Method" as the platform admin (to prepare what a case acts on).
  template <typename Response>
  grpc::Status AsAdmin(const std::string& method, const google::protobuf::Message& req,
                       Response* resp) {
    std::string bytes;
    grpc::Status s = testing::RawUnaryCall(channel_, admin_, absl::StrCat("/gpufed.v1.", method),
                                           req.SerializeAsString(), &bytes);
    if (s.ok()) resp->ParseFromString(bytes);
    return s;
  }

  Outcome Unary(const Caller& who, const std::string& method,
                const google::protobuf::Message& req) {
    Outcome out;
    out.sent = req.SerializeAsString();
    out.status = testing::RawUnaryCall(channel_, who.token, absl::StrCat("/gpufed.v1.", method),
                                       out.sent, &out.received);
    return out;
  }

  std::string Unique(const std::string& prefix) { return absl::StrCat(prefix, "-", ++serial_); }

  v1::WorkloadSpec Spec(const Aim& aim) {
    v1::WorkloadSpec s;
    s.set_tenant(aim.tenant);
    s.set_project(aim.project);
    s.set_name(Unique(absl::StrCat("job-", aim.tenant, "-", aim.project)));
    s.set_replicas(1);
    s.mutable_per_replica()->set_gpus(64);  // more than any node: it stays pending
    s.set_workload_class(v1::WORKLOAD_CLASS_BATCH);
    return s;
  }

  // A fresh pending workload in `aim`'s project; its id.
  std::string Submitted(const Aim& aim) {
    v1::SubmitRequest req;
    *req.mutable_spec() = Spec(aim);
    v1::SubmitResponse resp;
    EXPECT_OK(AsAdmin("WorkloadService/Submit", req, &resp));
    return resp.workload().id();
  }

  // The cases of every RPC: the aims it is tried at and how to call it.
  struct Cases {
    std::vector<Aim> aims;
    std::function<Outcome(const Caller&, const Aim&)> call;
  };
  std::map<std::string, Cases> AllCases();

  Outcome Watch(const Caller& who);
  Outcome Connect(const Caller& who, const Aim& aim);

  testing::TempDir dir_{"gpufed-rbac"};
  std::unique_ptr<server::Server> server_;
  std::string address_, admin_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<FakeAgentStream> cluster_agent_;
  std::vector<Caller> callers_;
  std::vector<Secret> secrets_;
  int serial_ = 0;
};

Outcome RbacMatrixTest::Watch(const Caller& who) {
  Outcome out;
  auto stub = v1::WorkloadService::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + who.token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  v1::WatchRequest req;
  out.sent = req.SerializeAsString();
  auto reader = stub->Watch(&ctx, req);
  v1::WorkloadEvent e;
  while (reader->Read(&e)) out.received += e.SerializeAsString();
  out.status = reader->Finish();
  // The matrix ends every stream by its deadline: a stream that was let in ends so.
  if (out.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) out.status = grpc::Status();
  return out;
}

Outcome RbacMatrixTest::Connect(const Caller& who, const Aim& aim) {
  Outcome out;
  FakeAgentStream agent(address_, who.token);
  v1::AgentMessage m = Registration(aim.cluster, 1, 1, "L4");
  out.sent = m.SerializeAsString();
  v1::ServerMessage reply;
  if (agent.Write(m) && agent.Read(&reply)) {
    out.received = reply.SerializeAsString();
    if (reply.body_case() == v1::ServerMessage::kRegistered) return out;  // let in: OK
  }
  out.status = agent.Finish();
  return out;
}

std::map<std::string, RbacMatrixTest::Cases> RbacMatrixTest::AllCases() {
  const std::vector<Aim> projects{kOwnProject, kOtherProject, kOtherTenant};
  const std::vector<Aim> tenants{kOwnTenant, kOtherTenantOnly};
  const std::vector<Aim> listings{kPlatform, kOwnTenant, kOwnProject, kOtherProject,
                                  kOtherTenantOnly};
  const std::vector<Aim> platform{kPlatform};
  std::map<std::string, Cases> c;

  // ---- WorkloadService
  c["WorkloadService.Submit"] = {projects, [this](const Caller& who, const Aim& aim) {
                                   v1::SubmitRequest req;
                                   *req.mutable_spec() = Spec(aim);
                                   return Unary(who, "WorkloadService/Submit", req);
                                 }};
  c["WorkloadService.WhatIf"] = {projects, [this](const Caller& who, const Aim& aim) {
                                   v1::SubmitRequest req;
                                   *req.mutable_spec() = Spec(aim);
                                   return Unary(who, "WorkloadService/WhatIf", req);
                                 }};
  c["WorkloadService.Get"] = {projects, [this](const Caller& who, const Aim& aim) {
                                v1::GetWorkloadRequest req;
                                req.set_id(Submitted(aim));
                                return Unary(who, "WorkloadService/Get", req);
                              }};
  c["WorkloadService.Explain"] = {projects, [this](const Caller& who, const Aim& aim) {
                                    v1::ExplainRequest req;
                                    req.set_id(Submitted(aim));
                                    return Unary(who, "WorkloadService/Explain", req);
                                  }};
  c["WorkloadService.Cancel"] = {projects, [this](const Caller& who, const Aim& aim) {
                                   v1::CancelRequest req;
                                   req.set_id(Submitted(aim));
                                   return Unary(who, "WorkloadService/Cancel", req);
                                 }};
  c["WorkloadService.List"] = {listings, [this](const Caller& who, const Aim& aim) {
                                 v1::ListWorkloadsRequest req;
                                 req.set_tenant(aim.tenant);
                                 req.set_project(aim.project);
                                 return Unary(who, "WorkloadService/List", req);
                               }};
  c["WorkloadService.Watch"] = {platform,
                                [this](const Caller& who, const Aim&) { return Watch(who); }};

  // ---- ClusterService
  c["ClusterService.ListClusters"] = {platform, [this](const Caller& who, const Aim&) {
                                        v1::ListClustersRequest req;
                                        req.set_include_nodes(true);
                                        return Unary(who, "ClusterService/ListClusters", req);
                                      }};
  c["ClusterService.GetCluster"] = {platform, [this](const Caller& who, const Aim&) {
                                      v1::GetClusterRequest req;
                                      req.set_name("c1");
                                      return Unary(who, "ClusterService/GetCluster", req);
                                    }};
  c["ClusterService.ListDeclarations"] = {platform, [this](const Caller& who, const Aim&) {
                                            return Unary(who, "ClusterService/ListDeclarations",
                                                         v1::ListDeclarationsRequest());
                                          }};
  for (const char* method : {"Cordon", "Uncordon"}) {
    c[absl::StrCat("ClusterService.", method)] = {
        platform, [this, method](const Caller& who, const Aim&) {
          v1::CordonRequest req;
          req.set_name("c1");
          return Unary(who, absl::StrCat("ClusterService/", method), req);
        }};
  }
  c["ClusterService.Drain"] = {platform, [this](const Caller& who, const Aim&) {
                                 v1::DrainRequest req;
                                 req.set_name("c1");
                                 return Unary(who, "ClusterService/Drain", req);
                               }};
  c["ClusterService.ApplyClusters"] = {platform, [this](const Caller& who, const Aim&) {
                                         v1::ApplyClustersRequest req;
                                         v1::ClusterDeclaration* d = req.add_declarations();
                                         d->set_cluster(Unique("declared"));
                                         d->set_provider("onprem");
                                         return Unary(who, "ClusterService/ApplyClusters", req);
                                       }};

  c["ClusterService.DeleteCluster"] = {
      platform, [this](const Caller& who, const Aim&) {
        v1::ApplyClustersRequest made;
        v1::ClusterDeclaration* d = made.add_declarations();
        d->set_cluster(Unique("retired"));
        d->set_provider("onprem");
        v1::ApplyClustersResponse applied;
        EXPECT_OK(AsAdmin("ClusterService/ApplyClusters", made, &applied));
        v1::DeleteClusterRequest req;
        req.set_name(d->cluster());
        return Unary(who, "ClusterService/DeleteCluster", req);
      }};

  c["ClusterService.EnrollCluster"] = {platform, [this](const Caller& who, const Aim&) {
                                         v1::EnrollClusterRequest req;
                                         req.set_cluster(Unique("enrolled"));
                                         return Unary(who, "ClusterService/EnrollCluster", req);
                                       }};
  c["ClusterService.RevokeCluster"] = {platform, [this](const Caller& who, const Aim&) {
                                         v1::RevokeClusterRequest req;
                                         req.set_cluster(Unique("revoked"));
                                         return Unary(who, "ClusterService/RevokeCluster", req);
                                       }};

  // ---- TenantService
  c["TenantService.CreateTenant"] = {platform, [this](const Caller& who, const Aim&) {
                                       v1::CreateTenantRequest req;
                                       req.set_name(Unique("tenant"));
                                       return Unary(who, "TenantService/CreateTenant", req);
                                     }};
  c["TenantService.DeleteTenant"] = {platform, [this](const Caller& who, const Aim&) {
                                       v1::CreateTenantRequest made;
                                       made.set_name(Unique("doomed"));
                                       v1::Tenant t;
                                       EXPECT_OK(AsAdmin("TenantService/CreateTenant", made, &t));
                                       v1::DeleteTenantRequest req;
                                       req.set_name(made.name());
                                       return Unary(who, "TenantService/DeleteTenant", req);
                                     }};
  c["TenantService.ListTenants"] = {platform, [this](const Caller& who, const Aim&) {
                                      return Unary(who, "TenantService/ListTenants",
                                                   v1::ListTenantsRequest());
                                    }};
  c["TenantService.CreateProject"] = {tenants, [this](const Caller& who, const Aim& aim) {
                                        v1::CreateProjectRequest req;
                                        req.set_tenant(aim.tenant);
                                        req.set_name(Unique("proj"));
                                        return Unary(who, "TenantService/CreateProject", req);
                                      }};
  c["TenantService.DeleteProject"] = {tenants, [this](const Caller& who, const Aim& aim) {
                                        v1::CreateProjectRequest made;
                                        made.set_tenant(aim.tenant);
                                        made.set_name(Unique("doomed"));
                                        v1::Project p;
                                        EXPECT_OK(AsAdmin("TenantService/CreateProject", made, &p));
                                        v1::DeleteProjectRequest req;
                                        req.set_tenant(aim.tenant);
                                        req.set_name(made.name());
                                        return Unary(who, "TenantService/DeleteProject", req);
                                      }};
  c["TenantService.ListProjects"] = {tenants, [this](const Caller& who, const Aim& aim) {
                                       v1::ListProjectsRequest req;
                                       req.set_tenant(aim.tenant);
                                       return Unary(who, "TenantService/ListProjects", req);
                                     }};
  std::vector<Aim> grants;
  for (const Aim& place : {kOwnProject, kOtherProject, kOtherTenant, kOwnTenant}) {
    for (Role role : {Role::kTenantAdmin, Role::kTenantUser, Role::kViewer}) {
      Aim a = place;
      a.label = absl::StrCat(place.label, ", granting ", auth::RoleName(role));
      a.grant = role;
      grants.push_back(a);
    }
  }
  for (Role role : {Role::kPlatformAdmin, Role::kViewer, Role::kAgent}) {
    Aim a = kPlatform;
    a.label = absl::StrCat("platform, granting ", auth::RoleName(role));
    a.grant = role;
    if (role == Role::kAgent) a.cluster = "c9";
    grants.push_back(a);
  }
  c["TenantService.CreateToken"] = {
      grants, [this](const Caller& who, const Aim& aim) {
        v1::CreateTokenRequest req;
        req.set_subject("granted");
        req.set_role(*aim.grant == Role::kTenantAdmin     ? v1::ROLE_TENANT_ADMIN
                     : *aim.grant == Role::kTenantUser    ? v1::ROLE_TENANT_USER
                     : *aim.grant == Role::kPlatformAdmin ? v1::ROLE_PLATFORM_ADMIN
                     : *aim.grant == Role::kAgent         ? v1::ROLE_AGENT
                                                          : v1::ROLE_VIEWER);
        req.set_tenant(aim.tenant);
        req.set_project(aim.project);
        req.set_cluster(aim.cluster);
        return Unary(who, "TenantService/CreateToken", req);
      }};
  c["TenantService.RevokeToken"] = {
      std::vector<Aim>{kOwnProject, kOtherProject, kOtherTenant, kOwnTenant},
      [this](const Caller& who, const Aim& aim) {
        v1::CreateTokenRequest made;
        made.set_subject("revoked");
        made.set_role(v1::ROLE_VIEWER);
        made.set_tenant(aim.tenant);
        made.set_project(aim.project);
        v1::CreateTokenResponse token;
        EXPECT_OK(AsAdmin("TenantService/CreateToken", made, &token));
        v1::RevokeTokenRequest req;
        req.set_token_id(token.token_id());
        return Unary(who, "TenantService/RevokeToken", req);
      }};

  c["TenantService.ListTokens"] = {listings, [this](const Caller& who, const Aim& aim) {
                                     v1::ListTokensRequest req;
                                     req.set_tenant(aim.tenant);
                                     req.set_project(aim.project);
                                     return Unary(who, "TenantService/ListTokens", req);
                                   }};

  // Role bindings: any role but an agent's (which no binding holds) at the places tokens are
  // granted; each case binds a subject of its own, so no earlier case's binding outranks the
  // caller.
  std::vector<Aim> bindings;
  for (const Aim& a : grants) {
    if (a.grant != Role::kAgent) bindings.push_back(a);
  }
  c["TenantService.SetRoleBinding"] = {
      bindings, [this](const Caller& who, const Aim& aim) {
        v1::SetRoleBindingRequest req;
        v1::RoleBinding* b = req.mutable_binding();
        b->set_subject(Unique("member"));
        b->set_role(*aim.grant == Role::kTenantAdmin     ? v1::ROLE_TENANT_ADMIN
                    : *aim.grant == Role::kTenantUser    ? v1::ROLE_TENANT_USER
                    : *aim.grant == Role::kPlatformAdmin ? v1::ROLE_PLATFORM_ADMIN
                                                         : v1::ROLE_VIEWER);
        b->set_tenant(aim.tenant);
        b->set_project(aim.project);
        return Unary(who, "TenantService/SetRoleBinding", req);
      }};
  c["TenantService.DeleteRoleBinding"] = {
      std::vector<Aim>{kOwnProject, kOtherProject, kOtherTenant, kOwnTenant, kPlatform},
      [this](const Caller& who, const Aim& aim) {
        v1::SetRoleBindingRequest made;
        v1::RoleBinding* b = made.mutable_binding();
        b->set_subject(Unique("leaving"));
        b->set_role(v1::ROLE_VIEWER);
        b->set_tenant(aim.tenant);
        b->set_project(aim.project);
        v1::SetRoleBindingResponse bound;
        EXPECT_OK(AsAdmin("TenantService/SetRoleBinding", made, &bound));
        v1::DeleteRoleBindingRequest req;
        req.set_subject(b->subject());
        req.set_tenant(aim.tenant);
        req.set_project(aim.project);
        return Unary(who, "TenantService/DeleteRoleBinding", req);
      }};
  c["TenantService.ListRoleBindings"] = {listings, [this](const Caller& who, const Aim& aim) {
                                           v1::ListRoleBindingsRequest req;
                                           req.set_tenant(aim.tenant);
                                           req.set_project(aim.project);
                                           return Unary(who, "TenantService/ListRoleBindings", req);
                                         }};

  // ---- QuotaService
  const std::vector<Aim> quota_keys{kOwnProject, kOtherProject, kOtherTenant, kOwnTenant,
                                    kOtherTenantOnly};
  c["QuotaService.SetQuota"] = {quota_keys, [this](const Caller& who, const Aim& aim) {
                                  v1::SetQuotaRequest req;
                                  req.mutable_quota()->set_tenant(aim.tenant);
                                  req.mutable_quota()->set_project(aim.project);
                                  req.mutable_quota()->set_resource("gpu");
                                  req.mutable_quota()->set_limit_milli(1000);
                                  return Unary(who, "QuotaService/SetQuota", req);
                                }};
  c["QuotaService.DeleteQuota"] = {quota_keys, [this](const Caller& who, const Aim& aim) {
                                     v1::SetQuotaRequest made;
                                     made.mutable_quota()->set_tenant(aim.tenant);
                                     made.mutable_quota()->set_project(aim.project);
                                     made.mutable_quota()->set_resource("gpu");
                                     made.mutable_quota()->set_limit_milli(1000);
                                     v1::Quota q;
                                     EXPECT_OK(AsAdmin("QuotaService/SetQuota", made, &q));
                                     v1::DeleteQuotaRequest req;
                                     req.set_tenant(aim.tenant);
                                     req.set_project(aim.project);
                                     req.set_resource("gpu");
                                     return Unary(who, "QuotaService/DeleteQuota", req);
                                   }};
  c["QuotaService.SetShareWeight"] = {quota_keys, [this](const Caller& who, const Aim& aim) {
                                        v1::SetShareWeightRequest req;
                                        req.mutable_weight()->set_tenant(aim.tenant);
                                        req.mutable_weight()->set_project(aim.project);
                                        req.mutable_weight()->set_weight(2);
                                        return Unary(who, "QuotaService/SetShareWeight", req);
                                      }};
  const std::vector<Aim> quota_listings{kPlatform, kOwnTenant, kOtherTenantOnly};
  c["QuotaService.ListQuotas"] = {quota_listings, [this](const Caller& who, const Aim& aim) {
                                    v1::ListQuotasRequest req;
                                    req.set_tenant(aim.tenant);
                                    return Unary(who, "QuotaService/ListQuotas", req);
                                  }};
  c["QuotaService.GetQuotaUsage"] = {quota_listings, [this](const Caller& who, const Aim& aim) {
                                       v1::GetQuotaUsageRequest req;
                                       req.set_tenant(aim.tenant);
                                       return Unary(who, "QuotaService/GetQuotaUsage", req);
                                     }};
  c["QuotaService.ListPreemptions"] = {quota_listings, [this](const Caller& who, const Aim& aim) {
                                         v1::ListPreemptionsRequest req;
                                         req.set_tenant(aim.tenant);
                                         return Unary(who, "QuotaService/ListPreemptions", req);
                                       }};

  // ---- AuditService
  const std::vector<Aim> audit_listings{kPlatform, kOwnTenant, kOtherTenantOnly};
  c["AuditService.ListAuditEvents"] = {audit_listings, [this](const Caller& who, const Aim& aim) {
                                         v1::ListAuditEventsRequest req;
                                         req.set_tenant(aim.tenant);
                                         return Unary(who, "AuditService/ListAuditEvents", req);
                                       }};
  c["AuditService.VerifyAudit"] = {platform, [this](const Caller& who, const Aim&) {
                                     return Unary(who, "AuditService/VerifyAudit",
                                                  v1::VerifyAuditRequest());
                                   }};

  // ---- ReportService
  const std::vector<Aim> report_listings{kPlatform, kOwnTenant, kOwnProject, kOtherProject,
                                         kOtherTenantOnly};
  c["ReportService.GetUsageReport"] = {
      report_listings, [this](const Caller& who, const Aim& aim) {
        v1::GetUsageReportRequest req;
        req.mutable_start_time()->set_seconds(1764547200);  // whole hours
        req.mutable_end_time()->set_seconds(1764547200 + 24 * 3600);
        req.add_group_by(v1::REPORT_DIMENSION_TENANT);
        req.add_group_by(v1::REPORT_DIMENSION_PROJECT);
        req.set_tenant(aim.tenant);
        req.set_project(aim.project);
        return Unary(who, "ReportService/GetUsageReport", req);
      }};
  c["ReportService.ListWorkloadTelemetry"] = {
      projects, [this](const Caller& who, const Aim& aim) {
        v1::ListWorkloadTelemetryRequest req;
        req.set_workload_id(Submitted(aim));
        req.mutable_start_time()->set_seconds(1764547200);
        req.mutable_end_time()->set_seconds(1764547200 + 3600);
        return Unary(who, "ReportService/ListWorkloadTelemetry", req);
      }};
  c["ReportService.GetCostAllocation"] = {
      platform, [this](const Caller& who, const Aim&) {
        v1::GetCostAllocationRequest req;
        req.mutable_start_time()->set_seconds(1764547200);
        req.mutable_end_time()->set_seconds(1764547200 + 24 * 3600);
        return Unary(who, "ReportService/GetCostAllocation", req);
      }};

  // ---- AgentService
  Aim own_cluster{"own cluster", "", "", "c2"};
  Aim other_cluster{"other cluster", "", "", "c1"};
  c["AgentService.Connect"] = {
      std::vector<Aim>{own_cluster, other_cluster},
      [this](const Caller& who, const Aim& aim) { return Connect(who, aim); }};
  return c;
}

// Every RPC the server's protos declare has a policy row and a case here.
TEST_F(RbacMatrixTest, EveryRpcHasAPolicyAndACase) {
  const std::map<std::string, Cases> cases = AllCases();
  std::set<std::string> declared;
  const std::filesystem::path protos =
      std::filesystem::path(GPUFED_SOURCE_DIR) / "api/proto/gpufed/v1";
  for (const auto& entry : std::filesystem::directory_iterator(protos)) {
    if (entry.path().extension() != ".proto") continue;
    const std::string name = absl::StrCat("gpufed/v1/", entry.path().filename().string());
    const google::protobuf::FileDescriptor* file =
        google::protobuf::DescriptorPool::generated_pool()->FindFileByName(name);
    ASSERT_NE(file, nullptr) << name << " is not compiled into the server";
    for (int s = 0; s < file->service_count(); ++s) {
      for (int m = 0; m < file->service(s)->method_count(); ++m) {
        const google::protobuf::MethodDescriptor* method = file->service(s)->method(m);
        declared.insert(method->full_name());
        EXPECT_TRUE(auth::PolicyFor(method->full_name()).has_value())
            << method->full_name() << " has no row in auth/policy.cc";
        EXPECT_TRUE(cases.contains(absl::StrCat(file->service(s)->name(), ".", method->name())))
            << method->full_name() << " has no case in the RBAC matrix";
      }
    }
  }
  EXPECT_GE(declared.size(), 38u);
  for (const MethodPolicy& m : auth::MethodPolicies()) {
    EXPECT_TRUE(declared.contains(std::string(m.method))) << m.method << ": no such RPC";
  }
}

TEST_F(RbacMatrixTest, EveryRpcByEveryRoleAndScopeAnswersAsThePolicySays) {
  const std::map<std::string, Cases> cases = AllCases();
  int calls = 0;
  for (const auto& [name, method_cases] : cases) {
    const std::optional<MethodPolicy> policy = auth::PolicyFor(absl::StrCat("gpufed.v1.", name));
    ASSERT_TRUE(policy.has_value()) << name;
    for (const Caller& who : callers_) {
      for (const Aim& aim : method_cases.aims) {
        const bool allowed = Expected(*policy, who.binding, aim);
        const Outcome out = method_cases.call(who, aim);
        ++calls;
        const std::string where = absl::StrCat(name, " by ", who.label, " at ", aim.label);
        if (allowed) {
          EXPECT_TRUE(out.status.ok()) << where << ": allowed, got " << out.status.error_code()
                                       << " " << out.status.error_message();
        } else {
          EXPECT_TRUE(out.status.error_code() == grpc::StatusCode::PERMISSION_DENIED ||
                      out.status.error_code() == grpc::StatusCode::NOT_FOUND)
              << where << ": denied, got " << out.status.error_code() << " "
              << out.status.error_message();
        }
        // Nothing of a scope the caller does not cover, unless it sent that name itself.
        const std::string answer = out.received + out.status.error_message();
        for (const Secret& secret : secrets_) {
          if (auth::Covers(who.binding, secret.scope)) continue;
          if (out.sent.find(secret.text) != std::string::npos) continue;
          EXPECT_EQ(answer.find(secret.text), std::string::npos)
              << where << ": the answer names \"" << secret.text << "\"";
        }
      }
    }
  }
  EXPECT_GT(calls, 500);
}

}  // namespace
}  // namespace gpufed
