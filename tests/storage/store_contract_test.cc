// One suite for every implementation of the storage ports (federation/store.h): the in-memory
// store the domain's unit tests use (tests/support/memory_store.h) and PgStore on a real
// PostgreSQL (a fresh migrated database per test). Both must pass the same tests, so they
// cannot drift apart; PgStore is the reference. Statuses are compared by code, never by
// message. PgStore-only behaviour (group commit, pool, schema, SQL constraints, revocation)
// stays in pg_store_*_test.cc.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "federation/audit.h"
#include "federation/store.h"
#include "federation/types.h"
#include "federation/validation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/pg_audit_log.h"
#include "storage/pg_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/memory_store.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/quota_fixtures.h"
#include "tests/support/replicas.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using ::gpufed::testing::IsOkAndHolds;
using ::gpufed::testing::MakeQuota;
using ::gpufed::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;
using Code = absl::StatusCode;
using S = WorkloadState;
using std::chrono::microseconds;
using std::chrono::seconds;

// One row of a workload's history (workload_events in PostgreSQL).
struct EventRow {
  Timestamp time{};
  WorkloadState from = S::kUnspecified;  // unspecified: the submission
  WorkloadState to = S::kUnspecified;
  std::string actor;
  std::string reason;
};

// An implementation under test, plus what the suite needs to look behind the ports.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual WorkloadStore& workloads() = 0;
  virtual ClusterStore& clusters() = 0;
  virtual TenantStore& tenants() = 0;
  virtual QuotaStore& quotas() = 0;
  virtual ClusterCertificateStore& certificates() = 0;
  virtual MeteringStore& metering() = 0;
  // The audit port, keyed with kAuditKey.
  virtual AuditLog& audit() = 0;
  // The event rows of one workload, oldest first.
  virtual std::vector<EventRow> Events(WorkloadId id) = 0;
  // The store's clock now (to the microsecond). Times the store writes itself during a call
  // fall between Now() before the call and Now() after it.
  virtual Timestamp Now() = 0;
  // Lets the store's clock move on (the fake clock stands still otherwise).
  virtual void Tick() = 0;
};

// The audit chain's key in these tests.
constexpr char kAuditKey[] = "contract-test-audit-key-0123456789abcdef";

Timestamp Micros(Timestamp t) {
  return Timestamp(std::chrono::duration_cast<microseconds>(t.time_since_epoch()));
}

class MemoryBackend final : public Backend {
 public:
  MemoryBackend() { store_.RecordAuditIn(&audit_); }
  WorkloadStore& workloads() override { return store_; }
  ClusterStore& clusters() override { return store_; }
  TenantStore& tenants() override { return store_; }
  QuotaStore& quotas() override { return store_; }
  ClusterCertificateStore& certificates() override { return store_; }
  MeteringStore& metering() override { return store_; }
  AuditLog& audit() override { return audit_; }
  std::vector<EventRow> Events(WorkloadId id) override {
    std::vector<EventRow> out;
    for (const auto& row : store_.Events(id)) {
      out.push_back(EventRow{row.time, row.from, row.to, row.actor, row.reason});
    }
    return out;
  }
  Timestamp Now() override { return store_.clock().Now(); }
  void Tick() override { store_.clock().Advance(seconds(1)); }

 private:
  testing::MemoryStore store_;
  testing::MemoryAuditLog audit_{kAuditKey, &store_.clock()};
};

class PostgresBackend final : public Backend {
 public:
  static absl::StatusOr<std::unique_ptr<Backend>> Create() {
    absl::StatusOr<testing::TestPostgres*> postgres = testing::TestPostgres::Get();
    if (!postgres.ok()) return postgres.status();
    absl::StatusOr<std::string> dsn = (*postgres)->CreateDatabase();
    if (!dsn.ok()) return dsn.status();
    auto backend = std::unique_ptr<PostgresBackend>(new PostgresBackend(*postgres, *dsn));
    absl::StatusOr<std::unique_ptr<storage::PgStore>> store = storage::PgStore::Create(*dsn);
    if (!store.ok()) return store.status();
    backend->store_ = *std::move(store);
    storage::PgAuditLogOptions audit_options;
    audit_options.key = kAuditKey;
    audit_options.verify_page = 2;  // several pages even for a few rows
    absl::StatusOr<std::unique_ptr<storage::PgAuditLog>> audit =
        storage::PgAuditLog::Create(*dsn, audit_options);
    if (!audit.ok()) return audit.status();
    backend->audit_ = *std::move(audit);
    return backend;
  }
  ~PostgresBackend() override {
    audit_.reset();
    store_.reset();
    absl::Status dropped = postgres_->DropDatabase(dsn_);
    EXPECT_OK(dropped);
  }

  WorkloadStore& workloads() override { return *store_; }
  ClusterStore& clusters() override { return *store_; }
  TenantStore& tenants() override { return *store_; }
  QuotaStore& quotas() override { return *store_; }
  ClusterCertificateStore& certificates() override { return *store_; }
  MeteringStore& metering() override { return *store_; }
  AuditLog& audit() override { return *audit_; }
  std::vector<EventRow> Events(WorkloadId id) override {
    pqxx::connection conn(dsn_);
    pqxx::nontransaction txn(conn);
    std::vector<EventRow> out;
    for (const pqxx::row& row :
         txn.exec_params("SELECT epoch_us(at) AS at_us, coalesce(from_state, '') AS from_state,"
                         " to_state, actor, reason FROM workload_events"
                         " WHERE workload_id = $1 ORDER BY id",
                         id)) {
      EventRow e;
      e.time = Timestamp(microseconds(row["at_us"].as<int64_t>()));
      e.from = ParseState(row["from_state"].c_str()).value_or(S::kUnspecified);
      e.to = ParseState(row["to_state"].c_str()).value_or(S::kUnspecified);
      e.actor = row["actor"].c_str();
      e.reason = row["reason"].c_str();
      out.push_back(std::move(e));
    }
    return out;
  }
  Timestamp Now() override { return Micros(std::chrono::system_clock::now()); }
  // The database's clock is the real one: a few milliseconds for times written before and after
  // to differ (the metering tests measure spans between them).
  void Tick() override { std::this_thread::sleep_for(std::chrono::milliseconds(3)); }

 private:
  PostgresBackend(testing::TestPostgres* postgres, std::string dsn)
      : postgres_(postgres), dsn_(std::move(dsn)) {}

  testing::TestPostgres* const postgres_;
  const std::string dsn_;
  std::unique_ptr<storage::PgStore> store_;
  std::unique_ptr<storage::PgAuditLog> audit_;
};

// ---- Builders ------------------------------------------------------------------------------

WorkloadSpec Spec(const std::string& name, const std::string& tenant = "acme",
                  const std::string& project = "research") {
  return storage::StoreTest::Spec(name, tenant, project);
}

Assignment AssignmentOn(const std::string& cluster, uint64_t epoch = 1) {
  return storage::StoreTest::AssignmentOn(cluster, epoch);
}

Transition Step(WorkloadId id, WorkloadState from, WorkloadState to) {
  return storage::StoreTest::Step(id, from, to);
}

ListFilter Filter(const std::string& tenant, const std::string& project = "",
                  std::vector<WorkloadState> states = {}, const std::string& cluster = "",
                  int page_size = 100) {
  ListFilter f;
  f.tenant = tenant;
  f.project = project;
  f.states = std::move(states);
  f.cluster = cluster;
  f.page_size = page_size;
  return f;
}

ClusterInfo Info(const std::string& name) {
  ClusterInfo info;
  info.name = name;
  info.provider = "onprem";
  info.region = "us-east";
  info.zone = "dc1";
  info.jurisdiction = "us";
  info.compliance_labels = {"hipaa", "sovereign"};
  return info;
}

NodeInfo Node(const std::string& cluster, const std::string& name, int gpus) {
  NodeInfo node;
  node.name = name;
  node.rack = "r1";
  node.block = "b1";
  node.cpu_millis = 224000;
  node.memory_mib = 2097152;
  node.labels = {{"pool", "training"}};
  for (int i = 0; i < gpus; ++i) {
    GpuInfo gpu;
    gpu.uuid = absl::StrCat("GPU-", cluster, "-", name, "-", i);
    gpu.index = i;
    gpu.model = "H100-80GB";
    gpu.memory_mib = 81559;
    gpu.nvlink_domain = name + "-nvl";
    gpu.numa_node = i / 4;
    gpu.pcie_switch = "sw" + std::to_string(i / 2);
    gpu.mig_capable = true;
    node.gpus.push_back(gpu);
  }
  return node;
}

std::vector<WorkloadId> Ids(const std::vector<Workload>& workloads) {
  std::vector<WorkloadId> out;
  out.reserve(workloads.size());
  for (const Workload& w : workloads) out.push_back(w.id);
  return out;
}

// ---- Fixture -------------------------------------------------------------------------------

enum class Kind { kMemory, kPostgres };

std::string KindName(Kind kind) { return kind == Kind::kMemory ? "Memory" : "Postgres"; }
void PrintTo(Kind kind, std::ostream* os) { *os << KindName(kind); }

class StoreContractTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kMemory) {
      backend_ = std::make_unique<MemoryBackend>();
    } else {
      ASSERT_OK_AND_ASSIGN(backend_, PostgresBackend::Create());
    }
  }
  void TearDown() override { backend_.reset(); }

  WorkloadStore& workloads() { return backend_->workloads(); }
  ClusterStore& clusters() { return backend_->clusters(); }
  TenantStore& tenants() { return backend_->tenants(); }
  QuotaStore& quotas() { return backend_->quotas(); }
  ClusterCertificateStore& certificates() { return backend_->certificates(); }
  MeteringStore& metering() { return backend_->metering(); }
  AuditLog& audit() { return backend_->audit(); }

  AuditEvent MustAppend(const std::string& actor, const std::string& tenant,
                        const std::string& project, const std::string& action,
                        const std::string& object, absl::string_view outcome = kAuditOk) {
    AuditEvent e;
    e.actor = actor;
    e.tenant = tenant;
    e.project = project;
    e.action = action;
    e.object = object;
    e.outcome = std::string(outcome);
    e.reason = "because";
    e.detail = "detail: 1";
    EXPECT_OK(audit().Append(e));
    // Chained by the next List: the newest row is this one.
    AuditFilter newest;
    newest.page_size = 1;
    absl::StatusOr<AuditPage> page = audit().List(newest);
    EXPECT_OK(page);
    return page.ok() && !page->events.empty() ? page->events.front() : AuditEvent{};
  }

  std::vector<int64_t> AuditIds(const AuditFilter& filter) {
    absl::StatusOr<AuditPage> page = audit().List(filter);
    EXPECT_OK(page);
    std::vector<int64_t> out;
    if (page.ok()) {
      for (const AuditEvent& e : page->events) out.push_back(e.id);
    }
    return out;
  }

  // The tenants and projects most tests submit to.
  void AddTenants() {
    for (const auto& [tenant, project] : std::vector<std::pair<std::string, std::string>>{
             {"acme", "research"}, {"acme", "prod"}, {"globex", "research"}}) {
      absl::StatusOr<Tenant> t = tenants().CreateTenant(Tenant{tenant, tenant + " inc", {}});
      if (!t.ok()) {
        ASSERT_THAT(t, StatusIs(Code::kAlreadyExists));
      }
      ASSERT_OK(tenants().CreateProject(Project{tenant, project, {}}));
    }
  }

  Workload MustSubmit(const WorkloadSpec& spec) {
    absl::StatusOr<SubmitResult> r = workloads().Submit(spec);
    EXPECT_OK(r);
    return r.ok() ? r->workload : Workload{};
  }

  Workload MustGet(WorkloadId id) {
    absl::StatusOr<Workload> w = workloads().Get(id);
    EXPECT_OK(w);
    return w.ok() ? *w : Workload{};
  }

  // Moves a PENDING workload along the happy path to `target` (one step off it at the end for
  // SUCCEEDED, FAILED, CANCELLED, LOST and PREEMPTED, from RUNNING).
  void Advance(WorkloadId id, WorkloadState target) {
    const S path[] = {S::kAdmitted, S::kPlaced, S::kRunning};
    S at = S::kPending;
    for (S next : path) {
      if (at == target) return;
      ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({Step(id, at, next)}));
      ASSERT_TRUE(r[0].applied);
      at = next;
    }
    if (at == target) return;
    ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({Step(id, at, target)}));
    ASSERT_TRUE(r[0].applied);
  }

  std::vector<WorkloadId> ListIds(const ListFilter& filter) {
    absl::StatusOr<WorkloadPage> page = workloads().List(filter);
    EXPECT_OK(page);
    if (!page.ok()) return {};
    std::vector<WorkloadId> ids = Ids(page->workloads);
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  std::map<WorkloadState, int64_t> Counts() {
    absl::StatusOr<std::vector<std::pair<WorkloadState, int64_t>>> counts =
        workloads().CountByState();
    EXPECT_OK(counts);
    if (!counts.ok()) return {};
    return std::map<WorkloadState, int64_t>(counts->begin(), counts->end());
  }

  // `t` was written by the store between `before` and `after` (its own clock readings).
  static void ExpectBetween(Timestamp t, Timestamp before, Timestamp after) {
    EXPECT_LE(before, t);
    EXPECT_LE(t, after);
  }

  std::unique_ptr<Backend> backend_;
};

// ---- Tenants, projects, tokens ---------------------------------------------------------------

TEST_P(StoreContractTest, TenantsAreCreatedOnceAndListedByName) {
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(Tenant globex, tenants().CreateTenant(Tenant{"globex", "", {}}));
  const Timestamp after = backend_->Now();
  EXPECT_EQ(globex.name, "globex");
  ExpectBetween(globex.create_time, before, after);
  backend_->Tick();
  ASSERT_OK_AND_ASSIGN(Tenant acme, tenants().CreateTenant(Tenant{"acme", "Acme Corp", {}}));
  EXPECT_EQ(acme.display_name, "Acme Corp");

  EXPECT_THAT(tenants().CreateTenant(Tenant{"acme", "again", {}}), StatusIs(Code::kAlreadyExists));
  EXPECT_THAT(tenants().CreateTenant(Tenant{"", "x", {}}), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateTenant(Tenant{std::string(kMaxNameLength + 1, 'a'), "", {}}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateTenant(Tenant{"1acme", "", {}}), StatusIs(Code::kInvalidArgument));
  EXPECT_OK(tenants().CreateTenant(Tenant{std::string(kMaxNameLength, 'a'), "", {}}));

  ASSERT_OK_AND_ASSIGN(std::vector<Tenant> listed, tenants().ListTenants());
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0].name, std::string(kMaxNameLength, 'a'));
  EXPECT_EQ(listed[1].name, "acme");
  EXPECT_EQ(listed[1].display_name, "Acme Corp");  // the first one, not "again"
  EXPECT_EQ(listed[1].create_time, acme.create_time);
  EXPECT_EQ(listed[2].name, "globex");
  EXPECT_EQ(listed[2].create_time, globex.create_time);
}

