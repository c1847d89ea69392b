// Prices as text <-> micro-units (cli/money.h): exact, never through a double.

#include "cli/money.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed::cli {
namespace {

using ::gpufed::testing::IsOkAndHolds;
using ::gpufed::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ParseMicrosTest, ReadsDecimalsExactly) {
  EXPECT_THAT(ParseMicros("3.20"), IsOkAndHolds(3'200'000));
  EXPECT_EQ(*ParseMicros("3.2"), 3'200'000);
  EXPECT_EQ(*ParseMicros("3"), 3'000'000);
  EXPECT_EQ(*ParseMicros("3."), 3'000'000);
  EXPECT_EQ(*ParseMicros(".5"), 500'000);
  EXPECT_EQ(*ParseMicros("0"), 0);
  EXPECT_EQ(*ParseMicros("0.000001"), 1);
  // Binary floating point cannot hold these; the text is read digit by digit.
  EXPECT_EQ(*ParseMicros("19.99"), 19'990'000);
  EXPECT_EQ(*ParseMicros("0.29"), 290'000);
  EXPECT_EQ(*ParseMicros("1234567.891011"), 1'234'567'891'011);
  // Zeros past the sixth decimal change nothing.
  EXPECT_EQ(*ParseMicros("2.500000000"), 2'500'000);
  EXPECT_EQ(*ParseMicros("9000000000000"), int64_t{9'000'000'000'000} * 1'000'000);
}

TEST(ParseMicrosTest, RefusesWhatItCannotKeepExactly) {
  for (const char* text :
       {"", ".", "-1", "+1", "1e3", "3,20", " 3", "3 ", "1.2.3", "abc", "0x10", "inf", "nan"}) {
    EXPECT_THAT(ParseMicros(text), StatusIs(absl::StatusCode::kInvalidArgument)) << text;
  }
  EXPECT_THAT(ParseMicros("0.0000001"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most six decimals")));
  EXPECT_THAT(ParseMicros("9000000000001"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most 9000000000000")));
  EXPECT_THAT(ParseMicros("99999999999999999999999"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseMicros("3,20"), StatusIs(absl::StatusCode::kInvalidArgument,
                                            "expected a price such as 3.20 or 0.45, got \"3,20\""));
}

TEST(FormatMicrosTest, TwoDecimalsAtLeastMoreWhenNeeded) {
  EXPECT_EQ(FormatMicros(3'200'000), "3.20");
  EXPECT_EQ(FormatMicros(12'000'000), "12.00");
  EXPECT_EQ(FormatMicros(0), "0.00");
  EXPECT_EQ(FormatMicros(1), "0.000001");
  EXPECT_EQ(FormatMicros(1'234'500), "1.2345");
  EXPECT_EQ(FormatMicros(-500'000), "-0.50");
  EXPECT_EQ(FormatMicros(std::numeric_limits<int64_t>::min()), "-9223372036854.775808");
}

TEST(MoneyTest, FormattedPricesReadBack) {
  for (int64_t micros :
       {int64_t{0}, int64_t{1}, int64_t{999'999}, int64_t{3'200'000}, int64_t{1'234'567'891'011}}) {
    EXPECT_EQ(*ParseMicros(FormatMicros(micros)), micros) << micros;
  }
}

}  // namespace
}  // namespace gpufed::cli
