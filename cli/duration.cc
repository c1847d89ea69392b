#include "cli/duration.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace gpufed::cli {
namespace {

// google.protobuf.Duration covers +-10,000 years.
constexpr int64_t kMaxProtoSeconds = 315'576'000'000;

}  // namespace

absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text) {
  absl::Duration d;
  // absl also accepts "inf" and negative values; neither is an estimated run time.
  if (!absl::ParseDuration(text, &d) || d == absl::InfiniteDuration() || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected a duration such as 30s, 5m, 1h30m or 250ms, got \"", absl::CEscape(text), "\""));
  }
  return d;
}

absl::StatusOr<google::protobuf::Duration> DurationToProto(absl::Duration d) {
  if (d < absl::ZeroDuration() || d > absl::Seconds(kMaxProtoSeconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("duration ", absl::FormatDuration(d), " is out of range"));
  }
  google::protobuf::Duration out;
  const int64_t seconds = absl::IDivDuration(d, absl::Seconds(1), &d);
  out.set_seconds(seconds);
  out.set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(d)));
  return out;
}

absl::Duration DurationFromProto(const google::protobuf::Duration& d) {
  return absl::Seconds(d.seconds()) + absl::Nanoseconds(d.nanos());
}

std::string DurationToText(absl::Duration d) { return absl::FormatDuration(d); }

}  // namespace gpufed::cli
