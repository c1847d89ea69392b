#include "agent/sim_backend.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "federation/clock.h"
#include "tests/agent/event_collector.h"
#include "tests/support/status_matchers.h"

namespace gpufed::agent {
namespace {

using ::gpufed::testing::EventCollector;
using ::gpufed::testing::MakeAssignment;

v1::WorkAssignment SimWork(const std::string& id, absl::Duration d, bool fail = false,
                           int exit_code = 0) {
  v1::WorkAssignment a = MakeAssignment(id);
  a.mutable_spec()->mutable_estimated_duration()->set_seconds(absl::ToInt64Seconds(d));
  a.mutable_spec()->mutable_estimated_duration()->set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(d % absl::Seconds(1))));
  if (fail) a.mutable_spec()->mutable_run()->set_sim_outcome(v1::SIM_OUTCOME_FAIL);
  a.mutable_spec()->mutable_run()->set_sim_exit_code(exit_code);
  return a;
}

class SimBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = SimBackend::Create(events_.Callback());
    ASSERT_OK(b);
    backend_ = std::move(*b);
  }

  EventCollector events_;
  std::unique_ptr<SimBackend> backend_;
};

TEST_F(SimBackendTest, RunsForTheEstimatedDurationThenSucceeds) {
  const absl::Time start = absl::Now();
  ASSERT_OK(backend_->Start(SimWork("w1", absl::Milliseconds(300))));
  EXPECT_EQ(backend_->Active(), 1u);
  const WorkloadEvent end = events_.WaitTerminal("w1");
  ASSERT_EQ(end.state, v1::WORKLOAD_STATE_SUCCEEDED);
  // Never early; how late it may be is not this test's business.
  EXPECT_GE(end.time - start, absl::Milliseconds(300));
  const auto all = events_.EventsOf("w1");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].state, v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(backend_->Active(), 0u);
}

TEST_F(SimBackendTest, ZeroDurationEndsAtOnce) {
  ASSERT_OK(backend_->Start(SimWork("w0", absl::ZeroDuration())));
  const WorkloadEvent end = events_.WaitTerminal("w0");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_SUCCEEDED);
  const auto all = events_.EventsOf("w0");
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].state, v1::WORKLOAD_STATE_RUNNING);
}

TEST_F(SimBackendTest, FailOutcomeReportsTheExitCode) {
  ASSERT_OK(backend_->Start(SimWork("wf", absl::Milliseconds(10), true, 7)));
  const WorkloadEvent end = events_.WaitTerminal("wf");
  EXPECT_EQ(end.state, v1::WORKLOAD_STATE_FAILED);
  EXPECT_EQ(end.exit_code, 7);
}

