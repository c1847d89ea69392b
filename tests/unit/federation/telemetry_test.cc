#include "federation/telemetry.h"

#include <chrono>
#include <cmath>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;
using testing::MakeCluster;
using testing::Uuid;
using testing::WholeGpus;

const Timestamp kStart = Timestamp{} + hours(24 * 365 * 56);
const Fraction kOneSeventh{1, 7};
const Fraction kThreeSevenths{3, 7};

Workload RunOf(WorkloadId id, std::vector<ReplicaAssignment> replicas) {
  Workload w;
  w.id = id;
  w.spec = testing::Gpus("job", 1);
  w.spec.workload_class = WorkloadClass::kTraining;
  w.state = WorkloadState::kRunning;
  w.attempts = 2;
  w.start_time = kStart;
  w.assignment.cluster = "dc";
  w.assignment.epoch = 1;
  w.assignment.replicas = std::move(replicas);
  return w;
}

ReplicaAssignment Mig(int gpu, const std::string& profile, int32_t start) {
  ReplicaAssignment r = WholeGpus("dc-n0", {static_cast<uint32_t>(gpu)});
  r.mig_profile = profile;
  r.mig_start = start;
  return r;
}

TelemetryMinute MinuteOf(WorkloadId id, int gpu, Timestamp at, GpuMetrics metrics) {
  TelemetryMinute m;
  m.gpu_uuid = Uuid("dc-n0", gpu);
  m.minute = at;
  m.covered_seconds = 60;
  m.workload = id;
  m.attempt = 2;
  m.metrics = metrics;
  return m;
}

// ---- EffectiveActivity: the pitfalls ----

TEST(EffectiveActivityTest, SmActivityComesFirstAndIsClampedToOne) {
  GpuMetrics m;
  m.sm_active = 0.6;
  m.gr_engine_active = 0.9;
  m.gpu_util = 100;
  EXPECT_EQ(EffectiveActivity(m, std::nullopt), (Activity{0.6, ActivitySource::kSmActive}));
  // On a MIG instance DCGM can read SM activity above 1: it counts as fully busy, not more.
  m.sm_active = 1.3;
  EXPECT_EQ(EffectiveActivity(m, kOneSeventh), (Activity{1.0, ActivitySource::kSmActive}));
}

TEST(EffectiveActivityTest, EngineActivityOfAMigInstanceIsNormalisedByItsComputeShare) {
  // A fully busy 1g instance reads 1/7 of the GPU's engine time: the 1/n ceiling.
  GpuMetrics m;
  m.gr_engine_active = 1.0 / 7;
  const Activity one = EffectiveActivity(m, kOneSeventh);
  EXPECT_EQ(one.source, ActivitySource::kEngineActive);
  EXPECT_DOUBLE_EQ(one.value, 1.0);
  // Half busy on a 3g instance: 3/14 of the GPU.
  m.gr_engine_active = 3.0 / 14;
  EXPECT_DOUBLE_EQ(EffectiveActivity(m, kThreeSevenths).value, 0.5);
  // A reading past the ceiling is clamped, not amplified beyond 1.
  m.gr_engine_active = 0.5;
  EXPECT_DOUBLE_EQ(EffectiveActivity(m, kOneSeventh).value, 1.0);
  // A whole GPU's engine activity is taken as it is.
  m.gr_engine_active = 0.25;
  EXPECT_DOUBLE_EQ(EffectiveActivity(m, std::nullopt).value, 0.25);
}

TEST(EffectiveActivityTest, WithoutProfilingFieldsOnlyTheCoarseCounterMeasuresAndIsFlagged) {
  // An older GPU: no DCGM_FI_PROF_* fields, only NVML's utilisation.
  GpuMetrics m;
  m.gpu_util = 100;
  m.power_watts = 250;
  EXPECT_EQ(EffectiveActivity(m, std::nullopt), (Activity{1.0, ActivitySource::kCoarse}));
  // NVML does not attribute utilisation to MIG devices: a MIG minute with only it measures
  // nothing.
  EXPECT_EQ(EffectiveActivity(m, kOneSeventh), (Activity{0.0, ActivitySource::kNone}));
  // No activity field at all.
  EXPECT_EQ(EffectiveActivity(GpuMetrics{}, std::nullopt).source, ActivitySource::kNone);
}

// ---- AttributeMinute ----