TEST_P(StoreContractTest, ProjectsBelongToAnExistingTenant) {
  ASSERT_OK(tenants().CreateTenant(Tenant{"acme", "", {}}));
  ASSERT_OK(tenants().CreateTenant(Tenant{"globex", "", {}}));
  ASSERT_OK(tenants().CreateTenant(Tenant{"empty", "", {}}));
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(Project research, tenants().CreateProject(Project{"acme", "research", {}}));
  const Timestamp after = backend_->Now();
  EXPECT_EQ(research.tenant, "acme");
  EXPECT_EQ(research.name, "research");
  ExpectBetween(research.create_time, before, after);
  ASSERT_OK(tenants().CreateProject(Project{"acme", "prod", {}}));
  ASSERT_OK(tenants().CreateProject(Project{"globex", "research", {}}));

  EXPECT_THAT(tenants().CreateProject(Project{"acme", "prod", {}}), StatusIs(Code::kAlreadyExists));
  EXPECT_THAT(tenants().CreateProject(Project{"initech", "x", {}}), StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().CreateProject(Project{"acme", "", {}}), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateProject(Project{"", "x", {}}), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateProject(Project{"acme", std::string(129, 'p'), {}}),
              StatusIs(Code::kInvalidArgument));

  ASSERT_OK_AND_ASSIGN(std::vector<Project> acme, tenants().ListProjects("acme"));
  ASSERT_EQ(acme.size(), 2u);
  EXPECT_EQ(acme[0].name, "prod");
  EXPECT_EQ(acme[1].name, "research");
  EXPECT_EQ(acme[1].tenant, "acme");
  EXPECT_EQ(acme[1].create_time, research.create_time);
  ASSERT_OK_AND_ASSIGN(std::vector<Project> globex, tenants().ListProjects("globex"));
  ASSERT_EQ(globex.size(), 1u);
  EXPECT_EQ(globex[0].tenant, "globex");
  EXPECT_THAT(tenants().ListProjects("empty"), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(tenants().ListProjects("initech"), StatusIs(Code::kNotFound));
}

TEST_P(StoreContractTest, TokensAreStoredByHashAndValidated) {
  ASSERT_OK(tenants().CreateTenant(Tenant{"acme", "", {}}));
  ASSERT_OK_AND_ASSIGN(int64_t none, tenants().CountTokens());
  EXPECT_EQ(none, 0);

  ASSERT_OK(tenants().CreateToken("hash-admin", {"alice", auth::Role::kPlatformAdmin, "", ""}));
  ASSERT_OK(tenants().CreateToken("hash-user", {"bob", auth::Role::kTenantUser, "acme", ""}));
  ASSERT_OK(tenants().CreateToken("hash-tadmin", {"carol", auth::Role::kTenantAdmin, "acme", ""}));
  ASSERT_OK(tenants().CreateToken("hash-viewer", {"dan", auth::Role::kViewer, "acme", ""}));
  // An agent's cluster need not be registered yet.
  ASSERT_OK(tenants().CreateToken(
      "hash-agent", {.subject = "agent-dgx", .role = auth::Role::kAgent, .cluster = "dgx"}));
  ASSERT_OK_AND_ASSIGN(int64_t five, tenants().CountTokens());
  EXPECT_EQ(five, 5);

  ASSERT_OK_AND_ASSIGN(TokenRecord user, tenants().LookupToken("hash-user"));
  EXPECT_EQ(user.subject, "bob");
  EXPECT_EQ(user.role, auth::Role::kTenantUser);
  EXPECT_EQ(user.tenant, "acme");
  EXPECT_EQ(user.cluster, "");
  ASSERT_OK_AND_ASSIGN(TokenRecord agent, tenants().LookupToken("hash-agent"));
  EXPECT_EQ(agent.subject, "agent-dgx");
  EXPECT_EQ(agent.role, auth::Role::kAgent);
  EXPECT_EQ(agent.tenant, "");
  EXPECT_EQ(agent.cluster, "dgx");
  ASSERT_OK_AND_ASSIGN(TokenRecord viewer, tenants().LookupToken("hash-viewer"));
  EXPECT_EQ(viewer.tenant, "acme");
  EXPECT_THAT(tenants().LookupToken("hash-nobody"), StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().LookupToken(""), StatusIs(Code::kNotFound));

  // A second token with the same hash is refused and the first one stays.
  EXPECT_THAT(tenants().CreateToken("hash-user", {"mallory", auth::Role::kPlatformAdmin, "", ""}),
              StatusIs(Code::kAlreadyExists));
  ASSERT_OK_AND_ASSIGN(TokenRecord still, tenants().LookupToken("hash-user"));
  EXPECT_EQ(still.subject, "bob");
  EXPECT_EQ(still.id, user.id);
  EXPECT_GT(user.id, 0);
  EXPECT_NE(user.id, agent.id);

  // Bad input: refused, nothing stored.
  EXPECT_THAT(tenants().CreateToken("h1", {"eve", static_cast<auth::Role>(42), "", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateToken("h2", {"eve", auth::Role::kTenantAdmin, "", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateToken("h3", {"eve", auth::Role::kTenantUser, "", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateToken("h4", {"eve", auth::Role::kAgent, "", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateToken("", {"eve", auth::Role::kViewer, "", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateToken("h5", {"", auth::Role::kViewer, "", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().CreateToken("h6", {"eve", auth::Role::kTenantUser, "initech", ""}),
              StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().CreateToken("h7", {"eve", auth::Role::kViewer, "initech", ""}),
              StatusIs(Code::kNotFound));
  for (const char* hash : {"h1", "h2", "h3", "h4", "h5", "h6", "h7"}) {
    EXPECT_THAT(tenants().LookupToken(hash), StatusIs(Code::kNotFound)) << hash;
  }
  ASSERT_OK_AND_ASSIGN(int64_t after, tenants().CountTokens());
  EXPECT_EQ(after, 5);
}

// Cutting a cluster off revokes every agent token bound to it, however many there are (more
// than one ListTokens page), and nothing else.
TEST_P(StoreContractTest, RevokeClusterTakesEveryAgentTokenOfTheClusterAndNothingElse) {
  ASSERT_OK(tenants().CreateTenant(Tenant{"acme", "", {}}));
  std::vector<int64_t> made;
  for (int i = 0; i < TenantStore::kMaxTokenList + 5; ++i) {
    ASSERT_OK_AND_ASSIGN(TokenRecord t, tenants().CreateToken(absl::StrCat("hash-edge-", i),
                                                              {.subject = "agent-edge",
                                                               .role = auth::Role::kAgent,
                                                               .cluster = "edge"}));
    made.push_back(t.id);
  }
  ASSERT_OK(tenants().CreateToken(
      "hash-core", {.subject = "agent-core", .role = auth::Role::kAgent, .cluster = "core"}));
  ASSERT_OK(tenants().CreateToken("hash-bob", {"bob", auth::Role::kTenantUser, "acme", ""}));

  ASSERT_OK_AND_ASSIGN(ClusterCertificateStore::ClusterRevocation revoked,
                       certificates().RevokeCluster("edge"));
  EXPECT_EQ(revoked.tokens, made);
  EXPECT_EQ(revoked.certificates, 0);
  EXPECT_THAT(tenants().LookupToken("hash-edge-0"), StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().LookupToken(absl::StrCat("hash-edge-", made.size() - 1)),
              StatusIs(Code::kNotFound));
  ASSERT_OK(tenants().LookupToken("hash-core"));
  ASSERT_OK(tenants().LookupToken("hash-bob"));
  EXPECT_THAT(tenants().CountTokens(), IsOkAndHolds(2));
  // Again: nothing left to revoke.
  ASSERT_OK_AND_ASSIGN(revoked, certificates().RevokeCluster("edge"));
  EXPECT_THAT(revoked.tokens, IsEmpty());
}

TEST_P(StoreContractTest, ARevokedTokenIsNoLongerFoundAndNeverComesBack) {
  ASSERT_OK(tenants().CreateTenant(Tenant{"acme", "", {}}));
  ASSERT_OK(tenants().CreateTenant(Tenant{"globex", "", {}}));
  ASSERT_OK(tenants().CreateToken("hash-bob", {"bob", auth::Role::kTenantUser, "acme", ""}));
  ASSERT_OK(tenants().CreateToken("hash-gil", {"gil", auth::Role::kTenantUser, "globex", ""}));
  ASSERT_OK(tenants().CreateToken(
      "hash-agent", {.subject = "agent-dgx", .role = auth::Role::kAgent, .cluster = "dgx"}));
  ASSERT_OK_AND_ASSIGN(TokenRecord bob, tenants().LookupToken("hash-bob"));
  ASSERT_OK_AND_ASSIGN(TokenRecord agent, tenants().LookupToken("hash-agent"));

  // Another tenant's scope does not reach it, and changes nothing.
  EXPECT_THAT(tenants().RevokeToken(bob.id, "globex", ""), StatusIs(Code::kNotFound));
  ASSERT_OK(tenants().LookupToken("hash-bob"));
  EXPECT_THAT(tenants().RevokeToken(bob.id + 1000, "", ""), StatusIs(Code::kNotFound));

  ASSERT_OK_AND_ASSIGN(TokenRecord revoked, tenants().RevokeToken(bob.id, "acme", ""));
  EXPECT_EQ(revoked.subject, "bob");
  EXPECT_EQ(revoked.id, bob.id);
  EXPECT_THAT(tenants().LookupToken("hash-bob"), StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().CountTokens(), IsOkAndHolds(2));
  // Again: the same answer, nothing else changes.
  ASSERT_OK_AND_ASSIGN(TokenRecord again, tenants().RevokeToken(bob.id, "", ""));
  EXPECT_EQ(again.id, bob.id);
  // Its hash is never live again.
  EXPECT_THAT(tenants().CreateToken("hash-bob", {"bob", auth::Role::kTenantUser, "acme", ""}),
              StatusIs(Code::kAlreadyExists));
  EXPECT_THAT(tenants().LookupToken("hash-bob"), StatusIs(Code::kNotFound));

  // Platform scope reaches any token, an agent's included.
  ASSERT_OK(tenants().RevokeToken(agent.id, "", ""));
  EXPECT_THAT(tenants().LookupToken("hash-agent"), StatusIs(Code::kNotFound));
  ASSERT_OK(tenants().LookupToken("hash-gil"));
}

// ---- Role bindings -----------------------------------------------------------------------

TEST_P(StoreContractTest, RoleBindingsAreOnePerSubjectAndScopeAndListedInOrder) {
  AddTenants();
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(BindingChange bob,
                       tenants().SetRoleBinding({"bob", auth::Role::kTenantUser, "acme", ""}));
  EXPECT_EQ(bob.binding.subject, "bob");
  EXPECT_EQ(bob.binding.role, auth::Role::kTenantUser);
  EXPECT_TRUE(bob.tokens.empty());
  ExpectBetween(bob.binding.create_time, before, backend_->Now());
  ASSERT_OK(tenants().SetRoleBinding({"bob", auth::Role::kTenantAdmin, "acme", "research"}));
  ASSERT_OK(tenants().SetRoleBinding({"ann", auth::Role::kViewer, "acme", ""}));
  ASSERT_OK(tenants().SetRoleBinding({"gil", auth::Role::kTenantUser, "globex", ""}));
  ASSERT_OK(tenants().SetRoleBinding({"fin", auth::Role::kViewer, "", ""}));
  // Setting it again changes the role in place: still one binding per subject and scope.
  ASSERT_OK_AND_ASSIGN(BindingChange ann,
                       tenants().SetRoleBinding({"ann", auth::Role::kTenantAdmin, "acme", ""}));
  EXPECT_EQ(ann.binding.role, auth::Role::kTenantAdmin);

  const auto names = [](const std::vector<RoleBinding>& bindings) {
    std::vector<std::string> out;
    out.reserve(bindings.size());
    for (const RoleBinding& b : bindings) {
      out.push_back(
          absl::StrCat(b.tenant, "/", b.project, "/", b.subject, "=", auth::RoleName(b.role)));
    }
    return out;
  };
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> all, tenants().ListRoleBindings("", ""));
  EXPECT_THAT(names(all),
              ElementsAre("//fin=viewer", "acme//ann=tenant-admin", "acme//bob=tenant-user",
                          "acme/research/bob=tenant-admin", "globex//gil=tenant-user"));
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> acme, tenants().ListRoleBindings("acme", ""));
  EXPECT_EQ(acme.size(), 3u);
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> research,
                       tenants().ListRoleBindings("acme", "research"));
  EXPECT_THAT(names(research), ElementsAre("acme/research/bob=tenant-admin"));
  // A subject's own, at every scope (what decides a JWT's role).
  ASSERT_OK(tenants().SetRoleBinding({"bob", auth::Role::kViewer, "", ""}));
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> bobs, tenants().ListSubjectRoleBindings("bob"));
  EXPECT_THAT(names(bobs), ElementsAre("//bob=viewer", "acme//bob=tenant-user",
                                       "acme/research/bob=tenant-admin"));
  EXPECT_THAT(tenants().ListSubjectRoleBindings("nobody"), IsOkAndHolds(IsEmpty()));
  ASSERT_OK(tenants().DeleteRoleBinding("bob", "", ""));

  // Refused, and nothing stored.
  EXPECT_THAT(tenants().SetRoleBinding({"eve", auth::Role::kTenantUser, "initech", ""}),
              StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().SetRoleBinding({"eve", auth::Role::kTenantUser, "acme", "nope"}),
              StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().SetRoleBinding({"eve", auth::Role::kAgent, "", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().SetRoleBinding({"eve", auth::Role::kPlatformAdmin, "acme", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().SetRoleBinding({"eve", auth::Role::kTenantUser, "", ""}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().SetRoleBinding({"", auth::Role::kViewer, "acme", ""}),
              StatusIs(Code::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> after, tenants().ListRoleBindings("", ""));
  EXPECT_EQ(names(after), names(all));
}

TEST_P(StoreContractTest, ABindingCapsItsSubjectsTokensAndTakesThemWhenRemoved) {
  AddTenants();
  ASSERT_OK(tenants().SetRoleBinding({"bob", auth::Role::kTenantUser, "acme", ""}));
  // No token above the binding at its scope; elsewhere the binding does not reach.
  EXPECT_THAT(tenants().CreateToken("h-admin", {"bob", auth::Role::kTenantAdmin, "acme", ""}),
              StatusIs(Code::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(
      TokenRecord user,
      tenants().CreateToken("h-user", {"bob", auth::Role::kTenantUser, "acme", ""}));
  ASSERT_OK_AND_ASSIGN(TokenRecord viewer,
                       tenants().CreateToken("h-view", {"bob", auth::Role::kViewer, "acme", ""}));
  ASSERT_OK_AND_ASSIGN(
      TokenRecord project,
      tenants().CreateToken("h-proj", {"bob", auth::Role::kTenantAdmin, "acme", "research"}));
  ASSERT_OK_AND_ASSIGN(
      TokenRecord other,
      tenants().CreateToken("h-other", {"carl", auth::Role::kTenantAdmin, "acme", ""}));

  // Lowered to viewer: the user token follows, the viewer token and the others stay.
  ASSERT_OK_AND_ASSIGN(BindingChange lowered,
                       tenants().SetRoleBinding({"bob", auth::Role::kViewer, "acme", ""}));
  EXPECT_THAT(lowered.tokens, ElementsAre(user.id));
  ASSERT_OK_AND_ASSIGN(TokenRecord now_user, tenants().LookupToken("h-user"));
  EXPECT_EQ(now_user.role, auth::Role::kViewer);
  ASSERT_OK_AND_ASSIGN(TokenRecord still_project, tenants().LookupToken("h-proj"));
  EXPECT_EQ(still_project.role, auth::Role::kTenantAdmin);
  // Raising the binding does not raise the tokens.
  ASSERT_OK_AND_ASSIGN(BindingChange raised,
                       tenants().SetRoleBinding({"bob", auth::Role::kTenantAdmin, "acme", ""}));
  EXPECT_TRUE(raised.tokens.empty());
  ASSERT_OK_AND_ASSIGN(now_user, tenants().LookupToken("h-user"));
  EXPECT_EQ(now_user.role, auth::Role::kViewer);

  // Removing it revokes the subject's tokens at that scope only.
  ASSERT_OK_AND_ASSIGN(BindingChange removed, tenants().DeleteRoleBinding("bob", "acme", ""));
  EXPECT_EQ(removed.binding.role, auth::Role::kTenantAdmin);
  EXPECT_THAT(removed.tokens, ElementsAre(user.id, viewer.id));
  EXPECT_THAT(tenants().LookupToken("h-user"), StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().LookupToken("h-view"), StatusIs(Code::kNotFound));
  ASSERT_OK(tenants().LookupToken("h-proj"));
  ASSERT_OK(tenants().LookupToken("h-other"));
  EXPECT_THAT(tenants().DeleteRoleBinding("bob", "acme", ""), StatusIs(Code::kNotFound));
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> left, tenants().ListRoleBindings("acme", ""));
  EXPECT_TRUE(left.empty());
  (void)project;
  (void)other;
}

TEST_P(StoreContractTest, BindingsGoWithTheirProjectAndTenant) {
  ASSERT_OK(tenants().CreateTenant(Tenant{"acme", "", {}}));
  ASSERT_OK(tenants().CreateProject(Project{"acme", "lab", {}}));
  ASSERT_OK(tenants().SetRoleBinding({"bob", auth::Role::kTenantUser, "acme", "lab"}));
  ASSERT_OK(tenants().SetRoleBinding({"ann", auth::Role::kTenantAdmin, "acme", ""}));
  ASSERT_OK(tenants().DeleteProject("acme", "lab"));
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> left, tenants().ListRoleBindings("acme", ""));
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].subject, "ann");
  ASSERT_OK(tenants().DeleteTenant("acme"));
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> none, tenants().ListRoleBindings("", ""));
  EXPECT_TRUE(none.empty());
  // A tenant made again under the name starts without members.
  ASSERT_OK(tenants().CreateTenant(Tenant{"acme", "", {}}));
  ASSERT_OK_AND_ASSIGN(none, tenants().ListRoleBindings("acme", ""));
  EXPECT_TRUE(none.empty());
}

// ---- Cluster certificates ------------------------------------------------------------------

// A certificate of `cluster` valid from an hour before the store's now, for a day; whole seconds,
// as certificates carry them.
ClusterCertificate Certificate(const std::string& serial, const std::string& cluster,
                               Timestamp now) {
  const Timestamp start = std::chrono::time_point_cast<seconds>(now) - std::chrono::hours(1);
  return ClusterCertificate{.serial = serial,
                            .cluster = cluster,
                            .not_before = start,
                            .not_after = start + std::chrono::hours(24)};
}

TEST_P(StoreContractTest, AClusterCertificateIsFoundOnlyForItsClusterUntilRevoked) {
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(ClusterCertificate east,
                       certificates().AddClusterCertificate(Certificate("7A01", "east", before)));
  ExpectBetween(east.issue_time, before, backend_->Now());
  EXPECT_EQ(east.serial, "7A01");
  EXPECT_EQ(east.not_after, Certificate("7A01", "east", before).not_after);
  EXPECT_FALSE(east.revoke_time.has_value());
  ASSERT_OK(certificates().AddClusterCertificate(Certificate("7A02", "east", before)));
  ASSERT_OK(certificates().AddClusterCertificate(Certificate("7B01", "west", before)));

  ASSERT_OK_AND_ASSIGN(ClusterCertificate found,
                       certificates().LookupClusterCertificate("7A01", "east"));
  EXPECT_EQ(found.cluster, "east");
  EXPECT_EQ(found.not_before, east.not_before);
  // Another cluster's certificate speaks for nothing here; an unknown serial neither.
  EXPECT_THAT(certificates().LookupClusterCertificate("7B01", "east"), StatusIs(Code::kNotFound));
  EXPECT_THAT(certificates().LookupClusterCertificate("FFFF", "east"), StatusIs(Code::kNotFound));

  // Revoking a cluster revokes all of its certificates, and only its.
  ASSERT_OK_AND_ASSIGN(ClusterCertificateStore::ClusterRevocation revoked,
                       certificates().RevokeCluster("east"));
  EXPECT_EQ(revoked.certificates, 2);
  EXPECT_THAT(certificates().LookupClusterCertificate("7A01", "east"), StatusIs(Code::kNotFound));
  EXPECT_THAT(certificates().LookupClusterCertificate("7A02", "east"), StatusIs(Code::kNotFound));
  ASSERT_OK(certificates().LookupClusterCertificate("7B01", "west"));
  // Again: nothing was live.
  ASSERT_OK_AND_ASSIGN(revoked, certificates().RevokeCluster("east"));
  EXPECT_EQ(revoked.certificates, 0);
  ASSERT_OK_AND_ASSIGN(revoked, certificates().RevokeCluster("nowhere"));
  EXPECT_EQ(revoked.certificates, 0);
  // A revoked serial is never recorded again.
  EXPECT_THAT(certificates().AddClusterCertificate(Certificate("7A01", "east", before)),
              StatusIs(Code::kAlreadyExists));
  EXPECT_THAT(certificates().LookupClusterCertificate("7A01", "east"), StatusIs(Code::kNotFound));
}

TEST_P(StoreContractTest, AnExpiredClusterCertificateIsNotFound) {
  ClusterCertificate old = Certificate("0BAD", "east", backend_->Now());
  old.not_before -= std::chrono::hours(48);
  old.not_after -= std::chrono::hours(48);
  ASSERT_OK(certificates().AddClusterCertificate(old));
  EXPECT_THAT(certificates().LookupClusterCertificate("0BAD", "east"), StatusIs(Code::kNotFound));
}

TEST_P(StoreContractTest, BadClusterCertificatesAreRefusedAndNothingIsStored) {
  const Timestamp now = backend_->Now();
  for (const std::string& serial :
       {std::string(""), std::string("7a01"), std::string("XYZ"), std::string(41, 'A')}) {
    EXPECT_THAT(certificates().AddClusterCertificate(Certificate(serial, "east", now)),
                StatusIs(Code::kInvalidArgument))
        << serial;
  }
  EXPECT_THAT(certificates().AddClusterCertificate(Certificate("7A01", "", now)),
              StatusIs(Code::kInvalidArgument));
  ClusterCertificate backwards = Certificate("7A02", "east", now);
  backwards.not_after = backwards.not_before;
  EXPECT_THAT(certificates().AddClusterCertificate(backwards), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(certificates().LookupClusterCertificate("7A02", "east"), StatusIs(Code::kNotFound));
  ASSERT_OK_AND_ASSIGN(ClusterCertificateStore::ClusterRevocation revoked,
                       certificates().RevokeCluster("east"));
  EXPECT_EQ(revoked.certificates, 0);
}

// ---- Submit and Get ------------------------------------------------------------------------

TEST_P(StoreContractTest, SubmitStoresAPendingWorkloadAndItsEvent) {
  AddTenants();
  WorkloadSpec spec = Spec("train");
  spec.priority = 7;
  spec.min_gpu_memory_mib = 40000;
  spec.run.sim_outcome = SimOutcome::kFail;
  spec.run.sim_exit_code = 3;
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(SubmitResult submitted, workloads().Submit(spec));
  const Timestamp after = backend_->Now();
  EXPECT_TRUE(submitted.created);
  const Workload& w = submitted.workload;
  EXPECT_GT(w.id, 0);
  EXPECT_EQ(w.spec, spec);
  EXPECT_EQ(w.state, S::kPending);
  EXPECT_EQ(w.version, 1u);
  EXPECT_EQ(w.pending_reason, PendingReason());
  EXPECT_TRUE(w.assignment.empty());
  EXPECT_FALSE(w.cancel_requested);
  ExpectBetween(w.create_time, before, after);
  EXPECT_EQ(w.update_time, w.create_time);

  ASSERT_OK_AND_ASSIGN(Workload got, workloads().Get(w.id));
  EXPECT_EQ(got.id, w.id);
  EXPECT_EQ(got.spec, spec);
  EXPECT_EQ(got.state, S::kPending);
  EXPECT_EQ(got.version, 1u);
  EXPECT_EQ(got.create_time, w.create_time);
  EXPECT_EQ(got.update_time, w.update_time);
  EXPECT_FALSE(got.start_time.has_value());
  EXPECT_FALSE(got.end_time.has_value());
  EXPECT_EQ(got.exit_code, 0);
  EXPECT_EQ(got.message, "");

  const std::vector<EventRow> events = backend_->Events(w.id);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].from, S::kUnspecified);
  EXPECT_EQ(events[0].to, S::kPending);
  EXPECT_EQ(events[0].actor, "submit");
  EXPECT_EQ(events[0].time, w.create_time);

  // Ids grow.
  ASSERT_OK_AND_ASSIGN(SubmitResult second, workloads().Submit(Spec("second")));
  EXPECT_GT(second.workload.id, w.id);
}

TEST_P(StoreContractTest, SharingFieldsRoundTrip) {
  AddTenants();
  WorkloadSpec spec = Spec("mig");
  spec.gpus_per_replica = 1;
  spec.mig_profile = "3g.40gb";
  spec.cpu_millis = 4000;
  spec.memory_mib = 32768;
  const Workload submitted = MustSubmit(spec);
  EXPECT_EQ(submitted.spec, spec);

  Transition place = Step(submitted.id, S::kPending, S::kPlaced);
  ReplicaAssignment r = testing::ReplicaOn("node-01", {"GPU-a"}, {0});
  r.mig_profile = "3g.40gb";
  r.mig_start = 4;
  ReplicaAssignment shared = testing::ReplicaOn("node-02", {"GPU-b"}, {1});
  shared.gpu_milli = 250;
  place.assignment->replicas = {r, shared};
  place.assignment->repartitions = {
      {"node-01", "GPU-a", true, {{"3g.40gb", 0}, {"3g.40gb", 4}}, "3g.40gb for workload"}};
  ASSERT_OK_AND_ASSIGN(auto placed, workloads().ApplyTransitions({place}));
  ASSERT_TRUE(placed[0].applied);

  const Workload w = MustGet(submitted.id);
  EXPECT_EQ(w.spec, spec);
  EXPECT_EQ(w.assignment, *place.assignment);
}

TEST_P(StoreContractTest, SubmitRefusesBadSpecsAndStoresNothing) {
  AddTenants();
  WorkloadSpec no_name = Spec("");
  WorkloadSpec no_tenant = Spec("x");
  no_tenant.tenant.clear();
  WorkloadSpec no_project = Spec("x");
  no_project.project.clear();
  WorkloadSpec long_tenant = Spec("x", std::string(129, 't'));
  EXPECT_THAT(workloads().Submit(no_name), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().Submit(no_tenant), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().Submit(no_project), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().Submit(long_tenant), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().Submit(Spec("x", "initech", "research")), StatusIs(Code::kNotFound));
  EXPECT_THAT(workloads().Submit(Spec("x", "acme", "nope")), StatusIs(Code::kNotFound));
  // A project of another tenant is not the tenant's.
  EXPECT_THAT(workloads().Submit(Spec("x", "globex", "prod")), StatusIs(Code::kNotFound));

  ASSERT_OK_AND_ASSIGN(WorkloadPage page, workloads().List(ListFilter{}));
  EXPECT_TRUE(page.workloads.empty());
  EXPECT_TRUE(Counts().empty());
}

TEST_P(StoreContractTest, GetUnknownIsNotFoundAndNonPositiveIsInvalid) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("a")).id;
  EXPECT_THAT(workloads().Get(id + 1000), StatusIs(Code::kNotFound));
  EXPECT_THAT(workloads().Get(0), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().Get(-1), StatusIs(Code::kInvalidArgument));
}

TEST_P(StoreContractTest, SameKeySameSpecReplaysTheWorkloadAsItIsNow) {
  AddTenants();
  WorkloadSpec spec = Spec("train");
  spec.idempotency_key = "train-2026-11-21";
  ASSERT_OK_AND_ASSIGN(SubmitResult first, workloads().Submit(spec));
  EXPECT_TRUE(first.created);
  Advance(first.workload.id, S::kRunning);
  backend_->Tick();

  ASSERT_OK_AND_ASSIGN(SubmitResult again, workloads().Submit(spec));
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.workload.id, first.workload.id);
  EXPECT_EQ(again.workload.spec, spec);
  EXPECT_EQ(again.workload.state, S::kRunning);
  EXPECT_EQ(again.workload.version, MustGet(first.workload.id).version);
  EXPECT_EQ(again.workload.create_time, first.workload.create_time);

  ASSERT_OK_AND_ASSIGN(WorkloadPage page, workloads().List(Filter("acme")));
  EXPECT_EQ(page.workloads.size(), 1u);
  EXPECT_EQ(backend_->Events(first.workload.id).size(), 4u);  // submit + 3 steps, no replay
}

TEST_P(StoreContractTest, SameKeyDifferentSpecIsAlreadyExists) {
  AddTenants();
  WorkloadSpec spec = Spec("train");
  spec.idempotency_key = "k1";
  ASSERT_OK(workloads().Submit(spec));
  for (const auto& change : std::vector<std::function<void(WorkloadSpec&)>>{
           [](WorkloadSpec& s) { s.replicas = 3; }, [](WorkloadSpec& s) { s.name = "other"; },
           [](WorkloadSpec& s) { s.project = "prod"; },
           [](WorkloadSpec& s) { s.run.env["EPOCHS"] = "4"; },
           [](WorkloadSpec& s) { s.gpu_milli = 300; }}) {
    WorkloadSpec other = spec;
    change(other);
    EXPECT_THAT(workloads().Submit(other), StatusIs(Code::kAlreadyExists));
  }
  ASSERT_OK_AND_ASSIGN(WorkloadPage page, workloads().List(ListFilter{}));
  EXPECT_EQ(page.workloads.size(), 1u);
}

TEST_P(StoreContractTest, IdempotencyKeysArePerTenantAndEmptyMeansNone) {
  AddTenants();
  WorkloadSpec a = Spec("train", "acme");
  a.idempotency_key = "shared";
  WorkloadSpec b = Spec("train", "globex");
  b.idempotency_key = "shared";
  ASSERT_OK_AND_ASSIGN(SubmitResult ra, workloads().Submit(a));
  ASSERT_OK_AND_ASSIGN(SubmitResult rb, workloads().Submit(b));
  EXPECT_TRUE(ra.created);
  EXPECT_TRUE(rb.created);
  EXPECT_NE(ra.workload.id, rb.workload.id);

  ASSERT_OK_AND_ASSIGN(SubmitResult n1, workloads().Submit(Spec("unkeyed")));
  ASSERT_OK_AND_ASSIGN(SubmitResult n2, workloads().Submit(Spec("unkeyed")));
  EXPECT_TRUE(n1.created);
  EXPECT_TRUE(n2.created);
  EXPECT_NE(n1.workload.id, n2.workload.id);
}

TEST_P(StoreContractTest, ConcurrentDuplicateSubmitsMakeOneWorkload) {
  AddTenants();
  WorkloadSpec spec = Spec("train");
  spec.idempotency_key = "retry-storm";
  constexpr int kThreads = 8;
  std::vector<absl::StatusOr<SubmitResult>> results(kThreads, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = workloads().Submit(spec); });
  }
  for (std::thread& t : threads) t.join();
  int created = 0;
  std::set<WorkloadId> ids;
  for (const auto& r : results) {
    ASSERT_OK(r);
    created += r->created ? 1 : 0;
    ids.insert(r->workload.id);
  }
  EXPECT_EQ(created, 1);
  EXPECT_EQ(ids.size(), 1u);
}

// ---- List ------------------------------------------------------------------------------------

TEST_P(StoreContractTest, ListIsNewestFirstWithFiltersAndKeysetPages) {
  AddTenants();
  std::vector<WorkloadId> research, prod, globex;
  for (int i = 0; i < 7; ++i) research.push_back(MustSubmit(Spec("r" + std::to_string(i))).id);
  for (int i = 0; i < 3; ++i) {
    prod.push_back(MustSubmit(Spec("p" + std::to_string(i), "acme", "prod")).id);
  }
  for (int i = 0; i < 2; ++i) {
    globex.push_back(MustSubmit(Spec("g" + std::to_string(i), "globex", "research")).id);
  }
  Advance(research[0], S::kRunning);  // on c1
  Advance(research[1], S::kSucceeded);
  Advance(prod[0], S::kPlaced);
  Advance(research[2], S::kLost);
  // Back to PENDING: no longer on any cluster.
  ASSERT_OK_AND_ASSIGN(auto requeued,
                       workloads().ApplyTransitions({Step(research[2], S::kLost, S::kPending)}));
  ASSERT_TRUE(requeued[0].applied);

  // Pages of 5 over everything: newest first, no overlap, nothing missed.
  std::vector<WorkloadId> seen;
  std::vector<size_t> sizes;
  ListFilter filter;
  filter.page_size = 5;
  do {
    ASSERT_OK_AND_ASSIGN(WorkloadPage page, workloads().List(filter));
    sizes.push_back(page.workloads.size());
    for (const Workload& w : page.workloads) seen.push_back(w.id);
    if (page.next_before_id != 0) {
      ASSERT_FALSE(page.workloads.empty());
      EXPECT_EQ(page.next_before_id, page.workloads.back().id);
    }
    filter.before_id = page.next_before_id;
  } while (filter.before_id != 0);
  EXPECT_THAT(sizes, ElementsAre(5u, 5u, 2u));
  std::vector<WorkloadId> all = research;
  all.insert(all.end(), prod.begin(), prod.end());
  all.insert(all.end(), globex.begin(), globex.end());
  std::sort(all.begin(), all.end(), std::greater<>());
  EXPECT_EQ(seen, all);

  // A cursor of our own: only smaller ids.
  ListFilter below;
  below.before_id = prod[0];
  EXPECT_EQ(ListIds(below), research);

  std::vector<WorkloadId> acme = research;
  acme.insert(acme.end(), prod.begin(), prod.end());
  EXPECT_EQ(ListIds(Filter("acme")), acme);
  EXPECT_EQ(ListIds(Filter("acme", "prod")), prod);
  EXPECT_EQ(ListIds(Filter("globex")), globex);
  EXPECT_EQ(ListIds(Filter("", "research", {S::kPending})),
            (std::vector<WorkloadId>{research[2], research[3], research[4], research[5],
                                     research[6], globex[0], globex[1]}));
  EXPECT_EQ(ListIds(Filter("", "", {S::kRunning, S::kPlaced})),
            (std::vector<WorkloadId>{research[0], prod[0]}));
  EXPECT_EQ(ListIds(Filter("acme", "", {S::kSucceeded})), (std::vector<WorkloadId>{research[1]}));
  EXPECT_EQ(ListIds(Filter("", "", {}, "c1")),
            (std::vector<WorkloadId>{research[0], research[1], prod[0]}));
  EXPECT_EQ(ListIds(Filter("acme", "prod", {S::kPlaced}, "c1")),
            (std::vector<WorkloadId>{prod[0]}));
  EXPECT_TRUE(ListIds(Filter("", "", {}, "c2")).empty());
  EXPECT_TRUE(ListIds(Filter("nobody")).empty());

  // A last page that is exactly full says so.
  ASSERT_OK_AND_ASSIGN(WorkloadPage exact, workloads().List(Filter("globex", "", {}, "", 2)));
  EXPECT_EQ(exact.workloads.size(), 2u);
  EXPECT_EQ(exact.next_before_id, 0);
  // page_size 0 is the default (100).
  ASSERT_OK_AND_ASSIGN(WorkloadPage defaulted, workloads().List(Filter("", "", {}, "", 0)));
  EXPECT_EQ(defaulted.workloads.size(), 12u);
  EXPECT_EQ(defaulted.next_before_id, 0);

  EXPECT_THAT(workloads().List(Filter("", "", {}, "", -1)), StatusIs(Code::kInvalidArgument));
  ListFilter negative_cursor;
  negative_cursor.before_id = -5;
  EXPECT_THAT(workloads().List(negative_cursor), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().List(Filter("", "", {S::kPending, S::kUnspecified})),
              StatusIs(Code::kInvalidArgument));
}

// A resumed Watch catches up with ListChangedAfter: the workloads in the order of their last
// change, strictly after a (time, id) position, everyone's or one tenant's, in keyset pages.
TEST_P(StoreContractTest, ListChangedAfterIsInOrderOfLastChangeAfterAPosition) {
  AddTenants();
  const WorkloadId a = MustSubmit(Spec("a")).id;
  backend_->Tick();
  const WorkloadId b = MustSubmit(Spec("b")).id;
  backend_->Tick();
  const WorkloadId g = MustSubmit(Spec("g", "globex", "research")).id;
  backend_->Tick();
  Advance(a, S::kPlaced);  // a changed last
  std::vector<Workload> stored = {MustGet(a), MustGet(b), MustGet(g)};
  std::sort(stored.begin(), stored.end(), [](const Workload& x, const Workload& y) {
    return std::pair(x.update_time, x.id) < std::pair(y.update_time, y.id);
  });
  ASSERT_EQ(stored.back().id, a);

  ASSERT_OK_AND_ASSIGN(std::vector<Workload> all,
                       workloads().ListChangedAfter("", Timestamp{}, 0, 1000));
  EXPECT_EQ(Ids(all), Ids(stored));
  EXPECT_EQ(all.back().state, S::kPlaced) << "as it is now";
  EXPECT_EQ(all.back().version, stored.back().version);
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> acme,
                       workloads().ListChangedAfter("acme", Timestamp{}, 0, 1000));
  EXPECT_THAT(Ids(acme), ElementsAre(b, a));

  // Pages of one, each after the last of the page before: all of them once, in order.
  std::vector<WorkloadId> paged;
  Timestamp after_time{};
  WorkloadId after_id = 0;
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(std::vector<Workload> page,
                         workloads().ListChangedAfter("", after_time, after_id, 1));
    if (page.empty()) break;
    ASSERT_EQ(page.size(), 1u);
    paged.push_back(page[0].id);
    after_time = page[0].update_time;
    after_id = page[0].id;
  }
  EXPECT_EQ(paged, Ids(stored));

  // Strictly after: the same time with a smaller id is before the position.
  const Workload last = stored.back();
  EXPECT_THAT(workloads().ListChangedAfter("", last.update_time, last.id, 10),
              IsOkAndHolds(IsEmpty()));
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> same_time,
                       workloads().ListChangedAfter("", last.update_time, 0, 10));
  EXPECT_THAT(Ids(same_time), ElementsAre(a));
  // A time past every change: nothing.
  EXPECT_THAT(workloads().ListChangedAfter("", last.update_time + std::chrono::hours(1), 0, 10),
              IsOkAndHolds(IsEmpty()));

  EXPECT_THAT(workloads().ListChangedAfter("", Timestamp{}, 0, 0),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().ListChangedAfter("", Timestamp{}, 0, 1001),
              StatusIs(Code::kInvalidArgument));
}

TEST_P(StoreContractTest, ListCapsThePageAtOneThousand) {
  AddTenants();
  for (int i = 0; i < 1002; ++i) MustSubmit(Spec("w" + std::to_string(i)));
  ASSERT_OK_AND_ASSIGN(WorkloadPage page, workloads().List(Filter("", "", {}, "", 5000)));
  EXPECT_EQ(page.workloads.size(), 1000u);
  EXPECT_NE(page.next_before_id, 0);
}

// The scheduler's queue: PENDING and ADMITTED (quota granted, waiting for capacity).
TEST_P(StoreContractTest, ListPendingIsPriorityDescThenIdAsc) {
  AddTenants();
  auto submit = [&](const std::string& name, int priority) {
    WorkloadSpec spec = Spec(name);
    spec.priority = priority;
    return MustSubmit(spec).id;
  };
  const WorkloadId low = submit("low", 1);
  const WorkloadId high1 = submit("high1", 10);
  const WorkloadId negative = submit("negative", -3);
  const WorkloadId mid = submit("mid", 5);
  const WorkloadId high2 = submit("high2", 10);
  const WorkloadId running = submit("running", 100);
  const WorkloadId admitted = submit("admitted", 100);
  Advance(running, S::kRunning);
  Advance(admitted, S::kAdmitted);

  ASSERT_OK_AND_ASSIGN(std::vector<Workload> pending, workloads().ListPending(10));
  EXPECT_EQ(Ids(pending), (std::vector<WorkloadId>{admitted, high1, high2, mid, low, negative}));
  EXPECT_EQ(pending.front().state, S::kAdmitted);
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> two, workloads().ListPending(2));
  EXPECT_EQ(Ids(two), (std::vector<WorkloadId>{admitted, high1}));
  EXPECT_THAT(workloads().ListPending(0), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().ListPending(-1), StatusIs(Code::kInvalidArgument));
}

// What a reload of the queue reads first: ListPending's ids, in its order, with versions that
// move with every change of the row.
TEST_P(StoreContractTest, ListPendingVersionsIsListPendingsIdsAndVersions) {
  AddTenants();
  std::vector<WorkloadId> ids;
  for (int i = 0; i < 5; ++i) {
    WorkloadSpec spec = Spec("w" + std::to_string(i));
    spec.priority = i % 2;
    ids.push_back(MustSubmit(spec).id);
  }
  Advance(ids[4], S::kRunning);
  ASSERT_OK(workloads().SetPendingReasons({{ids[0], PendingReason(ReasonCode::kNoClusters)}}));

  ASSERT_OK_AND_ASSIGN(std::vector<Workload> pending, workloads().ListPending(10));
  ASSERT_OK_AND_ASSIGN(std::vector<WorkloadStore::PendingVersion> versions,
                       workloads().ListPendingVersions(10));
  ASSERT_EQ(versions.size(), pending.size());
  for (size_t i = 0; i < pending.size(); ++i) {
    EXPECT_EQ(versions[i].id, pending[i].id);
    EXPECT_EQ(versions[i].version, pending[i].version);
  }
  EXPECT_EQ(versions.size(), 4u);
  EXPECT_EQ(versions.back().id, ids[2]);
  ASSERT_OK_AND_ASSIGN(Workload first, workloads().Get(ids[0]));
  ASSERT_OK_AND_ASSIGN(Workload second, workloads().Get(ids[2]));
  EXPECT_GT(first.version, second.version);  // its reason was written
  ASSERT_OK_AND_ASSIGN(std::vector<WorkloadStore::PendingVersion> one,
                       workloads().ListPendingVersions(1));
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].id, pending[0].id);
  EXPECT_THAT(workloads().ListPendingVersions(0), StatusIs(Code::kInvalidArgument));
}

