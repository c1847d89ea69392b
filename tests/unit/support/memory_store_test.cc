// tests/support/memory_store.h on its own: its clock, and the scheduler running on it with
// nothing else (no PostgreSQL, no gRPC). Its behaviour as a store is the contract suite's job
// (tests/storage/store_contract_test.cc, which runs the same tests against PgStore).

#include "tests/support/memory_store.h"

#include <chrono>
#include <set>
#include <string>

#include "federation/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed::testing {
namespace {

using std::chrono::microseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

void AddTenant(MemoryStore& store) {
  ASSERT_OK(store.CreateTenant(Tenant{"acme", "", {}}));
  ASSERT_OK(store.CreateProject(Project{"acme", "research", {}}));
}

TEST(MemoryStoreTest, TimesComeFromTheInjectedClockToTheMicrosecond) {
  FakeClock clock;
  const Timestamp start = clock.Now();
  clock.Advance(std::chrono::nanoseconds(1500));
  MemoryStore store(&clock);
  AddTenant(store);
  ASSERT_OK_AND_ASSIGN(SubmitResult submitted, store.Submit(Gpus("a", 1)));
  EXPECT_EQ(submitted.workload.create_time, start + microseconds(1));

  clock.Advance(seconds(10));
  Transition admit;
  admit.id = submitted.workload.id;
  admit.from = WorkloadState::kPending;
  admit.to = WorkloadState::kAdmitted;
  ASSERT_OK_AND_ASSIGN(std::vector<TransitionResult> r, store.ApplyTransitions({admit}));
  ASSERT_TRUE(r[0].applied);
  EXPECT_EQ(r[0].current->update_time, start + seconds(10) + microseconds(1));
  EXPECT_EQ(r[0].event->time, r[0].current->update_time);
  ASSERT_EQ(store.Events(submitted.workload.id).size(), 2u);
  EXPECT_EQ(store.Events(submitted.workload.id)[1].time, r[0].event->time);
}

TEST(MemoryStoreTest, DefaultClockStandsStillUntilMoved) {
  MemoryStore store;
  const Timestamp start = store.clock().Now();
  ASSERT_OK_AND_ASSIGN(Tenant a, store.CreateTenant(Tenant{"a", "", {}}));
  ASSERT_OK_AND_ASSIGN(Tenant b, store.CreateTenant(Tenant{"b", "", {}}));
  EXPECT_EQ(a.create_time, start);
  EXPECT_EQ(b.create_time, start);
  store.clock().Advance(seconds(3));
  ASSERT_OK_AND_ASSIGN(Tenant c, store.CreateTenant(Tenant{"c", "", {}}));
  EXPECT_EQ(c.create_time, start + seconds(3));
  store.clock().Advance(seconds(2));
  ClusterInfo info;
  info.name = "c1";
  ASSERT_OK_AND_ASSIGN(Cluster cluster, store.RegisterCluster(info, {}));
  EXPECT_EQ(cluster.last_heartbeat, start + seconds(5));
}

// The scheduler needs nothing but the ports: one 8-GPU node, two 4-GPU workloads placed, an
// 8-GPU one waiting with its reason stored.
TEST(MemoryStoreTest, RunsTheScheduler) {
  MemoryStore store;
  AddTenant(store);
  ClusterInfo info;
  info.name = "dgx";
  ASSERT_OK(store.RegisterCluster(info, {DgxNode()}));
  ASSERT_OK_AND_ASSIGN(SubmitResult a, store.Submit(Gpus("a", 4)));
  ASSERT_OK_AND_ASSIGN(SubmitResult b, store.Submit(Gpus("b", 4)));
  ASSERT_OK_AND_ASSIGN(SubmitResult c, store.Submit(Gpus("c", 8)));

  Scheduler scheduler(&store, &store);
  ASSERT_OK(scheduler.Rebuild());
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler.RunCycle());
  ASSERT_EQ(cycle.placed.size(), 2u);
  std::set<std::string> gpus;
  for (const Workload& w : cycle.placed) {
    for (const auto& r : w.assignment.replicas) gpus.insert(r.gpu_uuids.begin(), r.gpu_uuids.end());
  }
  EXPECT_EQ(gpus.size(), 8u);
  ASSERT_OK_AND_ASSIGN(Workload placed, store.Get(a.workload.id));
  EXPECT_EQ(placed.state, WorkloadState::kPlaced);
  EXPECT_EQ(placed.assignment.cluster, "dgx");
  ASSERT_OK_AND_ASSIGN(Workload waiting, store.Get(c.workload.id));
  EXPECT_EQ(waiting.state, WorkloadState::kAdmitted);  // waiting for capacity
  EXPECT_EQ(waiting.pending_reason.code, ReasonCode::kNothingFree);
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> active, store.ListActive("dgx"));
  EXPECT_EQ(active.size(), 2u);
}

}  // namespace
}  // namespace gpufed::testing
