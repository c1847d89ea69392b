#ifndef GPUFED_CLI_DURATION_H_
#define GPUFED_CLI_DURATION_H_

// Durations as people type them ("30s", "5m", "1h30m", "250ms") and as the API carries them
// (google.protobuf.Duration).
//
// Thread safety: stateless functions.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"

namespace gpufed::cli {

// Parses a non-negative, finite duration: a sequence of decimal numbers with units ns, us, ms,
// s, m or h ("1h30m", "1.5s"); "0" alone is allowed. INVALID_ARGUMENT otherwise, with a message
// that shows the accepted forms (the caller prefixes the field name).
absl::StatusOr<absl::Duration> ParseDuration(absl::string_view text);

// INVALID_ARGUMENT when `d` is negative or beyond google.protobuf.Duration's range.
absl::StatusOr<google::protobuf::Duration> DurationToProto(absl::Duration d);

absl::Duration DurationFromProto(const google::protobuf::Duration& d);

// The shortest form ParseDuration reads back: "20s", "1h30m", "250ms", "0s".
std::string DurationToText(absl::Duration d);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_DURATION_H_
