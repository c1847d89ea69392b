#include "federation/usage_report.h"

#include <chrono>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using ::gpufed::testing::StatusIs;
using std::chrono::hours;
using std::chrono::minutes;

Timestamp At(int y, int m, int d, int h = 0, int min = 0) {
  return absl::ToChronoTime(
      absl::FromCivil(absl::CivilSecond(y, m, d, h, min, 0), absl::UTCTimeZone()));
}

UsageRecord Record(const std::string& tenant, const std::string& cluster, Timestamp from,
                   Timestamp to, int64_t cost, Fraction fraction = {1, 1}, bool priced = true) {
  UsageRecord r;
  r.workload = 1;
  r.tenant = tenant;
  r.project = "p";
  r.cluster = cluster;
  r.gpu_model = "H100-80GB";
  r.workload_class = WorkloadClass::kTraining;
  r.from = from;
  r.to = to;
  r.fraction = fraction;
  if (priced) r.price_micros_per_hour = 1;
  r.cost_micros = cost;
  return r;
}

UsageQuery Query(Timestamp from, Timestamp to, ReportPeriod period,
                 std::vector<ReportDimension> by) {
  UsageQuery q;
  q.from = from;
  q.to = to;
  q.period = period;
  q.group_by = std::move(by);
  return q;
}

TEST(UsageReportTest, LinesSumWholeRecordsByPeriodAndKeysInOrder) {
  // Tuesday 2026-06-30 and Wednesday 2026-07-01: two days, one ISO week, two months.
  const std::vector<UsageRecord> records = {
      Record("globex", "c1", At(2026, 6, 30, 23), At(2026, 7, 1, 0), 100),
      Record("acme", "c1", At(2026, 6, 30, 10), At(2026, 6, 30, 10, 30), 50),
      Record("acme", "c2", At(2026, 7, 1, 5), At(2026, 7, 1, 6), 70, {1, 7}),
      Record("acme", "c1", At(2026, 7, 1, 1), At(2026, 7, 1, 2), 30, {1, 1}, false),
  };
  const Timestamp from = At(2026, 6, 29);
  const Timestamp to = At(2026, 7, 3);

  std::vector<UsageLine> day =
      SumUsage(Query(from, to, ReportPeriod::kDay, {ReportDimension::kTenant}), records);
  ASSERT_EQ(day.size(), 3u);
  EXPECT_EQ(day[0].period_start, At(2026, 6, 30));
  EXPECT_EQ(day[0].keys, std::vector<std::string>{"acme"});
  EXPECT_EQ(day[0].gpu_microseconds, int64_t{1'800'000'000});
  EXPECT_EQ(day[1].period_start, At(2026, 6, 30));
  EXPECT_EQ(day[1].keys, std::vector<std::string>{"globex"});
  EXPECT_EQ(day[2].period_start, At(2026, 7, 1));
  EXPECT_EQ(day[2].keys, std::vector<std::string>{"acme"});
  // An hour at 1/7 (514,285,714.29 rounds down) and an unpriced hour.
  EXPECT_EQ(day[2].gpu_microseconds, int64_t{514'285'714} + 3'600'000'000);
  EXPECT_EQ(day[2].unpriced_gpu_microseconds, int64_t{3'600'000'000});
  EXPECT_EQ(day[2].cost_micros, 100);
  EXPECT_EQ(day[2].records, 2);

  const std::vector<UsageLine> week = SumUsage(Query(from, to, ReportPeriod::kWeek, {}), records);
  ASSERT_EQ(week.size(), 1u);
  EXPECT_EQ(week[0].period_start, At(2026, 6, 29));  // the Monday
  EXPECT_EQ(week[0].cost_micros, 250);
  EXPECT_EQ(week[0].records, 4);

  const std::vector<UsageLine> month = SumUsage(
      Query(from, to, ReportPeriod::kMonth, {ReportDimension::kCluster, ReportDimension::kTenant}),
      records);
  ASSERT_EQ(month.size(), 4u);
  EXPECT_EQ(month[0].period_start, At(2026, 6, 1));
  EXPECT_EQ(month[0].keys, (std::vector<std::string>{"c1", "acme"}));
  EXPECT_EQ(month[1].keys, (std::vector<std::string>{"c1", "globex"}));
  EXPECT_EQ(month[2].period_start, At(2026, 7, 1));
  EXPECT_EQ(month[2].keys, (std::vector<std::string>{"c1", "acme"}));
  EXPECT_EQ(month[3].keys, (std::vector<std::string>{"c2", "acme"}));

  const std::vector<UsageLine> whole =
      SumUsage(Query(from, to, ReportPeriod::kWhole, {ReportDimension::kWorkloadClass}), records);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].period_start, from);
  EXPECT_EQ(whole[0].keys, std::vector<std::string>{"training"});
}

TEST(UsageReportTest, AQueryIsWholeDaysForwardBoundedAndAsksForEachDimensionOnce) {
  const Timestamp from = At(2026, 7, 1);
  const auto day = hours(24);
  EXPECT_OK(ValidateUsageQuery(Query(from, from + day, ReportPeriod::kWhole, {})));
  EXPECT_THAT(ValidateUsageQuery(Query(from + hours(1), from + day, ReportPeriod::kDay, {})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateUsageQuery(Query(from, from + day + minutes(1), ReportPeriod::kDay, {})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateUsageQuery(Query(from, from, ReportPeriod::kDay, {})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(
      ValidateUsageQuery(Query(from, from + kMaxReportWindow + day, ReportPeriod::kDay, {})),
      StatusIs(absl::StatusCode::kInvalidArgument));
  // Centuries apart: refused, without overflowing the difference.
  const Timestamp earliest =
      std::chrono::floor<std::chrono::days>(Timestamp::min()) + std::chrono::days(1);
  const Timestamp latest = std::chrono::floor<std::chrono::days>(Timestamp::max());
  EXPECT_THAT(ValidateUsageQuery(Query(earliest, latest, ReportPeriod::kWhole, {})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateUsageQuery(Query(from, from + day, ReportPeriod::kDay,
                                       {ReportDimension::kTenant, ReportDimension::kTenant})),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(UsageReportTest, NamesRoundTrip) {
  for (int i = 0; i < kReportDimensions; ++i) {
    const auto d = static_cast<ReportDimension>(i);
    EXPECT_EQ(ParseReportDimension(ReportDimensionName(d)), d);
  }
  for (ReportPeriod p :
       {ReportPeriod::kWhole, ReportPeriod::kDay, ReportPeriod::kWeek, ReportPeriod::kMonth}) {
    EXPECT_EQ(ParseReportPeriod(ReportPeriodName(p)), p);
  }
  EXPECT_FALSE(ParseReportDimension("user").has_value());
  EXPECT_FALSE(ParseReportPeriod("year").has_value());
}

}  // namespace
}  // namespace gpufed
