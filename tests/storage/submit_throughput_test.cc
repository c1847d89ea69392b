// Measures durable Submit throughput from 8 concurrent callers and prints it. The server is an
// EmbeddedPostgres with production settings (fsync on), not the test harness's throwaway one.
// Asserts only correctness: wall-clock speed depends on the machine (and on its neighbours).
//
//   build-storage/bin/gpufed_storage_tests --gtest_filter='SubmitThroughput*'

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/embedded_postgres.h"
#include "storage/migrator.h"
#include "storage/pg_store.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

namespace fs = std::filesystem;

class SubmitThroughputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "gpufed-tp-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    if (geteuid() == 0) chmod(root_.c_str(), 0711);
    auto pg = EmbeddedPostgres::Create(root_ + "/pg");  // production settings
    ASSERT_OK(pg);
    pg_ = *std::move(pg);
    ASSERT_OK(MigrateDatabase(pg_->dsn()));
    auto store = PgStore::Create(pg_->dsn());
    ASSERT_OK(store);
    store_ = *std::move(store);
    ASSERT_OK(store_->CreateTenant(Tenant{"acme", "", {}}));
    ASSERT_OK(store_->CreateProject(Project{"acme", "research", {}}));
  }
  void TearDown() override {
    store_.reset();
    pg_.reset();
    std::error_code ec;
    fs::remove_all(root_, ec);
  }

  std::string root_;
  std::unique_ptr<EmbeddedPostgres> pg_;
  std::unique_ptr<PgStore> store_;
};

// Returns submits per second.
double Measure(PgStore& store, const std::string& dsn, int committers, int64_t* rows) {
  constexpr int kCallers = 8;
  constexpr int kPerCaller = 1000;
  // Warm up: connections, prepared statements, caches.
  for (int i = 0; i < 50; ++i) {
    EXPECT_OK(store.Submit(StoreTest::Spec("warm-" + std::to_string(i))));
  }
  const PgStore::Stats before = store.GetStats();
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  callers.reserve(kCallers);
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int i = 0; i < kPerCaller; ++i) {
        WorkloadSpec spec = StoreTest::Spec("w-" + std::to_string(c) + "-" + std::to_string(i));
        spec.idempotency_key =
            "key-" + std::to_string(committers) + "-" + std::to_string(c) + "-" + std::to_string(i);
        auto r = store.Submit(spec);
        if (!r.ok() || !r->created) ++failures;
      }
    });
  }
  for (auto& t : callers) t.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const PgStore::Stats after = store.GetStats();
  EXPECT_EQ(failures.load(), 0);
  constexpr int kTotal = kCallers * kPerCaller;
  const int64_t groups = after.submit_groups - before.submit_groups;
  std::cout << "[ throughput ] committers=" << committers << ": " << kTotal
            << " durable submits (fsync on) from " << kCallers << " callers in " << seconds
            << " s = " << static_cast<int64_t>(kTotal / seconds) << " submits/s; " << groups
            << " commits, " << static_cast<double>(kTotal) / static_cast<double>(groups)
            << " submits per commit on average" << std::endl;
  pqxx::connection conn(dsn);
  pqxx::nontransaction txn(conn);
  *rows = txn.exec1("SELECT count(*) FROM workloads")[0].as<int64_t>();
  return kTotal / seconds;
}

TEST_F(SubmitThroughputTest, EightConcurrentCallers) {
  {
    pqxx::connection conn(pg_->dsn());
    pqxx::nontransaction txn(conn);
    ASSERT_STREQ(txn.exec1("SHOW fsync")[0].c_str(), "on");
    ASSERT_STREQ(txn.exec1("SHOW synchronous_commit")[0].c_str(), "on");
  }
  int64_t expected_rows = 0;
  for (int committers : {1, 2}) {
    PgStoreOptions options;
    options.committers = committers;
    store_.reset();
    auto store = PgStore::Create(pg_->dsn(), options);
    ASSERT_OK(store);
    store_ = *std::move(store);
    int64_t rows = 0;
    const double rate = Measure(*store_, pg_->dsn(), committers, &rows);
    expected_rows += 50 + 8 * 1000;
    EXPECT_EQ(rows, expected_rows);  // every acknowledged submit is there
    RecordProperty("submits_per_second_committers_" + std::to_string(committers),
                   static_cast<int>(rate));
  }
}

}  // namespace
}  // namespace gpufed::storage