TEST(AttributeMinuteTest, AWholeGpuMinuteMeasuresTheCoveredSecondsTimesActivity) {
  const Cluster c = MakeCluster("dc", 1, 8, "H100-80GB");
  const Workload run = RunOf(7, {WholeGpus("dc-n0", {0, 1})});
  GpuMetrics g;
  g.sm_active = 0.25;
  TelemetryMinute m = MinuteOf(7, 1, kStart + minutes(5), g);
  m.covered_seconds = 40;
  const std::optional<TelemetryUse> use = AttributeMinute(m, run, c, MeteringPolicy{});
  ASSERT_TRUE(use.has_value());
  EXPECT_EQ(use->measured_gpu_us, 40'000'000);
  EXPECT_EQ(use->effective_gpu_us, 10'000'000);
  EXPECT_EQ(use->coarse_gpu_us, 0);
  EXPECT_EQ(use->usage.tenant, "acme");
  EXPECT_EQ(use->usage.gpu_model, "H100-80GB");
  EXPECT_EQ(use->usage.workload_class, WorkloadClass::kTraining);
  EXPECT_EQ(use->usage.from, kStart + minutes(5));
}

TEST(AttributeMinuteTest, AMigMinuteIsWeightedByTheInstancesShareAndItsEngineNormalised) {
  const Cluster c = MakeCluster("dc", 1, 8, "H100-80GB");
  const Workload run = RunOf(7, {Mig(0, "3g.40gb", 4)});
  GpuMetrics g;
  g.gr_engine_active = 3.0 / 7;  // fully busy, as DCGM reports it for the instance
  TelemetryMinute m = MinuteOf(7, 0, kStart, g);
  m.mig_profile = "3g.40gb";
  m.mig_start = 4;
  const std::optional<TelemetryUse> use = AttributeMinute(m, run, c, MeteringPolicy{});
  ASSERT_TRUE(use.has_value());
  // 60 s x 3/7 of the GPU (compute basis), all of it effective.
  EXPECT_EQ(use->measured_gpu_us, 25'714'286);
  EXPECT_EQ(use->effective_gpu_us, 25'714'286);
  EXPECT_EQ(use->activity.source, ActivitySource::kEngineActive);
  // Another instance of the same GPU is not this run's.
  m.mig_start = 0;
  EXPECT_FALSE(AttributeMinute(m, run, c, MeteringPolicy{}).has_value());
}

TEST(AttributeMinuteTest, AShareIsChargedItsMilliOfTheGpusActivity) {
  const Cluster c = MakeCluster("dc", 1, 8, "L4", 23034);
  ReplicaAssignment share = WholeGpus("dc-n0", {3});
  share.gpu_milli = 250;
  const Workload run = RunOf(7, {share});
  GpuMetrics g;
  g.sm_active = 0.8;
  const std::optional<TelemetryUse> use =
      AttributeMinute(MinuteOf(7, 3, kStart, g), run, c, MeteringPolicy{});
  ASSERT_TRUE(use.has_value());
  EXPECT_EQ(use->measured_gpu_us, 15'000'000);
  EXPECT_EQ(use->effective_gpu_us, 12'000'000);
}

TEST(AttributeMinuteTest, CoarseMinutesAreCountedAndFlagged) {
  const Cluster c = MakeCluster("dc", 1, 4, "P100-16GB");
  const Workload run = RunOf(7, {WholeGpus("dc-n0", {0})});
  GpuMetrics g;
  g.gpu_util = 100;
  const std::optional<TelemetryUse> use =
      AttributeMinute(MinuteOf(7, 0, kStart, g), run, c, MeteringPolicy{});
  ASSERT_TRUE(use.has_value());
  EXPECT_EQ(use->measured_gpu_us, 60'000'000);
  EXPECT_EQ(use->coarse_gpu_us, 60'000'000);
  EXPECT_EQ(use->effective_gpu_us, 60'000'000);
}

TEST(AttributeMinuteTest, AMinuteWithNoActivityFieldIsKeptButMeasuresNothing) {
  const Cluster c = MakeCluster("dc", 1, 8, "H100-80GB");
  const Workload run = RunOf(7, {WholeGpus("dc-n0", {0})});
  GpuMetrics g;
  g.fb_used_mib = 1000;
  const std::optional<TelemetryUse> use =
      AttributeMinute(MinuteOf(7, 0, kStart, g), run, c, MeteringPolicy{});
  ASSERT_TRUE(use.has_value());
  EXPECT_EQ(use->activity.source, ActivitySource::kNone);
  EXPECT_EQ(use->measured_gpu_us, 0);
}