TEST_P(StoreContractTest, GetWorkloadsReadsThoseThatExistInIdOrder) {
  AddTenants();
  const WorkloadId a = MustSubmit(Spec("a")).id;
  const WorkloadId b = MustSubmit(Spec("b")).id;
  Advance(b, S::kRunning);
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> got, workloads().GetWorkloads({b, 424242, a, b}));
  EXPECT_EQ(Ids(got), (std::vector<WorkloadId>{a, b}));
  ASSERT_OK_AND_ASSIGN(Workload stored_b, workloads().Get(b));
  EXPECT_EQ(got[1].state, S::kRunning);
  EXPECT_EQ(got[1].version, stored_b.version);
  EXPECT_EQ(got[1].spec, stored_b.spec);
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> none, workloads().GetWorkloads({}));
  EXPECT_TRUE(none.empty());
  EXPECT_THAT(workloads().GetWorkloads({a, 0}), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().GetWorkloads({-5}), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(
      workloads().GetWorkloads(std::vector<WorkloadId>(WorkloadStore::kMaxGetWorkloads + 1, a)),
      StatusIs(Code::kInvalidArgument));
}

TEST_P(StoreContractTest, ListActiveIsPlacedAndRunningInIdOrder) {
  AddTenants();
  std::vector<WorkloadId> ids;
  ids.reserve(6);
  for (int i = 0; i < 6; ++i) ids.push_back(MustSubmit(Spec("w" + std::to_string(i))).id);
  Advance(ids[0], S::kRunning);
  Advance(ids[1], S::kSucceeded);
  Advance(ids[2], S::kPlaced);
  Advance(ids[3], S::kAdmitted);
  Transition elsewhere = Step(ids[4], S::kPending, S::kPlaced);
  elsewhere.assignment = AssignmentOn("c2", 3);
  ASSERT_OK(workloads().ApplyTransitions({elsewhere}));

  ASSERT_OK_AND_ASSIGN(std::vector<Workload> all, workloads().ListActive(""));
  EXPECT_EQ(Ids(all), (std::vector<WorkloadId>{ids[0], ids[2], ids[4]}));
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> c1, workloads().ListActive("c1"));
  EXPECT_EQ(Ids(c1), (std::vector<WorkloadId>{ids[0], ids[2]}));
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> c2, workloads().ListActive("c2"));
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0].assignment, AssignmentOn("c2", 3));
  EXPECT_THAT(workloads().ListActive("c9"), IsOkAndHolds(IsEmpty()));

  // By tenant, ids only: the same three, none of another tenant's.
  EXPECT_THAT(workloads().ListHeldIds("acme", ""),
              IsOkAndHolds(std::vector<WorkloadId>{ids[0], ids[2], ids[4]}));
  EXPECT_THAT(workloads().ListHeldIds("acme", "research"),
              IsOkAndHolds(std::vector<WorkloadId>{ids[0], ids[2], ids[4]}));
  EXPECT_THAT(workloads().ListHeldIds("acme", "prod"), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(workloads().ListHeldIds("globex", ""), IsOkAndHolds(IsEmpty()));
}

// ---- Transitions ---------------------------------------------------------------------------

TEST_P(StoreContractTest, LifecycleSetsAssignmentTimesVersionsAndEvents) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("train")).id;
  ASSERT_OK(workloads().SetPendingReasons({{id, PendingReason(ReasonCode::kNothingFree)}}));
  EXPECT_EQ(MustGet(id).pending_reason, PendingReason(ReasonCode::kNothingFree));
  backend_->Tick();

  Transition place = Step(id, S::kPending, S::kPlaced);
  place.assignment = AssignmentOn("c1", 4);
  place.actor = "scheduler";
  place.reason = "best fit";
  const Timestamp before_place = backend_->Now();
  ASSERT_OK_AND_ASSIGN(auto placed, workloads().ApplyTransitions({place}));
  const Timestamp after_place = backend_->Now();
  ASSERT_EQ(placed.size(), 1u);
  const TransitionResult& p = placed[0];
  EXPECT_EQ(p.id, id);
  ASSERT_TRUE(p.applied);
  ASSERT_TRUE(p.event.has_value());
  ASSERT_TRUE(p.current.has_value());
  EXPECT_EQ(p.event->from, S::kPending);
  EXPECT_EQ(p.event->to, S::kPlaced);
  ExpectBetween(p.event->time, before_place, after_place);
  EXPECT_EQ(p.event->workload.version, p.current->version);
  EXPECT_EQ(p.event->workload.state, S::kPlaced);
  EXPECT_EQ(p.current->state, S::kPlaced);
  EXPECT_EQ(p.current->assignment, AssignmentOn("c1", 4));
  EXPECT_EQ(p.current->pending_reason, PendingReason());  // leaving PENDING clears it
  EXPECT_EQ(p.current->version, 3u);                      // submit, pending reason, placement
  ExpectBetween(p.current->update_time, before_place, after_place);
  EXPECT_FALSE(p.current->start_time.has_value());

  // Agent clock, with sub-millisecond digits: kept to the microsecond.
  const Timestamp started = Timestamp(microseconds(1795000000123456));
  Transition run = Step(id, S::kPlaced, S::kRunning);
  run.actor = "agent:c1";
  run.reason = "started";
  run.time = started;
  ASSERT_OK_AND_ASSIGN(auto running, workloads().ApplyTransitions({run}));
  ASSERT_TRUE(running[0].applied);
  EXPECT_EQ(running[0].current->start_time, started);
  EXPECT_EQ(running[0].event->time, started);
  EXPECT_EQ(running[0].current->version, 4u);

  Transition done = Step(id, S::kRunning, S::kFailed);
  done.actor = "agent:c1";
  done.reason = "exited";
  done.exit_code = 3;
  done.message = "exit 3";
  done.time = started + std::chrono::milliseconds(1500);
  ASSERT_OK_AND_ASSIGN(auto failed, workloads().ApplyTransitions({done}));
  ASSERT_TRUE(failed[0].applied);

  const Workload w = MustGet(id);
  EXPECT_EQ(w.state, S::kFailed);
  EXPECT_EQ(w.exit_code, 3);
  EXPECT_EQ(w.message, "exit 3");
  EXPECT_EQ(w.start_time, started);
  EXPECT_EQ(w.end_time, started + std::chrono::milliseconds(1500));
  EXPECT_EQ(w.assignment, AssignmentOn("c1", 4));  // where it ran stays on record
  EXPECT_EQ(w.version, 5u);
  EXPECT_FALSE(w.cancel_requested);
  EXPECT_THAT(workloads().ListActive("c1"), IsOkAndHolds(IsEmpty()));

  const std::vector<EventRow> events = backend_->Events(id);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[1].from, S::kPending);
  EXPECT_EQ(events[1].to, S::kPlaced);
  EXPECT_EQ(events[1].actor, "scheduler");
  EXPECT_EQ(events[1].reason, "best fit");
  EXPECT_EQ(events[1].time, p.event->time);
  EXPECT_EQ(events[2].time, started);
  EXPECT_EQ(events[3].from, S::kRunning);
  EXPECT_EQ(events[3].to, S::kFailed);
  EXPECT_EQ(events[3].actor, "agent:c1");
  EXPECT_EQ(events[3].reason, "exited");
}

TEST_P(StoreContractTest, ExitCodeAndMessageAreKeptUnlessGiven) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("train")).id;
  Advance(id, S::kRunning);
  Transition requeue = Step(id, S::kRunning, S::kPending);
  requeue.exit_code = 137;
  requeue.message = "node gone";
  ASSERT_OK(workloads().ApplyTransitions({requeue}));
  ASSERT_OK(workloads().ApplyTransitions({Step(id, S::kPending, S::kPlaced)}));
  const Workload w = MustGet(id);
  EXPECT_EQ(w.exit_code, 137);
  EXPECT_EQ(w.message, "node gone");
  EXPECT_FALSE(w.end_time.has_value());  // a requeue does not end it
}

TEST_P(StoreContractTest, StaleOrUnknownTransitionIsSkippedNotAnError) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("train")).id;
  ASSERT_OK_AND_ASSIGN(auto first,
                       workloads().ApplyTransitions({Step(id, S::kPending, S::kPlaced)}));
  ASSERT_TRUE(first[0].applied);

  Transition stale = Step(id, S::kPending, S::kPlaced);
  stale.assignment = AssignmentOn("c2");
  ASSERT_OK_AND_ASSIGN(auto second, workloads().ApplyTransitions({stale}));
  ASSERT_EQ(second.size(), 1u);
  const TransitionResult& r = second[0];
  EXPECT_EQ(r.id, id);
  EXPECT_FALSE(r.applied);
  EXPECT_FALSE(r.event.has_value());
  ASSERT_TRUE(r.current.has_value());
  EXPECT_EQ(r.current->state, S::kPlaced);
  EXPECT_EQ(r.current->assignment.cluster, "c1");
  EXPECT_EQ(r.current->version, 2u);
  EXPECT_EQ(backend_->Events(id).size(), 2u);

  const WorkloadId unknown = id + 1000;
  ASSERT_OK_AND_ASSIGN(auto missing,
                       workloads().ApplyTransitions({Step(unknown, S::kPending, S::kPlaced)}));
  EXPECT_EQ(missing[0].id, unknown);
  EXPECT_FALSE(missing[0].applied);
  EXPECT_FALSE(missing[0].current.has_value());
  EXPECT_FALSE(missing[0].event.has_value());
  EXPECT_TRUE(backend_->Events(unknown).empty());
}

TEST_P(StoreContractTest, SeveralStepsOfOneWorkloadInOneBatchApplyInOrder) {
  AddTenants();
  const WorkloadId a = MustSubmit(Spec("a")).id;
  const WorkloadId b = MustSubmit(Spec("b")).id;
  ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({
                                   Step(a, S::kPending, S::kPlaced),
                                   Step(b, S::kPending, S::kPlaced),
                                   Step(a, S::kPlaced, S::kRunning),
                                   Step(b, S::kPending, S::kPlaced),  // stale by then
                                   Step(a, S::kRunning, S::kSucceeded),
                               }));
  std::vector<bool> applied;
  applied.reserve(r.size());
  for (const TransitionResult& t : r) applied.push_back(t.applied);
  EXPECT_EQ(applied, (std::vector<bool>{true, true, true, false, true}));
  // Each applied step reports the workload as that step left it; a skipped one as the batch
  // left it.
  EXPECT_EQ(r[0].current->state, S::kPlaced);
  EXPECT_EQ(r[0].current->version, 2u);
  EXPECT_EQ(r[2].current->state, S::kRunning);
  EXPECT_EQ(r[2].event->from, S::kPlaced);
  EXPECT_EQ(r[3].current->state, S::kPlaced);
  EXPECT_EQ(r[4].current->state, S::kSucceeded);
  EXPECT_EQ(MustGet(a).state, S::kSucceeded);
  EXPECT_EQ(MustGet(a).version, 4u);
  EXPECT_EQ(MustGet(b).version, 2u);
  EXPECT_EQ(backend_->Events(a).size(), 4u);
  EXPECT_EQ(backend_->Events(b).size(), 2u);
}

TEST_P(StoreContractTest, InvalidBatchIsRefusedWhole) {
  AddTenants();
  const WorkloadId a = MustSubmit(Spec("a")).id;
  const WorkloadId b = MustSubmit(Spec("b")).id;
  const Transition good = Step(a, S::kPending, S::kPlaced);
  Transition no_assignment = Step(b, S::kPending, S::kPlaced);
  no_assignment.assignment.reset();
  Transition no_cluster = Step(b, S::kPending, S::kPlaced);
  no_cluster.assignment->cluster.clear();
  Transition no_id = Step(b, S::kPending, S::kAdmitted);
  no_id.id = 0;
  Transition no_from = Step(b, S::kPending, S::kAdmitted);
  no_from.from = S::kUnspecified;
  Transition no_to = Step(b, S::kPending, S::kAdmitted);
  no_to.to = S::kUnspecified;
  const Transition same = Step(b, S::kPending, S::kPending);
  for (const Transition& bad : {no_assignment, no_cluster, no_id, no_from, no_to, same}) {
    EXPECT_THAT(workloads().ApplyTransitions({good, bad}), StatusIs(Code::kInvalidArgument));
  }
  EXPECT_EQ(MustGet(a).state, S::kPending);
  EXPECT_EQ(MustGet(a).version, 1u);
  EXPECT_EQ(backend_->Events(a).size(), 1u);
  EXPECT_EQ(backend_->Events(b).size(), 1u);
  EXPECT_THAT(workloads().ApplyTransitions({}), IsOkAndHolds(IsEmpty()));
}

TEST_P(StoreContractTest, TransitionWithoutATimeUsesTheStoresClock) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("train")).id;
  Advance(id, S::kPlaced);
  backend_->Tick();
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({Step(id, S::kPlaced, S::kRunning)}));
  const Timestamp after = backend_->Now();
  ASSERT_TRUE(r[0].applied);
  ASSERT_TRUE(r[0].current->start_time.has_value());
  ExpectBetween(*r[0].current->start_time, before, after);
  EXPECT_EQ(r[0].event->time, *r[0].current->start_time);
  EXPECT_GT(r[0].current->update_time, r[0].current->create_time);
}

TEST_P(StoreContractTest, ReturningToPendingClearsAssignmentAndStartTime) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("train")).id;
  Advance(id, S::kRunning);
  Transition lost = Step(id, S::kRunning, S::kLost);
  lost.message = "cluster c1 unreachable";
  ASSERT_OK_AND_ASSIGN(auto l, workloads().ApplyTransitions({lost}));
  ASSERT_TRUE(l[0].applied);
  EXPECT_EQ(l[0].current->assignment, AssignmentOn("c1"));  // LOST keeps where it was

  Transition requeue = Step(id, S::kLost, S::kPending);
  requeue.reason = "requeued after cluster c1 was lost";
  ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({requeue}));
  ASSERT_TRUE(r[0].applied);
  const Workload& w = *r[0].current;
  EXPECT_EQ(w.state, S::kPending);
  EXPECT_TRUE(w.assignment.empty());
  EXPECT_FALSE(w.start_time.has_value());
  EXPECT_EQ(w.pending_reason,
            ReasonWithText(ReasonCode::kRequeued, "requeued after cluster c1 was lost"));
  EXPECT_EQ(w.message, "cluster c1 unreachable");
  EXPECT_THAT(workloads().ListActive("c1"), IsOkAndHolds(IsEmpty()));
  EXPECT_TRUE(ListIds(Filter("", "", {}, "c1")).empty());
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> pending, workloads().ListPending(10));
  EXPECT_EQ(Ids(pending), (std::vector<WorkloadId>{id}));
}

TEST_P(StoreContractTest, ConcurrentIdenticalTransitionsApplyOnce) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("train")).id;
  constexpr int kThreads = 8;
  std::atomic<int> applied{0};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      Transition t = Step(id, S::kPending, S::kPlaced);
      t.assignment = AssignmentOn("c" + std::to_string(i));
      auto r = workloads().ApplyTransitions({t});
      if (!r.ok()) {
        ++errors;
      } else if ((*r)[0].applied) {
        ++applied;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(applied.load(), 1);
  EXPECT_EQ(backend_->Events(id).size(), 2u);
}

