// QueuedAuditLog (api/queued_audit_log.h): recording never waits for the log behind it, a flood
// is written in a few batches, readers see what was recorded before them, and what cannot be
// written (no room, or refused) is dropped and counted without losing the rest. A fake inner log
// that can be held shut; nothing else running.

#include "api/queued_audit_log.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "federation/request_deadline.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/counter.h"
#include "tests/support/status_matchers.h"

namespace gpufed::api {
namespace {

using ::gpufed::testing::IsOkAndHolds;
using ::gpufed::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::SizeIs;

// A guard against a hang, not a speed check: every wait here is met in microseconds.
constexpr absl::Duration kHang = absl::Seconds(30);

AuditEvent Row(const std::string& action) {
  AuditEvent e;
  e.actor = "user:eve";
  e.action = action;
  e.object = "project/acme/research";
  e.outcome = "INVALID_ARGUMENT";
  return e;
}

// Keeps what it is given, in order. While shut, AppendAll waits (after saying it was entered)
// until opened. Refuses, as a whole, any batch holding a row whose action is "refuse".
class FakeLog final : public AuditLog {
 public:
  void Shut() {
    absl::MutexLock lock(&mu_);
    open_ = false;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // Waits until an AppendAll is waiting for Open.
  bool WaitEntered() {
    absl::MutexLock lock(&mu_);
    auto entered = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_; };
    return mu_.AwaitWithTimeout(absl::Condition(&entered), kHang);
  }

  // Every AppendAll from now on fails with `status` (OK: none does).
  void FailWith(absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_ = std::move(status);
  }

  absl::Status AppendAll(const std::vector<AuditEvent>& events) override {
    absl::MutexLock lock(&mu_);
    waiting_ = true;
    auto open = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return open_; };
    mu_.Await(absl::Condition(&open));
    waiting_ = false;
    ++calls_;
    if (!fail_.ok()) return fail_;
    for (const AuditEvent& e : events) {
      if (e.action == "refuse") return absl::InvalidArgumentError("detail: refused");
    }
    for (const AuditEvent& e : events) actions_.push_back(e.action);
    return absl::OkStatus();
  }
  absl::StatusOr<int> Seal() override { return 7; }
  absl::StatusOr<AuditPage> List(const AuditFilter& /*filter*/) override {
    absl::MutexLock lock(&mu_);
    AuditPage page;
    for (const std::string& a : actions_) page.events.push_back(Row(a));
    return page;
  }
  absl::StatusOr<AuditVerification> Verify() override { return AuditVerification(); }

  std::vector<std::string> actions() const {
    absl::MutexLock lock(&mu_);
    return actions_;
  }
  int calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  mutable absl::Mutex mu_;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  bool waiting_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status fail_ ABSL_GUARDED_BY(mu_);
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> actions_ ABSL_GUARDED_BY(mu_);
};

// Shuts `inner`, records `action` and waits until the writer holds it, stuck in `inner`: from
// here on, rows queue.
::testing::AssertionResult HoldTheWriter(FakeLog& inner, QueuedAuditLog& log,
                                         const std::string& action) {
  inner.Shut();
  if (absl::Status s = log.Append(Row(action)); !s.ok()) {
    return ::testing::AssertionFailure() << s.ToString();
  }
  if (!inner.WaitEntered()) return ::testing::AssertionFailure() << "the writer never wrote";
  return ::testing::AssertionSuccess();
}

TEST(QueuedAuditLogTest, RecordingReturnsWhileTheLogBehindIsStuck) {
  FakeLog inner;
  QueuedAuditLog log(&inner);
  ASSERT_TRUE(HoldTheWriter(inner, log, "first"));

  absl::Notification returned;
  std::thread caller([&] {
    EXPECT_OK(log.Append(Row("second")));
    returned.Notify();
  });
  EXPECT_TRUE(returned.WaitForNotificationWithTimeout(kHang));
  inner.Open();
  caller.join();
  ASSERT_OK(log.Flush());
  EXPECT_THAT(inner.actions(), ElementsAre("first", "second"));
}

TEST(QueuedAuditLogTest, ReadersSeeEveryRowRecordedBeforeThem) {
  FakeLog inner;
  QueuedAuditLog log(&inner);
  for (int i = 0; i < 3; ++i) ASSERT_OK(log.Append(Row(absl::StrCat("call-", i))));
  ASSERT_OK_AND_ASSIGN(AuditPage page, log.List(AuditFilter()));
  EXPECT_THAT(page.events, SizeIs(3));
}

TEST(QueuedAuditLogTest, AFloodIsWrittenInAFewBatches) {
  FakeLog inner;
  QueuedAuditLog log(&inner, {.max_queued = 10000, .max_batch = 500});
  ASSERT_TRUE(HoldTheWriter(inner, log, "first"));
  for (int i = 0; i < 999; ++i) ASSERT_OK(log.Append(Row("flood")));
  inner.Open();
  ASSERT_OK(log.Flush());
  EXPECT_THAT(inner.actions(), SizeIs(1000));
  EXPECT_EQ(inner.calls(), 3);  // "first", then 500 and 499
  EXPECT_EQ(log.dropped(), 0);
}

TEST(QueuedAuditLogTest, RowsPastTheBoundAreDroppedAndCounted) {
  FakeLog inner;
  prometheus::Counter counted;
  QueuedAuditLog log(&inner, {.max_queued = 10, .max_batch = 500, .dropped_counter = &counted});
  ASSERT_TRUE(HoldTheWriter(inner, log, "first"));
  for (int i = 0; i < 10; ++i) ASSERT_OK(log.Append(Row("fits")));
  EXPECT_THAT(log.Append(Row("no room")), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(log.AppendAll({Row("no room"), Row("no room")}),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(log.dropped(), 3);
  EXPECT_EQ(counted.Value(), 3);
  inner.Open();
  ASSERT_OK(log.Flush());
  EXPECT_THAT(inner.actions(), SizeIs(11));
  ASSERT_OK(log.Append(Row("room again")));
  ASSERT_OK(log.Flush());
  EXPECT_THAT(inner.actions(), SizeIs(12));
}

TEST(QueuedAuditLogTest, ABatchRefusedAsAWholeIsWrittenCallByCall) {
  FakeLog inner;
  QueuedAuditLog log(&inner);
  ASSERT_TRUE(HoldTheWriter(inner, log, "first"));
  ASSERT_OK(log.Append(Row("before")));
  ASSERT_OK(log.AppendAll({Row("refuse"), Row("same call")}));
  ASSERT_OK(log.Append(Row("after")));
  inner.Open();
  ASSERT_OK(log.Flush());
  EXPECT_THAT(inner.actions(), ElementsAre("first", "before", "after"));
  EXPECT_EQ(log.dropped(), 2);  // the refused call's two rows, all or none
}

TEST(QueuedAuditLogTest, StoppingWritesWhatIsQueued) {
  FakeLog inner;
  {
    QueuedAuditLog log(&inner);
    ASSERT_TRUE(HoldTheWriter(inner, log, "first"));
    for (int i = 0; i < 5; ++i) ASSERT_OK(log.Append(Row("queued")));
    inner.Open();
  }
  EXPECT_THAT(inner.actions(), SizeIs(6));
}

TEST(QueuedAuditLogTest, AReaderWaitsNoLongerThanItsRequestsDeadline) {
  FakeLog inner;
  QueuedAuditLog log(&inner);
  ASSERT_TRUE(HoldTheWriter(inner, log, "stuck"));
  {
    DeadlineScope scope(absl::Now() + absl::Milliseconds(20));
    EXPECT_THAT(log.List(AuditFilter()), StatusIs(absl::StatusCode::kDeadlineExceeded));
  }
  inner.Open();
  ASSERT_OK_AND_ASSIGN(AuditPage page, log.List(AuditFilter()));
  EXPECT_THAT(page.events, SizeIs(1));
}

TEST(QueuedAuditLogTest, ABatchTheDatabaseCannotTakeIsDroppedWholeNotRetriedCallByCall) {
  FakeLog inner;
  QueuedAuditLog log(&inner);
  ASSERT_TRUE(HoldTheWriter(inner, log, "first"));
  for (int i = 0; i < 4; ++i) ASSERT_OK(log.Append(Row("queued")));
  inner.FailWith(absl::UnavailableError("no connection"));
  inner.Open();
  ASSERT_OK(log.Flush());
  EXPECT_EQ(inner.calls(), 2);  // "first", then the four together: one wait each
  EXPECT_EQ(log.dropped(), 5);
}

TEST(QueuedAuditLogTest, SealingDoesNotWaitForTheQueue) {
  FakeLog inner;
  QueuedAuditLog log(&inner);
  ASSERT_TRUE(HoldTheWriter(inner, log, "stuck"));
  absl::Notification sealed;
  std::thread sealer([&] {
    EXPECT_THAT(log.Seal(), IsOkAndHolds(7));
    sealed.Notify();
  });
  EXPECT_TRUE(sealed.WaitForNotificationWithTimeout(kHang));
  inner.Open();
  sealer.join();
}

}  // namespace
}  // namespace gpufed::api
