// The audit trail through the real server and real gRPC channels: what users, admins and the
// scheduler do is recorded with the right actor, action, object and outcome; a tenant's admin
// reads only its tenant's rows; VerifyAudit is the platform admin's.

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpufed/v1/audit_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "tests/service/fake_agent.h"
#include "tests/service/in_process_server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using Clock = std::chrono::steady_clock;

template <typename Fn>
grpc::Status Call(const std::string& token, Fn fn) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return fn(&ctx);
}

class AuditServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::ServerConfig config;
    config.heartbeat_interval_ms = 200;
    ASSERT_OK_AND_ASSIGN(testing::InProcessServer started,
                         testing::StartInProcessServer(dir_.path(), config));
    server_ = std::move(started.server);
    address_ = started.address;
    dsn_ = started.dsn;
    admin_ = started.admin_token;
    ASSERT_OK_AND_ASSIGN(user_, testing::BootstrapTenant(address_, admin_, "acme", "research"));
    ASSERT_OK_AND_ASSIGN(other_, testing::BootstrapTenant(address_, admin_, "globex", "research"));
    channel_ = testing::Connect(address_);
    workloads_ = v1::WorkloadService::NewStub(channel_);
    tenants_ = v1::TenantService::NewStub(channel_);
    audit_ = v1::AuditService::NewStub(channel_);
    acme_admin_ = Token("acme-admin", v1::ROLE_TENANT_ADMIN, "acme");
  }

  void TearDown() override {
    agent_.reset();
    if (server_) server_->Shutdown();
  }

  std::string Token(const std::string& subject, v1::Role role, const std::string& tenant) {
    v1::CreateTokenRequest req;
    req.set_subject(subject);
    req.set_role(role);
    req.set_tenant(tenant);
    v1::CreateTokenResponse resp;
    EXPECT_OK(
        Call(admin_, [&](grpc::ClientContext* c) { return tenants_->CreateToken(c, req, &resp); }));
    token_ids_[subject] = resp.token_id();
    return resp.token();
  }

  static v1::WorkloadSpec Spec(const std::string& name, uint32_t gpus) {
    v1::WorkloadSpec s;
    s.set_tenant("acme");
    s.set_project("research");
    s.set_name(name);
    s.set_replicas(1);
    s.mutable_per_replica()->set_gpus(gpus);
    s.set_workload_class(v1::WORKLOAD_CLASS_BATCH);
    return s;
  }

  std::string Submit(const std::string& name, uint32_t gpus) {
    v1::SubmitRequest req;
    *req.mutable_spec() = Spec(name, gpus);
    v1::SubmitResponse resp;
    EXPECT_OK(
        Call(user_, [&](grpc::ClientContext* c) { return workloads_->Submit(c, req, &resp); }));
    return resp.workload().id();
  }

  std::vector<v1::AuditEvent> List(const std::string& token, v1::ListAuditEventsRequest req = {}) {
    req.set_page_size(1000);
    v1::ListAuditEventsResponse resp;
    EXPECT_OK(Call(token,
                   [&](grpc::ClientContext* c) { return audit_->ListAuditEvents(c, req, &resp); }));
    return {resp.events().begin(), resp.events().end()};
  }

  // The rows (as the platform admin reads them) with this action and object.
  std::vector<v1::AuditEvent> Rows(const std::string& action, const std::string& object) {
    std::vector<v1::AuditEvent> out;
    for (const v1::AuditEvent& e : List(admin_)) {
      if (e.action() == action && e.object() == object) out.push_back(e);
    }
    return out;
  }

  testing::TempDir dir_{"gpufed-audit"};
  std::unique_ptr<server::Server> server_;
  std::string address_, admin_, user_, other_, acme_admin_, dsn_;
  std::map<std::string, int64_t> token_ids_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
  std::unique_ptr<v1::TenantService::Stub> tenants_;
  std::unique_ptr<v1::AuditService::Stub> audit_;
  std::unique_ptr<FakeAgentStream> agent_;
};

