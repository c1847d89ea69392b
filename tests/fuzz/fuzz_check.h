#ifndef GPUFED_TESTS_FUZZ_FUZZ_CHECK_H_
#define GPUFED_TESTS_FUZZ_FUZZ_CHECK_H_

// What every fuzz target asserts besides "no crash, no sanitizer report": a broken promise ends
// the run with abort(), so libFuzzer keeps the input as a crash artifact.

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpufed::fuzz {

// Aborts with `what` on stderr unless `ok`.
void Check(bool ok, absl::string_view what);

// The contract of every conversion and validation (api/convert.h, federation/validation.h) and
// of the file parsers: a refusal is INVALID_ARGUMENT with a message. Returns status.ok().
bool OkOrInvalid(const absl::Status& status, absl::string_view where);

}  // namespace gpufed::fuzz

#endif  // GPUFED_TESTS_FUZZ_FUZZ_CHECK_H_
