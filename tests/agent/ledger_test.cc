// The agent's ledger (agent/ledger.h) on a real folder: what a reopened ledger says is
// unfinished, after every kind of line and after a torn one.

#include "agent/ledger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): POSIX mkdtemp

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/support/status_matchers.h"

namespace gpufed::agent {
namespace {

class LedgerTest : public ::testing::Test {
 protected:
  LedgerTest() {
    std::string templ = (std::filesystem::temp_directory_path() / "gpufed-ledger-XXXXXX").string();
    dir_ = mkdtemp(templ.data()) != nullptr ? templ + "/state" : "";
  }
  ~LedgerTest() override {
    std::error_code ec;
    std::filesystem::remove_all(std::filesystem::path(dir_).parent_path(), ec);
  }

  std::unique_ptr<Ledger> Open(std::vector<Ledger::Entry>* unfinished) {
    absl::StatusOr<std::unique_ptr<Ledger>> ledger = Ledger::Open(dir_, unfinished);
    EXPECT_OK(ledger);
    return ledger.ok() ? *std::move(ledger) : nullptr;
  }

  std::string dir_;
};

TEST_F(LedgerTest, AReopenedLedgerReturnsWhatWasNotAcknowledgedInStartOrder) {
  std::vector<Ledger::Entry> unfinished;
  {
    std::unique_ptr<Ledger> ledger = Open(&unfinished);
    ASSERT_NE(ledger, nullptr);
    EXPECT_TRUE(unfinished.empty());
    ledger->Started("1", 1, 3);
    ledger->Started("2", 1, 3);
    ledger->Started("3", 2, 4);
    ledger->Ended("2", 1, v1::WORKLOAD_STATE_FAILED, 7);
    ledger->Ended("3", 2, v1::WORKLOAD_STATE_SUCCEEDED, 0);
    ledger->Acked("3", 2);
  }
  std::unique_ptr<Ledger> again = Open(&unfinished);
  ASSERT_EQ(unfinished.size(), 2u);
  EXPECT_EQ(unfinished[0].workload_id, "1");
  EXPECT_EQ(unfinished[0].state, v1::WORKLOAD_STATE_PLACED);  // running when it stopped
  EXPECT_EQ(unfinished[0].epoch, 3u);
  EXPECT_EQ(unfinished[1].workload_id, "2");
  EXPECT_EQ(unfinished[1].state, v1::WORKLOAD_STATE_FAILED);
  EXPECT_EQ(unfinished[1].exit_code, 7);

  // Acknowledged now: the next open finds nothing.
  again->Ended("1", 1, v1::WORKLOAD_STATE_LOST, 0);
  again->Acked("1", 1);
  again->Acked("2", 1);
  again.reset();
  Open(&unfinished);
  EXPECT_TRUE(unfinished.empty());
}

TEST_F(LedgerTest, AnotherAttemptIsAnotherRun) {
  std::vector<Ledger::Entry> unfinished;
  {
    std::unique_ptr<Ledger> ledger = Open(&unfinished);
    ledger->Started("9", 1, 1);
    ledger->Ended("9", 1, v1::WORKLOAD_STATE_LOST, 0);
    ledger->Started("9", 2, 2);
    ledger->Acked("9", 1);
  }
  Open(&unfinished);
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_EQ(unfinished[0].attempt, 2u);
  EXPECT_EQ(unfinished[0].state, v1::WORKLOAD_STATE_PLACED);
}

// The server refuses a registration that reports an id it could not have issued: a ledger
// holding one would keep the agent from ever registering again.
TEST_F(LedgerTest, OnlyTheServersWorkloadIdsAreKept) {
  std::vector<Ledger::Entry> unfinished;
  {
    std::unique_ptr<Ledger> ledger = Open(&unfinished);
    for (const char* id : {"w1", "", "01", "1 2", "-1", "99999999999999999999", "7"}) {
      ledger->Started(id, 1, 1);
    }
  }
  Open(&unfinished);
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_EQ(unfinished[0].workload_id, "7");
}

TEST_F(LedgerTest, ATornLastLineIsIgnored) {
  std::vector<Ledger::Entry> unfinished;
  { Open(&unfinished)->Started("5", 1, 1); }
  std::ofstream(dir_ + "/ledger", std::ios::app) << "E 5 1 6";  // killed mid-write
  Open(&unfinished);
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_EQ(unfinished[0].state, v1::WORKLOAD_STATE_PLACED);
}

TEST_F(LedgerTest, TheFileStaysSmallWhileRunsComeAndGo) {
  std::vector<Ledger::Entry> unfinished;
  std::unique_ptr<Ledger> ledger = Open(&unfinished);
  for (int i = 0; i < 20000; ++i) {
    const std::string id = std::to_string(i);
    ledger->Started(id, 1, 1);
    ledger->Ended(id, 1, v1::WORKLOAD_STATE_SUCCEEDED, 0);
    ledger->Acked(id, 1);
  }
  ledger->Started("99999", 1, 1);
  EXPECT_LT(std::filesystem::file_size(dir_ + "/ledger"), 200u << 10);
  ledger.reset();
  Open(&unfinished);
  ASSERT_EQ(unfinished.size(), 1u);
  EXPECT_EQ(unfinished[0].workload_id, "99999");
}

}  // namespace
}  // namespace gpufed::agent