TEST_F(AuditServiceTest, SubmitCancelTokenAndDenialAreRecordedWithActorActionAndOutcome) {
  const std::string id = Submit("audited", 64);  // never fits: stays pending

  v1::CancelRequest cancel;
  cancel.set_id(id);
  v1::Workload cancelled;
  ASSERT_OK(Call(
      user_, [&](grpc::ClientContext* c) { return workloads_->Cancel(c, cancel, &cancelled); }));

  // globex's user tries to submit into acme: refused, and recorded as globex's own row.
  v1::SubmitRequest intrusion;
  *intrusion.mutable_spec() = Spec("intruder", 1);
  v1::SubmitResponse ignored;
  EXPECT_EQ(Call(other_,
                 [&](grpc::ClientContext* c) { return workloads_->Submit(c, intrusion, &ignored); })
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  const std::string object = absl::StrCat("workload/", id);
  std::vector<v1::AuditEvent> submitted = Rows("workloads.submit", object);
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].actor(), "user:acme-user");
  EXPECT_EQ(submitted[0].outcome(), "ok");
  EXPECT_EQ(submitted[0].tenant(), "acme");
  EXPECT_EQ(submitted[0].project(), "research");

  std::vector<v1::AuditEvent> cancels = Rows("workloads.cancel", object);
  ASSERT_EQ(cancels.size(), 1u);
  EXPECT_EQ(cancels[0].actor(), "user:acme-user");
  EXPECT_EQ(cancels[0].outcome(), "ok");

  std::vector<v1::AuditEvent> denied;
  for (const v1::AuditEvent& e : List(admin_)) {
    if (e.action() == "workloads.submit" && e.outcome() == "denied") denied.push_back(e);
  }
  ASSERT_EQ(denied.size(), 1u);
  EXPECT_EQ(denied[0].actor(), "user:globex-user");
  EXPECT_EQ(denied[0].tenant(), "globex");

  // The token made in SetUp: recorded with its binding, never its secret.
  const std::string token_object = absl::StrCat("token/", token_ids_["acme-admin"]);
  std::vector<v1::AuditEvent> tokens = Rows("tokens.create", token_object);
  ASSERT_EQ(tokens.size(), 1u);
  EXPECT_EQ(tokens[0].outcome(), "ok");
  EXPECT_EQ(tokens[0].tenant(), "acme");
  EXPECT_TRUE(absl::StrContains(tokens[0].actor(), "user:"));
  for (const v1::AuditEvent& e : List(admin_)) {
    for (const std::string& secret : {admin_, user_, other_, acme_admin_}) {
      EXPECT_FALSE(absl::StrContains(e.detail(), secret)) << e.action();
      EXPECT_FALSE(absl::StrContains(e.reason(), secret)) << e.action();
    }
  }

  // The chain is whole.
  v1::VerifyAuditResponse verified;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) {
    return audit_->VerifyAudit(c, v1::VerifyAuditRequest(), &verified);
  }));
  EXPECT_EQ(verified.breaks_size(), 0);
  EXPECT_GT(verified.rows(), 5);
  EXPECT_EQ(verified.head_id(), verified.rows());
}

