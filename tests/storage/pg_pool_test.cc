// The connection pool and error mapping: bounded waits, broken connections replaced, and
// libpqxx exceptions turned into statuses with their retry meaning.

#include "storage/pg_pool.h"

#include <chrono>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "storage/pg_errors.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;

using PoolTest = StoreTest;

TEST_F(PoolTest, AcquireTimesOutWithUnavailable) {
  PgPoolOptions options;
  options.size = 1;
  auto pool = PgPool::Create(dsn(), options, nullptr);
  ASSERT_OK(pool);
  auto held = (*pool)->Acquire(absl::Seconds(1));
  ASSERT_OK(held);
  auto second = (*pool)->Acquire(absl::Milliseconds(50));
  EXPECT_THAT(second, StatusIs(absl::StatusCode::kUnavailable));
  // Freed, it is handed out again.
  { auto released = std::move(*held); }
  EXPECT_OK((*pool)->Acquire(absl::Milliseconds(50)));
}

TEST_F(PoolTest, BadPoolSizeIsInvalid) {
  PgPoolOptions options;
  options.size = 0;
  EXPECT_THAT(PgPool::Create(dsn(), options, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(PoolTest, StoreSurvivesItsConnectionsBeingKilled) {
  AddTenant("acme", "research");
  const WorkloadId id = MustSubmit(Spec("before")).id;
  ASSERT_OK(store_->Get(id));
  // What a database restart or failover does to established sessions.
  Exec(
      "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
      "WHERE datname = current_database() AND pid <> pg_backend_pid()");
  auto got = store_->Get(id);
  EXPECT_OK(got);
  auto submitted = store_->Submit(Spec("after"));
  EXPECT_OK(submitted);
  auto listed = store_->List({});
  ASSERT_OK(listed);
  EXPECT_EQ(listed->workloads.size(), 2u);
}

TEST_F(PoolTest, ExceptionsMapToRetryMeanings) {
  auto status_of = [&](const std::string& sql) {
    try {
      pqxx::connection conn(dsn());
      pqxx::work txn(conn);
      txn.exec(sql);
      txn.commit();
    } catch (const std::exception& e) {
      return StatusFromException(e, "test");
    }
    return absl::OkStatus();
  };
  Exec("CREATE TABLE t (id int PRIMARY KEY, v int CHECK (v > 0))");
  Exec("INSERT INTO t VALUES (1, 1)");
  EXPECT_THAT(status_of("INSERT INTO t VALUES (1, 1)"), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(status_of("INSERT INTO t VALUES (2, -1)"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status_of("SELECT 1/0"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(status_of("INSERT INTO projects (tenant, name) VALUES ('nobody', 'p')"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(status_of("SET LOCAL statement_timeout = 10; SELECT pg_sleep(1)"),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_THAT(status_of("SELECT * FROM no_such_table"), StatusIs(absl::StatusCode::kInternal));
  absl::Status s = status_of("SELECT * FROM no_such_table");
  EXPECT_TRUE(absl::StartsWith(s.message(), "test: ")) << s;
  EXPECT_EQ(s.message().find('\n'), absl::string_view::npos) << s;

  try {
    pqxx::connection conn("host=/nonexistent-gpufed port=1 dbname=x");
    FAIL() << "connected to nothing";
  } catch (const std::exception& e) {
    EXPECT_THAT(StatusFromException(e, "connect"), StatusIs(absl::StatusCode::kUnavailable));
    EXPECT_TRUE(IsConnectionBroken(e));
  }
}

TEST_F(PoolTest, SerializationConflictsAreAborted) {
  Exec("CREATE TABLE c (id int PRIMARY KEY, v int)");
  Exec("INSERT INTO c VALUES (1, 0)");
  pqxx::connection a(dsn()), b(dsn());
  pqxx::transaction<pqxx::serializable> ta(a);
  pqxx::transaction<pqxx::serializable> tb(b);
  ta.exec("SELECT v FROM c WHERE id = 1");
  tb.exec("SELECT v FROM c WHERE id = 1");
  ta.exec("UPDATE c SET v = 1 WHERE id = 1");
  ta.commit();
  try {
    tb.exec("UPDATE c SET v = 2 WHERE id = 1");
    tb.commit();
    FAIL() << "no conflict";
  } catch (const std::exception& e) {
    EXPECT_THAT(StatusFromException(e, "test"), StatusIs(absl::StatusCode::kAborted));
  }
}

TEST(WithConnectTimeoutTest, AddsATimeoutUnlessOneIsSet) {
  EXPECT_EQ(WithConnectTimeout("host=/run dbname=x", 5), "host=/run dbname=x connect_timeout=5");
  EXPECT_EQ(WithConnectTimeout("", 5), "connect_timeout=5");
  EXPECT_EQ(WithConnectTimeout("dbname=x connect_timeout=9", 5), "dbname=x connect_timeout=9");
  EXPECT_EQ(WithConnectTimeout("postgresql://h/db", 5), "postgresql://h/db?connect_timeout=5");
  EXPECT_EQ(WithConnectTimeout("postgres://h/db?sslmode=require", 5),
            "postgres://h/db?sslmode=require&connect_timeout=5");
  EXPECT_EQ(WithConnectTimeout("dbname=x", 0), "dbname=x");
}

}  // namespace
}  // namespace gpufed::storage