// ---- Pending reasons -----------------------------------------------------------------------

TEST_P(StoreContractTest, PendingReasonsWriteOnlyChangesOnWaitingWorkloads) {
  AddTenants();
  const WorkloadId waiting = MustSubmit(Spec("waiting")).id;
  const WorkloadId admitted = MustSubmit(Spec("admitted")).id;
  const WorkloadId running = MustSubmit(Spec("running")).id;
  Advance(admitted, S::kAdmitted);
  Advance(running, S::kRunning);
  const Workload running_before = MustGet(running);
  backend_->Tick();

  const PendingReason quota = PendingReason(ReasonCode::kGpusBusy).Set(figure::kFree, 2);
  const PendingReason moved = PendingReason(ReasonCode::kGpusBusy).Set(figure::kFree, 3);
  const PendingReason none_free(ReasonCode::kNothingFree);
  const Timestamp before = backend_->Now();
  ASSERT_OK(workloads().SetPendingReasons(
      {{waiting, quota}, {admitted, quota}, {running, quota}, {running + 1000, quota}}));
  const Timestamp after = backend_->Now();
  const Workload w = MustGet(waiting);
  EXPECT_EQ(w.pending_reason, quota);
  EXPECT_EQ(w.version, 2u);
  ExpectBetween(w.update_time, before, after);
  EXPECT_EQ(MustGet(admitted).pending_reason, quota);
  EXPECT_EQ(MustGet(admitted).version, 3u);
  EXPECT_EQ(MustGet(running).pending_reason, PendingReason());
  EXPECT_EQ(MustGet(running).version, running_before.version);
  EXPECT_EQ(MustGet(running).update_time, running_before.update_time);
  EXPECT_EQ(backend_->Events(waiting).size(), 1u);  // not a state change

  ASSERT_OK(workloads().SetPendingReasons({{waiting, quota}}));  // unchanged: no write
  EXPECT_EQ(MustGet(waiting).version, 2u);
  // Only a figure moved: still written when asked to.
  ASSERT_OK(workloads().SetPendingReasons({{waiting, moved}}));
  EXPECT_EQ(MustGet(waiting).pending_reason, moved);
  EXPECT_EQ(MustGet(waiting).version, 3u);
  // The last entry for an id wins.
  ASSERT_OK(workloads().SetPendingReasons({{waiting, quota}, {waiting, none_free}}));
  EXPECT_EQ(MustGet(waiting).pending_reason, none_free);
  EXPECT_EQ(MustGet(waiting).version, 4u);
  EXPECT_OK(workloads().SetPendingReasons({}));

  // A bad id refuses the whole call.
  EXPECT_THAT(workloads().SetPendingReasons({{waiting, quota}, {0, quota}}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().SetPendingReasons({{-4, quota}}), StatusIs(Code::kInvalidArgument));
  EXPECT_EQ(MustGet(waiting).pending_reason, none_free);
}

// Admission carries the reason the workload still waits for; placing it clears it.
TEST_P(StoreContractTest, AnAdmittedWorkloadWaitsWithItsReasonUntilPlaced) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("gang")).id;
  const PendingReason busy = PendingReason(ReasonCode::kGangBusy).Set(figure::kFit, 1);
  Transition admit = Step(id, S::kPending, S::kAdmitted);
  admit.pending_reason = busy;
  ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({admit}));
  ASSERT_TRUE(r[0].applied);
  EXPECT_EQ(r[0].event->from, S::kPending);
  EXPECT_EQ(r[0].event->to, S::kAdmitted);
  Workload w = MustGet(id);
  EXPECT_EQ(w.state, S::kAdmitted);
  EXPECT_EQ(w.pending_reason, busy);
  EXPECT_TRUE(w.assignment.empty());

  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({Step(id, S::kAdmitted, S::kPlaced)}));
  ASSERT_TRUE(r[0].applied);
  w = MustGet(id);
  EXPECT_EQ(w.state, S::kPlaced);
  EXPECT_EQ(w.pending_reason, PendingReason());
  EXPECT_EQ(w.attempts, 1u);
  // A reason is only for a state that waits.
  Transition run = Step(id, S::kPlaced, S::kRunning);
  run.pending_reason = busy;
  EXPECT_THAT(workloads().ApplyTransitions({run}), StatusIs(Code::kInvalidArgument));
}

// ---- Cancel ----------------------------------------------------------------------------------

TEST_P(StoreContractTest, CancelInEachState) {
  AddTenants();
  struct Case {
    WorkloadState state;
    bool immediate;  // CANCELLED at once (with an event)
    bool refused;    // FAILED_PRECONDITION
  };
  const Case cases[] = {
      {S::kPending, true, false},   {S::kAdmitted, true, false},  {S::kPlaced, false, false},
      {S::kRunning, false, false},  {S::kPreempted, false, true}, {S::kLost, false, true},
      {S::kSucceeded, false, true}, {S::kFailed, false, true},    {S::kCancelled, false, true},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(StateName(c.state)));
    const WorkloadId id = MustSubmit(Spec("w")).id;
    Advance(id, c.state);
    const Workload before = MustGet(id);
    ASSERT_EQ(before.state, c.state);
    const size_t events_before = backend_->Events(id).size();
    backend_->Tick();

    const Timestamp t0 = backend_->Now();
    absl::StatusOr<WorkloadStore::CancelResult> r =
        workloads().RequestCancel(id, "user:alice", "not needed");
    const Timestamp t1 = backend_->Now();
    if (c.refused) {
      EXPECT_THAT(r, StatusIs(Code::kFailedPrecondition));
      EXPECT_EQ(MustGet(id).version, before.version);
      EXPECT_EQ(backend_->Events(id).size(), events_before);
      continue;
    }
    ASSERT_OK(r);
    EXPECT_TRUE(r->workload.cancel_requested);
    EXPECT_EQ(r->workload.version, before.version + 1);
    ExpectBetween(r->workload.update_time, t0, t1);
    if (c.immediate) {
      EXPECT_EQ(r->workload.state, S::kCancelled);
      EXPECT_EQ(r->workload.pending_reason, PendingReason());
      EXPECT_EQ(r->workload.message, "not needed");
      ASSERT_TRUE(r->workload.end_time.has_value());
      ExpectBetween(*r->workload.end_time, t0, t1);
      ASSERT_TRUE(r->event.has_value());
      EXPECT_EQ(r->event->from, c.state);
      EXPECT_EQ(r->event->to, S::kCancelled);
      EXPECT_EQ(r->event->workload.state, S::kCancelled);
      EXPECT_EQ(r->event->time, r->workload.update_time);
      const std::vector<EventRow> events = backend_->Events(id);
      ASSERT_EQ(events.size(), events_before + 1);
      EXPECT_EQ(events.back().from, c.state);
      EXPECT_EQ(events.back().to, S::kCancelled);
      EXPECT_EQ(events.back().actor, "user:alice");
      EXPECT_EQ(events.back().reason, "not needed");
      EXPECT_EQ(MustGet(id).state, S::kCancelled);
    } else {
      EXPECT_EQ(r->workload.state, c.state);
      EXPECT_FALSE(r->event.has_value());
      EXPECT_EQ(backend_->Events(id).size(), events_before);
      EXPECT_TRUE(MustGet(id).cancel_requested);
      // Asking again changes nothing.
      ASSERT_OK_AND_ASSIGN(WorkloadStore::CancelResult again,
                           workloads().RequestCancel(id, "user:alice", "really"));
      EXPECT_EQ(again.workload.version, before.version + 1);
      EXPECT_FALSE(again.event.has_value());
      // The agent confirms.
      ASSERT_OK_AND_ASSIGN(auto confirmed,
                           workloads().ApplyTransitions({Step(id, c.state, S::kCancelled)}));
      ASSERT_TRUE(confirmed[0].applied);
      EXPECT_TRUE(confirmed[0].current->cancel_requested);
      EXPECT_TRUE(confirmed[0].current->end_time.has_value());
    }
  }
  EXPECT_THAT(workloads().RequestCancel(55555, "user:alice", ""), StatusIs(Code::kNotFound));
  EXPECT_THAT(workloads().RequestCancel(0, "user:alice", ""), StatusIs(Code::kInvalidArgument));
}

TEST_P(StoreContractTest, CancelWithoutAReasonKeepsTheMessage) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("w")).id;
  Advance(id, S::kRunning);
  Transition requeued = Step(id, S::kRunning, S::kPending);
  requeued.message = "requeued: its cluster was lost";
  ASSERT_OK(workloads().ApplyTransitions({requeued}));
  ASSERT_OK_AND_ASSIGN(WorkloadStore::CancelResult r, workloads().RequestCancel(id, "user:x", ""));
  EXPECT_EQ(r.workload.state, S::kCancelled);
  EXPECT_EQ(r.workload.message, "requeued: its cluster was lost");
}

TEST_P(StoreContractTest, CountByStateCountsEveryStateThatHasWorkloads) {
  AddTenants();
  EXPECT_TRUE(Counts().empty());
  MustSubmit(Spec("a"));
  MustSubmit(Spec("b"));
  Advance(MustSubmit(Spec("c")).id, S::kRunning);
  Advance(MustSubmit(Spec("d")).id, S::kFailed);
  const std::map<WorkloadState, int64_t> counts = Counts();
  EXPECT_EQ(counts, (std::map<WorkloadState, int64_t>{
                        {S::kPending, 2}, {S::kRunning, 1}, {S::kFailed, 1}}));
}

// ---- Clusters --------------------------------------------------------------------------------

TEST_P(StoreContractTest, RegisterCreatesAReadyClusterAtEpochOneWithItsInventory) {
  std::vector<NodeInfo> nodes = {Node("dgx", "dgx-02", 4), Node("dgx", "dgx-01", 4)};
  nodes[1].gpus[3].healthy = false;
  nodes[0].schedulable = false;
  std::swap(nodes[1].gpus[0], nodes[1].gpus[2]);  // reported out of index order
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(Cluster registered, clusters().RegisterCluster(Info("dgx"), nodes));
  const Timestamp after = backend_->Now();
  EXPECT_EQ(registered.info, Info("dgx"));
  EXPECT_EQ(registered.state, ClusterState::kReady);
  EXPECT_EQ(registered.epoch, 1u);
  ASSERT_TRUE(registered.last_heartbeat.has_value());
  ExpectBetween(*registered.last_heartbeat, before, after);

  // Stored order: nodes by name, GPUs by index.
  std::vector<NodeInfo> stored = {nodes[1], nodes[0]};
  std::swap(stored[0].gpus[0], stored[0].gpus[2]);
  EXPECT_EQ(registered.nodes, stored);

  ASSERT_OK_AND_ASSIGN(Cluster got, clusters().GetCluster("dgx"));
  EXPECT_EQ(got.info, Info("dgx"));
  EXPECT_EQ(got.nodes, stored);
  EXPECT_EQ(got.state, ClusterState::kReady);
  EXPECT_EQ(got.epoch, 1u);
  EXPECT_EQ(got.last_heartbeat, registered.last_heartbeat);
  EXPECT_THAT(clusters().GetCluster("nope"), StatusIs(Code::kNotFound));
}

TEST_P(StoreContractTest, MigModeAndLayoutAreStoredAndReplaced) {
  std::vector<NodeInfo> nodes = {Node("dgx", "dgx-01", 4)};
  nodes[0].gpus[0].mig_enabled = true;
  nodes[0].gpus[0].mig_layout = {{"3g.40gb", 4}, {"1g.10gb", 0}, {"2g.20gb", 2}};
  nodes[0].gpus[1].mig_enabled = true;  // MIG on, no instances yet
  ASSERT_OK_AND_ASSIGN(Cluster registered, clusters().RegisterCluster(Info("dgx"), nodes));
  ASSERT_EQ(registered.nodes.size(), 1u);
  EXPECT_EQ(registered.nodes[0], nodes[0]);  // layout order as reported

  nodes[0].gpus[0].mig_enabled = false;
  nodes[0].gpus[0].mig_layout.clear();
  ASSERT_OK_AND_ASSIGN(Cluster again, clusters().RegisterCluster(Info("dgx"), nodes));
  EXPECT_EQ(again.nodes, nodes);
  ASSERT_OK_AND_ASSIGN(Cluster got, clusters().GetCluster("dgx"));
  EXPECT_EQ(got.nodes, nodes);
}

TEST_P(StoreContractTest, RegisterAgainReplacesInventoryKeepsEpochAndIsReady) {
  ASSERT_OK(clusters().RegisterCluster(Info("dgx"), {Node("dgx", "a", 8), Node("dgx", "b", 8)}));
  ASSERT_OK(clusters().SetClusterState("dgx", ClusterState::kUnreachable));
  ASSERT_OK_AND_ASSIGN(Cluster lost, clusters().GetCluster("dgx"));
  ASSERT_EQ(lost.epoch, 2u);
  ASSERT_EQ(lost.state, ClusterState::kUnreachable);
  backend_->Tick();

  ClusterInfo moved = Info("dgx");
  moved.zone = "dc2";
  moved.compliance_labels = {};
  NodeInfo b = Node("dgx", "b", 4);
  b.rack = "r9";
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(Cluster again, clusters().RegisterCluster(moved, {Node("dgx", "c", 2), b}));
  EXPECT_EQ(again.state, ClusterState::kReady);
  EXPECT_EQ(again.epoch, 2u);
  EXPECT_EQ(again.info, moved);
  EXPECT_GE(*again.last_heartbeat, before);
  EXPECT_EQ(again.nodes, (std::vector<NodeInfo>{b, Node("dgx", "c", 2)}));
  ASSERT_OK_AND_ASSIGN(Cluster got, clusters().GetCluster("dgx"));
  EXPECT_EQ(got.nodes, again.nodes);
  EXPECT_EQ(got.info, moved);

  // An empty inventory is an inventory.
  ASSERT_OK_AND_ASSIGN(Cluster empty, clusters().RegisterCluster(moved, {}));
  EXPECT_TRUE(empty.nodes.empty());
}

TEST_P(StoreContractTest, BadInventoryIsRefusedAndLeavesTheOldOne) {
  ASSERT_OK(clusters().RegisterCluster(Info("edge"), {Node("edge", "n1", 2)}));

  EXPECT_THAT(clusters().RegisterCluster(Info("Edge_1"), {}), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(clusters().RegisterCluster(Info(""), {}), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(clusters().RegisterCluster(Info(std::string(64, 'a')), {}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(
      clusters().RegisterCluster(Info("edge"), {Node("edge", "x", 1), Node("edge", "x", 1)}),
      StatusIs(Code::kInvalidArgument));
  NodeInfo twin = Node("edge", "y", 1);
  twin.name = "z";
  EXPECT_THAT(clusters().RegisterCluster(Info("edge"), {Node("edge", "y", 1), twin}),
              StatusIs(Code::kInvalidArgument));
  NodeInfo dup_index = Node("edge", "w", 2);
  dup_index.gpus[1].index = 0;
  EXPECT_THAT(clusters().RegisterCluster(Info("edge"), {dup_index}),
              StatusIs(Code::kInvalidArgument));
  NodeInfo unnamed = Node("edge", "", 0);
  EXPECT_THAT(clusters().RegisterCluster(Info("edge"), {unnamed}),
              StatusIs(Code::kInvalidArgument));
  NodeInfo no_uuid = Node("edge", "v", 1);
  no_uuid.gpus[0].uuid.clear();
  EXPECT_THAT(clusters().RegisterCluster(Info("edge"), {no_uuid}),
              StatusIs(Code::kInvalidArgument));
  // The store applies the one inventory rule (federation/validation.h), as the API does ...
  NodeInfo unknown_model = Node("edge", "u", 1);
  unknown_model.gpus[0].model = "GTX-480";
  EXPECT_THAT(clusters().RegisterCluster(Info("edge"), {unknown_model}),
              StatusIs(Code::kInvalidArgument, HasSubstr("gpus[0].model")));
  // ... and refuses what its columns cannot hold.
  NodeInfo huge = Node("edge", "t", 1);
  huge.cpu_millis = std::numeric_limits<uint64_t>::max();
  EXPECT_THAT(clusters().RegisterCluster(Info("edge"), {huge}),
              StatusIs(Code::kInvalidArgument, HasSubstr("nodes[0].cpu_millis")));

  ASSERT_OK_AND_ASSIGN(Cluster cluster, clusters().GetCluster("edge"));
  EXPECT_EQ(cluster.nodes, (std::vector<NodeInfo>{Node("edge", "n1", 2)}));
  ASSERT_OK_AND_ASSIGN(std::vector<Cluster> all, clusters().ListClusters(false));
  EXPECT_EQ(all.size(), 1u);
}

TEST_P(StoreContractTest, UnreachableBumpsTheEpochOncePerVisit) {
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {}));
  auto epoch_and_state = [&]() -> std::pair<uint64_t, ClusterState> {
    absl::StatusOr<Cluster> c = clusters().GetCluster("c1");
    EXPECT_OK(c);
    return c.ok() ? std::make_pair(c->epoch, c->state)
                  : std::make_pair(uint64_t{0}, ClusterState::kUnspecified);
  };
  ASSERT_OK(clusters().SetClusterState("c1", ClusterState::kDegraded));
  EXPECT_EQ(epoch_and_state(), std::make_pair(uint64_t{1}, ClusterState::kDegraded));
  ASSERT_OK(clusters().SetClusterState("c1", ClusterState::kUnreachable));
  ASSERT_OK(clusters().SetClusterState("c1", ClusterState::kUnreachable));
  EXPECT_EQ(epoch_and_state(), std::make_pair(uint64_t{2}, ClusterState::kUnreachable));
  ASSERT_OK(clusters().SetClusterState("c1", ClusterState::kDraining));
  EXPECT_EQ(epoch_and_state(), std::make_pair(uint64_t{2}, ClusterState::kDraining));
  ASSERT_OK(clusters().SetClusterState("c1", ClusterState::kUnreachable));
  EXPECT_EQ(epoch_and_state(), std::make_pair(uint64_t{3}, ClusterState::kUnreachable));
  ASSERT_OK(clusters().SetClusterState("c1", ClusterState::kReady));
  EXPECT_EQ(epoch_and_state(), std::make_pair(uint64_t{3}, ClusterState::kReady));

  EXPECT_THAT(clusters().SetClusterState("c9", ClusterState::kReady), StatusIs(Code::kNotFound));
  EXPECT_THAT(clusters().SetClusterState("c1", ClusterState::kUnspecified),
              StatusIs(Code::kInvalidArgument));
  EXPECT_EQ(epoch_and_state(), std::make_pair(uint64_t{3}, ClusterState::kReady));
}

// ---- Failover: losing a cluster, attempts and fences -----------------------------------------

// A loss of c1 that requeues every workload it read, with a reason, and says what it was shown.
ClusterStore::LossPlan RequeueAll(std::vector<WorkloadId>* shown, uint64_t* epoch_seen) {
  return [shown, epoch_seen](const Cluster& lost, const std::vector<Workload>& held) {
    *epoch_seen = lost.epoch;
    std::vector<Transition> out;
    for (const Workload& w : held) {
      shown->push_back(w.id);
      Transition t = Step(w.id, w.state, S::kPending);
      t.on_cluster = lost.info.name;
      t.at_attempt = w.attempts;
      PendingReason reason(ReasonCode::kClusterLost);
      reason.Set(figure::kCluster, lost.info.name).Set(figure::kAttempt, int64_t{w.attempts});
      t.pending_reason = reason;
      out.push_back(std::move(t));
    }
    return out;
  };
}

TEST_P(StoreContractTest, LosingAClusterMovesItsEpochOnceAndEndsWhatItHeld) {
  AddTenants();
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {}));
  const WorkloadId running = MustSubmit(Spec("a")).id;
  const WorkloadId placed = MustSubmit(Spec("b")).id;
  const WorkloadId elsewhere = MustSubmit(Spec("c")).id;
  const WorkloadId pending = MustSubmit(Spec("d")).id;
  Advance(running, S::kRunning);
  Advance(placed, S::kPlaced);
  Transition other = Step(elsewhere, S::kPending, S::kPlaced);
  other.assignment = AssignmentOn("c2");
  ASSERT_OK(workloads().ApplyTransitions({other}));

  std::vector<WorkloadId> shown;
  uint64_t epoch_seen = 0;
  ASSERT_OK_AND_ASSIGN(ClusterStore::LossResult loss,
                       clusters().LoseCluster("c1", RequeueAll(&shown, &epoch_seen)));
  EXPECT_EQ(shown, (std::vector<WorkloadId>{running, placed}));
  EXPECT_EQ(epoch_seen, 2u);
  EXPECT_EQ(loss.cluster.epoch, 2u);
  EXPECT_EQ(loss.cluster.state, ClusterState::kUnreachable);
  ASSERT_EQ(loss.transitions.size(), 2u);
  for (const TransitionResult& r : loss.transitions) {
    EXPECT_TRUE(r.applied);
    ASSERT_TRUE(r.event.has_value());
    EXPECT_EQ(r.event->to, S::kPending);
  }
  const Workload requeued = MustGet(running);
  EXPECT_EQ(requeued.state, S::kPending);
  EXPECT_EQ(requeued.attempts, 1u);
  EXPECT_EQ(requeued.pending_reason.code, ReasonCode::kClusterLost);
  EXPECT_EQ(requeued.pending_reason.Text(figure::kCluster), "c1");
  EXPECT_EQ(requeued.assignment, Assignment());
  EXPECT_EQ(MustGet(elsewhere).state, S::kPlaced);
  EXPECT_EQ(MustGet(pending).state, S::kPending);
  ASSERT_OK_AND_ASSIGN(Cluster c1, clusters().GetCluster("c1"));
  EXPECT_EQ(c1.epoch, 2u);
  EXPECT_EQ(c1.state, ClusterState::kUnreachable);

  // Declared again (a retry, or the next leader finishing it): the epoch stays, nothing is left.
  shown.clear();
  ASSERT_OK_AND_ASSIGN(loss, clusters().LoseCluster("c1", RequeueAll(&shown, &epoch_seen)));
  EXPECT_THAT(shown, IsEmpty());
  EXPECT_EQ(loss.cluster.epoch, 2u);

  EXPECT_THAT(clusters().LoseCluster("c9", RequeueAll(&shown, &epoch_seen)),
              StatusIs(Code::kNotFound));
}

TEST_P(StoreContractTest, AnInvalidLossPlanChangesNothing) {
  AddTenants();
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {}));
  const WorkloadId id = MustSubmit(Spec("a")).id;
  Advance(id, S::kRunning);
  auto bad = [](const Cluster&, const std::vector<Workload>& held) {
    Transition t = Step(held[0].id, S::kRunning, S::kRunning);  // to == from: invalid
    return std::vector<Transition>{t};
  };
  EXPECT_THAT(clusters().LoseCluster("c1", bad), StatusIs(Code::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(Cluster c1, clusters().GetCluster("c1"));
  EXPECT_EQ(c1.epoch, 1u);
  EXPECT_EQ(c1.state, ClusterState::kReady);
  EXPECT_EQ(MustGet(id).state, S::kRunning);
}

TEST_P(StoreContractTest, APlacementOnALostClusterOrAnOldEpochIsFenced) {
  AddTenants();
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {}));
  const WorkloadId id = MustSubmit(Spec("a")).id;
  std::vector<WorkloadId> shown;
  uint64_t epoch_seen = 0;
  ASSERT_OK(clusters().LoseCluster("c1", RequeueAll(&shown, &epoch_seen)));

  Transition old_epoch = Step(id, S::kPending, S::kPlaced);
  old_epoch.assignment = AssignmentOn("c1", 1);
  Transition unreachable = Step(id, S::kPending, S::kPlaced);
  unreachable.assignment = AssignmentOn("c1", 2);
  ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({old_epoch}));
  EXPECT_FALSE(r[0].applied);
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({unreachable}));
  EXPECT_FALSE(r[0].applied);
  EXPECT_EQ(MustGet(id).state, S::kPending);

  // Back (its agent registered again): placements at the new epoch apply, and count.
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {}));
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({old_epoch}));
  EXPECT_FALSE(r[0].applied);
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({unreachable}));
  EXPECT_TRUE(r[0].applied);
  EXPECT_EQ(MustGet(id).attempts, 1u);
}

