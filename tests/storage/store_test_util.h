#ifndef GPUFED_TESTS_STORAGE_STORE_TEST_UTIL_H_
#define GPUFED_TESTS_STORAGE_STORE_TEST_UTIL_H_

// Shared by the PgStore tests: a fixture with a fresh migrated database and a store on it,
// plus small builders. Direct SQL (Scalar) is for checking what is really in the tables.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "federation/types.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/pg_store.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/replicas.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {

class StoreTest : public gpufed::testing::PostgresTest {
 protected:
  void SetUp() override {
    PostgresTest::SetUp();
    if (HasFatalFailure()) return;
    auto store = PgStore::Create(dsn());
    ASSERT_OK(store);
    store_ = *std::move(store);
  }
  void TearDown() override {
    store_.reset();
    PostgresTest::TearDown();
  }

  // Runs a query returning one value, on a separate connection.
  int64_t Scalar(const std::string& sql) {
    pqxx::connection conn(dsn());
    pqxx::nontransaction txn(conn);
    return txn.exec1(sql)[0].as<int64_t>();
  }
  void Exec(const std::string& sql) {
    pqxx::connection conn(dsn());
    pqxx::nontransaction txn(conn);
    txn.exec(sql);
  }

  void AddTenant(const std::string& tenant, const std::string& project) {
    auto t = store_->CreateTenant(Tenant{tenant, tenant + " inc", {}});
    if (!t.ok()) {
      ASSERT_THAT(t, testing::StatusIs(absl::StatusCode::kAlreadyExists));
    }
    auto p = store_->CreateProject(Project{tenant, project, {}});
    ASSERT_OK(p);
  }

  // ---- Builders (public: other tests use them too) ----
 public:
  static WorkloadSpec Spec(const std::string& name, const std::string& tenant = "acme",
                           const std::string& project = "research") {
    WorkloadSpec spec;
    spec.tenant = tenant;
    spec.project = project;
    spec.name = name;
    spec.workload_class = WorkloadClass::kTraining;
    spec.replicas = 2;
    spec.gpus_per_replica = 4;
    spec.gpu_models = {"H100-80GB"};
    spec.topology = Topology::kSameNode;
    spec.estimated_duration_ms = 20000;
    spec.run.image = "registry/llm:1";
    spec.run.command = {"python", "train.py"};
    spec.run.env = {{"EPOCHS", "3"}};
    return spec;
  }

 protected:
  // Submits and returns the new workload (fails the test otherwise).
  Workload MustSubmit(const WorkloadSpec& spec) {
    auto r = store_->Submit(spec);
    EXPECT_OK(r);
    return r.ok() ? r->workload : Workload{};
  }

 public:
  static Assignment AssignmentOn(const std::string& cluster, uint64_t epoch = 1) {
    Assignment a;
    a.cluster = cluster;
    a.epoch = epoch;
    a.replicas = {testing::ReplicaOn("node-01", {"GPU-a", "GPU-b"}, {0, 1}),
                  testing::ReplicaOn("node-02", {"GPU-c", "GPU-d"}, {2, 3})};
    return a;
  }

  static Transition Step(WorkloadId id, WorkloadState from, WorkloadState to) {
    Transition t;
    t.id = id;
    t.from = from;
    t.to = to;
    t.actor = "test";
    t.reason = "because";
    if (to == WorkloadState::kPlaced) t.assignment = AssignmentOn("c1");
    return t;
  }

 protected:
  // Moves a fresh workload along the happy path up to `target`.
  void Advance(WorkloadId id, WorkloadState target);

  std::unique_ptr<PgStore> store_;
};

inline void StoreTest::Advance(WorkloadId id, WorkloadState target) {
  using S = WorkloadState;
  const S path[] = {S::kAdmitted, S::kPlaced, S::kRunning};
  S at = S::kPending;
  for (S next : path) {
    if (at == target) return;
    auto r = store_->ApplyTransitions({Step(id, at, next)});
    ASSERT_OK(r);
    ASSERT_TRUE((*r)[0].applied);
    at = next;
  }
  if (at == target) return;
  // Off the happy path: SUCCEEDED, FAILED, CANCELLED, LOST, PREEMPTED from RUNNING.
  auto r = store_->ApplyTransitions({Step(id, at, target)});
  ASSERT_OK(r);
  ASSERT_TRUE((*r)[0].applied);
}

}  // namespace gpufed::storage

#endif  // GPUFED_TESTS_STORAGE_STORE_TEST_UTIL_H_
