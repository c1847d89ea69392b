// The request deadline (federation/request_deadline.h) bounds what the store does for a call:
// the wait for a connection, the statement (statement_timeout) and, for submissions, the wait
// for the group commit. Codes only; nothing here depends on how fast the machine is.

#include <chrono>
#include <memory>

#include "absl/synchronization/notification.h"
#include "federation/clock.h"
#include "federation/request_deadline.h"
#include "gtest/gtest.h"
#include "storage/pg_pool.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;
using DeadlineTest = StoreTest;

std::unique_ptr<PgPool> MakePool(const std::string& dsn, int size) {
  PgPoolOptions options;
  options.size = size;
  options.acquire_timeout = absl::Seconds(30);
  options.statement_timeout = absl::Seconds(30);
  absl::StatusOr<std::unique_ptr<PgPool>> pool = PgPool::Create(dsn, options, nullptr);
  EXPECT_OK(pool);
  return pool.ok() ? *std::move(pool) : nullptr;
}

// Under the deadline in scope, a transaction on `pool` is answered DEADLINE_EXCEEDED without
// its body running (so without reaching the database).
void ExpectRefusedBeforeRunning(PgPool& pool) {
  bool ran = false;
  absl::Status s = pool.Transact("noop", [&](pqxx::work&) {
    ran = true;
    return absl::OkStatus();
  });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_FALSE(ran);
}

absl::StatusOr<std::string> SessionTimeout(PgPool& pool) {
  return pool.Transact<pqxx::nontransaction>("show", [](pqxx::nontransaction& txn) {
    return absl::StatusOr<std::string>(txn.exec1("SHOW statement_timeout")[0].as<std::string>());
  });
}

// Submits workload "late" with `deadline` and waits for its answer.
absl::StatusOr<SubmitResult> SubmitAndWait(PgStore& store, absl::Time deadline) {
  absl::StatusOr<SubmitResult> result = absl::InternalError("not answered");
  absl::Notification answered;
  store.SubmitAsync(StoreTest::Spec("late"), PendingReason(), "", deadline,
                    [&](absl::StatusOr<SubmitResult> r) {
                      result = std::move(r);
                      answered.Notify();
                    });
  answered.WaitForNotification();
  return result;
}

TEST_F(DeadlineTest, APassedDeadlineNeverReachesTheDatabase) {
  std::unique_ptr<PgPool> pool = MakePool(dsn(), 1);
  ASSERT_NE(pool, nullptr);
  DeadlineScope scope(absl::Now() - absl::Seconds(1));
  ExpectRefusedBeforeRunning(*pool);
}

TEST_F(DeadlineTest, TheDeadlineBoundsTheStatement) {
  std::unique_ptr<PgPool> pool = MakePool(dsn(), 1);
  ASSERT_NE(pool, nullptr);
  {
    // Far shorter than the pool's 30 s statement_timeout: the server cancels the statement.
    DeadlineScope scope(absl::Now() + absl::Milliseconds(300));
    absl::Status s = pool->Transact("sleep", [](pqxx::work& txn) {
      txn.exec("SELECT pg_sleep(60)");
      return absl::OkStatus();
    });
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  }
  {
    DeadlineScope scope(absl::Now() + absl::Milliseconds(300));
    absl::Status s = pool->Transact<pqxx::nontransaction>("sleep", [](pqxx::nontransaction& txn) {
      txn.exec("SELECT pg_sleep(60)");
      return absl::OkStatus();
    });
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
  }
  // Outside the request the connection has its own limit again (SET LOCAL ended with its
  // transaction; the autocommit session setting was put back).
  EXPECT_THAT(SessionTimeout(*pool), gpufed::testing::IsOkAndHolds("30s"));
}

TEST_F(DeadlineTest, TheDeadlineBoundsTheWaitForAConnection) {
  std::unique_ptr<PgPool> pool = MakePool(dsn(), 1);
  ASSERT_NE(pool, nullptr);
  absl::StatusOr<PgPool::Lease> held = pool->Acquire(absl::Seconds(1));
  ASSERT_OK(held);
  // The pool would wait 30 s for a connection; the request allows far less.
  DeadlineScope scope(absl::Now() + absl::Milliseconds(200));
  absl::Status s = pool->Transact("noop", [](pqxx::work&) { return absl::OkStatus(); });
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(DeadlineTest, ASubmissionWhoseDeadlinePassedIsNotStored) {
  AddTenant("acme", "research");
  EXPECT_THAT(SubmitAndWait(*store_, absl::Now() - absl::Seconds(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK_AND_ASSIGN(WorkloadPage page, store_->List({}));
  EXPECT_TRUE(page.workloads.empty());
}

// Deadlines are judged by the clock the store and the pool are given, not the wall clock: with
// the clock fifty years ahead, a deadline an hour away by the wall clock has passed.
void MoveFiftyYearsAhead(FakeClock& clock) { clock.Advance(std::chrono::hours(24 * 365 * 50)); }

TEST_F(DeadlineTest, ThePoolJudgesARequestsDeadlineByItsClock) {
  FakeClock clock;
  MoveFiftyYearsAhead(clock);
  PgPoolOptions options;
  options.size = 1;
  options.clock = &clock;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PgPool> pool, PgPool::Create(dsn(), options, nullptr));
  DeadlineScope scope(absl::Now() + absl::Hours(1));
  ExpectRefusedBeforeRunning(*pool);
}

TEST_F(DeadlineTest, TheStoreJudgesASubmissionsDeadlineByItsClock) {
  AddTenant("acme", "research");
  FakeClock clock;
  MoveFiftyYearsAhead(clock);
  PgStoreOptions options;
  options.clock = &clock;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PgStore> store, PgStore::Create(dsn(), options));
  EXPECT_THAT(SubmitAndWait(*store, absl::Now() + absl::Hours(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  ASSERT_OK_AND_ASSIGN(WorkloadPage page, store_->List({}));
  EXPECT_TRUE(page.workloads.empty());
}

TEST_F(DeadlineTest, SubmitAsyncAnswersAfterTheCommit) {
  AddTenant("acme", "research");
  absl::StatusOr<SubmitResult> result = absl::InternalError("not answered");
  absl::Notification answered;
  store_->SubmitAsync(Spec("on-time"), PendingReason(), "", absl::InfiniteFuture(),
                      [&](absl::StatusOr<SubmitResult> r) {
                        result = std::move(r);
                        answered.Notify();
                      });
  answered.WaitForNotification();
  ASSERT_OK(result);
  EXPECT_TRUE(result->created);
  ASSERT_OK_AND_ASSIGN(Workload stored, store_->Get(result->workload.id));
  EXPECT_EQ(stored.state, WorkloadState::kPending);
}

}  // namespace
}  // namespace gpufed::storage
