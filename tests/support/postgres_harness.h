#ifndef GPUFED_TESTS_SUPPORT_POSTGRES_HARNESS_H_
#define GPUFED_TESTS_SUPPORT_POSTGRES_HARNESS_H_

// A real PostgreSQL for tests. One embedded server per test binary (started on first use in a
// fresh temporary folder, stopped and removed when the binary exits — also if it is killed),
// and a fresh database per test, created from a template that already holds the migrations
// (migrations/*.sql, the same files the server applies). The server is a real PostgreSQL 15 run
// as in production except that it does not fsync (EmbeddedPostgres::Options::durable = false):
// tests that need durability figures start their own EmbeddedPostgres.
//
// Use the fixture:
//
//   class MyTest : public gpufed::testing::PostgresTest {};
//   TEST_F(MyTest, Works) {
//     auto store = gpufed::storage::PgStore::Create(dsn());
//     ...
//   }
//
// or, outside a fixture, gpufed::testing::CreateTestDatabase().
//
// A test that stops and starts PostgreSQL under a running server (a fault test) takes one of
// its own, TestPostgres::StartOwn(), so that the binary's shared server stays up for the rest.
//
// In CMake: include(${PROJECT_SOURCE_DIR}/tests/support/support.cmake) and link
// gpufed_test_support.

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace gpufed::storage {
class EmbeddedPostgres;
}

namespace gpufed::testing {

// The binary's PostgreSQL. Thread-safe.
class TestPostgres {
 public:
  // The process-wide instance, started on first call. An error here means PostgreSQL 15 is
  // missing or cannot start; its message says why.
  static absl::StatusOr<TestPostgres*> Get();
  // A server of the caller's own in a fresh temporary folder, like the shared one; stopped and
  // removed when the object is destroyed (or the binary exits).
  static absl::StatusOr<std::unique_ptr<TestPostgres>> StartOwn();

  // A new database with every migration applied; returns its libpq DSN.
  absl::StatusOr<std::string> CreateDatabase();
  // A new database with nothing in it (for migration tests).
  absl::StatusOr<std::string> CreateEmptyDatabase();
  // Drops the database a DSN from this harness points at, closing its remaining sessions.
  absl::Status DropDatabase(const std::string& dsn);

  // Stops the server at once, as a crash would (`pg_ctl stop -m immediate`): sessions are cut
  // and nothing is checkpointed. Idempotent. Not thread-safe with Restart().
  absl::Status Stop();
  // Starts it again after Stop() on the same data folder, socket and port, so that existing DSNs
  // reach it again; PostgreSQL first replays its WAL, so every committed transaction is there.
  // UNAVAILABLE when it does not come up.
  absl::Status Restart();

  // DSN of the maintenance database "postgres" (superuser).
  [[nodiscard]] std::string AdminDsn() const;
  // DSN for database `name` on this server.
  [[nodiscard]] std::string DsnFor(const std::string& name) const;

  ~TestPostgres();

 private:
  TestPostgres() = default;
  absl::Status Start();
  absl::StatusOr<std::string> NewDatabase(bool migrated);

  std::string root_;  // the temporary folder
  std::unique_ptr<storage::EmbeddedPostgres> server_;
  absl::Mutex mu_;
  int next_database_ ABSL_GUARDED_BY(mu_) = 0;
};

// A fresh migrated database on the binary's PostgreSQL: TestPostgres::Get()->CreateDatabase().
absl::StatusOr<std::string> CreateTestDatabase();

// gtest fixture: a fresh migrated database per test, dropped afterwards. Fails the test (not
// skips it) if PostgreSQL cannot be started.
class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The test's database. Close everything connected to it before TearDown (it is dropped
  // with FORCE, which would otherwise break those connections).
  [[nodiscard]] const std::string& dsn() const { return dsn_; }
  [[nodiscard]] TestPostgres& postgres() const { return *postgres_; }

 private:
  TestPostgres* postgres_ = nullptr;
  std::string dsn_;
};

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_POSTGRES_HARNESS_H_
