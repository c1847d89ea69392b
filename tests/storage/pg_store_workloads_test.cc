// PgStore as a WorkloadStore, against a real PostgreSQL.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/replicas.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;

using ::testing::HasSubstr;
using S = WorkloadState;

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

class WorkloadStoreTest : public StoreTest {
 protected:
  void SetUp() override {
    StoreTest::SetUp();
    if (HasFatalFailure()) return;
    AddTenant("acme", "research");
    AddTenant("acme", "prod");
    AddTenant("globex", "research");
  }
};

// ---- Submit ----------------------------------------------------------------------------------

TEST_F(WorkloadStoreTest, SubmitStoresPendingWorkloadAndItsEvent) {
  WorkloadSpec spec = Spec("train");
  spec.priority = 7;
  spec.min_gpu_memory_mib = 40000;
  spec.run.sim_outcome = SimOutcome::kFail;
  spec.run.sim_exit_code = 3;
  const auto before = std::chrono::system_clock::now();
  auto submitted = store_->Submit(spec);
  ASSERT_OK(submitted);
  EXPECT_TRUE(submitted->created);
  const Workload& w = submitted->workload;
  EXPECT_GT(w.id, 0);
  EXPECT_EQ(w.state, S::kPending);
  EXPECT_EQ(w.version, 1u);
  EXPECT_EQ(w.spec, spec);
  EXPECT_GE(w.create_time, before - std::chrono::seconds(5));
  EXPECT_LE(w.create_time, std::chrono::system_clock::now() + std::chrono::seconds(5));

  auto got = store_->Get(w.id);
  ASSERT_OK(got);
  EXPECT_EQ(got->spec, spec);
  EXPECT_EQ(got->state, S::kPending);
  EXPECT_EQ(got->create_time, w.create_time);
  EXPECT_EQ(got->version, 1u);
  EXPECT_FALSE(got->start_time.has_value());
  EXPECT_TRUE(got->assignment.empty());

  EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events WHERE workload_id = " +
                   std::to_string(w.id) + " AND to_state = 'PENDING' AND from_state IS NULL"),
            1);
}

TEST_F(WorkloadStoreTest, GetUnknownIsNotFound) {
  EXPECT_THAT(store_->Get(424242), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->Get(0), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(WorkloadStoreTest, SubmitToUnknownTenantOrProjectIsNotFoundAndStoresNothing) {
  auto no_tenant = store_->Submit(Spec("x", "initech", "research"));
  EXPECT_THAT(no_tenant, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(no_tenant.status().message()), HasSubstr("spec.tenant"));

  auto no_project = store_->Submit(Spec("x", "acme", "nope"));
  EXPECT_THAT(no_project, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(no_project.status().message()), HasSubstr("spec.project"));

  EXPECT_EQ(Scalar("SELECT count(*) FROM workloads"), 0);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events"), 0);
}

TEST_F(WorkloadStoreTest, SubmitWithoutNameIsInvalidAndStoresNothing) {
  auto r = store_->Submit(Spec(""));
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("spec.name"));
  WorkloadSpec no_tenant = Spec("x");
  no_tenant.tenant.clear();
  EXPECT_THAT(std::string(store_->Submit(no_tenant).status().message()), HasSubstr("spec.tenant"));
  EXPECT_EQ(Scalar("SELECT count(*) FROM workloads"), 0);
}

TEST_F(WorkloadStoreTest, SameKeySameSpecReturnsTheEarlierWorkload) {
  WorkloadSpec spec = Spec("train");
  spec.idempotency_key = "train-2026-11-21";
  auto first = store_->Submit(spec);
  ASSERT_OK(first);
  auto again = store_->Submit(spec);
  ASSERT_OK(again);
  EXPECT_TRUE(first->created);
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->workload.id, first->workload.id);
  EXPECT_EQ(again->workload.spec, spec);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workloads"), 1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events"), 1);
}

TEST_F(WorkloadStoreTest, SameKeyDifferentSpecIsAlreadyExists) {
  WorkloadSpec spec = Spec("train");
  spec.idempotency_key = "k1";
  ASSERT_OK(store_->Submit(spec));
  WorkloadSpec other = spec;
  other.replicas = 3;
  auto r = store_->Submit(other);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("spec.idempotency_key"));
  EXPECT_EQ(Scalar("SELECT count(*) FROM workloads"), 1);
}

TEST_F(WorkloadStoreTest, IdempotencyKeysArePerTenant) {
  WorkloadSpec a = Spec("train", "acme");
  a.idempotency_key = "shared";
  WorkloadSpec b = Spec("train", "globex");
  b.idempotency_key = "shared";
  auto ra = store_->Submit(a);
  auto rb = store_->Submit(b);
  ASSERT_OK(ra);
  ASSERT_OK(rb);
  EXPECT_TRUE(ra->created);
  EXPECT_TRUE(rb->created);
  EXPECT_NE(ra->workload.id, rb->workload.id);
}

