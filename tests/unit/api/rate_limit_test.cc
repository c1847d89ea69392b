// RateLimiter (api/rate_limit.h) and the request-size check (api/limits.h), on a FakeClock:
// nothing sleeps.

#include "api/rate_limit.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "api/limits.h"
#include "federation/clock.h"
#include "gmock/gmock.h"
#include "gpufed/v1/cluster_service.pb.h"
#include "gpufed/v1/workload_service.pb.h"
#include "gtest/gtest.h"

namespace gpufed::api {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(RateLimiterTest, BurstThenRate) {
  FakeClock clock;
  RateLimiter limiter({/*rate_per_second=*/10, /*burst=*/5}, &clock);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Admit("token:1").ok()) << i;
  const absl::Status refused = limiter.Admit("token:1");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), HasSubstr("retry in 100 ms"));
  // A tenth of a second buys one call, no more.
  clock.Advance(std::chrono::milliseconds(100));
  EXPECT_TRUE(limiter.Admit("token:1").ok());
  EXPECT_EQ(limiter.Admit("token:1").code(), absl::StatusCode::kResourceExhausted);
  // Idle time accrues up to the burst, never beyond.
  clock.Advance(std::chrono::hours(1));
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(limiter.Admit("token:1").ok()) << i;
  EXPECT_EQ(limiter.Admit("token:1").code(), absl::StatusCode::kResourceExhausted);
}

TEST(RateLimiterTest, RefusedCallsAreNotCharged) {
  FakeClock clock;
  RateLimiter limiter({/*rate_per_second=*/1, /*burst=*/1}, &clock);
  ASSERT_TRUE(limiter.Admit("a").ok());
  // A caller that keeps hammering while empty is not pushed further into debt.
  for (int i = 0; i < 1000; ++i) ASSERT_FALSE(limiter.Admit("a").ok());
  clock.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(limiter.Admit("a").ok());
}

TEST(RateLimiterTest, CallersHaveTheirOwnBuckets) {
  FakeClock clock;
  RateLimiter limiter({/*rate_per_second=*/1, /*burst=*/3}, &clock);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(limiter.Admit("token:1").ok());
  ASSERT_FALSE(limiter.Admit("token:1").ok());
  // Another caller is untouched by the first one's flood.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Admit("token:2").ok()) << i;
}

TEST(RateLimiterTest, ZeroRateIsNoLimit) {
  FakeClock clock;
  RateLimiter limiter({/*rate_per_second=*/0, /*burst=*/1}, &clock);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(limiter.Admit("a").ok());
  EXPECT_EQ(limiter.buckets(), 0u);
}

TEST(RateLimiterTest, IdleBucketsAreDropped) {
  FakeClock clock;
  // Refills in 2 s (burst 20 at 10/s): a bucket idle that long is full, the same as none.
  RateLimiter limiter({/*rate_per_second=*/10, /*burst=*/20}, &clock);
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(limiter.Admit(absl::StrCat("token:", i)).ok());
  EXPECT_EQ(limiter.buckets(), 10000u);
  clock.Advance(std::chrono::milliseconds(2500));
  ASSERT_TRUE(limiter.Admit("token:busy").ok());
  EXPECT_EQ(limiter.buckets(), 1u);
  // A bucket still refilling is kept, with what it owes.
  for (int i = 0; i < 19; ++i) ASSERT_TRUE(limiter.Admit("token:busy").ok());
  clock.Advance(std::chrono::milliseconds(1000));
  ASSERT_TRUE(limiter.Admit("token:busy").ok());
  clock.Advance(std::chrono::milliseconds(1100));  // past the next sweep
  ASSERT_TRUE(limiter.Admit("token:other").ok());
  EXPECT_EQ(limiter.buckets(), 2u);
}

TEST(RateLimiterTest, MemoryStaysBoundedUnderChurn) {
  FakeClock clock;
  RateLimiter limiter({/*rate_per_second=*/100, /*burst=*/100}, &clock);
  // 100 new callers every 10 ms for 100 s: 1,000,000 callers in all, about 200 s of them held
  // at most (two refill periods of 1 s).
  size_t most = 0;
  for (int step = 0; step < 10000; ++step) {
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(limiter.Admit(absl::StrCat(step, "/", i)).ok());
    most = std::max(most, limiter.buckets());
    clock.Advance(std::chrono::milliseconds(10));
  }
  EXPECT_LE(most, 20100u);
}

TEST(CallerKeyTest, TokenFirstThenSubject) {
  auth::Principal a{.subject = "ci-bot", .tenant = "acme", .token_id = 7};
  auth::Principal b{.subject = "ci-bot", .tenant = "globex", .token_id = 8};
  EXPECT_NE(CallerKey(a), CallerKey(b));
  auth::Principal bare{.subject = "ci-bot"};
  EXPECT_EQ(CallerKey(bare), "subject:ci-bot");
}

TEST(RequestSizeTest, SmallRequestsPass) {
  v1::SubmitRequest r;
  r.mutable_spec()->set_name("w");
  (*r.mutable_spec()->mutable_run()->mutable_env())["A"] = std::string(60 << 10, 'v');
  EXPECT_TRUE(CheckRequestSize(r).ok());
}

TEST(RequestSizeTest, TooLargeNamesTheFieldHoldingMostOfIt) {
  v1::SubmitRequest r;
  r.mutable_spec()->set_name("w");
  r.mutable_spec()->mutable_run()->set_image(std::string(1000, 'i'));
  (*r.mutable_spec()->mutable_run()->mutable_env())["A"] = std::string(2 << 20, 'v');
  const absl::Status s = CheckRequestSize(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith("spec.run.env: request too large: "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("at most 1048576"));
}

TEST(RequestSizeTest, UnknownFieldsAreCounted) {
  v1::GetWorkloadRequest r;
  r.set_id("1");
  r.GetReflection()->MutableUnknownFields(&r)->AddLengthDelimited(999, std::string(2 << 20, 'x'));
  const absl::Status s = CheckRequestSize(r);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), StartsWith("request: request too large: "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("fields this server does not know"));
}

TEST(RequestSizeTest, ApplyClustersMayBeLarger) {
  v1::ApplyClustersRequest r;
  r.GetReflection()->MutableUnknownFields(&r)->AddLengthDelimited(999, std::string(4 << 20, 'x'));
  EXPECT_TRUE(CheckRequestSize(r).ok());
  r.GetReflection()->MutableUnknownFields(&r)->AddLengthDelimited(998, std::string(13 << 20, 'x'));
  EXPECT_EQ(CheckRequestSize(r).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gpufed::api