TEST(AttributeMinuteTest, OnlyTheRunsOwnGpusAttemptClusterAndTimeCount) {
  const Cluster c = MakeCluster("dc", 1, 8, "H100-80GB");
  Workload run = RunOf(7, {WholeGpus("dc-n0", {0})});
  GpuMetrics g;
  g.sm_active = 0.5;
  const TelemetryMinute ok = MinuteOf(7, 0, kStart, g);
  ASSERT_TRUE(AttributeMinute(ok, run, c, MeteringPolicy{}).has_value());

  TelemetryMinute other_gpu = ok;
  other_gpu.gpu_uuid = Uuid("dc-n0", 5);
  EXPECT_FALSE(AttributeMinute(other_gpu, run, c, MeteringPolicy{}).has_value());
  TelemetryMinute old_attempt = ok;
  old_attempt.attempt = 1;
  EXPECT_FALSE(AttributeMinute(old_attempt, run, c, MeteringPolicy{}).has_value());
  // Another cluster's agent cannot charge this run.
  const Cluster elsewhere = MakeCluster("edge", 1, 8, "H100-80GB");
  EXPECT_FALSE(AttributeMinute(ok, run, elsewhere, MeteringPolicy{}).has_value());
  // Before the run started, or after it ended.
  EXPECT_FALSE(AttributeMinute(MinuteOf(7, 0, kStart - minutes(1), g), run, c, MeteringPolicy{})
                   .has_value());
  run.end_time = kStart + seconds(30);
  const std::optional<TelemetryUse> cut = AttributeMinute(ok, run, c, MeteringPolicy{});
  ASSERT_TRUE(cut.has_value());
  EXPECT_EQ(cut->measured_gpu_us, 30'000'000);
}

// ---- ValidateTelemetry ----

TEST(ValidateTelemetryTest, NamesTheFieldOfTheMinuteThatIsWrong) {
  GpuMetrics g;
  g.sm_active = 0.5;
  std::vector<TelemetryMinute> minutes = {MinuteOf(7, 0, kStart, g), MinuteOf(7, 1, kStart, g)};
  EXPECT_OK(ValidateTelemetry(minutes));

  auto refused = [&](auto mutate, const std::string& field) {
    std::vector<TelemetryMinute> bad = minutes;
    mutate(bad[1]);
    const absl::Status s = ValidateTelemetry(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_TRUE(absl::StartsWith(s.message(), "minutes[1]." + field)) << s.message();
  };
  refused([](TelemetryMinute& m) { m.metrics.sm_active = std::nan(""); }, "sm_active");
  refused([](TelemetryMinute& m) { m.metrics.sm_active = -0.1; }, "sm_active");
  refused([](TelemetryMinute& m) { m.metrics.dram_active = 1e9; }, "dram_active");
  refused([](TelemetryMinute& m) { m.metrics.gpu_util = 101; }, "gpu_util");
  refused([](TelemetryMinute& m) { m.metrics.power_watts = -1; }, "power_watts");
  refused([](TelemetryMinute& m) { m.metrics.gpu_temp_celsius = 1000; }, "gpu_temp_celsius");
  refused([](TelemetryMinute& m) { m.metrics.fb_used_mib = 1e12; }, "fb_used_mib");
  refused([](TelemetryMinute& m) { m.minute += seconds(1); }, "minute");
  refused([](TelemetryMinute& m) { m.covered_seconds = 0; }, "covered_seconds");
  refused([](TelemetryMinute& m) { m.covered_seconds = 61; }, "covered_seconds");
  refused([](TelemetryMinute& m) { m.gpu_uuid.clear(); }, "gpu_uuid");
  refused([](TelemetryMinute& m) { m.gpu_uuid = std::string(129, 'x'); }, "gpu_uuid");
  refused([](TelemetryMinute& m) { m.mig_profile = std::string(33, 'x'); }, "mig_profile");
  refused([](TelemetryMinute& m) { m.workload = 0; }, "workload_id");
  refused([](TelemetryMinute& m) { m.attempt = 0; }, "attempt");

  std::vector<TelemetryMinute> many(kMaxTelemetryMinutes + 1, minutes[0]);
  EXPECT_EQ(ValidateTelemetry(many).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpufed
