// Idle guarantees (docs/chargeback.md#idle-guarantees): what a quota's guarantee reserved and
// left unused, cut at UTC midnights and summed by period.

#include "federation/idle_guarantee.h"

#include <chrono>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpufed {
namespace {

using std::chrono::hours;
using std::chrono::minutes;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const Timestamp kMidnight = Timestamp{} + hours(24 * 20'000);  // a UTC midnight
constexpr int64_t kHourUs = 3'600'000'000;

QuotaUsage Guarantee(const std::string& tenant, const std::string& project, int64_t guaranteed,
                     int64_t used) {
  QuotaUsage u;
  u.key = QuotaKey{tenant, project, "H100-80GB"};
  Quota q;
  q.key = u.key;
  q.guaranteed_milli = guaranteed;
  u.quota = q;
  u.used_milli = used;
  return u;
}

TEST(IdleGuaranteeTest, TheUnheldPartOfAGuaranteeIsIdleForTheSpan) {
  // 8 GPUs guaranteed, 3 held, for an hour: 8 GPU-hours reserved, 5 idle.
  const std::vector<GuaranteeUse> uses = GuaranteeUses({Guarantee("acme", "", 8000, 3000)},
                                                       kMidnight + hours(2), kMidnight + hours(3));
  ASSERT_THAT(uses, SizeIs(1));
  EXPECT_EQ(uses[0].day, kMidnight);
  EXPECT_EQ(uses[0].key, (QuotaKey{"acme", "", "H100-80GB"}));
  EXPECT_EQ(uses[0].reserved_unit_us, 8 * kHourUs);
  EXPECT_EQ(uses[0].idle_unit_us, 5 * kHourUs);
}

TEST(IdleGuaranteeTest, HoldingMoreThanTheGuaranteeLeavesNothingIdleAndNoGuaranteeReservesNothing) {
  QuotaUsage no_quota = Guarantee("globex", "", 0, 4000);
  no_quota.quota.reset();
  const std::vector<GuaranteeUse> uses =
      GuaranteeUses({Guarantee("acme", "", 2000, 5000), Guarantee("initech", "", 0, 0), no_quota},
                    kMidnight, kMidnight + minutes(30));
  ASSERT_THAT(uses, SizeIs(1));
  EXPECT_EQ(uses[0].reserved_unit_us, kHourUs);  // 2 GPUs x half an hour
  EXPECT_EQ(uses[0].idle_unit_us, 0);
}

TEST(IdleGuaranteeTest, ASpanAcrossMidnightIsCutIntoItsDaysAndFractionsAreKept) {
  // Half a GPU-equivalent (500 milli) guaranteed, nothing held, 23:00 to 01:00.
  const std::vector<GuaranteeUse> uses = GuaranteeUses({Guarantee("acme", "research", 500, 0)},
                                                       kMidnight - hours(1), kMidnight + hours(1));
  ASSERT_THAT(uses, SizeIs(2));
  EXPECT_EQ(uses[0].day, kMidnight - hours(24));
  EXPECT_EQ(uses[1].day, kMidnight);
  for (const GuaranteeUse& u : uses) {
    EXPECT_EQ(u.reserved_unit_us, kHourUs / 2);
    EXPECT_EQ(u.idle_unit_us, kHourUs / 2);
  }
  EXPECT_THAT(GuaranteeUses({Guarantee("acme", "", 1000, 0)}, kMidnight, kMidnight), IsEmpty());
}

TEST(IdleGuaranteeTest, LinesSumThePeriodsUsesPerQuotaInOrder) {
  std::vector<GuaranteeUse> uses;
  for (int d = 0; d < 3; ++d) {
    for (const GuaranteeUse& u :
         GuaranteeUses({Guarantee("globex", "", 1000, 0), Guarantee("acme", "", 2000, 1000)},
                       kMidnight + hours(24 * d), kMidnight + hours(24 * d + 1))) {
      uses.push_back(u);
    }
  }
  UsageQuery q;
  q.from = kMidnight;
  q.to = kMidnight + hours(48);  // the third day is outside
  const std::vector<GuaranteeLine> lines = SumGuarantees(q, uses);
  ASSERT_THAT(lines, SizeIs(2));
  EXPECT_EQ(lines[0].key.tenant, "acme");
  EXPECT_EQ(lines[0].period_start, kMidnight);
  EXPECT_EQ(lines[0].reserved_unit_us, 4 * kHourUs);
  EXPECT_EQ(lines[0].idle_unit_us, 2 * kHourUs);
  EXPECT_EQ(lines[1].key.tenant, "globex");
  EXPECT_EQ(lines[1].idle_unit_us, 2 * kHourUs);

  q.period = ReportPeriod::kDay;
  q.tenant = "globex";
  EXPECT_THAT(SumGuarantees(q, uses), SizeIs(2));
  q.cluster = "anywhere";
  EXPECT_THAT(SumGuarantees(q, uses), IsEmpty());
}

TEST(IdleGuaranteeTest, ValidationNamesTheUseAndField) {
  GuaranteeUse ok;
  ok.day = kMidnight;
  ok.reserved_unit_us = 10;
  ok.idle_unit_us = 10;
  GuaranteeUse over = ok;
  over.idle_unit_us = 11;
  GuaranteeUse noon = ok;
  noon.day = kMidnight + hours(12);
  EXPECT_TRUE(ValidateGuaranteeUses({ok}).ok());
  EXPECT_EQ(ValidateGuaranteeUses({ok, over}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateGuaranteeUses({ok, over}).message().substr(0, 21), "uses[1].idle_unit_us:");
  EXPECT_EQ(ValidateGuaranteeUses({noon}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpufed
