// EmbeddedPostgres: initdb on first use, restart on the same data, attaching to a postmaster
// left behind by a killed server, long paths, and the durability settings. Each test runs its
// own server in its own temporary folder.

#include "storage/embedded_postgres.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class EmbeddedPostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "gpufed-ep-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    if (geteuid() == 0) chmod(root_.c_str(), 0711);  // the postgres user must pass through
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  static std::string Query(const std::string& dsn, const std::string& sql) {
    pqxx::connection conn(dsn);
    pqxx::nontransaction txn(conn);
    return txn.exec1(sql)[0].c_str();
  }
  static void Exec(const std::string& dsn, const std::string& sql) {
    pqxx::connection conn(dsn);
    pqxx::nontransaction txn(conn);
    txn.exec(sql);
  }

  std::string root_;
};

TEST_F(EmbeddedPostgresTest, InitialisesStartsAndKeepsDataAcrossRestarts) {
  const std::string dir = root_ + "/data/postgres";
  {
    auto pg = EmbeddedPostgres::Create(dir);
    ASSERT_OK(pg);
    EXPECT_FALSE((*pg)->reused());
    EXPECT_EQ((*pg)->socket_dir(), dir + "/run");
    EXPECT_THAT((*pg)->dsn(), HasSubstr("dbname=gpufed"));
    EXPECT_EQ(Query((*pg)->dsn(), "SELECT current_database()"), "gpufed");
    // Durable, private and plainly configured.
    EXPECT_EQ(Query((*pg)->dsn(), "SHOW fsync"), "on");
    EXPECT_EQ(Query((*pg)->dsn(), "SHOW synchronous_commit"), "on");
    EXPECT_EQ(Query((*pg)->dsn(), "SHOW full_page_writes"), "on");
    EXPECT_EQ(Query((*pg)->dsn(), "SHOW listen_addresses"), "");
    EXPECT_EQ(Query((*pg)->dsn(), "SHOW server_encoding"), "UTF8");
    EXPECT_EQ(Query((*pg)->dsn(), "SHOW TimeZone"), "UTC");
    EXPECT_EQ(Query((*pg)->dsn(), "SHOW data_checksums"), "on");
    struct stat st;
    ASSERT_EQ(stat((*pg)->socket_dir().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    Exec((*pg)->dsn(), "CREATE TABLE kept AS SELECT 42 AS answer");
    ASSERT_OK((*pg)->Stop());
    ASSERT_OK((*pg)->Stop());  // idempotent
    EXPECT_FALSE(fs::exists(dir + "/pgdata/postmaster.pid"));
  }
  auto again = EmbeddedPostgres::Create(dir);
  ASSERT_OK(again);
  EXPECT_FALSE((*again)->reused());
  EXPECT_EQ(Query((*again)->dsn(), "SELECT answer FROM kept"), "42");
}

TEST_F(EmbeddedPostgresTest, AttachesToAPostmasterLeftRunningByAKilledServer) {
  const std::string dir = root_ + "/pg";
  auto first = EmbeddedPostgres::Create(dir);
  ASSERT_OK(first);
  Exec((*first)->dsn(), "CREATE TABLE survived AS SELECT 7 AS n");
  // What SIGKILL does to the server: its object is never destroyed, PostgreSQL keeps running.
  EmbeddedPostgres* abandoned = first->release();
  (void)abandoned;

  auto second = EmbeddedPostgres::Create(dir);
  ASSERT_OK(second);
  EXPECT_TRUE((*second)->reused());
  EXPECT_EQ(Query((*second)->dsn(), "SELECT n FROM survived"), "7");
  ASSERT_OK((*second)->Stop());
  EXPECT_FALSE(fs::exists(dir + "/pgdata/postmaster.pid"));
}

TEST_F(EmbeddedPostgresTest, LongDataPathsPutTheSocketUnderTmp) {
  const std::string dir = root_ + "/" + std::string(60, 'd') + "/" + std::string(40, 'e');
  auto pg = EmbeddedPostgres::Create(dir);
  ASSERT_OK(pg);
  const std::string socket_dir = (*pg)->socket_dir();
  EXPECT_THAT(socket_dir, StartsWith("/tmp/gpufed-pg-"));
  EXPECT_EQ(Query((*pg)->dsn(), "SELECT 1"), "1");
  ASSERT_OK((*pg)->Stop());
  EXPECT_FALSE(fs::exists(socket_dir));
}

TEST_F(EmbeddedPostgresTest, UnusableDataFolderIsAFailedPrecondition) {
  const std::string file = root_ + "/not-a-dir";
  { std::ofstream(file) << "x"; }
  auto pg = EmbeddedPostgres::Create(file);
  EXPECT_THAT(pg, StatusIs(absl::StatusCode::kFailedPrecondition));

  fs::create_directories(root_ + "/junk/pgdata");
  { std::ofstream(root_ + "/junk/pgdata/stray") << "x"; }
  auto junk = EmbeddedPostgres::Create(root_ + "/junk");
  EXPECT_THAT(junk, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(junk.status().message()), HasSubstr("PG_VERSION"));
}

TEST_F(EmbeddedPostgresTest, MissingPostgresIsAFailedPrecondition) {
  EmbeddedPostgres::Options options;
  options.bin_dir = "/nonexistent/postgresql/bin";
  auto pg = EmbeddedPostgres::Create(root_ + "/pg", options);
  EXPECT_THAT(pg, StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(std::string(pg.status().message()), HasSubstr("/nonexistent/postgresql/bin"));
}

}  // namespace
}  // namespace gpufed::storage