TEST_P(StoreContractTest, TransitionsGuardedByClusterAndAttemptApplyOnlyThere) {
  AddTenants();
  const WorkloadId id = MustSubmit(Spec("a")).id;
  EXPECT_EQ(MustGet(id).attempts, 0u);
  Advance(id, S::kRunning);  // on c1, attempt 1
  Transition wrong_cluster = Step(id, S::kRunning, S::kSucceeded);
  wrong_cluster.on_cluster = "c2";
  Transition wrong_attempt = Step(id, S::kRunning, S::kSucceeded);
  wrong_attempt.on_cluster = "c1";
  wrong_attempt.at_attempt = 2;
  ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({wrong_cluster}));
  EXPECT_FALSE(r[0].applied);
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({wrong_attempt}));
  EXPECT_FALSE(r[0].applied);
  EXPECT_EQ(MustGet(id).state, S::kRunning);

  // Requeued and placed again: attempt 2; the first attempt's end no longer applies.
  ASSERT_OK(workloads().ApplyTransitions({Step(id, S::kRunning, S::kPending)}));
  ASSERT_OK(workloads().ApplyTransitions({Step(id, S::kPending, S::kPlaced)}));
  EXPECT_EQ(MustGet(id).attempts, 2u);
  Transition first = Step(id, S::kPlaced, S::kFailed);
  first.on_cluster = "c1";
  first.at_attempt = 1;
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({first}));
  EXPECT_FALSE(r[0].applied);
  first.at_attempt = 2;
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({first}));
  EXPECT_TRUE(r[0].applied);
}

TEST_P(StoreContractTest, LostAndPreemptedAreEndStates) {
  AddTenants();
  const WorkloadId lost = MustSubmit(Spec("a")).id;
  const WorkloadId preempted = MustSubmit(Spec("b")).id;
  Advance(lost, S::kLost);
  Advance(preempted, S::kPreempted);
  for (WorkloadId id : {lost, preempted}) {
    const Workload w = MustGet(id);
    EXPECT_TRUE(w.end_time.has_value());
    EXPECT_THAT(workloads().ListActive(""), IsOkAndHolds(IsEmpty()));
  }
}

ClusterDeclaration Declaration(const std::string& cluster);  // below, with the declaration tests

TEST_P(StoreContractTest, AClusterIsDeletedOnlyOnceNothingDependsOnIt) {
  AddTenants();
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2)}));
  ASSERT_OK(clusters().PutDeclarations({Declaration("c1"), Declaration("planned")}));
  const WorkloadId running = MustSubmit(Spec("a")).id;
  Advance(running, S::kRunning);
  ASSERT_OK_AND_ASSIGN(
      TokenRecord agent,
      tenants().CreateToken("hash-agent",
                            {.subject = "agent-c1", .role = auth::Role::kAgent, .cluster = "c1"}));

  // Refused while it is not cordoned, while work holds capacity there, while its agent's token
  // lives; nothing changes.
  EXPECT_THAT(clusters().DeleteCluster("c1"),
              StatusIs(Code::kFailedPrecondition, HasSubstr("cordon")));
  ASSERT_OK(clusters().SetCordon("c1", "", true));
  EXPECT_THAT(clusters().DeleteCluster("c1"),
              StatusIs(Code::kFailedPrecondition, HasSubstr("workloads")));
  ASSERT_OK_AND_ASSIGN(auto ended,
                       workloads().ApplyTransitions({Step(running, S::kRunning, S::kSucceeded)}));
  ASSERT_TRUE(ended[0].applied);
  EXPECT_THAT(clusters().DeleteCluster("c1"),
              StatusIs(Code::kFailedPrecondition, HasSubstr("token")));
  ASSERT_OK(clusters().GetCluster("c1"));
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(SizeIs(2)));

  ASSERT_OK(tenants().RevokeToken(agent.id, "", ""));
  ASSERT_OK(certificates().AddClusterCertificate(Certificate("C1", "c1", backend_->Now())));
  EXPECT_THAT(clusters().DeleteCluster("c1"),
              StatusIs(Code::kFailedPrecondition, HasSubstr("certificates")));
  ASSERT_OK(certificates().RevokeCluster("c1"));
  ASSERT_OK(clusters().DeleteCluster("c1"));
  EXPECT_THAT(clusters().GetCluster("c1"), StatusIs(Code::kNotFound));
  EXPECT_THAT(clusters().ListClusters(true), IsOkAndHolds(IsEmpty()));
  ASSERT_OK_AND_ASSIGN(std::vector<ClusterDeclaration> left, clusters().ListDeclarations());
  ASSERT_THAT(left, SizeIs(1));
  EXPECT_EQ(left[0].cluster, "planned");
  // The ended workload keeps its history.
  EXPECT_EQ(MustGet(running).assignment.cluster, "c1");
  EXPECT_THAT(clusters().DeleteCluster("c1"), StatusIs(Code::kNotFound));
  // A name with only a declaration loses that; a bad name is refused.
  ASSERT_OK(clusters().DeleteCluster("planned"));
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(clusters().DeleteCluster("Bad Name"), StatusIs(Code::kInvalidArgument));
  // The name is free again: an agent registering under it starts a new cluster.
  ASSERT_OK_AND_ASSIGN(Cluster again,
                       clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2)}));
  EXPECT_FALSE(again.cordoned);
}

TEST_P(StoreContractTest, ACordonedClusterDrainsAndStaysSoWhenItsAgentRegistersAgain) {
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2)}));
  ASSERT_OK_AND_ASSIGN(Cluster c, clusters().SetCordon("c1", "", true));
  EXPECT_TRUE(c.cordoned);
  EXPECT_EQ(c.state, ClusterState::kDraining);
  ASSERT_EQ(c.nodes.size(), 1u);                                  // returned with its nodes
  ASSERT_OK_AND_ASSIGN(c, clusters().SetCordon("c1", "", true));  // idempotent
  EXPECT_EQ(c.state, ClusterState::kDraining);
  ASSERT_OK_AND_ASSIGN(c, clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2)}));
  EXPECT_EQ(c.state, ClusterState::kDraining);
  EXPECT_TRUE(c.cordoned);

  // Lost while cordoned: unreachable; back: draining again.
  std::vector<WorkloadId> shown;
  uint64_t epoch_seen = 0;
  ASSERT_OK(clusters().LoseCluster("c1", RequeueAll(&shown, &epoch_seen)));
  ASSERT_OK_AND_ASSIGN(c, clusters().SetCordon("c1", "", false));
  EXPECT_EQ(c.state, ClusterState::kUnreachable);
  ASSERT_OK_AND_ASSIGN(c, clusters().SetCordon("c1", "", true));
  ASSERT_OK_AND_ASSIGN(c, clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2)}));
  EXPECT_EQ(c.state, ClusterState::kDraining);
  ASSERT_OK_AND_ASSIGN(c, clusters().SetCordon("c1", "", false));
  EXPECT_EQ(c.state, ClusterState::kReady);
  EXPECT_FALSE(c.cordoned);
  ASSERT_OK_AND_ASSIGN(std::vector<Cluster> all, clusters().ListClusters(false));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_FALSE(all[0].cordoned);

  EXPECT_THAT(clusters().SetCordon("c9", "", true), StatusIs(Code::kNotFound));
}

TEST_P(StoreContractTest, ACordonedNodeIsNotSchedulableWhateverItsAgentSays) {
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2), Node("c1", "n2", 2)}));
  ASSERT_OK_AND_ASSIGN(Cluster c, clusters().SetCordon("c1", "n2", true));
  EXPECT_FALSE(c.cordoned);
  EXPECT_EQ(c.state, ClusterState::kReady);
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_TRUE(c.nodes[0].schedulable);
  EXPECT_FALSE(c.nodes[0].cordoned);
  EXPECT_FALSE(c.nodes[1].schedulable);
  EXPECT_TRUE(c.nodes[1].cordoned);
  // The agent reports it schedulable again: the cordon holds.
  ASSERT_OK_AND_ASSIGN(
      c, clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2), Node("c1", "n2", 2)}));
  EXPECT_FALSE(c.nodes[1].schedulable);
  ASSERT_OK_AND_ASSIGN(c, clusters().GetCluster("c1"));
  EXPECT_FALSE(c.nodes[1].schedulable);
  ASSERT_OK_AND_ASSIGN(std::vector<Cluster> all, clusters().ListClusters(true));
  EXPECT_FALSE(all[0].nodes[1].schedulable);

  EXPECT_THAT(clusters().SetCordon("c1", "n9", true), StatusIs(Code::kNotFound));
  // A node its agent no longer reports may still be uncordoned.
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2)}));
  ASSERT_OK(clusters().SetCordon("c1", "n2", false));
  EXPECT_THAT(clusters().SetCordon("c1", "n2", false), StatusIs(Code::kNotFound));
  ASSERT_OK_AND_ASSIGN(
      c, clusters().RegisterCluster(Info("c1"), {Node("c1", "n1", 2), Node("c1", "n2", 2)}));
  EXPECT_TRUE(c.nodes[1].schedulable);
}

TEST_P(StoreContractTest, APlacementOnACordonedClusterOrNodeIsFenced) {
  AddTenants();
  ASSERT_OK(
      clusters().RegisterCluster(Info("c1"), {Node("c1", "node-01", 2), Node("c1", "node-02", 2)}));
  const WorkloadId id = MustSubmit(Spec("a")).id;
  const Transition place = Step(id, S::kPending, S::kPlaced);  // replicas on node-01 and node-02
  ASSERT_OK(clusters().SetCordon("c1", "node-02", true));
  ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({place}));
  EXPECT_FALSE(r[0].applied);
  ASSERT_OK(clusters().SetCordon("c1", "node-02", false));
  ASSERT_OK(clusters().SetCordon("c1", "", true));
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({place}));
  EXPECT_FALSE(r[0].applied);
  EXPECT_EQ(MustGet(id).state, S::kPending);
  EXPECT_EQ(MustGet(id).attempts, 0u);

  ASSERT_OK(clusters().SetCordon("c1", "", false));
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({place}));
  EXPECT_TRUE(r[0].applied);
}

TEST_P(StoreContractTest, EvictionsMarkOnlyWorkStillInItsPlaceAndEndWithIt) {
  AddTenants();
  const WorkloadId running = MustSubmit(Spec("a")).id;
  const WorkloadId cancelling = MustSubmit(Spec("b")).id;
  const WorkloadId pending = MustSubmit(Spec("c")).id;
  Advance(running, S::kRunning);  // on c1, attempt 1
  Advance(cancelling, S::kRunning);
  ASSERT_OK(workloads().RequestCancel(cancelling, "user:u", "stop"));
  const uint64_t version = MustGet(running).version;
  const auto evict = [](WorkloadId id, const std::string& cluster, uint32_t attempt) {
    return WorkloadStore::Eviction{id, cluster, attempt, AttemptEnd::kPreempted, "drained"};
  };

  // Another cluster, another attempt, a cancel pending, not placed, unknown: nothing marked.
  EXPECT_THAT(workloads().RequestEvictions({evict(running, "c2", 1), evict(running, "c1", 2),
                                            evict(cancelling, "c1", 1), evict(pending, "c1", 0),
                                            evict(987654, "c1", 1)}),
              IsOkAndHolds(IsEmpty()));
  EXPECT_FALSE(MustGet(running).evicting.has_value());
  // A bad one refuses the whole call.
  EXPECT_THAT(workloads().RequestEvictions({evict(running, "c1", 1), evict(0, "c1", 1)}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_FALSE(MustGet(running).evicting.has_value());

  ASSERT_OK_AND_ASSIGN(std::vector<Workload> marked,
                       workloads().RequestEvictions({evict(running, "c1", 1)}));
  ASSERT_EQ(marked.size(), 1u);
  EXPECT_EQ(marked[0].id, running);
  EXPECT_EQ(marked[0].evicting, AttemptEnd::kPreempted);
  EXPECT_EQ(marked[0].message, "drained");
  EXPECT_EQ(marked[0].state, S::kRunning);
  EXPECT_GT(marked[0].version, version);
  EXPECT_EQ(MustGet(running).evicting, AttemptEnd::kPreempted);
  // Asked again (a drain retried): already marked, nothing changes.
  EXPECT_THAT(workloads().RequestEvictions({evict(running, "c1", 1)}), IsOkAndHolds(IsEmpty()));

  // A stop guarded by "no eviction pending" does not apply; the attempt's end does, and clears
  // it.
  Transition stopped = Step(running, S::kRunning, S::kCancelled);
  stopped.unless_evicting = true;
  ASSERT_OK_AND_ASSIGN(auto r, workloads().ApplyTransitions({stopped}));
  EXPECT_FALSE(r[0].applied);
  ASSERT_TRUE(r[0].current.has_value());
  EXPECT_EQ(r[0].current->evicting, AttemptEnd::kPreempted);
  ASSERT_OK_AND_ASSIGN(r, workloads().ApplyTransitions({Step(running, S::kRunning, S::kPending)}));
  ASSERT_TRUE(r[0].applied);
  EXPECT_FALSE(r[0].current->evicting.has_value());
  EXPECT_FALSE(MustGet(running).evicting.has_value());
}

// A preemption is recorded with exactly the victims its evictions marked, in the same call, and
// read back newest first, per tenant involved, a page at a time.
TEST_P(StoreContractTest, PreemptionsAreRecordedWithTheVictimsTheyMarked) {
  AddTenants();
  const WorkloadId owner = MustSubmit(Spec("owner")).id;
  const WorkloadId victim = MustSubmit(Spec("victim", "globex")).id;
  const WorkloadId gone = MustSubmit(Spec("gone", "globex")).id;
  Advance(victim, S::kRunning);  // on c1, attempt 1
  auto preemption = [&](const std::vector<WorkloadId>& victims) {
    WorkloadStore::Preemption p;
    p.record.cause = PreemptionCause::kGuaranteeReclaim;
    p.record.preemptor = owner;
    p.record.tenant = "acme";
    p.record.project = "web";
    p.record.resource = "H100-80GB";
    p.record.cluster = "c1";
    p.record.needed_milli = 2000;
    p.record.evicted_milli = 2000;
    p.record.gpu_seconds_lost = 12.5;
    p.record.shares = {{"acme", 0, 2000}, {"globex", 4000, 2000}};
    for (WorkloadId v : victims) {
      p.record.victims.push_back({v, "globex", "web", 1000});
      p.victims.push_back({v, "c1", 1, AttemptEnd::kPreempted, "preempted by workload 1"});
    }
    return p;
  };

  // Victims that do not match the evictions: refused, nothing marked.
  WorkloadStore::Preemption mismatched = preemption({victim});
  mismatched.victims.clear();
  EXPECT_THAT(workloads().RequestPreemptions({mismatched}), StatusIs(Code::kInvalidArgument));
  EXPECT_FALSE(MustGet(victim).evicting.has_value());

  // One victim is marked; the one that is not placed is left out of the record.
  ASSERT_OK_AND_ASSIGN(WorkloadStore::PreemptionResult result,
                       workloads().RequestPreemptions({preemption({victim, gone})}));
  ASSERT_EQ(result.marked.size(), 1u);
  EXPECT_EQ(result.marked[0].id, victim);
  EXPECT_EQ(MustGet(victim).evicting, AttemptEnd::kPreempted);
  ASSERT_EQ(result.recorded.size(), 1u);
  const PreemptionRecord first = result.recorded[0];
  EXPECT_GT(first.id, 0);
  EXPECT_NE(first.time, Timestamp{});
  ASSERT_EQ(first.victims.size(), 1u);
  EXPECT_EQ(first.victims[0].id, victim);
  // A preemption none of whose victims could be marked is not recorded.
  ASSERT_OK_AND_ASSIGN(result, workloads().RequestPreemptions({preemption({gone})}));
  EXPECT_THAT(result.recorded, IsEmpty());

  const WorkloadId victim2 = MustSubmit(Spec("victim2", "globex")).id;
  Advance(victim2, S::kRunning);
  ASSERT_OK_AND_ASSIGN(result, workloads().RequestPreemptions({preemption({victim2})}));
  ASSERT_EQ(result.recorded.size(), 1u);
  const PreemptionRecord second = result.recorded[0];
  EXPECT_GT(second.id, first.id);

  ASSERT_OK_AND_ASSIGN(std::vector<PreemptionRecord> all, workloads().ListPreemptions("", 0, 10));
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], second);  // newest first, as stored
  EXPECT_EQ(all[1], first);
  EXPECT_EQ(all[1].shares, (std::vector<TenantShare>{{"acme", 0, 2000}, {"globex", 4000, 2000}}));
  EXPECT_EQ(all[1].gpu_seconds_lost, 12.5);
  // Per tenant: the preemptor's and the victims'; nobody else's.
  ASSERT_OK_AND_ASSIGN(std::vector<PreemptionRecord> page,
                       workloads().ListPreemptions("globex", 0, 1));
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].id, second.id);
  ASSERT_OK_AND_ASSIGN(page, workloads().ListPreemptions("globex", second.id, 1));
  ASSERT_EQ(page.size(), 1u);
  EXPECT_EQ(page[0].id, first.id);
  EXPECT_THAT(workloads().ListPreemptions("acme", 0, 10), IsOkAndHolds(SizeIs(2)));
  EXPECT_THAT(workloads().ListPreemptions("initech", 0, 10), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(workloads().ListPreemptions("", 0, 0), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().ListPreemptions("", 0, kMaxPreemptionPage + 1),
              StatusIs(Code::kInvalidArgument));
}

TEST_P(StoreContractTest, FinishedWorkloadsAreArchivedOldestFirstAndStillFoundById) {
  AddTenants();
  const Timestamp now = backend_->Now();
  const auto finish = [&](const std::string& name, WorkloadState end, Timestamp at) {
    WorkloadSpec spec = Spec(name);
    spec.idempotency_key = name;
    const WorkloadId id = MustSubmit(spec).id;
    Advance(id, S::kRunning);
    Transition t = Step(id, S::kRunning, end);
    t.time = at;
    EXPECT_OK(workloads().ApplyTransitions({t}));
    return id;
  };
  const WorkloadId oldest = finish("oldest", S::kSucceeded, now - std::chrono::hours(30));
  const WorkloadId older = finish("older", S::kFailed, now - std::chrono::hours(20));
  const WorkloadId recent = finish("recent", S::kCancelled, now - std::chrono::hours(1));
  const WorkloadId running = MustSubmit(Spec("running")).id;
  Advance(running, S::kRunning);
  const Timestamp cutoff = now - std::chrono::hours(10);

  EXPECT_THAT(workloads().ArchiveFinished(cutoff, 0), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(workloads().ArchiveFinished(cutoff, 1), IsOkAndHolds(1));  // the oldest first
  EXPECT_THAT(ListIds(Filter("acme")), ::testing::UnorderedElementsAre(older, recent, running));
  EXPECT_THAT(workloads().ArchiveFinished(cutoff, 10), IsOkAndHolds(1));
  EXPECT_THAT(workloads().ArchiveFinished(cutoff, 10), IsOkAndHolds(0));
  EXPECT_THAT(ListIds(Filter("acme")), ::testing::UnorderedElementsAre(recent, running));

  // Still found by id, as they ended; a cancel is refused as for any ended workload.
  EXPECT_EQ(MustGet(oldest).state, S::kSucceeded);
  EXPECT_EQ(MustGet(older).state, S::kFailed);
  EXPECT_THAT(workloads().RequestCancel(older, "user:u", "late"),
              StatusIs(Code::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(auto counts, workloads().CountByState());
  for (const auto& [state, n] : counts) {
    EXPECT_NE(state, S::kSucceeded) << n;
    EXPECT_NE(state, S::kFailed) << n;
  }
  // The key of an archived workload is free again.
  WorkloadSpec again = Spec("oldest");
  again.idempotency_key = "oldest";
  ASSERT_OK_AND_ASSIGN(SubmitResult r, workloads().Submit(again));
  EXPECT_TRUE(r.created);
  EXPECT_NE(r.workload.id, oldest);
}

// ---- Quotas
// ------------------------------------------------------------------------------------

// A check that lets everything through, recording what it was shown.
QuotaStore::QuotaCheck Accept(std::vector<Quota>* seen = nullptr) {
  return [seen](Quota&, const std::vector<Quota>& same) {
    if (seen != nullptr) *seen = same;
    return absl::OkStatus();
  };
}

TEST_P(StoreContractTest, QuotasAreSetReplacedListedAndDeleted) {
  AddTenants();
  const Timestamp before = backend_->Now();
  ASSERT_OK_AND_ASSIGN(
      Quota set, quotas().SetQuota(MakeQuota("acme", "", "H100-80GB", 32000, 48000), Accept()));
  ExpectBetween(set.update_time, before, backend_->Now());
  EXPECT_EQ(set.limit_milli, std::optional<int64_t>(48000));
  ASSERT_OK(quotas().SetQuota(MakeQuota("acme", "research", "H100-80GB", 8000), Accept()));
  ASSERT_OK(quotas().SetQuota(MakeQuota("globex", "", "gpu", 500), Accept()));
  // Replacing: the limit goes (no borrowing), the guarantee changes.
  std::vector<Quota> seen;
  ASSERT_OK_AND_ASSIGN(Quota replaced,
                       quotas().SetQuota(MakeQuota("acme", "", "H100-80GB", 16000), Accept(&seen)));
  EXPECT_EQ(replaced.limit_milli, std::nullopt);
  // The check saw every quota on the resource, of every tenant and project, as stored.
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].key, (QuotaKey{"acme", "", "H100-80GB"}));
  EXPECT_EQ(seen[0].guaranteed_milli, 32000);
  EXPECT_EQ(seen[1].key, (QuotaKey{"acme", "research", "H100-80GB"}));

  ASSERT_OK_AND_ASSIGN(std::vector<Quota> acme, quotas().ListQuotas("acme"));
  ASSERT_EQ(acme.size(), 2u);
  EXPECT_EQ(acme[0].key, (QuotaKey{"acme", "", "H100-80GB"}));
  EXPECT_EQ(acme[0].guaranteed_milli, 16000);
  EXPECT_EQ(acme[0].limit_milli, std::nullopt);
  EXPECT_EQ(acme[1].key, (QuotaKey{"acme", "research", "H100-80GB"}));
  ASSERT_OK_AND_ASSIGN(std::vector<Quota> all, quotas().ListQuotas(""));
  EXPECT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].key.tenant, "globex");

  EXPECT_OK(quotas().DeleteQuota(QuotaKey{"acme", "research", "H100-80GB"}));
  EXPECT_THAT(quotas().DeleteQuota(QuotaKey{"acme", "research", "H100-80GB"}),
              StatusIs(Code::kNotFound));
  ASSERT_OK_AND_ASSIGN(acme, quotas().ListQuotas("acme"));
  EXPECT_EQ(acme.size(), 1u);
}