TEST_F(AuditServiceTest, ATenantAdminSeesOnlyItsTenantsRowsAndCannotVerify) {
  Submit("acme-work", 64);
  v1::SubmitRequest globex;
  *globex.mutable_spec() = Spec("globex-work", 64);
  globex.mutable_spec()->set_tenant("globex");
  v1::SubmitResponse resp;
  ASSERT_OK(
      Call(other_, [&](grpc::ClientContext* c) { return workloads_->Submit(c, globex, &resp); }));

  const std::vector<v1::AuditEvent> seen = List(acme_admin_);
  ASSERT_FALSE(seen.empty());
  for (const v1::AuditEvent& e : seen) {
    EXPECT_EQ(e.tenant(), "acme") << e.action() << " " << e.object();
  }
  bool platform_sees_globex = false;
  for (const v1::AuditEvent& e : List(admin_)) platform_sees_globex |= e.tenant() == "globex";
  EXPECT_TRUE(platform_sees_globex);

  // Naming another tenant is refused as if it did not exist.
  v1::ListAuditEventsRequest other_tenant;
  other_tenant.set_tenant("globex");
  v1::ListAuditEventsResponse ignored;
  EXPECT_EQ(Call(acme_admin_,
                 [&](grpc::ClientContext* c) {
                   return audit_->ListAuditEvents(c, other_tenant, &ignored);
                 })
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
  // Tenant users read no audit rows; only platform admins verify.
  EXPECT_EQ(Call(user_,
                 [&](grpc::ClientContext* c) {
                   return audit_->ListAuditEvents(c, v1::ListAuditEventsRequest(), &ignored);
                 })
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::VerifyAuditResponse verified;
  EXPECT_EQ(Call(acme_admin_,
                 [&](grpc::ClientContext* c) {
                   return audit_->VerifyAudit(c, v1::VerifyAuditRequest(), &verified);
                 })
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  // Filters: one actor, one object.
  v1::ListAuditEventsRequest by_actor;
  by_actor.set_actor("user:globex-user");
  for (const v1::AuditEvent& e : List(admin_, by_actor)) EXPECT_EQ(e.actor(), "user:globex-user");
  EXPECT_FALSE(List(admin_, by_actor).empty());
  v1::ListAuditEventsRequest by_object;
  by_object.set_object(absl::StrCat("workload/", resp.workload().id()));
  const std::vector<v1::AuditEvent> one = List(admin_, by_object);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].action(), "workloads.submit");
}

TEST_F(AuditServiceTest, APlacementIsRecordedByTheSchedulersTransaction) {
  agent_ = RegisteredAgent(address_, admin_, "dgx-1", 1, 8, "H100-80GB");
  ASSERT_NE(agent_, nullptr);
  const std::string id = Submit("placed", 2);
  const std::string object = absl::StrCat("workload/", id);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  std::vector<v1::AuditEvent> placed;
  while (Clock::now() < deadline) {
    placed = Rows("workloads.placed", object);
    if (!placed.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].actor(), "scheduler");
  EXPECT_EQ(placed[0].outcome(), "ok");
  EXPECT_EQ(placed[0].tenant(), "acme");
  // Recorded by the transaction that placed it: the transition, and where it went.
  EXPECT_TRUE(absl::EndsWith(placed[0].detail(), "-> PLACED"));
  EXPECT_TRUE(absl::StrContains(placed[0].reason(), "dgx-1"));
  // The agent's registration is on record too.
  EXPECT_EQ(Rows("agents.register", "cluster/dgx-1").size(), 1u);
}

// Someone with SQL access to the server's database, behind its back: edits one row, deletes
// another, inserts a forged one. VerifyAudit (gpufedctl audit verify) reports each, by id and
// kind, and the rows recorded afterwards chain on.
TEST_F(AuditServiceTest, TamperingThroughSqlBehindTheServersBackIsReportedByVerify) {
  for (int i = 0; i < 4; ++i) Submit(absl::StrCat("w", i), 1);
  v1::VerifyAuditResponse clean;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) {
    return audit_->VerifyAudit(c, v1::VerifyAuditRequest(), &clean);
  }));
  ASSERT_EQ(clean.breaks_size(), 0);
  ASSERT_GE(clean.rows(), 6);
  {
    pqxx::connection conn(dsn_);
    pqxx::work txn(conn);
    txn.exec0("ALTER TABLE audit_events DISABLE TRIGGER USER");
    txn.exec0("UPDATE audit_events SET actor = 'user:nobody' WHERE id = 2");
    txn.exec0("DELETE FROM audit_events WHERE id = 4");
    txn.exec0("ALTER TABLE audit_events ENABLE TRIGGER USER");
    txn.commit();
  }
  Submit("after", 1);
  v1::VerifyAuditResponse verified;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) {
    return audit_->VerifyAudit(c, v1::VerifyAuditRequest(), &verified);
  }));
  std::vector<std::pair<int64_t, v1::AuditBreakKind>> breaks;
  for (const v1::AuditBreak& b : verified.breaks()) breaks.emplace_back(b.id(), b.kind());
  EXPECT_THAT(breaks, ::testing::ElementsAre(std::pair(2, v1::AUDIT_BREAK_KIND_EDITED),
                                             std::pair(4, v1::AUDIT_BREAK_KIND_DELETED)));
  // The submission after the tampering chained on (the scheduler may have added rows too).
  EXPECT_GT(verified.head_id(), clean.head_id());
}

// An admin change commits with its audit row or not at all: when the row cannot be written
// (here a constraint added behind the server's back refuses it), the change does not happen and
// the caller gets an error, never an OK for a change the trail does not show.
TEST_F(AuditServiceTest, AChangeWhoseAuditRowCannotBeWrittenDoesNotHappen) {
  {
    pqxx::connection conn(dsn_);
    pqxx::work txn(conn);
    txn.exec0(
        "ALTER TABLE audit_pending ADD CONSTRAINT refuse_tenants"
        " CHECK (action <> 'tenants.create') NOT VALID");
    txn.commit();
  }
  auto tenant_names = [&] {
    v1::ListTenantsResponse listed;
    EXPECT_OK(Call(admin_, [&](grpc::ClientContext* c) {
      return tenants_->ListTenants(c, v1::ListTenantsRequest(), &listed);
    }));
    std::vector<std::string> names;
    for (const v1::Tenant& t : listed.tenants()) names.push_back(t.name());
    return names;
  };
  v1::CreateTenantRequest req;
  req.set_name("initech");
  v1::Tenant created;
  EXPECT_FALSE(Call(admin_, [&](grpc::ClientContext* c) {
                 return tenants_->CreateTenant(c, req, &created);
               }).ok());
  EXPECT_THAT(tenant_names(), ::testing::Not(::testing::Contains("initech")));

  {
    pqxx::connection conn(dsn_);
    pqxx::work txn(conn);
    txn.exec0("ALTER TABLE audit_pending DROP CONSTRAINT refuse_tenants");
    txn.commit();
  }
  ASSERT_OK(Call(admin_,
                 [&](grpc::ClientContext* c) { return tenants_->CreateTenant(c, req, &created); }));
  EXPECT_THAT(tenant_names(), ::testing::Contains("initech"));
  const std::vector<v1::AuditEvent> rows = Rows("tenants.create", "tenant/initech");
  ASSERT_THAT(rows, ::testing::SizeIs(1));
  EXPECT_EQ(rows[0].outcome(), "ok");
}

// A refused call's audit row never holds up its answer. With audit_pending locked by another
// session (a database slow to take the write), Submits refused before the store are answered at
// once with their own code: from a caller whose token is cached (answered on gRPC's own thread)
// and from one seen for the first time (on the executor). Their rows are there once the lock
// goes. Before, each answer waited for its audit row's commit, here until the deadline.
TEST_F(AuditServiceTest, ARefusedSubmitIsAnsweredWithoutWaitingForItsAuditRow) {
  Submit("warm", 1);  // user_'s token is cached from here on
  auto invalid_rows = [&] {
    int n = 0;
    for (const v1::AuditEvent& e : List(admin_)) {
      if (e.action() == "workloads.submit" && e.outcome() == "invalid") ++n;
    }
    return n;
  };
  ASSERT_EQ(invalid_rows(), 0);

  pqxx::connection locker(dsn_);
  auto lock = std::make_unique<pqxx::work>(locker);
  lock->exec0("LOCK TABLE audit_pending IN EXCLUSIVE MODE");
  v1::SubmitRequest unnamed;
  *unnamed.mutable_spec() = Spec("", 1);
  for (const std::string& token : {user_, acme_admin_}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
    v1::SubmitResponse ignored;
    EXPECT_EQ(workloads_->Submit(&ctx, unnamed, &ignored).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  lock->abort();
  lock.reset();
  EXPECT_EQ(invalid_rows(), 2);
}

}  // namespace
}  // namespace gpufed
