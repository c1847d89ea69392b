// Metering through the control plane and its loop (docs/chargeback.md), on the in-memory store
// with a FakeClock: long runs metered as they go, a failover of the scheduler, a lost attempt
// and its retry. The stores' own rules are the contract suite's (tests/storage/).

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "federation/metering.h"
#include "gtest/gtest.h"
#include "tests/unit/federation/plane_test_base.h"

namespace gpufed {
namespace {

using std::chrono::minutes;
using testing::Gang;
using testing::User;

// Cluster "dc" (8 H100s) priced on demand at 3,600,000 micro-units an hour: one micro-unit per
// GPU-millisecond.
class MeteringUseCaseTest : public testing::PlaneLoopTestBase {
 protected:
  MeteringUseCaseTest() {
    ClusterDeclaration d;
    d.cluster = "dc";
    d.prices = {
        {"H100-80GB", "", CapacityType::kOnDemand, 3'600'000, Timestamp{} + std::chrono::hours(1)}};
    EXPECT_OK(store_.PutDeclarations({d}));
    Register("dc");
  }

  // A two-GPU workload of acme, placed and started now.
  WorkloadId StartTwoGpus(RetryPolicy retry = RetryPolicy()) {
    WorkloadSpec spec = Gang(1, 2);
    spec.retry = retry;
    absl::StatusOr<SubmitResult> submitted = Submit(User("acme"), spec);
    EXPECT_OK(submitted);
    const WorkloadId id = submitted.ok() ? submitted->workload.id : 0;
    Step();
    EXPECT_EQ(MustGet(id).state, WorkloadState::kPlaced);
    EXPECT_OK(Report("dc", id, WorkloadState::kRunning));
    return id;
  }

  // `n` minutes of the loop `loop`, a heartbeat and a step each minute.
  void RunFor(int n, ControlLoop& loop) {
    for (int i = 0; i < n; ++i) {
      clock_.Advance(minutes(1));
      Heartbeat("dc");
      loop.RunOnce(clock_.Monotonic());
    }
  }

  std::vector<UsageRecord> Records() {
    UsageFilter f;
    f.from = Timestamp{};
    f.to = clock_.Now() + std::chrono::hours(1);
    f.page_size = 10000;
    absl::StatusOr<std::vector<UsageRecord>> r = store_.ListUsage(f);
    EXPECT_OK(r);
    return r.ok() ? *r : std::vector<UsageRecord>{};
  }

  // Per (attempt, GPU), the spans in order; each must begin where the one before ended.
  std::map<std::pair<uint32_t, std::string>, std::vector<std::pair<Timestamp, Timestamp>>> Spans() {
    std::map<std::pair<uint32_t, std::string>, std::vector<std::pair<Timestamp, Timestamp>>> out;
    for (const UsageRecord& r : Records()) out[{r.attempt, r.gpu_uuid}].emplace_back(r.from, r.to);
    return out;
  }

  static void ExpectContiguous(const std::vector<std::pair<Timestamp, Timestamp>>& spans,
                               Timestamp from, Timestamp to) {
    ASSERT_FALSE(spans.empty());
    EXPECT_EQ(spans.front().first, from);
    EXPECT_EQ(spans.back().second, to);
    for (size_t i = 1; i < spans.size(); ++i) EXPECT_EQ(spans[i].first, spans[i - 1].second);
  }