TEST_F(WorkloadStoreTest, ConcurrentDuplicatesMakeOneWorkload) {
  WorkloadSpec spec = Spec("train");
  spec.idempotency_key = "retry-storm";
  constexpr int kThreads = 16;
  std::vector<absl::StatusOr<SubmitResult>> results(kThreads, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = store_->Submit(spec); });
  }
  for (auto& t : threads) t.join();
  int created = 0;
  std::set<WorkloadId> ids;
  for (const auto& r : results) {
    ASSERT_OK(r);
    created += r->created ? 1 : 0;
    ids.insert(r->workload.id);
  }
  EXPECT_EQ(created, 1);
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workloads"), 1);
}

TEST_F(WorkloadStoreTest, ConcurrentDuplicatesWithDifferentSpecsKeepOne) {
  constexpr int kThreads = 12;
  std::vector<absl::StatusOr<SubmitResult>> results(kThreads, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      WorkloadSpec spec = Spec("train");
      spec.idempotency_key = "contested";
      spec.priority = i % 2;  // two different specs
      results[i] = store_->Submit(spec);
    });
  }
  for (auto& t : threads) t.join();
  auto stored = store_->List(Filter("acme"));
  ASSERT_OK(stored);
  ASSERT_EQ(stored->workloads.size(), 1u);
  const int winner_priority = stored->workloads[0].spec.priority;
  int created = 0;
  for (int i = 0; i < kThreads; ++i) {
    if (i % 2 == winner_priority) {
      ASSERT_OK(results[i]);
      created += results[i]->created ? 1 : 0;
    } else {
      EXPECT_THAT(results[i], StatusIs(absl::StatusCode::kAlreadyExists));
    }
  }
  EXPECT_EQ(created, 1);
}

// Holds the committer inside a transaction (by locking a table it writes) so that the next
// submits provably queue up and land in one group; then checks that one bad row in that group
// fails only itself.
TEST_F(WorkloadStoreTest, BadRowsInAGroupFailOnlyThemselves) {
  // One committer, so that the group boundaries below are exact.
  store_.reset();
  PgStoreOptions options;
  options.committers = 1;
  auto store = PgStore::Create(dsn(), options);
  ASSERT_OK(store);
  store_ = *std::move(store);

  pqxx::connection blocker(dsn());
  pqxx::work lock(blocker);
  lock.exec("LOCK TABLE workload_events IN EXCLUSIVE MODE");

  std::thread first([&] { EXPECT_OK(store_->Submit(Spec("first"))); });
  // Wait until the committer is stuck on the lock with the first submit.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (Scalar("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = "
                "'workload_events'::regclass") == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  struct Case {
    WorkloadSpec spec;
    absl::StatusCode want;
  };
  std::vector<Case> cases;
  cases.reserve(6);
  for (int i = 0; i < 6; ++i)
    cases.push_back({Spec("good-" + std::to_string(i)), absl::StatusCode::kOk});
  cases.push_back({Spec("bad-project", "acme", "nope"), absl::StatusCode::kNotFound});
  cases.push_back({Spec("bad-tenant", "initech", "x"), absl::StatusCode::kNotFound});
  WorkloadSpec keyed = Spec("keyed");
  keyed.idempotency_key = "dup";
  WorkloadSpec keyed_other = keyed;
  keyed_other.priority = 99;
  cases.push_back({keyed, absl::StatusCode::kOk});
  cases.push_back({keyed, absl::StatusCode::kOk});
  cases.push_back({keyed_other, absl::StatusCode::kAlreadyExists});

  std::vector<absl::StatusOr<SubmitResult>> results(cases.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  const int64_t groups_before = store_->GetStats().submit_groups;
  auto wait_queued = [&](size_t n) {
    while (store_->GetStats().queued < static_cast<int64_t>(n)) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  };
  // The last two keyed submits are queued one at a time so their order is known.
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i >= 9) wait_queued(i);
    threads.emplace_back([&, i] { results[i] = store_->Submit(cases[i].spec); });
  }
  wait_queued(cases.size());
  lock.commit();
  first.join();
  for (auto& t : threads) t.join();

  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(results[i].status().code(), cases[i].want)
        << cases[i].spec.name << ": " << results[i].status();
  }
  // The first submit's group, then exactly one group for all the rest.
  EXPECT_EQ(store_->GetStats().submit_groups - groups_before, 2);
  ASSERT_OK(results[8]);
  ASSERT_OK(results[9]);
  EXPECT_NE(results[8]->created, results[9]->created);
  EXPECT_EQ(results[8]->workload.id, results[9]->workload.id);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workloads"), 1 + 6 + 1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events"), 1 + 6 + 1);
}

