#include "tests/fuzz/fuzz_check.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace gpufed::fuzz {

void Check(bool ok, absl::string_view what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz check failed: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

bool OkOrInvalid(const absl::Status& status, absl::string_view where) {
  if (status.ok()) return true;
  if (status.code() != absl::StatusCode::kInvalidArgument || status.message().empty()) {
    const std::string what =
        std::string(where) + ": expected INVALID_ARGUMENT with a message, got " + status.ToString();
    Check(false, what);
  }
  return false;
}

}  // namespace gpufed::fuzz
