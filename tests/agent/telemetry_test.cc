#include "agent/telemetry.h"

#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"

namespace gpufed::agent {
namespace {

using google::protobuf::util::TimeUtil;
using ::testing::SizeIs;

const absl::Time kMinute = absl::FromUnixSeconds(int64_t{1'800'000'000} / 60 * 60);

Occupant On(const std::string& workload, const std::string& model, v1::WorkloadClass c) {
  Occupant o;
  o.workload_id = workload;
  o.attempt = 1;
  o.workload_class = c;
  o.gpu_uuid = "GPU-0";
  o.gpu_model = model;
  o.gpu_memory_mib = 81559;
  return o;
}

TEST(SimTelemetryTest, TrainingKeepsSmsBusyAndInteractiveSessionsMostlyIdle) {
  SimTelemetry sim;
  const std::vector<GpuMetrics> s =
      sim.Sample({On("1", "H100-80GB", v1::WORKLOAD_CLASS_TRAINING),
                  On("2", "H100-80GB", v1::WORKLOAD_CLASS_INTERACTIVE)},
                 kMinute);
  ASSERT_THAT(s, SizeIs(2));
  ASSERT_TRUE(s[0].sm_active && s[1].sm_active);
  EXPECT_GT(*s[0].sm_active, 0.6);
  EXPECT_LT(*s[1].sm_active, 0.1);
  // Both read the coarse counter high-ish: the reason it misleads.
  EXPECT_GT(*s[0].gpu_util, 90);
  EXPECT_TRUE(s[0].fb_used_mib && s[0].power_watts && s[0].gpu_temp_celsius);
  // The same workload at the same second reads the same.
  EXPECT_EQ(sim.Sample({On("1", "H100-80GB", v1::WORKLOAD_CLASS_TRAINING)}, kMinute)[0], s[0]);
}

TEST(SimTelemetryTest, AMigInstanceReadsAsDcgmReportsIt) {
  SimTelemetry sim;
  bool above_one = false;
  // Many workloads and seconds: the bounds hold whatever the noise.
  for (int w = 0; w < 200; ++w) {
    Occupant o = On(std::to_string(w), "H100-80GB", v1::WORKLOAD_CLASS_TRAINING);
    o.mig_profile = "1g.10gb";
    o.mig_start = 3;
    const GpuMetrics m = sim.Sample({o}, kMinute + absl::Seconds(10 * w))[0];
    // Engine activity as a part of the whole GPU: at most 1/7 for a 1g instance.
    ASSERT_TRUE(m.gr_engine_active.has_value());
    EXPECT_LE(*m.gr_engine_active, 1.0 / 7 + 1e-9);
    EXPECT_GT(*m.gr_engine_active, 0.1);
    // A busy instance reads SM activity 15 % above what it did (training: 0.82 +- 8 %); no
    // coarse counter on MIG.
    ASSERT_TRUE(m.sm_active.has_value());
    EXPECT_GT(*m.sm_active, 0.82 * 0.92 * 1.15 - 1e-9);
    EXPECT_LT(*m.sm_active, 0.82 * 1.08 * 1.15 + 1e-9);
    above_one = above_one || *m.sm_active > 1;
    EXPECT_FALSE(m.gpu_util.has_value());
  }
  EXPECT_TRUE(above_one) << "no sample read SM activity above 1, the pitfall the server clamps";
}

TEST(SimTelemetryTest, GpusOlderThanVoltaHaveNoProfilingFields) {
  SimTelemetry sim;
  const GpuMetrics m =
      sim.Sample({On("1", "Tesla-P100-16GB", v1::WORKLOAD_CLASS_BATCH)}, kMinute)[0];
  EXPECT_FALSE(m.sm_active || m.gr_engine_active || m.sm_occupancy || m.pipe_tensor_active ||
               m.dram_active);
  ASSERT_TRUE(m.gpu_util.has_value());
  EXPECT_TRUE(LacksProfiling("Tesla-P100-16GB"));
  EXPECT_FALSE(LacksProfiling("H100-80GB"));
}

TEST(MinuteAggregatorTest, SendsEachEndedMinuteOnceWithMeansAndCoverage) {
  MinuteAggregator agg(absl::Seconds(10), 100);
  const Occupant o = On("7", "H100-80GB", v1::WORKLOAD_CLASS_TRAINING);
  GpuMetrics a;
  a.sm_active = 0.2;
  a.power_watts = 100;
  GpuMetrics b;
  b.sm_active = 0.6;  // no power reading in this sample
  agg.Add(o, a, kMinute + absl::Seconds(5));
  agg.Add(o, b, kMinute + absl::Seconds(15));
  agg.Add(o, a, kMinute + absl::Seconds(65));  // the next minute
  // Nothing has ended yet.
  EXPECT_THAT(agg.TakeEnded(kMinute + absl::Seconds(59), 10), SizeIs(0));

  const std::vector<v1::GpuMinute> ended = agg.TakeEnded(kMinute + absl::Seconds(70), 10);
  ASSERT_THAT(ended, SizeIs(1));
  const v1::GpuMinute& m = ended[0];
  EXPECT_EQ(m.minute(), TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(kMinute)));
  EXPECT_EQ(m.workload_id(), "7");
  EXPECT_EQ(m.attempt(), 1u);
  EXPECT_EQ(m.gpu_uuid(), "GPU-0");
  EXPECT_EQ(m.covered_seconds(), 20u);  // two samples of 10 s
  EXPECT_DOUBLE_EQ(m.sm_active(), 0.4);
  EXPECT_DOUBLE_EQ(m.power_watts(), 100);  // the mean of the samples that had it
  EXPECT_FALSE(m.has_gpu_util());
  EXPECT_THAT(agg.TakeEnded(kMinute + absl::Seconds(70), 10), SizeIs(0));
  EXPECT_THAT(agg.TakeEnded(kMinute + absl::Seconds(125), 10), SizeIs(1));
}

TEST(MinuteAggregatorTest, KeepsOnlyTheNewestMinutesWhenTooManyWait) {
  MinuteAggregator agg(absl::Seconds(60), 3);
  const Occupant o = On("7", "H100-80GB", v1::WORKLOAD_CLASS_TRAINING);
  GpuMetrics g;
  g.sm_active = 0.5;
  for (int i = 0; i < 5; ++i) agg.Add(o, g, kMinute + absl::Minutes(i));
  const std::vector<v1::GpuMinute> ended = agg.TakeEnded(kMinute + absl::Minutes(10), 10);
  ASSERT_THAT(ended, SizeIs(3));
  EXPECT_EQ(ended[0].minute(), TimeUtil::SecondsToTimestamp(absl::ToUnixSeconds(kMinute) + 120));
  EXPECT_EQ(agg.dropped(), 2u);
}

}  // namespace
}  // namespace gpufed::agent