TEST_F(SimBackendTest, CancelEndsItCancelledAndOnlyOnce) {
  ASSERT_OK(backend_->Start(SimWork("wc", absl::Hours(1))));
  ASSERT_TRUE(events_.Wait([](const auto& e) { return !e.empty(); }));
  ASSERT_OK(backend_->Cancel("wc"));
  EXPECT_EQ(events_.WaitTerminal("wc").state, v1::WORKLOAD_STATE_CANCELLED);
  EXPECT_EQ(backend_->Cancel("wc").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(backend_->Cancel("never").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(backend_->Active(), 0u);
}

TEST_F(SimBackendTest, RejectsBadInput) {
  ASSERT_OK(backend_->Start(SimWork("dup", absl::Hours(1))));
  EXPECT_EQ(backend_->Start(SimWork("dup", absl::Hours(1))).code(),
            absl::StatusCode::kAlreadyExists);
  v1::WorkAssignment negative = SimWork("neg", absl::ZeroDuration());
  negative.mutable_spec()->mutable_estimated_duration()->set_seconds(-1);
  absl::Status s = backend_->Start(negative);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("spec.estimated_duration"), absl::string_view::npos) << s;
  EXPECT_EQ(backend_->Start(SimWork("", absl::ZeroDuration())).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SimBackendTest, ThousandsAtOnceEachEndExactlyOnceInOrder) {
  constexpr int kCount = 5000;
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> ms(0, 200);
  for (int i = 0; i < kCount; ++i) {
    ASSERT_OK(backend_->Start(SimWork(absl::StrCat("m", i), absl::Milliseconds(ms(rng)),
                                      i % 10 == 0, i % 10 == 0 ? 1 : 0)));
  }
  ASSERT_TRUE(
      events_.Wait([](const auto& e) { return e.size() >= 2 * static_cast<size_t>(kCount); },
                   absl::Seconds(60)));
  absl::flat_hash_map<std::string, std::vector<v1::WorkloadState>> by_id;
  for (const WorkloadEvent& e : events_.Events()) by_id[e.workload_id].push_back(e.state);
  ASSERT_EQ(by_id.size(), static_cast<size_t>(kCount));
  for (int i = 0; i < kCount; ++i) {
    const auto& states = by_id[absl::StrCat("m", i)];
    ASSERT_EQ(states.size(), 2u) << "m" << i;
    EXPECT_EQ(states[0], v1::WORKLOAD_STATE_RUNNING);
    EXPECT_EQ(states[1], i % 10 == 0 ? v1::WORKLOAD_STATE_FAILED : v1::WORKLOAD_STATE_SUCCEEDED);
  }
  EXPECT_EQ(backend_->Active(), 0u);
}

TEST_F(SimBackendTest, ShutdownStopsWithoutReporting) {
  ASSERT_OK(backend_->Start(SimWork("long", absl::Hours(1))));
  ASSERT_TRUE(events_.Wait([](const auto& e) { return e.size() == 1; }));
  backend_->Shutdown();
  EXPECT_EQ(backend_->Start(SimWork("late", absl::ZeroDuration())).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(events_.Events().size(), 1u);
  backend_->Shutdown();  // idempotent
}

// The sim reads the clock it is given: durations pass when the injected clock moves, not when
// real time does, and events carry the injected clock's time.
TEST(SimBackendClockTest, DurationsAndEventTimesFollowTheInjectedClock) {
  FakeClock clock;
  EventCollector events;
  auto made = SimBackend::Create(events.Callback(), &clock);
  ASSERT_OK(made);
  SimBackend& backend = **made;
  const absl::Time start = AbslNow(clock);

  ASSERT_OK(backend.Start(SimWork("hour", absl::Hours(1))));
  ASSERT_OK(backend.Start(SimWork("minute", absl::Minutes(1))));
  ASSERT_TRUE(events.Wait([](const auto& e) { return e.size() == 2; }));
  for (const WorkloadEvent& e : events.Events()) {
    EXPECT_EQ(e.state, v1::WORKLOAD_STATE_RUNNING);
    EXPECT_EQ(e.time, start) << e.workload_id;
  }

  clock.Advance(std::chrono::minutes(1));
  backend.ClockMoved();
  const WorkloadEvent minute = events.WaitTerminal("minute");
  ASSERT_EQ(minute.state, v1::WORKLOAD_STATE_SUCCEEDED);
  EXPECT_EQ(minute.time, start + absl::Minutes(1));
  // The pass that ended "minute" saw the clock at one minute: the hour is not up.
  EXPECT_EQ(backend.Active(), 1u);
  EXPECT_EQ(events.EventsOf("hour").size(), 1u);

  clock.Advance(std::chrono::minutes(59));
  backend.ClockMoved();
  const WorkloadEvent hour = events.WaitTerminal("hour");
  ASSERT_EQ(hour.state, v1::WORKLOAD_STATE_SUCCEEDED);
  EXPECT_EQ(hour.time, start + absl::Hours(1));

  ASSERT_OK(backend.Start(SimWork("cancelled", absl::Hours(1))));
  clock.Advance(std::chrono::seconds(5));
  ASSERT_OK(backend.Cancel("cancelled"));
  EXPECT_EQ(events.WaitTerminal("cancelled").time, start + absl::Hours(1) + absl::Seconds(5));
}

}  // namespace
}  // namespace gpufed::agent