TEST_P(StoreContractTest, AQuotaTheCheckRefusesOrThatNamesNothingKnownChangesNothing) {
  AddTenants();
  ASSERT_OK(quotas().SetQuota(MakeQuota("acme", "", "gpu", 4000), Accept()));
  auto refuse = [](Quota&, const std::vector<Quota>&) {
    return absl::FailedPreconditionError("no room");
  };
  EXPECT_THAT(quotas().SetQuota(MakeQuota("acme", "", "gpu", 9000), refuse),
              StatusIs(Code::kFailedPrecondition));
  EXPECT_THAT(quotas().SetQuota(MakeQuota("initech", "", "gpu", 1000), Accept()),
              StatusIs(Code::kNotFound));
  EXPECT_THAT(quotas().SetQuota(MakeQuota("acme", "nope", "gpu", 1000), Accept()),
              StatusIs(Code::kNotFound));
  EXPECT_THAT(quotas().SetQuota(MakeQuota("acme", "", "gpu", 2000, 1000), Accept()),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(quotas().SetQuota(MakeQuota("acme", "", "H900", 1000), Accept()),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(quotas().SetQuota(MakeQuota("acme", "", "gpu", -1), Accept()),
              StatusIs(Code::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(std::vector<Quota> all, quotas().ListQuotas(""));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].guaranteed_milli, 4000);
}

// What the check marks is stored; the mark is replaced with the quota.
TEST_P(StoreContractTest, TheChecksOvercommitMarkIsKept) {
  AddTenants();
  auto mark = [](Quota& q, const std::vector<Quota>&) {
    q.overcommitted = true;
    return absl::OkStatus();
  };
  ASSERT_OK_AND_ASSIGN(Quota q, quotas().SetQuota(MakeQuota("acme", "", "3g.40gb", 3000), mark));
  EXPECT_TRUE(q.overcommitted);
  ASSERT_OK_AND_ASSIGN(std::vector<Quota> all, quotas().ListQuotas("acme"));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(all[0].overcommitted);
  ASSERT_OK(quotas().SetQuota(MakeQuota("acme", "", "3g.40gb", 1000), Accept()));
  ASSERT_OK_AND_ASSIGN(all, quotas().ListQuotas("acme"));
  EXPECT_FALSE(all[0].overcommitted);
}

// Concurrent writers on one resource: each check sees the other's write committed or not
// started, so a rule over the sum (here: at most 10 GPUs guaranteed in all) holds.
TEST_P(StoreContractTest, ConcurrentQuotaWritesOnOneResourceSeeEachOther) {
  AddTenants();
  auto within_ten = [](Quota& q, const std::vector<Quota>& same) {
    int64_t sum = q.guaranteed_milli;
    for (const Quota& other : same) {
      if (!(other.key == q.key)) sum += other.guaranteed_milli;
    }
    return sum <= 10000 ? absl::OkStatus() : absl::FailedPreconditionError("over");
  };
  std::atomic<int> accepted{0};
  std::vector<std::thread> writers;
  for (const char* tenant : {"acme", "globex"}) {
    writers.emplace_back([&, tenant] {
      for (int i = 1; i <= 10; ++i) {
        if (quotas().SetQuota(MakeQuota(tenant, "", "L4", int64_t{i} * 1000), within_ten).ok()) {
          ++accepted;
        }
      }
    });
  }
  for (std::thread& w : writers) w.join();
  EXPECT_GT(accepted.load(), 0);
  ASSERT_OK_AND_ASSIGN(std::vector<Quota> all, quotas().ListQuotas(""));
  int64_t sum = 0;
  for (const Quota& q : all) sum += q.guaranteed_milli;
  EXPECT_LE(sum, 10000);
}

TEST_P(StoreContractTest, ShareWeightsAreSetReplacedAndListed) {
  AddTenants();
  ASSERT_OK(quotas().SetShareWeight({"acme", "", 3}));
  ASSERT_OK(quotas().SetShareWeight({"acme", "research", 2}));
  ASSERT_OK_AND_ASSIGN(ShareWeight set, quotas().SetShareWeight({"acme", "", 4}));  // replaced
  EXPECT_EQ(set, (ShareWeight{"acme", "", 4}));
  EXPECT_THAT(
      quotas().ListShareWeights(),
      IsOkAndHolds(ElementsAre(ShareWeight{"acme", "", 4}, ShareWeight{"acme", "research", 2})));
  EXPECT_THAT(quotas().SetShareWeight({"nobody", "", 1}), StatusIs(Code::kNotFound));
  EXPECT_THAT(quotas().SetShareWeight({"acme", "nope", 1}), StatusIs(Code::kNotFound));
  EXPECT_THAT(quotas().SetShareWeight({"acme", "", 0}), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(quotas().SetShareWeight({"acme", "", kMaxShareWeight + 1}),
              StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(quotas().ListShareWeights(), IsOkAndHolds(SizeIs(2)));
}

// Fair-share usage is saved as a whole and read back as saved; a bad snapshot changes nothing.
TEST_P(StoreContractTest, FairShareUsageIsSavedWholeAndLoadedBack) {
  ASSERT_OK_AND_ASSIGN(UsageSnapshot none, quotas().LoadUsage());
  EXPECT_EQ(none.as_of, Timestamp{});
  EXPECT_TRUE(none.gpu_seconds.empty());

  UsageSnapshot first;
  first.as_of = Timestamp(microseconds(int64_t{1'795'000'000'000'007}));  // to the microsecond
  first.gpu_seconds = {{{"acme", ""}, 7200.5}, {{"acme", "research"}, 3600.25}, {{"beta", ""}, 0}};
  ASSERT_OK(quotas().SaveUsage(first));
  EXPECT_THAT(quotas().LoadUsage(), IsOkAndHolds(first));

  UsageSnapshot second;
  second.as_of = first.as_of + seconds(10);
  second.gpu_seconds = {{{"beta", ""}, 42.0}};
  ASSERT_OK(quotas().SaveUsage(second));
  EXPECT_THAT(quotas().LoadUsage(), IsOkAndHolds(second)) << "replaced, acme's rows gone";

  UsageSnapshot bad = second;
  bad.gpu_seconds[{"acme", ""}] = -1;
  EXPECT_THAT(quotas().SaveUsage(bad), StatusIs(Code::kInvalidArgument));
  bad.gpu_seconds[{"acme", ""}] = std::numeric_limits<double>::infinity();
  EXPECT_THAT(quotas().SaveUsage(bad), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(quotas().LoadUsage(), IsOkAndHolds(second));
}

TEST_P(StoreContractTest, HeartbeatsMoveForwardOnly) {
  ASSERT_OK(clusters().RegisterCluster(Info("c1"), {}));
  const Timestamp later = backend_->Now() + std::chrono::hours(1) + microseconds(7);
  ASSERT_OK(clusters().RecordHeartbeat("c1", later));
  ASSERT_OK_AND_ASSIGN(Cluster c, clusters().GetCluster("c1"));
  EXPECT_EQ(c.last_heartbeat, later);
  ASSERT_OK(clusters().RecordHeartbeat("c1", later - std::chrono::minutes(5)));
  ASSERT_OK_AND_ASSIGN(Cluster still, clusters().GetCluster("c1"));
  EXPECT_EQ(still.last_heartbeat, later);
  ASSERT_OK(clusters().RecordHeartbeat("c1", later + seconds(2)));
  ASSERT_OK_AND_ASSIGN(Cluster moved, clusters().GetCluster("c1"));
  EXPECT_EQ(moved.last_heartbeat, later + seconds(2));
  EXPECT_THAT(clusters().RecordHeartbeat("c9", later), StatusIs(Code::kNotFound));
}

TEST_P(StoreContractTest, ListClustersByNameWithAndWithoutNodes) {
  ASSERT_OK_AND_ASSIGN(std::vector<Cluster> none, clusters().ListClusters(true));
  EXPECT_TRUE(none.empty());
  ASSERT_OK(clusters().RegisterCluster(Info("b-site"), {Node("b-site", "n1", 1)}));
  ASSERT_OK(clusters().RegisterCluster(Info("a-site"),
                                       {Node("a-site", "n2", 0), Node("a-site", "n1", 2)}));
  ASSERT_OK(clusters().SetClusterState("b-site", ClusterState::kUnreachable));

  ASSERT_OK_AND_ASSIGN(std::vector<Cluster> bare, clusters().ListClusters(false));
  ASSERT_EQ(bare.size(), 2u);
  EXPECT_EQ(bare[0].info, Info("a-site"));
  EXPECT_TRUE(bare[0].nodes.empty());
  EXPECT_EQ(bare[1].info.name, "b-site");
  EXPECT_EQ(bare[1].state, ClusterState::kUnreachable);
  EXPECT_EQ(bare[1].epoch, 2u);
  EXPECT_TRUE(bare[1].nodes.empty());

  ASSERT_OK_AND_ASSIGN(std::vector<Cluster> full, clusters().ListClusters(true));
  ASSERT_EQ(full.size(), 2u);
  EXPECT_EQ(full[0].nodes,
            (std::vector<NodeInfo>{Node("a-site", "n1", 2), Node("a-site", "n2", 0)}));
  EXPECT_EQ(full[1].nodes, (std::vector<NodeInfo>{Node("b-site", "n1", 1)}));
  EXPECT_EQ(full[1].last_heartbeat, bare[1].last_heartbeat);
}

// ---- Declarations (issue #11) -------------------------------------------------------------

Timestamp AtMicros(int64_t us) { return Timestamp(microseconds(us)); }

// A declaration ValidateDeclaration accepts, with something in every field.
ClusterDeclaration Declaration(const std::string& cluster) {
  ClusterDeclaration d;
  d.cluster = cluster;
  d.provider = "aws";
  d.region = "eu-west-1";
  d.zone = "eu-west-1a";
  d.jurisdiction = "eu";
  d.compliance_labels = std::vector<std::string>{"gdpr", "iso27001"};
  d.default_capacity = CapacityType::kCommitted;
  d.prices = {
      {"A100-80GB", "", CapacityType::kOnDemand, 4'100'000, AtMicros(1'717'200'000'000'000)},
      {"H100-80GB", "", CapacityType::kSpot, 2'100'000, AtMicros(1'717'200'000'123'456)},
      {"H100-80GB", "3g.40gb", CapacityType::kOnDemand, 1'600'000, AtMicros(1'717'200'000'000'001)},
  };
  d.rtt_micros = {{"eu-west", 1'200}, {"us-east", 85'000}};
  return d;
}

TEST_P(StoreContractTest, DeclarationsArePutListedByNameAndReplaced) {
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(IsEmpty()));
  ASSERT_OK(clusters().PutDeclarations({}));
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(IsEmpty()));

  ClusterDeclaration b = Declaration("b-site");
  ClusterDeclaration a = Declaration("a-site");
  a.compliance_labels.reset();  // absent: the agent's labels stay in force
  a.default_capacity = CapacityType::kOnDemand;
  a.rtt_micros.clear();
  ASSERT_OK(clusters().PutDeclarations({b, a}));
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(ElementsAre(a, b)));

  // A second put replaces the declarations it names, whole, adds new ones and leaves the rest.
  ClusterDeclaration a2;
  a2.cluster = "a-site";
  a2.region = "eu-central";
  a2.compliance_labels = std::vector<std::string>{};  // declares "none": not the same as absent
  ClusterDeclaration c = Declaration("c-site");
  c.prices.clear();
  ASSERT_OK(clusters().PutDeclarations({c, a2}));
  ASSERT_OK_AND_ASSIGN(std::vector<ClusterDeclaration> listed, clusters().ListDeclarations());
  EXPECT_THAT(listed, ElementsAre(a2, b, c));
  ASSERT_EQ(listed.size(), 3u);
  ASSERT_TRUE(listed[0].compliance_labels.has_value());
  EXPECT_TRUE(listed[0].compliance_labels->empty());

  // Putting the same again changes nothing.
  ASSERT_OK(clusters().PutDeclarations({c, a2}));
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(ElementsAre(a2, b, c)));

  // Price dates are kept to the microsecond, as PostgreSQL keeps them.
  ClusterDeclaration fine = Declaration("d-site");
  fine.prices = {{"H100-80GB", "", CapacityType::kOnDemand, 1,
                  AtMicros(1'717'200'000'654'321) + std::chrono::nanoseconds(999)}};
  ASSERT_OK(clusters().PutDeclarations({fine}));
  ASSERT_OK_AND_ASSIGN(listed, clusters().ListDeclarations());
  ASSERT_EQ(listed.size(), 4u);
  ASSERT_EQ(listed[3].prices.size(), 1u);
  EXPECT_EQ(listed[3].prices[0].effective_from, AtMicros(1'717'200'000'654'321));
}

TEST_P(StoreContractTest, ADeclarationMadeBeforeItsClusterRegistersShowsOnceItDoes) {
  const ClusterDeclaration d = Declaration("edge");
  ASSERT_OK(clusters().PutDeclarations({d}));
  // Declared, not registered: not a cluster yet.
  EXPECT_THAT(clusters().ListClusters(false), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(clusters().GetCluster("edge"), StatusIs(Code::kNotFound));
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(ElementsAre(d)));

  ASSERT_OK_AND_ASSIGN(Cluster registered,
                       clusters().RegisterCluster(Info("edge"), {Node("edge", "n1", 2)}));
  EXPECT_EQ(registered.declared, d);
  EXPECT_EQ(registered.info, Info("edge"));  // what the agent reported, not laid over
  ASSERT_OK(clusters().RegisterCluster(Info("core"), {Node("core", "n1", 1)}));

  for (bool include_nodes : {false, true}) {
    ASSERT_OK_AND_ASSIGN(std::vector<Cluster> all, clusters().ListClusters(include_nodes));
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].info.name, "core");
    EXPECT_EQ(all[0].declared, ClusterDeclaration{});  // none declared
    EXPECT_EQ(all[0].declared.cluster, "");
    EXPECT_EQ(all[1].info, Info("edge"));
    EXPECT_EQ(all[1].declared, d);
    EXPECT_EQ(all[1].nodes.size(), include_nodes ? 1u : 0u);
  }
  ASSERT_OK_AND_ASSIGN(Cluster edge, clusters().GetCluster("edge"));
  EXPECT_EQ(edge.declared, d);
  EXPECT_EQ(edge.info, Info("edge"));
  ASSERT_OK_AND_ASSIGN(Cluster core, clusters().GetCluster("core"));
  EXPECT_EQ(core.declared, ClusterDeclaration{});

  // Declaring a registered cluster shows at once.
  ClusterDeclaration core_d = Declaration("core");
  core_d.prices.clear();
  ASSERT_OK(clusters().PutDeclarations({core_d}));
  ASSERT_OK_AND_ASSIGN(core, clusters().GetCluster("core"));
  EXPECT_EQ(core.declared, core_d);
}

TEST_P(StoreContractTest, RegisteringAgainNeverChangesTheDeclaration) {
  ClusterDeclaration d = Declaration("dgx");
  d.compliance_labels = std::vector<std::string>{};
  ASSERT_OK(clusters().PutDeclarations({d}));
  ASSERT_OK(clusters().RegisterCluster(Info("dgx"), {Node("dgx", "a", 8)}));

  // The agent moves, changes its labels, loses a node: its report changes, the declaration not.
  ClusterInfo moved = Info("dgx");
  moved.provider = "gcp";
  moved.region = "us-central";
  moved.zone = "";
  moved.jurisdiction = "us";
  moved.compliance_labels = {"fedramp"};
  ASSERT_OK_AND_ASSIGN(Cluster again, clusters().RegisterCluster(moved, {}));
  EXPECT_EQ(again.info, moved);
  EXPECT_EQ(again.declared, d);
  ASSERT_OK_AND_ASSIGN(Cluster got, clusters().GetCluster("dgx"));
  EXPECT_EQ(got.info, moved);
  EXPECT_EQ(got.declared, d);
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(ElementsAre(d)));

  // Nor do the other cluster writes; each returns the cluster with its declaration.
  ASSERT_OK_AND_ASSIGN(Cluster cordoned, clusters().SetCordon("dgx", "", true));
  EXPECT_EQ(cordoned.declared, d);
  ASSERT_OK(clusters().SetClusterState("dgx", ClusterState::kDegraded));
  std::vector<WorkloadId> shown;
  uint64_t epoch_seen = 0;
  ASSERT_OK_AND_ASSIGN(ClusterStore::LossResult loss,
                       clusters().LoseCluster("dgx", RequeueAll(&shown, &epoch_seen)));
  EXPECT_EQ(loss.cluster.declared, d);
  ASSERT_OK(clusters().RegisterCluster(Info("dgx"), {Node("dgx", "a", 8)}));
  ASSERT_OK_AND_ASSIGN(got, clusters().GetCluster("dgx"));
  EXPECT_EQ(got.declared, d);
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(ElementsAre(d)));
}

TEST_P(StoreContractTest, InvalidDeclarationsAreRefusedWholeAndStoreNothing) {
  const ClusterDeclaration kept = Declaration("dgx");
  ASSERT_OK(clusters().PutDeclarations({kept}));
  ClusterDeclaration changed = kept;
  changed.region = "eu-central";
  const ClusterDeclaration fresh = Declaration("edge");

  std::vector<ClusterDeclaration> bad;
  {
    ClusterDeclaration d = Declaration("Bad_Name");
    bad.push_back(d);
    d = Declaration("x");
    d.cluster.clear();
    bad.push_back(d);
    d = Declaration("x");
    d.region = "Not A Label";
    bad.push_back(d);
    d = Declaration("x");
    d.compliance_labels = std::vector<std::string>{"gdpr", "gdpr"};
    bad.push_back(d);
    d = Declaration("x");
    d.prices[0].gpu_model = "TPU-v5";
    bad.push_back(d);
    d = Declaration("x");
    d.prices[0].mig_profile = "9g.99gb";
    bad.push_back(d);
    d = Declaration("x");
    d.prices[0].micros_per_hour = -1;
    bad.push_back(d);
    d = Declaration("x");
    d.prices[0].effective_from = Timestamp{};
    bad.push_back(d);
    d = Declaration("x");
    d.prices.push_back(d.prices[0]);  // a second line for the same key and date
    d.prices.back().micros_per_hour += 1;
    bad.push_back(d);
    d = Declaration("x");
    d.rtt_micros["eu-west"] = kMaxRttMicros + 1;
    bad.push_back(d);
    d = Declaration("x");
    d.rtt_micros["Bad Region"] = 10;
    bad.push_back(d);
  }
  for (size_t i = 0; i < bad.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("bad declaration #", i));
    // Alone, and behind valid ones in a batch: the whole batch is refused, nothing is stored.
    EXPECT_THAT(clusters().PutDeclarations({bad[i]}), StatusIs(Code::kInvalidArgument));
    EXPECT_THAT(clusters().PutDeclarations({changed, fresh, bad[i]}),
                StatusIs(Code::kInvalidArgument, HasSubstr("declarations[2]")));
    EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(ElementsAre(kept)));
  }
  // A cluster named twice in one batch: which one would win is not the store's to guess.
  EXPECT_THAT(clusters().PutDeclarations({fresh, changed, fresh}),
              StatusIs(Code::kInvalidArgument, HasSubstr("declarations[2]")));
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(ElementsAre(kept)));

  ASSERT_OK(clusters().PutDeclarations({changed, fresh}));
  EXPECT_THAT(clusters().ListDeclarations(), IsOkAndHolds(ElementsAre(changed, fresh)));
}

TEST_P(StoreContractTest, PlacementConstraintsRoundTripThroughSubmitAndGet) {
  AddTenants();
  WorkloadSpec spec = Spec("routed");
  spec.idempotency_key = "routed-1";
  PlacementConstraints& p = spec.placement;
  p.jurisdictions = {"eu", "ch"};
  p.compliance_labels = {"gdpr"};
  p.providers = {"aws", "onprem"};
  p.regions = {"eu-west-1"};
  p.clusters = {"dgx-a", "dgx-b"};
  p.denied_clusters = {"edge"};
  p.max_price_per_gpu_hour_micros = 3'250'000;
  p.spot_tolerated = true;
  p.objective = Objective::kBalanced;
  p.client_region = "eu-west";
  p.max_rtt_micros = 45'000;
  p.min_driver_version = "550";
  ASSERT_OK(ValidateSpec(spec));

  const Workload submitted = MustSubmit(spec);
  EXPECT_EQ(submitted.spec, spec);
  EXPECT_EQ(MustGet(submitted.id).spec, spec);
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> pending, workloads().ListPending(10));
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].spec.placement, p);

  // The placement is part of the spec an idempotency key stands for.
  ASSERT_OK_AND_ASSIGN(SubmitResult replay, workloads().Submit(spec));
  EXPECT_FALSE(replay.created);
  EXPECT_EQ(replay.workload.id, submitted.id);
  WorkloadSpec elsewhere = spec;
  elsewhere.placement.denied_clusters = {"dgx-c"};
  EXPECT_THAT(workloads().Submit(elsewhere), StatusIs(Code::kAlreadyExists));

  // A spec without constraints reads back without them.
  const Workload plain = MustSubmit(Spec("plain"));
  EXPECT_TRUE(MustGet(plain.id).spec.placement.empty());
}

TEST_P(StoreContractTest, AProjectOrTenantIsDeletedOnlyWhenNothingDependsOnIt) {
  AddTenants();  // acme/research, acme/prod, globex/research
  ASSERT_OK(tenants().CreateProject(Project{"acme", "empty", {}}));
  const WorkloadId named = MustSubmit(Spec("w", "acme", "research")).id;
  ASSERT_OK(quotas().SetQuota(MakeQuota("acme", "empty", "gpu", 1000), Accept()));
  ASSERT_OK(quotas().SetShareWeight(ShareWeight{"acme", "empty", 3}));

  // Workloads name it (an ended one too): refused, nothing changes.
  ASSERT_OK(workloads().RequestCancel(named, "user:test", "done"));
  EXPECT_THAT(tenants().DeleteProject("acme", "research"), StatusIs(Code::kFailedPrecondition));
  EXPECT_THAT(tenants().DeleteProject("acme", "nope"), StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().DeleteProject("initech", "research"), StatusIs(Code::kNotFound));
  ASSERT_OK_AND_ASSIGN(std::vector<Project> before, tenants().ListProjects("acme"));
  EXPECT_EQ(before.size(), 3u);

  // Its quotas and weight go with it.
  ASSERT_OK(tenants().DeleteProject("acme", "empty"));
  ASSERT_OK_AND_ASSIGN(std::vector<Project> after, tenants().ListProjects("acme"));
  EXPECT_EQ(after.size(), 2u);
  EXPECT_THAT(quotas().ListQuotas("acme"), IsOkAndHolds(IsEmpty()));
  ASSERT_OK_AND_ASSIGN(std::vector<ShareWeight> weights, quotas().ListShareWeights());
  EXPECT_TRUE(std::none_of(weights.begin(), weights.end(),
                           [](const ShareWeight& w) { return w.project == "empty"; }));
  EXPECT_THAT(tenants().DeleteProject("acme", "empty"), StatusIs(Code::kNotFound));

  // A tenant with projects, or with live tokens, stays.
  EXPECT_THAT(tenants().DeleteTenant("globex"), StatusIs(Code::kFailedPrecondition));
  ASSERT_OK(tenants().DeleteProject("globex", "research"));
  ASSERT_OK(tenants().CreateToken("hash-gil", {"gil", auth::Role::kTenantUser, "globex", ""}));
  ASSERT_OK(tenants().CreateToken("hash-old", {"old", auth::Role::kViewer, "globex", ""}));
  ASSERT_OK_AND_ASSIGN(TokenRecord old, tenants().LookupToken("hash-old"));
  ASSERT_OK(tenants().RevokeToken(old.id, "", ""));
  ASSERT_OK(quotas().SetQuota(MakeQuota("globex", "", "gpu", 500), Accept()));
  EXPECT_THAT(tenants().DeleteTenant("globex"), StatusIs(Code::kFailedPrecondition));
  ASSERT_OK_AND_ASSIGN(TokenRecord gil, tenants().LookupToken("hash-gil"));
  ASSERT_OK(tenants().RevokeToken(gil.id, "", ""));
  ASSERT_OK(tenants().DeleteTenant("globex"));
  ASSERT_OK_AND_ASSIGN(std::vector<Tenant> left, tenants().ListTenants());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].name, "acme");
  EXPECT_THAT(quotas().ListQuotas("globex"), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(tenants().DeleteTenant("globex"), StatusIs(Code::kNotFound));
  // The name is free again.
  ASSERT_OK(tenants().CreateTenant(Tenant{"globex", "", {}}));
}

TEST_P(StoreContractTest, TokensExpireSayWhenTheyWereLastUsedAndAreListedWithoutSecrets) {
  ASSERT_OK(tenants().CreateTenant(Tenant{"acme", "", {}}));
  ASSERT_OK(tenants().CreateTenant(Tenant{"globex", "", {}}));
  const Timestamp now = backend_->Now();
  TokenRecord lapsed{.subject = "old", .role = auth::Role::kTenantUser, .tenant = "acme"};
  lapsed.expire_time = now - std::chrono::hours(1);
  TokenRecord fresh{.subject = "new", .role = auth::Role::kTenantUser, .tenant = "acme"};
  fresh.expire_time = now + std::chrono::hours(1);
  ASSERT_OK(tenants().CreateToken("hash-old", lapsed));
  ASSERT_OK(tenants().CreateToken("hash-new", fresh));
  ASSERT_OK(tenants().CreateToken("hash-gil", {"gil", auth::Role::kViewer, "globex", ""}));

  // An expired token authenticates nothing; a live one does and is marked used.
  EXPECT_THAT(tenants().LookupToken("hash-old"), StatusIs(Code::kNotFound));
  ASSERT_OK_AND_ASSIGN(std::vector<TokenRecord> before, tenants().ListTokens("acme", ""));
  ASSERT_EQ(before.size(), 2u);
  EXPECT_FALSE(before[1].last_used_time.has_value());
  backend_->Tick();
  const Timestamp used_after = backend_->Now();
  ASSERT_OK_AND_ASSIGN(TokenRecord live, tenants().LookupToken("hash-new"));
  EXPECT_EQ(live.subject, "new");
  ASSERT_TRUE(live.expire_time.has_value());
  EXPECT_EQ(*live.expire_time, Micros(*fresh.expire_time));

  // Listed by id with their times, the expired and the revoked ones too, scoped by tenant.
  ASSERT_OK(tenants().RevokeToken(live.id, "", ""));
  ASSERT_OK_AND_ASSIGN(std::vector<TokenRecord> acme, tenants().ListTokens("acme", ""));
  ASSERT_EQ(acme.size(), 2u);
  EXPECT_EQ(acme[0].subject, "old");
  EXPECT_FALSE(acme[0].revoke_time.has_value());
  EXPECT_EQ(acme[1].subject, "new");
  ASSERT_TRUE(acme[1].last_used_time.has_value());
  EXPECT_GE(*acme[1].last_used_time, used_after);
  EXPECT_TRUE(acme[1].revoke_time.has_value());
  EXPECT_GE(acme[1].create_time, now);
  ASSERT_OK_AND_ASSIGN(std::vector<TokenRecord> all, tenants().ListTokens("", ""));
  EXPECT_EQ(all.size(), 3u);
  EXPECT_THAT(tenants().ListTokens("acme", "research"), IsOkAndHolds(IsEmpty()));
}

TEST_P(StoreContractTest, ATokenBoundToAProjectStaysInsideIt) {
  AddTenants();  // acme/research, acme/prod, globex/research
  const TokenRecord in_research{
      .subject = "rita", .role = auth::Role::kTenantUser, .tenant = "acme", .project = "research"};
  ASSERT_OK(tenants().CreateToken("hash-rita", in_research));
  ASSERT_OK_AND_ASSIGN(TokenRecord rita, tenants().LookupToken("hash-rita"));
  EXPECT_EQ(rita.tenant, "acme");
  EXPECT_EQ(rita.project, "research");

  // A project the tenant does not have, or a project without its tenant: refused.
  TokenRecord nowhere = in_research;
  nowhere.project = "nope";
  EXPECT_THAT(tenants().CreateToken("hash-nope", nowhere), StatusIs(Code::kNotFound));
  nowhere.tenant.clear();
  nowhere.role = auth::Role::kViewer;
  nowhere.project = "research";
  EXPECT_THAT(tenants().CreateToken("hash-nope", nowhere), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(tenants().LookupToken("hash-nope"), StatusIs(Code::kNotFound));

  // Revocation scoped to another project of the tenant does not reach it.
  EXPECT_THAT(tenants().RevokeToken(rita.id, "acme", "prod"), StatusIs(Code::kNotFound));
  ASSERT_OK(tenants().LookupToken("hash-rita"));

  // Its project stays while the token is live, and goes once it is revoked.
  ASSERT_OK(tenants().CreateProject(Project{"acme", "scratch", {}}));
  ASSERT_OK(tenants().CreateToken(
      "hash-sam",
      {.subject = "sam", .role = auth::Role::kViewer, .tenant = "acme", .project = "scratch"}));
  ASSERT_OK_AND_ASSIGN(TokenRecord sam, tenants().LookupToken("hash-sam"));
  EXPECT_THAT(tenants().DeleteProject("acme", "scratch"), StatusIs(Code::kFailedPrecondition));
  ASSERT_OK(tenants().RevokeToken(sam.id, "acme", "scratch"));
  ASSERT_OK(tenants().DeleteProject("acme", "scratch"));
  ASSERT_OK(tenants().RevokeToken(rita.id, "acme", "research"));
}

// ---- Audit -----------------------------------------------------------------------------------

TEST_P(StoreContractTest, AuditAppendsChainRowsInOrderWithTheKeyedHash) {
  const Timestamp before = backend_->Now();
  const AuditEvent a =
      MustAppend("user:alice", "acme", "research", "workloads.submit", "workload/1");
  backend_->Tick();
  const AuditEvent b = MustAppend("scheduler", "acme", "research", "workloads.place", "workload/1");
  const AuditEvent c =
      MustAppend("user:mallory", "globex", "", "tokens.create", "token/", kAuditDenied);
  const Timestamp after = backend_->Now();

  EXPECT_EQ(a.id, 1);
  EXPECT_EQ(b.id, 2);
  EXPECT_EQ(c.id, 3);
  EXPECT_EQ(a.prev_hash, "");
  EXPECT_EQ(b.prev_hash, a.hash);
  EXPECT_EQ(c.prev_hash, b.hash);
  EXPECT_EQ(a.hash, AuditRowHash(kAuditKey, a));
  EXPECT_EQ(c.hash, AuditRowHash(kAuditKey, c));
  EXPECT_NE(c.hash, AuditRowHash("another-key-another-key-another-key", c));
  EXPECT_GE(a.time, Micros(before));
  EXPECT_LE(c.time, after);

  // Read back exactly as written (the hash covers the microseconds too).
  AuditFilter all;
  ASSERT_OK_AND_ASSIGN(AuditPage page, audit().List(all));
  ASSERT_THAT(page.events, SizeIs(3));
  const AuditEvent& read = page.events[2];
  EXPECT_EQ(read.id, 1);
  EXPECT_EQ(read.time, a.time);
  EXPECT_EQ(read.actor, "user:alice");
  EXPECT_EQ(read.tenant, "acme");
  EXPECT_EQ(read.project, "research");
  EXPECT_EQ(read.action, "workloads.submit");
  EXPECT_EQ(read.object, "workload/1");
  EXPECT_EQ(read.outcome, "ok");
  EXPECT_EQ(read.reason, "because");
  EXPECT_EQ(read.detail, "detail: 1");
  EXPECT_EQ(read.hash, a.hash);
  EXPECT_EQ(page.events[0].outcome, "denied");
}

TEST_P(StoreContractTest, AuditAppendAllIsOneRunOfTheChain) {
  MustAppend("user:alice", "", "", "tenants.create", "tenant/acme");
  std::vector<AuditEvent> rows(3);
  for (int i = 0; i < 3; ++i) {
    rows[i].actor = "scheduler";
    rows[i].tenant = "acme";
    rows[i].action = "workloads.place";
    rows[i].object = absl::StrCat("workload/", i + 1);
    rows[i].outcome = "ok";
  }
  ASSERT_OK(audit().AppendAll(rows));
  ASSERT_OK(audit().AppendAll({}));
  EXPECT_THAT(AuditIds(AuditFilter()), ElementsAre(4, 3, 2, 1));
  ASSERT_OK_AND_ASSIGN(AuditVerification v, audit().Verify());
  EXPECT_THAT(v.breaks, IsEmpty());
  EXPECT_EQ(v.rows, 4);
}

TEST_P(StoreContractTest, AuditListFiltersByScopeActorObjectAndTime) {
  MustAppend("user:root", "", "", "tenants.create", "tenant/acme");                // 1
  MustAppend("user:alice", "acme", "research", "workloads.submit", "workload/1");  // 2
  MustAppend("user:alice", "acme", "prod", "workloads.submit", "workload/2");      // 3
  MustAppend("user:bob", "acme", "", "projects.create", "project/acme/prod");      // 4
  backend_->Tick();
  const Timestamp later = backend_->Now();
  MustAppend("user:eve", "globex", "research", "workloads.cancel", "workload/1");  // 5
  MustAppend("scheduler", "acme", "research", "workloads.place", "workload/1");    // 6

  AuditFilter f;
  EXPECT_THAT(AuditIds(f), ElementsAre(6, 5, 4, 3, 2, 1));
  f.tenant = "acme";
  EXPECT_THAT(AuditIds(f), ElementsAre(6, 4, 3, 2));
  f.project = "research";
  EXPECT_THAT(AuditIds(f), ElementsAre(6, 2));
  f = AuditFilter();
  f.tenant = "";  // the platform's own rows
  EXPECT_THAT(AuditIds(f), ElementsAre(1));
  f = AuditFilter();
  f.actor = "user:alice";
  EXPECT_THAT(AuditIds(f), ElementsAre(3, 2));
  f = AuditFilter();
  f.object = "workload/1";
  EXPECT_THAT(AuditIds(f), ElementsAre(6, 5, 2));
  f.tenant = "acme";
  EXPECT_THAT(AuditIds(f), ElementsAre(6, 2));
  if (GetParam() == Kind::kMemory) {
    // Only the fake clock stands still between calls: PostgreSQL's real clock cannot split
    // rows written a microsecond apart by a boundary the test can name.
    f = AuditFilter();
    f.since = later;
    EXPECT_THAT(AuditIds(f), ElementsAre(6, 5));
    f.since.reset();
    f.until = later;
    EXPECT_THAT(AuditIds(f), ElementsAre(4, 3, 2, 1));
  }
  f = AuditFilter();
  f.since = backend_->Now() + seconds(3600);
  EXPECT_THAT(AuditIds(f), IsEmpty());
  f = AuditFilter();
  f.until = Timestamp{};
  EXPECT_THAT(AuditIds(f), IsEmpty());

  // Pages, newest first.
  f = AuditFilter();
  f.page_size = 4;
  ASSERT_OK_AND_ASSIGN(AuditPage first, audit().List(f));
  EXPECT_THAT(first.events, SizeIs(4));
  EXPECT_EQ(first.next_before_id, 3);
  f.before_id = first.next_before_id;
  ASSERT_OK_AND_ASSIGN(AuditPage second, audit().List(f));
  ASSERT_THAT(second.events, SizeIs(2));
  EXPECT_EQ(second.events[0].id, 2);
  EXPECT_EQ(second.next_before_id, 0);

  f.page_size = 0;
  EXPECT_THAT(audit().List(f), StatusIs(Code::kInvalidArgument));
  f.page_size = kMaxAuditPage + 1;
  EXPECT_THAT(audit().List(f), StatusIs(Code::kInvalidArgument));
}

TEST_P(StoreContractTest, AuditVerifiesAnUntouchedChainAndReturnsItsHead) {
  ASSERT_OK_AND_ASSIGN(AuditVerification empty, audit().Verify());
  EXPECT_EQ(empty.rows, 0);
  EXPECT_THAT(empty.breaks, IsEmpty());
  EXPECT_EQ(empty.head_id, 0);

  AuditEvent last;
  for (int i = 0; i < 5; ++i) {
    last = MustAppend("user:alice", "acme", "", "quotas.set", absl::StrCat("quota/acme//gpu", i));
  }
  ASSERT_OK_AND_ASSIGN(AuditVerification v, audit().Verify());
  EXPECT_EQ(v.rows, 5);
  EXPECT_THAT(v.breaks, IsEmpty());
  EXPECT_EQ(v.head_id, 5);
  EXPECT_EQ(v.head_hash, last.hash);
}

TEST_P(StoreContractTest, AuditFieldsAreCutToTheirLimits) {
  AuditEvent e;
  e.actor = std::string(1000, 'a');
  e.action = "workloads.submit";
  e.object = "workload/1";
  e.outcome = "ok";
  e.detail = std::string(kMaxAuditDetailBytes + 10, 'd');
  ASSERT_OK(audit().Append(e));
  ASSERT_OK_AND_ASSIGN(AuditPage page, audit().List(AuditFilter()));
  ASSERT_THAT(page.events, SizeIs(1));
  const AuditEvent& stored = page.events.front();
  EXPECT_EQ(stored.actor.size(), kMaxAuditFieldBytes);
  EXPECT_EQ(stored.detail.size(), kMaxAuditDetailBytes);
  ASSERT_OK_AND_ASSIGN(AuditVerification v, audit().Verify());
  EXPECT_THAT(v.breaks, IsEmpty());
}

TEST_P(StoreContractTest, AuditRowsWaitUnchainedUntilSealedAndAreChainedOnce) {
  MustAppend("user:alice", "", "", "tenants.create", "tenant/acme");  // sealed by its List
  std::vector<AuditEvent> rows(2);
  for (int i = 0; i < 2; ++i) {
    rows[i].actor = "user:alice";
    rows[i].action = "tenants.create";
    rows[i].object = absl::StrCat("tenant/t", i);
    rows[i].outcome = "ok";
  }
  ASSERT_OK(audit().AppendAll(rows));
  EXPECT_THAT(audit().Seal(), IsOkAndHolds(2));
  EXPECT_THAT(audit().Seal(), IsOkAndHolds(0));
  ASSERT_OK_AND_ASSIGN(AuditVerification v, audit().Verify());
  EXPECT_EQ(v.rows, 3);
  EXPECT_THAT(v.breaks, IsEmpty());
}

// The workload store records each state change in the audit trail itself, with the change's
// actor (PostgreSQL: in the same transaction, by the trigger on workload_events).
TEST_P(StoreContractTest, AuditHasEveryWorkloadStateChangeWithItsActor) {
  AddTenants();
  ASSERT_OK_AND_ASSIGN(SubmitResult first,
                       workloads().Submit(Spec("train"), PendingReason(), "user:alice"));
  const WorkloadId id = first.workload.id;
  Advance(id, S::kSucceeded);  // ADMITTED, PLACED, RUNNING, SUCCEEDED, each by "test"
  WorkloadSpec keyed = Spec("other", "globex", "research");
  keyed.idempotency_key = "once";
  const Workload other = MustSubmit(keyed);
  ASSERT_OK(workloads().RequestCancel(other.id, "user:bob", "not needed").status());
  // A replay changes nothing and records nothing.
  ASSERT_OK_AND_ASSIGN(SubmitResult replay, workloads().Submit(keyed));
  EXPECT_FALSE(replay.created);

  AuditFilter acme;
  acme.tenant = "acme";
  acme.project = "research";
  ASSERT_OK_AND_ASSIGN(AuditPage page, audit().List(acme));
  std::vector<std::tuple<std::string, std::string, std::string>> rows;
  for (auto it = page.events.rbegin(); it != page.events.rend(); ++it) {
    EXPECT_EQ(it->object, absl::StrCat("workload/", id));
    EXPECT_EQ(it->outcome, "ok");
    rows.emplace_back(it->actor, it->action, it->detail);
  }
  EXPECT_THAT(rows, ElementsAre(std::tuple("user:alice", "workloads.submit", " -> PENDING"),
                                std::tuple("test", "workloads.admitted", "PENDING -> ADMITTED"),
                                std::tuple("test", "workloads.placed", "ADMITTED -> PLACED"),
                                std::tuple("test", "workloads.running", "PLACED -> RUNNING"),
                                std::tuple("test", "workloads.succeeded", "RUNNING -> SUCCEEDED")));
  EXPECT_EQ(page.events.front().reason, "because");

  AuditFilter globex;
  globex.tenant = "globex";
  ASSERT_OK_AND_ASSIGN(AuditPage theirs, audit().List(globex));
  ASSERT_THAT(theirs.events, SizeIs(2));
  EXPECT_EQ(theirs.events[0].actor, "user:bob");
  EXPECT_EQ(theirs.events[0].action, "workloads.cancelled");
  EXPECT_EQ(theirs.events[0].reason, "not needed");
  EXPECT_EQ(theirs.events[1].actor, "submit");  // submitted with no actor named
  ASSERT_OK_AND_ASSIGN(AuditVerification v, audit().Verify());
  EXPECT_EQ(v.rows, 7);
  EXPECT_THAT(v.breaks, IsEmpty());
}

// An audited change records the row it is given in its own transaction: the row exists if and
// only if the change committed, with what only the store knows added (a token's id, the tokens a
// binding change lowered or revoked).
TEST_P(StoreContractTest, AnAuditedChangeRecordsItsRowOnlyWhenItCommits) {
  const auto row = [](const std::string& action, const std::string& object,
                      const std::string& detail = "") {
    AuditEvent e;
    e.actor = "user:root";
    e.action = action;
    e.object = object;
    e.outcome = std::string(kAuditOk);
    e.detail = detail;
    return e;
  };
  ASSERT_OK(
      tenants().CreateTenant(Tenant{"acme", "Acme", {}}, row("tenants.create", "tenant/acme")));
  EXPECT_THAT(tenants().CreateTenant(Tenant{"acme", "Acme", {}}, row("tenants.create", "again")),
              StatusIs(Code::kAlreadyExists));
  ASSERT_OK(tenants().CreateProject(Project{"acme", "research", {}},
                                    row("projects.create", "project/acme/research")));
  EXPECT_THAT(tenants().CreateProject(Project{"nobody", "x", {}}, row("projects.create", "lost")),
              StatusIs(Code::kNotFound));
  TokenRecord token;
  token.subject = "alice";
  token.role = auth::Role::kTenantAdmin;
  token.tenant = "acme";
  ASSERT_OK_AND_ASSIGN(TokenRecord made,
                       tenants().CreateToken("hash-1", token, row("tokens.create", "token/")));
  EXPECT_THAT(tenants().CreateToken("hash-1", token, row("tokens.create", "lost")),
              StatusIs(Code::kAlreadyExists));
  RoleBinding binding{.subject = "alice", .role = auth::Role::kTenantUser, .tenant = "acme"};
  ASSERT_OK(tenants().SetRoleBinding(binding, row("members.set", "binding", "role: tenant-user")));
  const auto refuse = [](Quota&, const std::vector<Quota>&) {
    return absl::FailedPreconditionError("no");
  };
  const auto accept = [](Quota&, const std::vector<Quota>&) { return absl::OkStatus(); };
  Quota quota;
  quota.key = QuotaKey{"acme", "", "H100-80GB"};
  quota.guaranteed_milli = 8000;
  EXPECT_THAT(quotas().SetQuota(quota, refuse, row("quotas.set", "lost")),
              StatusIs(Code::kFailedPrecondition));
  ASSERT_OK(quotas().SetQuota(quota, accept, row("quotas.set", "quota/acme//H100-80GB")));
  EXPECT_THAT(quotas().DeleteQuota(QuotaKey{"acme", "", "A100-40GB"}, row("quotas.delete", "lost")),
              StatusIs(Code::kNotFound));
  ASSERT_OK(quotas().DeleteQuota(quota.key, row("quotas.delete", "quota/acme//H100-80GB")));
  ASSERT_OK(quotas().SetShareWeight(ShareWeight{"acme", "", 2},
                                    row("share_weights.set", "share_weight/acme/")));
  ASSERT_OK(tenants().DeleteRoleBinding("alice", "acme", "", row("members.remove", "binding")));
  EXPECT_THAT(tenants().DeleteRoleBinding("alice", "acme", "", row("members.remove", "lost")),
              StatusIs(Code::kNotFound));
  // Revoked with the binding; revoking it again succeeds and is recorded again.
  ASSERT_OK(tenants().RevokeToken(made.id, "acme", "", row("tokens.revoke", "token/again")));
  EXPECT_THAT(tenants().RevokeToken(made.id + 100, "", "", row("tokens.revoke", "lost")),
              StatusIs(Code::kNotFound));
  EXPECT_THAT(tenants().DeleteTenant("acme", row("tenants.delete", "lost")),
              StatusIs(Code::kFailedPrecondition));  // it has a project
  ASSERT_OK(
      tenants().DeleteProject("acme", "research", row("projects.delete", "project/acme/research")));
  ASSERT_OK(tenants().DeleteTenant("acme", row("tenants.delete", "tenant/acme")));

  ASSERT_OK(clusters().RegisterCluster(Info("dgx"), {Node("dgx", "a", 8)}));
  EXPECT_THAT(clusters().SetCordon("nope", "", true, row("clusters.cordon", "lost")),
              StatusIs(Code::kNotFound));
  ASSERT_OK(clusters().SetCordon("dgx", "", true, row("clusters.cordon", "cluster/dgx")));
  ASSERT_OK(certificates().AddClusterCertificate(Certificate("0A01", "dgx", backend_->Now()),
                                                 row("clusters.enroll", "cluster/dgx")));
  EXPECT_THAT(certificates().AddClusterCertificate(Certificate("0A01", "dgx", backend_->Now()),
                                                   row("clusters.enroll", "lost")),
              StatusIs(Code::kAlreadyExists));
  EXPECT_THAT(clusters().DeleteCluster("dgx", row("clusters.delete", "lost")),
              StatusIs(Code::kFailedPrecondition));  // its certificate is live
  ASSERT_OK(
      clusters().PutDeclarations({Declaration("edge")}, row("clusters.apply", "declarations")));
  ASSERT_OK(clusters().RegisterCluster(Info("dgx"), {Node("dgx", "a", 8)},
                                       row("agents.register", "cluster/dgx", "nodes: 1")));
  ASSERT_OK(certificates().RevokeCluster("dgx", row("clusters.revoke", "cluster/dgx")));
  const auto nothing_held = [](const Cluster&, const std::vector<Workload>&) {
    return std::vector<Transition>();
  };
  ASSERT_OK(clusters().LoseCluster("dgx", nothing_held, row("clusters.lose", "cluster/dgx")));
  ASSERT_OK(clusters().DeleteCluster("edge", row("clusters.delete", "cluster/edge")));
  // A row without an action records nothing.
  ASSERT_OK(clusters().SetCordon("dgx", "", false, AuditEvent{}));

  ASSERT_OK_AND_ASSIGN(AuditPage page, audit().List(AuditFilter()));
  std::vector<std::pair<std::string, std::string>> rows;
  for (auto it = page.events.rbegin(); it != page.events.rend(); ++it) {
    EXPECT_EQ(it->actor, "user:root");
    EXPECT_EQ(it->outcome, "ok");
    rows.emplace_back(it->action, absl::StrCat(it->object, " ", it->detail));
  }
  const std::string id = absl::StrCat(made.id);
  EXPECT_THAT(
      rows,
      ElementsAre(
          Pair("tenants.create", "tenant/acme "), Pair("projects.create", "project/acme/research "),
          Pair("tokens.create", absl::StrCat("token/", id, " ")),
          Pair("members.set", absl::StrCat("binding role: tenant-user; tokens "
                                           "lowered: ",
                                           id)),
          Pair("quotas.set", "quota/acme//H100-80GB "),
          Pair("quotas.delete", "quota/acme//H100-80GB "),
          Pair("share_weights.set", "share_weight/acme/ "),
          Pair("members.remove", absl::StrCat("binding tokens revoked: ", id)),
          Pair("tokens.revoke", "token/again "), Pair("projects.delete", "project/acme/research "),
          Pair("tenants.delete", "tenant/acme "), Pair("clusters.cordon", "cluster/dgx "),
          Pair("clusters.enroll", "cluster/dgx "), Pair("clusters.apply", "declarations "),
          Pair("agents.register", "cluster/dgx nodes: 1; epoch: 1"),
          Pair("clusters.revoke", "cluster/dgx certificates revoked: 1"),
          Pair("clusters.lose", "cluster/dgx epoch: 2; requeued: 0; ended: 0"),
          Pair("clusters.delete", "cluster/edge ")));
  ASSERT_OK_AND_ASSIGN(AuditVerification v, audit().Verify());
  EXPECT_THAT(v.breaks, IsEmpty());
}

// A cancel's own row is recorded with it: what it did (ended at once, or the agent asked to stop
// it) in the workload's scope; a cancel refused records nothing.
TEST_P(StoreContractTest, ACancelRecordsItsRowWithWhatItDid) {
  AddTenants();
  const Workload running = MustSubmit(Spec("train"));
  Advance(running.id, S::kRunning);
  const Workload pending = MustSubmit(Spec("wait"));
  AuditEvent row;
  row.actor = "user:alice";
  row.tenant = "acme";
  row.project = "research";
  row.action = "workloads.cancel";
  row.outcome = std::string(kAuditOk);
  row.object = absl::StrCat("workload/", running.id);
  ASSERT_OK(workloads().RequestCancel(running.id, "user:alice", "stop", row));
  row.object = absl::StrCat("workload/", pending.id);
  ASSERT_OK(workloads().RequestCancel(pending.id, "user:alice", "stop", row));
  EXPECT_THAT(workloads().RequestCancel(pending.id, "user:alice", "again", row),
              StatusIs(Code::kFailedPrecondition));

  AuditFilter filter;
  filter.actor = "user:alice";
  ASSERT_OK_AND_ASSIGN(AuditPage page, audit().List(filter));
  std::vector<std::pair<std::string, std::string>> rows;
  // Oldest first.
  for (size_t i = page.events.size(); i-- > 0;) {
    const AuditEvent& e = page.events[i];
    if (e.action == "workloads.cancel") rows.emplace_back(e.object, e.detail);
  }
  EXPECT_THAT(rows, ElementsAre(Pair(absl::StrCat("workload/", running.id),
                                     "state RUNNING, agent asked to stop it"),
                                Pair(absl::StrCat("workload/", pending.id), "state CANCELLED")));
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContractTest,
                         ::testing::Values(Kind::kMemory, Kind::kPostgres),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return KindName(info.param);
                         });

// ---- Metering (MeteringStore) -----------------------------------------------------------------

// A cluster "m1" with one node of two H100s, priced on demand at 3,600,000 micro-units an hour:
// one micro-unit per GPU-millisecond.
class MeteringContractTest : public StoreContractTest {
 protected:
  void SetUp() override {
    StoreContractTest::SetUp();
    AddTenants();
    ASSERT_OK_AND_ASSIGN(Cluster m1,
                         clusters().RegisterCluster(Info("m1"), {Node("m1", "node-01", 2)}));
    epoch_ = m1.epoch;
    ClusterDeclaration d;
    d.cluster = "m1";
    d.prices = {
        {"H100-80GB", "", CapacityType::kOnDemand, 3'600'000, Timestamp{} + std::chrono::hours(1)}};
    ASSERT_OK(clusters().PutDeclarations({d}));
  }

  // A workload of tenant acme placed on both GPUs of m1 (one replica).
  WorkloadId MustPlace() {
    const WorkloadId id = MustSubmit(Spec("metered")).id;
    Transition place = Step(id, S::kPending, S::kPlaced);
    place.assignment = Assignment{};
    place.assignment->cluster = "m1";
    place.assignment->epoch = epoch_;
    place.assignment->replicas = {
        testing::ReplicaOn("node-01", {"GPU-m1-node-01-0", "GPU-m1-node-01-1"}, {0, 1})};
    EXPECT_THAT(workloads().ApplyTransitions({place}),
                IsOkAndHolds(ElementsAre(::testing::Field(&TransitionResult::applied, true))));
    return id;
  }

  Transition At(WorkloadId id, S from, S to, Timestamp time) {
    Transition t = Step(id, from, to);
    t.actor = "agent:m1";
    t.time = time;
    return t;
  }

  bool Apply(const std::vector<Transition>& batch) {
    absl::StatusOr<std::vector<TransitionResult>> r = workloads().ApplyTransitions(batch);
    EXPECT_OK(r);
    return r.ok() && std::all_of(r->begin(), r->end(), [](const auto& x) { return x.applied; });
  }

  // Every record of acme, in the store's order.
  std::vector<UsageRecord> Usage() {
    UsageFilter f;
    f.tenant = "acme";
    f.from = Timestamp{};
    f.to = backend_->Now() + std::chrono::hours(24);
    absl::StatusOr<std::vector<UsageRecord>> r = metering().ListUsage(f);
    EXPECT_OK(r);
    return r.ok() ? *r : std::vector<UsageRecord>{};
  }

  // Places a workload, starts it (after a tick) and ends it with `end` (after another); returns
  // its id and the start and end times the agent reported.
  struct Ran {
    WorkloadId id = 0;
    Timestamp start{};
    Timestamp end{};
  };
  Ran RunOnce(S end = S::kSucceeded) {
    Ran ran;
    ran.id = MustPlace();
    backend_->Tick();
    ran.start = backend_->Now();
    EXPECT_TRUE(Apply({At(ran.id, S::kPlaced, S::kRunning, ran.start)}));
    backend_->Tick();
    ran.end = backend_->Now();
    EXPECT_TRUE(Apply({At(ran.id, S::kRunning, end, ran.end)}));
    return ran;
  }

  uint64_t epoch_ = 1;
};

int64_t Millis(Timestamp from, Timestamp to) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(to - from).count();
}

TEST_P(MeteringContractTest, AnEndedRunIsMeteredPerGpuFromItsStartToItsEndOnce) {
  const auto [id, start, end] = RunOnce();
  const Transition done = At(id, S::kRunning, S::kSucceeded, end);

  const std::vector<UsageRecord> records = Usage();
  ASSERT_THAT(records, SizeIs(2));
  for (size_t g = 0; g < 2; ++g) {
    const UsageRecord& r = records[g];
    EXPECT_EQ(r.workload, id);
    EXPECT_EQ(r.attempt, 1u);
    EXPECT_EQ(r.replica, 0u);
    EXPECT_EQ(r.gpu_uuid, absl::StrCat("GPU-m1-node-01-", g));
    EXPECT_EQ(r.tenant, "acme");
    EXPECT_EQ(r.project, "research");
    EXPECT_EQ(r.cluster, "m1");
    EXPECT_EQ(r.node, "node-01");
    EXPECT_EQ(r.gpu_model, "H100-80GB");
    EXPECT_EQ(r.capacity, CapacityType::kOnDemand);
    EXPECT_EQ(r.from, start);
    EXPECT_EQ(r.to, end);
    EXPECT_EQ(r.fraction, (Fraction{1, 1}));
    EXPECT_EQ(r.price_micros_per_hour, 3'600'000);
    EXPECT_EQ(r.cost_micros, CostMicros(3'600'000, Fraction{1, 1},
                                        std::chrono::duration_cast<microseconds>(end - start)));
  }
  // Neither a replayed end nor a meter pass adds anything.
  EXPECT_THAT(workloads().ApplyTransitions({done}),
              IsOkAndHolds(ElementsAre(::testing::Field(&TransitionResult::applied, false))));
  EXPECT_THAT(metering().MeterRunning(backend_->Now(), 100), IsOkAndHolds(0));
  EXPECT_THAT(Usage(), SizeIs(2));
}

TEST_P(MeteringContractTest, ARunStillGoingIsMeteredToNowAndItsEndGoesOnFromThere) {
  const WorkloadId id = MustPlace();
  backend_->Tick();
  const Timestamp start = backend_->Now();
  ASSERT_TRUE(Apply({At(id, S::kPlaced, S::kRunning, start)}));
  backend_->Tick();
  const Timestamp cut = backend_->Now();
  EXPECT_THAT(metering().MeterRunning(cut, 100), IsOkAndHolds(1));
  EXPECT_THAT(metering().MeterRunning(cut, 100), IsOkAndHolds(0));  // nothing left before cut
  std::vector<UsageRecord> records = Usage();
  ASSERT_THAT(records, SizeIs(2));
  EXPECT_EQ(records[0].from, start);
  EXPECT_EQ(records[0].to, cut);

  backend_->Tick();
  const Timestamp end = backend_->Now();
  ASSERT_TRUE(Apply({At(id, S::kRunning, S::kFailed, end)}));
  records = Usage();
  ASSERT_THAT(records, SizeIs(4));
  // Per GPU, the spans follow each other with neither gap nor overlap.
  for (const char* gpu : {"GPU-m1-node-01-0", "GPU-m1-node-01-1"}) {
    std::vector<std::pair<Timestamp, Timestamp>> spans;
    for (const UsageRecord& r : records) {
      if (r.gpu_uuid == gpu) spans.emplace_back(r.from, r.to);
    }
    EXPECT_THAT(spans, ElementsAre(Pair(start, cut), Pair(cut, end)));
  }
}

TEST_P(MeteringContractTest, AnAgentClockBehindOrAheadBillsNeitherBeforePlacementNorAfterNow) {
  const Timestamp before_place = backend_->Now();
  const WorkloadId id = MustPlace();
  const Timestamp placed = MustGet(id).update_time;
  ExpectBetween(placed, before_place, backend_->Now());
  backend_->Tick();
  // The agent's clock is ten hours slow at the start and ten hours fast at the end.
  ASSERT_TRUE(Apply({At(id, S::kPlaced, S::kRunning, placed - std::chrono::hours(10))}));
  backend_->Tick();
  ASSERT_TRUE(
      Apply({At(id, S::kRunning, S::kSucceeded, backend_->Now() + std::chrono::hours(10))}));
  const Timestamp after_end = backend_->Now();
  const std::vector<UsageRecord> records = Usage();
  ASSERT_THAT(records, SizeIs(2));
  EXPECT_EQ(records[0].from, placed);
  EXPECT_LE(records[0].to, after_end);
  EXPECT_LT(Millis(records[0].from, records[0].to), 60'000);
}

TEST_P(MeteringContractTest, ARunStartedAndEndedInOneBatchIsMetered) {
  const WorkloadId id = MustPlace();
  backend_->Tick();
  const Timestamp start = backend_->Now();
  backend_->Tick();
  const Timestamp end = backend_->Now();
  ASSERT_TRUE(
      Apply({At(id, S::kPlaced, S::kRunning, start), At(id, S::kRunning, S::kSucceeded, end)}));
  const std::vector<UsageRecord> records = Usage();
  ASSERT_THAT(records, SizeIs(2));
  EXPECT_EQ(records[0].from, start);
  EXPECT_EQ(records[0].to, end);
}

TEST_P(MeteringContractTest, ARequeuedRunIsMeteredAndItsNextAttemptStartsAfresh) {
  RunOnce(S::kPending);  // preempted, to be retried
  EXPECT_THAT(metering().MeterRunning(backend_->Now(), 100), IsOkAndHolds(0));
  ASSERT_THAT(Usage(), SizeIs(2));
  EXPECT_EQ(Usage()[0].attempt, 1u);
}

TEST_P(MeteringContractTest, ListUsageFiltersByTenantAndWindowAndPages) {
  const auto [id, start, end] = RunOnce();

  UsageFilter f;
  f.from = start;
  f.to = end;
  f.page_size = 1;
  ASSERT_OK_AND_ASSIGN(std::vector<UsageRecord> first, metering().ListUsage(f));
  ASSERT_THAT(first, SizeIs(1));
  f.after = first[0];
  ASSERT_OK_AND_ASSIGN(std::vector<UsageRecord> second, metering().ListUsage(f));
  ASSERT_THAT(second, SizeIs(1));
  EXPECT_NE(second[0].gpu_uuid, first[0].gpu_uuid);
  f.after = second[0];
  EXPECT_THAT(metering().ListUsage(f), IsOkAndHolds(IsEmpty()));

  UsageFilter other;
  other.tenant = "globex";
  other.from = start;
  other.to = end;
  EXPECT_THAT(metering().ListUsage(other), IsOkAndHolds(IsEmpty()));
  UsageFilter outside;
  outside.from = end;  // the window starts where the records end
  outside.to = end + std::chrono::hours(1);
  EXPECT_THAT(metering().ListUsage(outside), IsOkAndHolds(IsEmpty()));

  UsageFilter bad = f;
  bad.page_size = 0;
  EXPECT_THAT(metering().ListUsage(bad), StatusIs(Code::kInvalidArgument));
  bad = f;
  bad.to = bad.from;
  EXPECT_THAT(metering().ListUsage(bad), StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(metering().MeterRunning(end, 0), StatusIs(Code::kInvalidArgument));
}

TEST_P(MeteringContractTest, AReportSumsItsWindowsRecordsExactlyAndTheSameEachTime) {
  const auto [id, start, end] = RunOnce();
  const std::vector<UsageRecord> records = Usage();
  ASSERT_THAT(records, ::testing::Not(IsEmpty()));

  UsageQuery q;
  q.from = std::chrono::floor<std::chrono::days>(start) - std::chrono::days(1);
  q.to = std::chrono::floor<std::chrono::days>(end) + std::chrono::days(1);
  q.period = ReportPeriod::kDay;
  q.group_by = {ReportDimension::kTenant,     ReportDimension::kProject,
                ReportDimension::kCluster,    ReportDimension::kGpuModel,
                ReportDimension::kMigProfile, ReportDimension::kWorkloadClass,
                ReportDimension::kCapacity};
  ASSERT_OK_AND_ASSIGN(std::vector<UsageLine> lines, metering().ReportUsage(q));
  EXPECT_EQ(lines, SumUsage(q, records));
  int64_t gpu_us = 0;
  int64_t cost = 0;
  for (const UsageLine& line : lines) {
    EXPECT_EQ(line.keys[0], "acme");
    EXPECT_EQ(line.keys[2], "m1");
    EXPECT_EQ(line.keys[3], "H100-80GB");
    EXPECT_EQ(line.keys[6], "on-demand");
    EXPECT_EQ(line.unpriced_gpu_microseconds, 0);
    gpu_us += line.gpu_microseconds;
    cost += line.cost_micros;
  }
  EXPECT_EQ(gpu_us, 2 * std::chrono::duration_cast<microseconds>(end - start).count());
  EXPECT_EQ(cost, 2 * CostMicros(3'600'000, Fraction{1, 1},
                                 std::chrono::duration_cast<microseconds>(end - start)));
  EXPECT_THAT(metering().ReportUsage(q), IsOkAndHolds(lines));  // the same, every time

  UsageQuery whole = q;
  whole.period = ReportPeriod::kWhole;
  whole.group_by = {};
  ASSERT_OK_AND_ASSIGN(std::vector<UsageLine> one, metering().ReportUsage(whole));
  ASSERT_THAT(one, SizeIs(1));
  EXPECT_EQ(one[0].period_start, whole.from);
  EXPECT_EQ(one[0].gpu_microseconds, gpu_us);

  UsageQuery other = q;
  other.tenant = "globex";
  EXPECT_THAT(metering().ReportUsage(other), IsOkAndHolds(IsEmpty()));
  UsageQuery bad = q;
  bad.from += std::chrono::hours(1);
  EXPECT_THAT(metering().ReportUsage(bad), StatusIs(Code::kInvalidArgument));
}

TEST_P(MeteringContractTest, HeldCostsSumTheWindowsRecordsAtTheGpuLinePerTenantAndType) {
  const auto [id, start, end] = RunOnce();
  const std::vector<UsageRecord> records = Usage();
  ASSERT_THAT(records, SizeIs(2));
  const Timestamp day = std::chrono::floor<std::chrono::days>(start);
  ASSERT_OK_AND_ASSIGN(std::vector<HeldCost> held,
                       metering().ReportHeldCosts(day, day + std::chrono::days(2), ""));
  EXPECT_EQ(held, SumHeldCosts(records));
  ASSERT_THAT(held, SizeIs(1));
  EXPECT_EQ(held[0].cluster, "m1");
  EXPECT_EQ(held[0].tenant, "acme");
  EXPECT_EQ(held[0].gpu_model, "H100-80GB");
  EXPECT_EQ(held[0].gpu_line_micros, records[0].cost_micros + records[1].cost_micros);
  EXPECT_EQ(held[0].billed_micros, held[0].gpu_line_micros);
  // Records keep what they cost at the GPU's line.
  EXPECT_EQ(records[0].gpu_line_cost_micros, records[0].cost_micros);

  EXPECT_THAT(metering().ReportHeldCosts(day, day + std::chrono::days(2), "elsewhere"),
              IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(
      metering().ReportHeldCosts(day + std::chrono::days(1), day + std::chrono::days(2), ""),
      IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(metering().ReportHeldCosts(day + std::chrono::hours(1), day, ""),
              StatusIs(Code::kInvalidArgument));
}

TEST_P(MeteringContractTest, GuaranteesAreAddedPerDayAndReportedByPeriodAndQuota) {
  const Timestamp day = std::chrono::floor<std::chrono::days>(backend_->Now());
  auto use = [&](Timestamp d, const std::string& tenant, const std::string& project,
                 int64_t reserved, int64_t idle) {
    GuaranteeUse u;
    u.day = d;
    u.key = QuotaKey{tenant, project, "H100-80GB"};
    u.reserved_unit_us = reserved;
    u.idle_unit_us = idle;
    return u;
  };
  const std::vector<GuaranteeUse> first = {
      use(day, "acme", "", 100, 40), use(day, "acme", "research", 50, 50),
      use(day + std::chrono::days(1), "acme", "", 10, 0), use(day, "globex", "", 7, 7)};
  ASSERT_OK(metering().RecordGuarantees(first));
  ASSERT_OK(metering().RecordGuarantees({use(day, "acme", "", 100, 60)}));  // adds up

  UsageQuery q;
  q.from = day;
  q.to = day + std::chrono::days(2);
  q.period = ReportPeriod::kDay;
  ASSERT_OK_AND_ASSIGN(std::vector<GuaranteeLine> lines, metering().ReportGuarantees(q));
  std::vector<GuaranteeUse> all = first;
  all.push_back(use(day, "acme", "", 100, 60));
  EXPECT_EQ(lines, SumGuarantees(q, all));
  ASSERT_THAT(lines, SizeIs(4));
  EXPECT_EQ(lines[0].key, (QuotaKey{"acme", "", "H100-80GB"}));
  EXPECT_EQ(lines[0].reserved_unit_us, 200);
  EXPECT_EQ(lines[0].idle_unit_us, 100);
  EXPECT_EQ(lines[1].key.project, "research");
  EXPECT_EQ(lines[2].key.tenant, "globex");
  EXPECT_EQ(lines[3].period_start, day + std::chrono::days(1));

  // Filters: a tenant, a project; a cluster matches nothing (guarantees are pool-wide).
  UsageQuery whole = q;
  whole.period = ReportPeriod::kWhole;
  whole.tenant = "acme";
  ASSERT_OK_AND_ASSIGN(lines, metering().ReportGuarantees(whole));
  ASSERT_THAT(lines, SizeIs(2));
  EXPECT_EQ(lines[0].reserved_unit_us, 210);
  EXPECT_EQ(lines[0].period_start, day);
  whole.project = "research";
  ASSERT_OK_AND_ASSIGN(lines, metering().ReportGuarantees(whole));
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].idle_unit_us, 50);
  UsageQuery on_cluster = q;
  on_cluster.cluster = "m1";
  EXPECT_THAT(metering().ReportGuarantees(on_cluster), IsOkAndHolds(IsEmpty()));

  // Bad figures change nothing.
  EXPECT_THAT(
      metering().RecordGuarantees({use(day, "acme", "", 100, 1), use(day, "acme", "", 1, 2)}),
      StatusIs(Code::kInvalidArgument));
  EXPECT_THAT(metering().RecordGuarantees({use(day + std::chrono::hours(1), "acme", "", 1, 1)}),
              StatusIs(Code::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(lines, metering().ReportGuarantees(q));
  EXPECT_EQ(lines[0].reserved_unit_us, 200);
}

TEST_P(MeteringContractTest, TelemetryIsAttributedCountedOnceReportedAndPrunedWithoutLosingSums) {
  // A run that has ended: telemetry of its last minute comes after its end.
  const auto [id, start, end] = RunOnce();
  const Timestamp minute = std::chrono::floor<std::chrono::minutes>(start);
  const int64_t measured = std::chrono::duration_cast<microseconds>(
                               std::min(end, minute + std::chrono::minutes(1)) - start)
                               .count();

  auto minute_of = [&](WorkloadId w, const std::string& gpu) {
    TelemetryMinute m;
    m.gpu_uuid = gpu;
    m.minute = minute;
    m.covered_seconds = 60;
    m.workload = w;
    m.attempt = 1;
    m.metrics.power_watts = 500;
    return m;
  };
  TelemetryMinute sm = minute_of(id, "GPU-m1-node-01-0");
  sm.metrics.sm_active = 0.5;
  sm.metrics.gpu_util = 100;
  TelemetryMinute engine = minute_of(id, "GPU-m1-node-01-1");
  engine.metrics.gr_engine_active = 0.25;
  TelemetryMinute not_held = minute_of(id, "GPU-m1-node-01-7");
  not_held.metrics.sm_active = 1;
  TelemetryMinute unknown = minute_of(id + 1000, "GPU-m1-node-01-0");
  unknown.metrics.sm_active = 1;
  TelemetryMinute old_attempt = sm;
  old_attempt.attempt = 2;
  old_attempt.gpu_uuid = "GPU-m1-node-01-1";

  EXPECT_THAT(metering().RecordTelemetry("m1", {sm, engine, not_held, unknown, old_attempt}),
              IsOkAndHolds(2));
  // A repeat counts nothing; nor does another cluster's agent naming this run.
  EXPECT_THAT(metering().RecordTelemetry("m1", {sm, engine}), IsOkAndHolds(0));
  EXPECT_THAT(metering().RecordTelemetry("elsewhere", {sm}), IsOkAndHolds(0));

  ASSERT_OK_AND_ASSIGN(std::vector<TelemetryRow> rows,
                       metering().ListTelemetry(id, minute, minute + std::chrono::minutes(1), 100));
  ASSERT_THAT(rows, SizeIs(2));
  EXPECT_EQ(rows[0].cluster, "m1");
  EXPECT_EQ(rows[0].minute, sm);
  EXPECT_EQ(rows[0].tenant, "acme");
  EXPECT_EQ(rows[0].activity, (Activity{0.5, ActivitySource::kSmActive}));
  EXPECT_EQ(rows[0].measured_gpu_us, measured);
  EXPECT_EQ(rows[0].effective_gpu_us, std::llround(static_cast<double>(measured) * 0.5));
  EXPECT_EQ(rows[1].minute, engine);
  EXPECT_EQ(rows[1].activity, (Activity{0.25, ActivitySource::kEngineActive}));
  EXPECT_EQ(rows[1].effective_gpu_us, std::llround(static_cast<double>(measured) * 0.25));
  EXPECT_THAT(metering().ListTelemetry(id, minute, minute, 100), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(metering().ListTelemetry(id, minute, minute + std::chrono::minutes(1), 0),
              StatusIs(Code::kInvalidArgument));

  UsageQuery q;
  q.from = std::chrono::floor<std::chrono::days>(start) - std::chrono::days(1);
  q.to = std::chrono::floor<std::chrono::days>(start) + std::chrono::days(2);
  q.group_by = {ReportDimension::kTenant, ReportDimension::kGpuModel,
                ReportDimension::kWorkloadClass, ReportDimension::kCapacity};
  ASSERT_OK_AND_ASSIGN(std::vector<UsageLine> lines, metering().ReportUsage(q));
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].keys,
            (std::vector<std::string>{"acme", "H100-80GB", "training", "on-demand"}));
  EXPECT_EQ(lines[0].measured_gpu_microseconds, 2 * measured);
  EXPECT_EQ(lines[0].effective_gpu_microseconds,
            rows[0].effective_gpu_us + rows[1].effective_gpu_us);
  EXPECT_EQ(lines[0].coarse_gpu_microseconds, 0);

  // Pruning drops the minutes, not what they measured.
  EXPECT_THAT(metering().PruneTelemetry(minute + std::chrono::minutes(1), 1), IsOkAndHolds(1));
  EXPECT_THAT(metering().PruneTelemetry(minute + std::chrono::minutes(1), 100), IsOkAndHolds(1));
  EXPECT_THAT(metering().PruneTelemetry(minute + std::chrono::minutes(1), 100), IsOkAndHolds(0));
  EXPECT_THAT(metering().ListTelemetry(id, minute, minute + std::chrono::minutes(1), 100),
              IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(metering().ReportUsage(q), IsOkAndHolds(lines));
}

INSTANTIATE_TEST_SUITE_P(Stores, MeteringContractTest,
                         ::testing::Values(Kind::kMemory, Kind::kPostgres),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return KindName(info.param);
                         });

}  // namespace
}  // namespace gpufed