// Many concurrent submitters: every acknowledged submit is stored, once, with its event; and
// they were committed in far fewer transactions than submits.
TEST_F(WorkloadStoreTest, ConcurrentSubmittersAreDurableDistinctAndGroupCommitted) {
  const std::string dbname = pqxx::connection(dsn()).dbname();
  pqxx::connection admin(postgres().AdminDsn());
  auto commits = [&] {
    pqxx::nontransaction txn(admin);
    txn.exec("SELECT pg_stat_clear_snapshot()");
    return txn.exec1("SELECT xact_commit FROM pg_stat_database WHERE datname = '" + dbname + "'")[0]
        .as<int64_t>();
  };
  // Backends publish their statistics when they exit: close every session first.
  auto settle = [&] {
    store_.reset();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (true) {
      pqxx::nontransaction txn(admin);
      if (txn.exec1("SELECT count(*) FROM pg_stat_activity WHERE datname = '" + dbname + "'")[0]
              .as<int64_t>() == 0) {
        break;
      }
      ASSERT_LT(std::chrono::steady_clock::now(), deadline);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  settle();
  const int64_t commits_before = commits();
  auto store = PgStore::Create(dsn());
  ASSERT_OK(store);
  store_ = *std::move(store);

  constexpr int kThreads = 8;
  constexpr int kPerThread = 250;
  std::vector<std::vector<WorkloadId>> ids(kThreads);
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        WorkloadSpec spec = Spec("w-" + std::to_string(t) + "-" + std::to_string(i));
        if (i % 3 == 0) spec.idempotency_key = "key-" + std::to_string(t) + "-" + std::to_string(i);
        auto r = store_->Submit(spec);
        if (!r.ok() || !r->created) {
          ++failures;
          continue;
        }
        ids[t].push_back(r->workload.id);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  const PgStore::Stats stats = store_->GetStats();
  settle();
  const int64_t commit_count = commits() - commits_before;

  std::set<WorkloadId> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  constexpr int kTotal = kThreads * kPerThread;
  EXPECT_EQ(all.size(), static_cast<size_t>(kTotal));
  EXPECT_EQ(Scalar("SELECT count(*) FROM workloads"), kTotal);
  EXPECT_EQ(Scalar("SELECT count(DISTINCT workload_id) FROM workload_events"), kTotal);
  std::cout << "[ group commit ] " << kTotal << " submits in " << stats.submit_groups
            << " groups (largest " << stats.largest_group << "); the database counted "
            << commit_count << " commits\n";
  EXPECT_EQ(stats.submits, kTotal);
  EXPECT_LT(stats.submit_groups, kTotal / 2);
  EXPECT_LT(commit_count, kTotal / 2);
}

// ---- List ------------------------------------------------------------------------------------

TEST_F(WorkloadStoreTest, ListIsNewestFirstWithFiltersAndKeysetPages) {
  std::vector<WorkloadId> research, prod, globex;
  for (int i = 0; i < 12; ++i) research.push_back(MustSubmit(Spec("r" + std::to_string(i))).id);
  for (int i = 0; i < 5; ++i) {
    prod.push_back(MustSubmit(Spec("p" + std::to_string(i), "acme", "prod")).id);
  }
  for (int i = 0; i < 3; ++i) {
    globex.push_back(MustSubmit(Spec("g" + std::to_string(i), "globex", "research")).id);
  }
  Advance(research[0], S::kRunning);  // on c1
  Advance(research[1], S::kSucceeded);
  Advance(prod[0], S::kPlaced);

  // Pages of 5 over everything: newest first, no overlap, nothing missed.
  std::vector<WorkloadId> seen;
  ListFilter filter;
  filter.page_size = 5;
  int pages = 0;
  do {
    auto page = store_->List(filter);
    ASSERT_OK(page);
    ++pages;
    ASSERT_LE(page->workloads.size(), 5u);
    for (const Workload& w : page->workloads) seen.push_back(w.id);
    filter.before_id = page->next_before_id;
  } while (filter.before_id != 0);
  EXPECT_EQ(pages, 4);
  EXPECT_EQ(seen.size(), 20u);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end(), std::greater<>()));
  EXPECT_EQ(std::set<WorkloadId>(seen.begin(), seen.end()).size(), 20u);

  auto ids_of = [&](const ListFilter& f) {
    std::vector<WorkloadId> out;
    auto page = store_->List(f);
    EXPECT_OK(page);
    if (page.ok()) {
      for (const Workload& w : page->workloads) out.push_back(w.id);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  std::vector<WorkloadId> acme = research;
  acme.insert(acme.end(), prod.begin(), prod.end());
  std::sort(acme.begin(), acme.end());
  EXPECT_EQ(ids_of(Filter("acme")), acme);
  EXPECT_EQ(ids_of(Filter("acme", "prod")), prod);
  EXPECT_EQ(ids_of(Filter("globex")), globex);
  EXPECT_EQ(ids_of(Filter("", "", {S::kRunning, S::kPlaced})),
            (std::vector<WorkloadId>{research[0], prod[0]}));
  EXPECT_EQ(ids_of(Filter("acme", "", {S::kSucceeded})), (std::vector<WorkloadId>{research[1]}));
  EXPECT_EQ(ids_of(Filter("", "", {}, "c1")),
            (std::vector<WorkloadId>{research[0], research[1], prod[0]}));
  EXPECT_EQ(ids_of(Filter("acme", "prod", {S::kPlaced}, "c1")), (std::vector<WorkloadId>{prod[0]}));
  EXPECT_TRUE(ids_of(Filter("nobody")).empty());

  // A last page that is exactly full says so.
  auto exact = store_->List(Filter("globex", "", {}, "", 3));
  ASSERT_OK(exact);
  EXPECT_EQ(exact->workloads.size(), 3u);
  EXPECT_EQ(exact->next_before_id, 0);

  EXPECT_THAT(store_->List(Filter("", "", {}, "", -1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  auto defaulted = store_->List(Filter("", "", {}, "", 0));
  ASSERT_OK(defaulted);
  EXPECT_EQ(defaulted->workloads.size(), 20u);
}

TEST_F(WorkloadStoreTest, ListPendingIsInSchedulingOrder) {
  auto submit = [&](const std::string& name, int priority) {
    WorkloadSpec spec = Spec(name);
    spec.priority = priority;
    return MustSubmit(spec).id;
  };
  WorkloadId low = submit("low", 1);
  WorkloadId high1 = submit("high1", 10);
  WorkloadId mid = submit("mid", 5);
  WorkloadId high2 = submit("high2", 10);
  WorkloadId running = submit("running", 100);
  Advance(running, S::kRunning);

  auto pending = store_->ListPending(10);
  ASSERT_OK(pending);
  std::vector<WorkloadId> order;
  for (const Workload& w : *pending) order.push_back(w.id);
  EXPECT_EQ(order, (std::vector<WorkloadId>{high1, high2, mid, low}));

  auto two = store_->ListPending(2);
  ASSERT_OK(two);
  EXPECT_EQ(two->size(), 2u);
  EXPECT_THAT(store_->ListPending(0), StatusIs(absl::StatusCode::kInvalidArgument));
}

// ---- Transitions ---------------------------------------------------------------------------

TEST_F(WorkloadStoreTest, LifecycleSetsAssignmentTimesAndEvents) {
  const WorkloadId id = MustSubmit(Spec("train")).id;
  ASSERT_OK(store_->SetPendingReasons({{id, PendingReason(ReasonCode::kNothingFree)}}));

  Transition place = Step(id, S::kPending, S::kPlaced);
  place.assignment = AssignmentOn("c1", 4);
  auto placed = store_->ApplyTransitions({place});
  ASSERT_OK(placed);
  ASSERT_EQ(placed->size(), 1u);
  const TransitionResult& p = (*placed)[0];
  ASSERT_TRUE(p.applied);
  ASSERT_TRUE(p.event.has_value());
  EXPECT_EQ(p.event->from, S::kPending);
  EXPECT_EQ(p.event->to, S::kPlaced);
  EXPECT_EQ(p.current->assignment, AssignmentOn("c1", 4));
  EXPECT_EQ(p.current->pending_reason, PendingReason());
  EXPECT_EQ(p.current->version, 3u);  // submit, pending reason, placement

  auto active = store_->ListActive("c1");
  ASSERT_OK(active);
  ASSERT_EQ(active->size(), 1u);
  EXPECT_EQ((*active)[0].id, id);
  EXPECT_TRUE(store_->ListActive("c2")->empty());
  EXPECT_EQ(store_->ListActive("")->size(), 1u);

  // Agent clock, with sub-millisecond digits: must come back to the microsecond.
  const Timestamp started =
      std::chrono::system_clock::time_point(std::chrono::microseconds(1795000000123456));
  Transition run = Step(id, S::kPlaced, S::kRunning);
  run.time = started;
  auto running = store_->ApplyTransitions({run});
  ASSERT_OK(running);
  ASSERT_TRUE((*running)[0].applied);
  EXPECT_EQ((*running)[0].current->start_time, started);
  EXPECT_EQ((*running)[0].event->time, started);

  Transition done = Step(id, S::kRunning, S::kFailed);
  done.exit_code = 3;
  done.message = "exit 3";
  done.time = started + std::chrono::milliseconds(1500);
  auto failed = store_->ApplyTransitions({done});
  ASSERT_OK(failed);
  ASSERT_TRUE((*failed)[0].applied);

  auto w = store_->Get(id);
  ASSERT_OK(w);
  EXPECT_EQ(w->state, S::kFailed);
  EXPECT_EQ(w->exit_code, 3);
  EXPECT_EQ(w->message, "exit 3");
  EXPECT_EQ(w->start_time, started);
  EXPECT_EQ(w->end_time, started + std::chrono::milliseconds(1500));
  EXPECT_EQ(w->assignment, AssignmentOn("c1", 4));  // where it ran stays on record
  EXPECT_EQ(w->version, 5u);
  EXPECT_TRUE(store_->ListActive("c1")->empty());

  EXPECT_EQ(
      Scalar("SELECT count(*) FROM workload_events WHERE workload_id = " + std::to_string(id)), 4);
  EXPECT_EQ(
      Scalar("SELECT count(*) FROM workload_events WHERE workload_id = " + std::to_string(id) +
             " AND from_state = 'RUNNING' AND to_state = 'FAILED' "
             "AND actor = 'test' AND reason = 'because'"),
      1);
  EXPECT_EQ(Scalar("SELECT cluster_epoch FROM workloads WHERE id = " + std::to_string(id)), 4);
}

// Specs and assignments with GPU shares, MIG instances and repartitions come back whole.
TEST_F(WorkloadStoreTest, SharingFieldsRoundTripThroughTheStore) {
  WorkloadSpec spec = Spec("mig");
  spec.gpus_per_replica = 1;
  spec.mig_profile = "3g.40gb";
  spec.gpu_models = {"H100-80GB"};
  spec.cpu_millis = 4000;
  spec.memory_mib = 32768;
  const Workload submitted = MustSubmit(spec);
  EXPECT_EQ(submitted.spec, spec);

  Transition place = Step(submitted.id, S::kPending, S::kPlaced);
  ReplicaAssignment r = testing::ReplicaOn("node-01", {"GPU-a"}, {0});
  r.mig_profile = "3g.40gb";
  r.mig_start = 0;
  place.assignment->replicas = {r};
  place.assignment->repartitions = {
      {"node-01", "GPU-a", true, {{"3g.40gb", 0}, {"3g.40gb", 4}}, "3g.40gb for workload"}};
  auto placed = store_->ApplyTransitions({place});
  ASSERT_OK(placed);
  ASSERT_TRUE((*placed)[0].applied);

  auto w = store_->Get(submitted.id);
  ASSERT_OK(w);
  EXPECT_EQ(w->spec, spec);
  EXPECT_EQ(w->assignment, *place.assignment);

  // The same key with the same spec is the same workload; with another share it is not.
  WorkloadSpec shared = Spec("share");
  shared.gpus_per_replica = 1;
  shared.gpu_milli = 300;
  shared.idempotency_key = "share-1";
  const Workload first = MustSubmit(shared);
  EXPECT_EQ(MustSubmit(shared).id, first.id);
  shared.gpu_milli = 400;
  EXPECT_THAT(store_->Submit(shared), StatusIs(absl::StatusCode::kAlreadyExists));
}

TEST_F(WorkloadStoreTest, StaleTransitionIsSkippedNotAppliedTwice) {
  const WorkloadId id = MustSubmit(Spec("train")).id;
  auto first = store_->ApplyTransitions({Step(id, S::kPending, S::kPlaced)});
  ASSERT_OK(first);
  ASSERT_TRUE((*first)[0].applied);

  Transition stale = Step(id, S::kPending, S::kPlaced);
  stale.assignment = AssignmentOn("c2");
  auto second = store_->ApplyTransitions({stale});
  ASSERT_OK(second);
  const TransitionResult& r = (*second)[0];
  EXPECT_FALSE(r.applied);
  EXPECT_FALSE(r.event.has_value());
  ASSERT_TRUE(r.current.has_value());
  EXPECT_EQ(r.current->state, S::kPlaced);
  EXPECT_EQ(r.current->assignment.cluster, "c1");
  EXPECT_EQ(r.current->version, 2u);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events WHERE to_state = 'PLACED'"), 1);

  auto unknown = store_->ApplyTransitions({Step(987654, S::kPending, S::kPlaced)});
  ASSERT_OK(unknown);
  EXPECT_FALSE((*unknown)[0].applied);
  EXPECT_FALSE((*unknown)[0].current.has_value());
}

TEST_F(WorkloadStoreTest, ConcurrentIdenticalTransitionsApplyOnce) {
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
      auto r = store_->ApplyTransitions({t});
      if (!r.ok()) {
        ++errors;
      } else if ((*r)[0].applied) {
        ++applied;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(applied.load(), 1);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events WHERE to_state = 'PLACED'"), 1);
}

TEST_F(WorkloadStoreTest, SeveralStepsOfOneWorkloadInOneBatchApplyInOrder) {
  const WorkloadId a = MustSubmit(Spec("a")).id;
  const WorkloadId b = MustSubmit(Spec("b")).id;
  auto r = store_->ApplyTransitions({
      Step(a, S::kPending, S::kPlaced),
      Step(b, S::kPending, S::kPlaced),
      Step(a, S::kPlaced, S::kRunning),
      Step(b, S::kPending, S::kPlaced),  // stale by then
      Step(a, S::kRunning, S::kSucceeded),
  });
  ASSERT_OK(r);
  std::vector<bool> applied;
  for (const TransitionResult& t : *r) applied.push_back(t.applied);
  EXPECT_EQ(applied, (std::vector<bool>{true, true, true, false, true}));
  EXPECT_EQ((*r)[2].current->state, S::kRunning);
  EXPECT_EQ((*r)[3].current->state, S::kPlaced);
  EXPECT_EQ(store_->Get(a)->state, S::kSucceeded);
  EXPECT_EQ(store_->Get(a)->version, 4u);
  EXPECT_EQ(store_->Get(b)->version, 2u);
}

TEST_F(WorkloadStoreTest, LargeBatchAppliesInOneCall) {
  std::vector<Transition> batch;
  batch.reserve(300);
  for (int i = 0; i < 300; ++i) {
    batch.push_back(Step(MustSubmit(Spec("w" + std::to_string(i))).id, S::kPending, S::kPlaced));
  }
  auto r = store_->ApplyTransitions(batch);
  ASSERT_OK(r);
  EXPECT_EQ(std::count_if(r->begin(), r->end(), [](const auto& t) { return t.applied; }), 300);
  EXPECT_EQ(store_->ListActive("c1")->size(), 300u);
}

TEST_F(WorkloadStoreTest, RequeuedWorkloadReturnsToPendingWithoutItsAssignment) {
  const WorkloadId id = MustSubmit(Spec("train")).id;
  Advance(id, S::kRunning);
  Transition requeue = Step(id, S::kRunning, S::kPending);
  requeue.message = "cluster c1 unreachable";
  requeue.reason = "requeued after cluster c1 was lost";
  auto r = store_->ApplyTransitions({requeue});
  ASSERT_OK(r);
  ASSERT_TRUE((*r)[0].applied);
  const Workload& w = *(*r)[0].current;
  EXPECT_EQ(w.state, S::kPending);
  EXPECT_TRUE(w.assignment.empty());
  EXPECT_FALSE(w.start_time.has_value());
  EXPECT_EQ(w.pending_reason,
            ReasonWithText(ReasonCode::kRequeued, "requeued after cluster c1 was lost"));
  EXPECT_EQ(store_->Get(id)->pending_reason, w.pending_reason);
  EXPECT_EQ(w.message, "cluster c1 unreachable");
  EXPECT_TRUE(store_->ListActive("c1")->empty());
  EXPECT_EQ(store_->ListPending(10)->size(), 1u);
}

TEST_F(WorkloadStoreTest, InvalidBatchIsRefusedWhole) {
  const WorkloadId a = MustSubmit(Spec("a")).id;
  const WorkloadId b = MustSubmit(Spec("b")).id;
  Transition no_assignment = Step(b, S::kPending, S::kPlaced);
  no_assignment.assignment.reset();
  auto r = store_->ApplyTransitions({Step(a, S::kPending, S::kPlaced), no_assignment});
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("transitions[1].assignment"));
  EXPECT_EQ(store_->Get(a)->state, S::kPending);
  EXPECT_EQ(store_->Get(a)->version, 1u);

  EXPECT_THAT(store_->ApplyTransitions({Step(a, S::kPending, S::kPending)}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  Transition no_to = Step(a, S::kPending, S::kPlaced);
  no_to.to = S::kUnspecified;
  EXPECT_THAT(store_->ApplyTransitions({no_to}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events"), 2);
  EXPECT_TRUE(store_->ApplyTransitions({})->empty());
}

TEST_F(WorkloadStoreTest, PendingReasonsWriteOnlyChangesOnPendingWorkloads) {
  const WorkloadId waiting = MustSubmit(Spec("waiting")).id;
  const WorkloadId running = MustSubmit(Spec("running")).id;
  Advance(running, S::kRunning);
  const uint64_t running_version = store_->Get(running)->version;

  const PendingReason busy = PendingReason(ReasonCode::kGpusBusy)
                                 .Set(figure::kNeeds, "4 GPUs")
                                 .Set(figure::kUnit, "GPU")
                                 .Set(figure::kFree, 2)
                                 .Set(figure::kFreeByModel, "2 H100-80GB")
                                 .Set(figure::kClusters, 1)
                                 .Set(figure::kLevel, "node")
                                 .Set(figure::kGpus, 4)
                                 .Set(figure::kLargest, 2)
                                 .Set(figure::kWhere, "c1/n0");
  ASSERT_OK(store_->SetPendingReasons({{waiting, busy}, {running, busy}}));
  EXPECT_EQ(store_->Get(waiting)->pending_reason, busy);
  EXPECT_EQ(store_->Get(waiting)->version, 2u);
  EXPECT_EQ(store_->Get(running)->pending_reason, PendingReason());
  EXPECT_EQ(store_->Get(running)->version, running_version);
  // Code, figures and words are all in the row (the words for psql and older readers).
  pqxx::connection conn(dsn());
  pqxx::nontransaction txn(conn);
  const pqxx::row row = txn.exec_params1(
      "SELECT pending_reason_code, pending_reason_figures->>'where' AS where_, "
      "(pending_reason_figures->>'largest')::int AS largest, pending_reason FROM workloads "
      "WHERE id = $1",
      waiting);
  EXPECT_EQ(row["pending_reason_code"].as<std::string>(), "GpusBusy");
  EXPECT_EQ(row["where_"].as<std::string>(), "c1/n0");
  EXPECT_EQ(row["largest"].as<int>(), 2);
  EXPECT_EQ(row["pending_reason"].as<std::string>(), RenderReason(busy));

  ASSERT_OK(store_->SetPendingReasons({{waiting, busy}}));  // unchanged: no write
  EXPECT_EQ(store_->Get(waiting)->version, 2u);
  PendingReason moved = busy;
  moved.Set(figure::kLargest, 3);  // only a figure: still written when asked to
  ASSERT_OK(store_->SetPendingReasons({{waiting, PendingReason()}, {waiting, moved}}));
  EXPECT_EQ(store_->Get(waiting)->pending_reason, moved);
  EXPECT_EQ(store_->Get(waiting)->version, 3u);
  EXPECT_OK(store_->SetPendingReasons({}));
  EXPECT_TRUE(absl::IsInvalidArgument(
      store_->SetPendingReasons({{0, PendingReason(ReasonCode::kNothingFree)}})));
}

// Rows written before reasons had codes, or by a newer server with a code this build does not
// know, read back with their words (kUnclassified) instead of failing the read.
TEST_F(WorkloadStoreTest, PendingReasonWithoutAKnownCodeReadsBackAsItsWords) {
  const WorkloadId old = MustSubmit(Spec("old")).id;
  const WorkloadId newer = MustSubmit(Spec("newer")).id;
  Exec(absl::StrCat("UPDATE workloads SET pending_reason = 'no H100 free' WHERE id = ", old));
  Exec(absl::StrCat(
      "UPDATE workloads SET pending_reason = 'over quota', pending_reason_code = ",
      "'QuotaExceeded', pending_reason_figures = '{\"quota\": 4}' WHERE id = ", newer));
  EXPECT_EQ(store_->Get(old)->pending_reason,
            ReasonWithText(ReasonCode::kUnclassified, "no H100 free"));
  EXPECT_EQ(store_->Get(newer)->pending_reason,
            ReasonWithText(ReasonCode::kUnclassified, "over quota"));
  EXPECT_EQ(store_->ListPending(10)->size(), 2u);
}

// ---- Cancel ----------------------------------------------------------------------------------

TEST_F(WorkloadStoreTest, CancelInEachState) {
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
    ASSERT_EQ(store_->Get(id)->state, c.state);
    const uint64_t version = store_->Get(id)->version;

    auto r = store_->RequestCancel(id, "user:alice", "not needed");
    if (c.refused) {
      EXPECT_THAT(r, StatusIs(absl::StatusCode::kFailedPrecondition));
      EXPECT_EQ(store_->Get(id)->version, version);
      continue;
    }
    ASSERT_OK(r);
    EXPECT_TRUE(r->workload.cancel_requested);
    EXPECT_EQ(r->workload.version, version + 1);
    if (c.immediate) {
      EXPECT_EQ(r->workload.state, S::kCancelled);
      ASSERT_TRUE(r->event.has_value());
      EXPECT_EQ(r->event->from, c.state);
      EXPECT_EQ(r->event->to, S::kCancelled);
      EXPECT_TRUE(r->workload.end_time.has_value());
      EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events WHERE workload_id = " +
                       std::to_string(id) + " AND to_state = 'CANCELLED' AND actor = 'user:alice'"),
                1);
    } else {
      EXPECT_EQ(r->workload.state, c.state);
      EXPECT_FALSE(r->event.has_value());
      // Asking again changes nothing.
      auto again = store_->RequestCancel(id, "user:alice", "really");
      ASSERT_OK(again);
      EXPECT_EQ(again->workload.version, version + 1);
      // The agent confirms.
      auto confirmed = store_->ApplyTransitions({Step(id, c.state, S::kCancelled)});
      ASSERT_OK(confirmed);
      ASSERT_TRUE((*confirmed)[0].applied);
    }
  }
  EXPECT_THAT(store_->RequestCancel(55555, "user:alice", ""),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(WorkloadStoreTest, CountByState) {
  MustSubmit(Spec("a"));
  MustSubmit(Spec("b"));
  Advance(MustSubmit(Spec("c")).id, S::kRunning);
  auto counts = store_->CountByState();
  ASSERT_OK(counts);
  std::map<WorkloadState, int64_t> by_state(counts->begin(), counts->end());
  EXPECT_EQ(by_state[S::kPending], 2);
  EXPECT_EQ(by_state[S::kRunning], 1);
  EXPECT_EQ(by_state.count(S::kFailed), 0u);
}

// The counts come from the deltas each writing statement appends (migrations/0006), folded on
// each read, not from a scan of workloads: under writers on several threads they equal a scan,
// and after a read the deltas are one row per state.
TEST_F(WorkloadStoreTest, CountByStateKeepsExactCountsWithoutScanningWorkloads) {
  std::vector<std::thread> writers;
  writers.reserve(4);
  for (int t = 0; t < 4; ++t) {
    writers.emplace_back([this, t] {
      for (int i = 0; i < 25; ++i) {
        const Workload w = MustSubmit(Spec(absl::StrCat("w", t, "-", i)));
        if (i % 3 == 1) {
          Advance(w.id, S::kRunning);
        }
        if (i % 3 == 2) {
          Advance(w.id, S::kSucceeded);
        }
        if (i % 3 == 0 && i % 2 == 0) {  // still PENDING
          EXPECT_OK(store_->RequestCancel(w.id, "user:alice", "no longer needed"));
        }
        if (i % 10 == 0) {
          EXPECT_OK(store_->CountByState());  // folds while others write
        }
      }
    });
  }
  for (std::thread& w : writers) w.join();
  ASSERT_OK_AND_ASSIGN(auto counts, store_->CountByState());
  std::map<WorkloadState, int64_t> by_state(counts.begin(), counts.end());
  int64_t total = 0;
  for (const auto& [state, n] : by_state) {
    EXPECT_EQ(n, Scalar(absl::StrCat("SELECT count(*) FROM workloads WHERE state = '",
                                     StateName(state), "'")))
        << StateName(state);
    total += n;
  }
  EXPECT_EQ(total, 100);
  EXPECT_LE(Scalar("SELECT count(*) FROM workload_state_counts"),
            static_cast<int64_t>(by_state.size()));
}

// Every statement that writes workload_events audits its events by a trigger that reads each
// event's workload (migrations/0027). It must read them by key whatever plan the planner would
// like: a hash join over the whole table made each group commit cost as much as the table is
// large. Joins other than a nested loop are pushed on the planner here, and the rows the trigger
// read are counted from the transaction's own statistics.
TEST_F(WorkloadStoreTest, TheAuditTriggerReadsOnlyTheWorkloadsOfItsEvents) {
  std::vector<WorkloadSpec> specs;
  specs.reserve(300);
  for (int i = 0; i < 300; ++i) specs.push_back(Spec(absl::StrCat("w", i)));
  int64_t last = 0;
  for (const WorkloadSpec& spec : specs) last = MustSubmit(spec).id;
  Exec("ANALYZE workloads");

  pqxx::connection conn(dsn());
  pqxx::work txn(conn);
  txn.exec0("SET LOCAL enable_nestloop = off");
  txn.exec0(absl::StrCat("INSERT INTO workload_events (workload_id, at, from_state, to_state, ",
                         "actor, reason) VALUES (", last,
                         ", now(), NULL, 'PENDING', 'test', 'x')"));
  const pqxx::row read = txn.exec1(
      "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
      "FROM pg_stat_xact_user_tables WHERE relname = 'workloads'");
  EXPECT_LE(read[0].as<int64_t>(), 5);
  EXPECT_EQ(txn.exec1("SELECT count(*) FROM audit_pending WHERE object = 'workload/" +
                      std::to_string(last) + "' AND detail = ' -> PENDING'")[0]
                .as<int64_t>(),
            2);  // the submission's row and this one
}

TEST_F(WorkloadStoreTest, EventsAreAppendOnly) {
  MustSubmit(Spec("a"));
  EXPECT_THROW(Exec("UPDATE workload_events SET reason = 'x'"), pqxx::sql_error);
  EXPECT_THROW(Exec("DELETE FROM workload_events"), pqxx::sql_error);
  EXPECT_EQ(Scalar("SELECT count(*) FROM workload_events"), 1);
}

// The submit statement checks and locks each project of its group (migrations/0005): a
// project workloads name cannot be deleted or renamed; one they do not name can.
TEST_F(WorkloadStoreTest, AProjectWorkloadsNameCannotBeDeletedOrRenamed) {
  MustSubmit(Spec("a", "acme", "research"));
  EXPECT_THROW(Exec("DELETE FROM projects WHERE tenant = 'acme' AND name = 'research'"),
               pqxx::foreign_key_violation);
  EXPECT_THROW(Exec("UPDATE projects SET name = 'lab' WHERE tenant = 'acme' AND name = 'research'"),
               pqxx::foreign_key_violation);
  Exec("DELETE FROM projects WHERE tenant = 'acme' AND name = 'prod'");
  EXPECT_EQ(Scalar("SELECT count(*) FROM projects WHERE tenant = 'acme'"), 1);
}

// A project deleted while a submission to it is being inserted: the insert waits for the
// delete and then finds no project, so no workload names a project that is gone.
TEST_F(WorkloadStoreTest, ASubmitRacingTheDeleteOfItsProjectStoresNothing) {
  pqxx::connection deleter(dsn());
  pqxx::work del(deleter);
  del.exec("DELETE FROM projects WHERE tenant = 'acme' AND name = 'prod'");

  absl::Notification answered;
  absl::StatusOr<SubmitResult> result;
  store_->SubmitAsync(Spec("late", "acme", "prod"), PendingReason(ReasonCode::kQueueDepth), "",
                      absl::InfiniteFuture(), [&](absl::StatusOr<SubmitResult> r) {
                        result = std::move(r);
                        answered.Notify();
                      });
  // The submit's statement now waits for the deleter's row lock.
  while (Scalar("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND "
                "datname = current_database()") == 0) {
    ASSERT_FALSE(answered.HasBeenNotified()) << result.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  del.commit();
  answered.WaitForNotification();
  EXPECT_THAT(result, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(Scalar("SELECT count(*) FROM workloads"), 0);
}

TEST_F(WorkloadStoreTest, SchemaRefusesUnknownStates) {
  MustSubmit(Spec("a"));
  EXPECT_THROW(Exec("UPDATE workloads SET state = 'DANCING'"), pqxx::check_violation);
}

}  // namespace
}  // namespace gpufed::storage
