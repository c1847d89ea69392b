#include "cli/duration.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed::cli {
namespace {

using ::gpufed::testing::StatusIs;
using ::testing::HasSubstr;

TEST(DurationTest, ParsesTheFormsPeopleType) {
  EXPECT_EQ(*ParseDuration("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("5m"), absl::Minutes(5));
  EXPECT_EQ(*ParseDuration("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDuration("250ms"), absl::Milliseconds(250));
  EXPECT_EQ(*ParseDuration("1.5s"), absl::Milliseconds(1500));
  EXPECT_EQ(*ParseDuration("0"), absl::ZeroDuration());
  EXPECT_EQ(*ParseDuration("0s"), absl::ZeroDuration());
}

TEST(DurationTest, RejectsWhatIsNotADuration) {
  for (const char* bad : {"", "30", "5 minutes", "1d", "-5s", "inf", "s", "1h30", "abc"}) {
    EXPECT_THAT(ParseDuration(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("30s, 5m, 1h30m or 250ms")))
        << "\"" << bad << "\"";
  }
}

TEST(DurationTest, ConvertsToAndFromProto) {
  absl::StatusOr<google::protobuf::Duration> p = DurationToProto(absl::Milliseconds(90'250));
  ASSERT_OK(p);
  EXPECT_EQ(p->seconds(), 90);
  EXPECT_EQ(p->nanos(), 250'000'000);
  EXPECT_EQ(DurationFromProto(*p), absl::Milliseconds(90'250));
}

TEST(DurationTest, ProtoRangeIsEnforced) {
  EXPECT_THAT(DurationToProto(absl::Seconds(-1)), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(DurationToProto(absl::Hours(24 * 365 * 20000)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(DurationToProto(absl::Hours(24 * 365)));
}

TEST(DurationTest, FormatsBackToAParsableForm) {
  for (const absl::Duration d :
       {absl::Seconds(20), absl::Minutes(90), absl::Milliseconds(250), absl::ZeroDuration()}) {
    const std::string text = DurationToText(d);
    absl::StatusOr<absl::Duration> back = ParseDuration(text);
    ASSERT_OK(back);
    EXPECT_EQ(*back, d) << text;
  }
  EXPECT_EQ(DurationToText(absl::Minutes(90)), "1h30m");
}

}  // namespace
}  // namespace gpufed::cli
