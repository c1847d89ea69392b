#ifndef GPUFED_CLI_MONEY_H_
#define GPUFED_CLI_MONEY_H_

// Prices as people write them ("3.20", "0.45", "12") and as the API carries them: micro-units of
// the currency in an int64 (3.20 -> 3200000). The text is read digit by digit, never through a
// floating-point number, so every price with at most six decimals is exact.
//
// Thread safety: stateless functions.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpufed::cli {

// Digits with at most one '.', at most six non-zero digits after it ("3", "3.2", "3.20",
// "0.000001", "3."); no sign, exponent or spaces; at most 9,000,000,000,000 units.
// INVALID_ARGUMENT otherwise, with a message that shows the accepted form (the caller prefixes
// the field name).
absl::StatusOr<int64_t> ParseMicros(absl::string_view text);

// At least two decimals, more only when needed: 3200000 -> "3.20", 1 -> "0.000001",
// 12000000 -> "12.00", -500000 -> "-0.50".
std::string FormatMicros(int64_t micros);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_MONEY_H_