  static std::pair<double, int64_t> Totals(const std::vector<UsageRecord>& records) {
    double gpu_seconds = 0;
    int64_t cost = 0;
    for (const UsageRecord& r : records) {
      gpu_seconds += r.GpuSeconds();
      cost += r.cost_micros;
    }
    return {gpu_seconds, cost};
  }
};

TEST_F(MeteringUseCaseTest, ALongRunIsMeteredAsItGoesAndEndsWhereItEnded) {
  const WorkloadId id = StartTwoGpus();
  const Timestamp start = clock_.Now();
  RunFor(90, loop_);
  // Metered as it goes: up to the last whole hour, both GPUs.
  const Timestamp hour = std::chrono::floor<std::chrono::hours>(clock_.Now());
  ASSERT_FALSE(Records().empty());
  for (const auto& [key, list] : Spans()) EXPECT_EQ(list.back().second, hour);
  clock_.Advance(std::chrono::seconds(17));
  ASSERT_OK(Report("dc", id, WorkloadState::kSucceeded));
  const Timestamp end = clock_.Now();

  const auto spans = Spans();
  ASSERT_EQ(spans.size(), 2u);
  for (const auto& [key, list] : spans) ExpectContiguous(list, start, end);
  for (const UsageRecord& r : Records()) {  // no record crosses a whole hour
    EXPECT_EQ(std::chrono::floor<std::chrono::hours>(r.from),
              std::chrono::floor<std::chrono::hours>(r.to - std::chrono::microseconds(1)));
  }
  const auto [gpu_seconds, cost] = Totals(Records());
  EXPECT_DOUBLE_EQ(gpu_seconds, 2 * (90 * 60 + 17));
  EXPECT_EQ(cost, 2 * (90 * 60 + 17) * 1000);
  // Nothing more once it ended.
  RunFor(5, loop_);
  EXPECT_DOUBLE_EQ(Totals(Records()).first, 2 * (90 * 60 + 17));
}

TEST_F(MeteringUseCaseTest, MeteringGoesOnWhenAnotherSchedulerTakesOver) {
  const WorkloadId id = StartTwoGpus();
  const Timestamp start = clock_.Now();
  RunFor(30, loop_);
  // This scheduler loses its lock; another process's takes over, on the same database.
  leader_.grant = false;
  loop_.RunOnce(clock_.Monotonic());
  testing::FakeLeader other_leader;
  ControlPlanePorts ports = Ports();
  ControlPlane other_plane(ports);
  ControlLoop other_loop(&other_plane, &scheduler_, &agents_, &other_leader, &clock_, nullptr,
                         LoopOptions());
  RunFor(30, other_loop);
  ASSERT_OK(Report("dc", id, WorkloadState::kSucceeded));
  const Timestamp end = clock_.Now();
  for (const auto& [key, list] : Spans()) ExpectContiguous(list, start, end);
  EXPECT_DOUBLE_EQ(Totals(Records()).first, 2 * 60 * 60);
}

TEST_F(MeteringUseCaseTest, ALostAttemptIsMeteredToItsStopAndItsRetryFromItsOwnStart) {
  RetryPolicy retry;
  retry.max_attempts = 2;
  retry.on_cluster_lost = true;
  const WorkloadId id = StartTwoGpus(retry);
  const Timestamp first_start = clock_.Now();
  RunFor(10, loop_);
  // The agent's lease ran out: it stopped the work by itself; the attempt ends, and the
  // workload waits to be placed again.
  ASSERT_OK(ReportAttempt("dc", id, WorkloadState::kLost, 1));
  const Timestamp first_end = clock_.Now();
  ASSERT_EQ(MustGet(id).state, WorkloadState::kPending);
  clock_.Advance(minutes(3));  // pending: not metered
  Heartbeat("dc");
  Step();
  ASSERT_EQ(MustGet(id).state, WorkloadState::kPlaced);
  ASSERT_OK(ReportAttempt("dc", id, WorkloadState::kRunning, 2));
  const Timestamp second_start = clock_.Now();
  RunFor(5, loop_);
  ASSERT_OK(ReportAttempt("dc", id, WorkloadState::kSucceeded, 2));
  const Timestamp second_end = clock_.Now();

  const auto spans = Spans();
  ASSERT_EQ(spans.size(), 4u);  // two GPUs, two attempts
  for (const auto& [key, list] : spans) {
    if (key.first == 1) {
      ExpectContiguous(list, first_start, first_end);
    } else {
      ExpectContiguous(list, second_start, second_end);
    }
  }
  EXPECT_DOUBLE_EQ(Totals(Records()).first, 2 * (10 + 5) * 60);
}

}  // namespace
}  // namespace gpufed
