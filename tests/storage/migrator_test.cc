// Schema migrations against a real PostgreSQL: idempotent, safe to run concurrently, all or
// nothing per migration, and refusing a schema newer than the build.

#include "storage/migrator.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/pg_store.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;

using ::testing::HasSubstr;

class MigratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto postgres = gpufed::testing::TestPostgres::Get();
    ASSERT_OK(postgres);
    postgres_ = *postgres;
    auto dsn = postgres_->CreateEmptyDatabase();
    ASSERT_OK(dsn);
    dsn_ = *dsn;
  }
  void TearDown() override {
    if (!dsn_.empty()) {
      EXPECT_OK(postgres_->DropDatabase(dsn_));
    }
  }

  int64_t Scalar(const std::string& sql) {
    pqxx::connection conn(dsn_);
    pqxx::nontransaction txn(conn);
    return txn.exec1(sql)[0].as<int64_t>();
  }

  void Exec(const std::string& sql) {
    pqxx::connection conn(dsn_);
    pqxx::nontransaction txn(conn);
    txn.exec(sql);
  }

  // Whether PostgreSQL refuses `sql` for breaking a CHECK (or the clusters' name trigger).
  bool CheckRefuses(const std::string& sql) {
    try {
      Exec(sql);
      return false;
    } catch (const pqxx::check_violation&) {
      return true;
    }
  }

  gpufed::testing::TestPostgres* postgres_ = nullptr;
  std::string dsn_;
};

TEST_F(MigratorTest, EmbeddedMigrationsAreSortedAndNonEmpty) {
  std::span<const Migration> all = EmbeddedMigrations();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front().version, 1);
  EXPECT_EQ(all.front().name, "init");
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1].version, all[i].version);
  EXPECT_EQ(LatestSchemaVersion(), all.back().version);
  EXPECT_TRUE(absl::StrContains(std::string(all.front().sql), "CREATE TABLE workloads"));
}

TEST_F(MigratorTest, AppliesEverythingOnceAndIsIdempotent) {
  EXPECT_EQ(*AppliedSchemaVersion(dsn_), 0);
  ASSERT_OK(MigrateDatabase(dsn_));
  EXPECT_EQ(*AppliedSchemaVersion(dsn_), LatestSchemaVersion());
  const int64_t rows = Scalar("SELECT count(*) FROM schema_migrations");
  EXPECT_EQ(rows, static_cast<int64_t>(EmbeddedMigrations().size()));
  const int64_t applied_at = Scalar("SELECT epoch_us(max(applied_at)) FROM schema_migrations");

  ASSERT_OK(MigrateDatabase(dsn_));
  ASSERT_OK(MigrateDatabase(dsn_));
  EXPECT_EQ(Scalar("SELECT count(*) FROM schema_migrations"), rows);
  EXPECT_EQ(Scalar("SELECT epoch_us(max(applied_at)) FROM schema_migrations"), applied_at);
  for (const char* table : {"tenants", "projects", "api_tokens", "clusters", "nodes", "gpus",
                            "workloads", "workload_events"}) {
    EXPECT_EQ(Scalar(std::string("SELECT count(*) FROM ") + table), 0) << table;
  }
}

TEST_F(MigratorTest, ConcurrentMigratorsConverge) {
  constexpr int kServers = 4;
  std::vector<absl::Status> results(kServers);
  std::vector<std::thread> threads;
  threads.reserve(kServers);
  for (int i = 0; i < kServers; ++i) {
    threads.emplace_back([&, i] { results[i] = MigrateDatabase(dsn_); });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& s : results) EXPECT_OK(s);
  EXPECT_EQ(Scalar("SELECT count(*) FROM schema_migrations"),
            static_cast<int64_t>(EmbeddedMigrations().size()));
}

TEST_F(MigratorTest, RefusesASchemaNewerThanTheBuild) {
  ASSERT_OK(MigrateDatabase(dsn_));
  {
    pqxx::connection conn(dsn_);
    pqxx::nontransaction txn(conn);
    txn.exec("INSERT INTO schema_migrations (version, name) VALUES (9999, 'from_the_future')");
  }
  absl::Status s = MigrateDatabase(dsn_);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(s.message()), HasSubstr("9999"));
  EXPECT_FALSE(absl::StrContains(s.message(), "\n"));
  EXPECT_THAT(PgStore::Create(dsn_), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(MigratorTest, StoreRefusesAnUnmigratedDatabase) {
  auto store = PgStore::Create(dsn_);
  EXPECT_THAT(store, StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(MigratorTest, NewMigrationsApplyInOrderAfterTheOldOnes) {
  ASSERT_OK(MigrateDatabase(dsn_));
  std::vector<Migration> next(EmbeddedMigrations().begin(), EmbeddedMigrations().end());
  const int64_t base = next.back().version;
  next.push_back(
      {base + 1, "add_notes", "CREATE TABLE notes (id int); INSERT INTO notes VALUES (1);"});
  next.push_back({base + 2, "more_notes", "INSERT INTO notes VALUES (2);"});
  ASSERT_OK(MigrateDatabase(dsn_, next));
  ASSERT_OK(MigrateDatabase(dsn_, next));
  EXPECT_EQ(Scalar("SELECT count(*) FROM notes"), 2);
  EXPECT_EQ(*AppliedSchemaVersion(dsn_), base + 2);
  // The embedded list alone now refuses this database.
  EXPECT_THAT(MigrateDatabase(dsn_), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(MigratorTest, AFailingMigrationLeavesNoTrace) {
  ASSERT_OK(MigrateDatabase(dsn_));
  std::vector<Migration> next(EmbeddedMigrations().begin(), EmbeddedMigrations().end());
  const int64_t base = next.back().version;
  next.push_back({base + 1, "broken", "CREATE TABLE half (id int); SELECT 1/0;"});
  absl::Status s = MigrateDatabase(dsn_, next);
  EXPECT_THAT(s, StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(std::string(s.message()), HasSubstr("broken"));
  EXPECT_EQ(*AppliedSchemaVersion(dsn_), base);
  EXPECT_EQ(Scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'half'"), 0);
}

// 0004_name_rules: names written from now on follow federation/validation.h's rule; names an
// earlier build stored stay, and an old cluster can still change state.
TEST_F(MigratorTest, NameRulesBindNewRowsAndLeaveOldOnes) {
  std::vector<Migration> before;
  for (const Migration& m : EmbeddedMigrations()) {
    if (m.version < 4) before.push_back(m);
  }
  ASSERT_OK(MigrateDatabase(dsn_, before));
  const std::string long_name(100, 'p');
  Exec("INSERT INTO tenants (name) VALUES ('1legacy')");
  Exec("INSERT INTO projects (tenant, name) VALUES ('1legacy', '" + long_name + "')");
  Exec("INSERT INTO clusters (name) VALUES ('1dc')");
  Exec("INSERT INTO nodes (cluster, name) VALUES ('1dc', 'Node_1')");

  ASSERT_OK(MigrateDatabase(dsn_));
  EXPECT_EQ(*AppliedSchemaVersion(dsn_), LatestSchemaVersion());
  EXPECT_EQ(Scalar("SELECT count(*) FROM projects WHERE tenant = '1legacy'"), 1);
  Exec("UPDATE clusters SET state = 'unreachable', epoch = epoch + 1 WHERE name = '1dc'");
  EXPECT_EQ(Scalar("SELECT epoch FROM clusters WHERE name = '1dc'"), 2);

  EXPECT_TRUE(CheckRefuses("INSERT INTO tenants (name) VALUES ('2acme')"));
  EXPECT_TRUE(CheckRefuses("INSERT INTO tenants (name) VALUES ('" + std::string(64, 'a') + "')"));
  EXPECT_TRUE(CheckRefuses("INSERT INTO projects (tenant, name) VALUES ('1legacy', '-p')"));
  EXPECT_TRUE(CheckRefuses("INSERT INTO clusters (name) VALUES ('2dc')"));
  EXPECT_TRUE(CheckRefuses("UPDATE clusters SET name = '3dc' WHERE name = '1dc'"));
  EXPECT_TRUE(CheckRefuses("INSERT INTO nodes (cluster, name) VALUES ('1dc', 'Node_2')"));
  Exec("INSERT INTO tenants (name) VALUES ('acme-" + std::string(58, 'a') + "')");  // 63
  Exec("INSERT INTO projects (tenant, name) VALUES ('1legacy', 'p1')");
  Exec("INSERT INTO clusters (name) VALUES ('dc-2')");
  Exec("INSERT INTO nodes (cluster, name) VALUES ('dc-2', '0node')");
}

TEST_F(MigratorTest, RejectsUnorderedMigrationLists) {
  std::vector<Migration> bad = {{2, "b", "SELECT 1"}, {1, "a", "SELECT 1"}};
  EXPECT_THAT(MigrateDatabase(dsn_, bad), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(MigratorUnreachableTest, UnreachableDatabaseIsUnavailable) {
  const std::string dsn = "host=/nonexistent-gpufed-socket-dir port=1 dbname=x connect_timeout=2";
  EXPECT_THAT(MigrateDatabase(dsn), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(AppliedSchemaVersion(dsn), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(PgStore::Create(dsn), StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace gpufed::storage
