#include "cli/money.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpufed::cli {
namespace {

constexpr int kDecimals = 6;
constexpr int64_t kMicrosPerUnit = 1'000'000;
constexpr int64_t kMaxUnits = 9'000'000'000'000;  // x 10^6 still fits an int64

absl::Status BadPrice(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("expected a price such as 3.20 or 0.45, got \"",
                                                 absl::CEscape(text), "\"", why));
}

}  // namespace

absl::StatusOr<int64_t> ParseMicros(absl::string_view text) {
  const size_t dot = text.find('.');
  const absl::string_view whole = text.substr(0, dot);
  absl::string_view fraction =
      dot == absl::string_view::npos ? absl::string_view() : text.substr(dot + 1);
  if (whole.empty() && fraction.empty()) return BadPrice(text, "");
  for (absl::string_view part : {whole, fraction}) {
    for (char c : part) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return BadPrice(text, "");
    }
  }
  // Zeros past the sixth decimal say nothing; other digits cannot be kept exactly.
  while (fraction.size() > kDecimals && fraction.back() == '0') fraction.remove_suffix(1);
  if (fraction.size() > kDecimals) {
    return BadPrice(text, " (at most six decimals: prices are kept in millionths)");
  }
  int64_t units = 0;
  for (char c : whole) {
    units = units * 10 + (c - '0');
    if (units > kMaxUnits) {
      return BadPrice(text, absl::StrCat(" (at most ", kMaxUnits, ")"));
    }
  }
  int64_t micros = 0;
  for (int i = 0; i < kDecimals; ++i) {
    micros = micros * 10 + (i < static_cast<int>(fraction.size()) ? fraction[i] - '0' : 0);
  }
  return units * kMicrosPerUnit + micros;
}

std::string FormatMicros(int64_t micros) {
  // The magnitude as unsigned, so that the most negative int64 has one too.
  const bool negative = micros < 0;
  const uint64_t magnitude =
      negative ? uint64_t{0} - static_cast<uint64_t>(micros) : static_cast<uint64_t>(micros);
  std::string text = absl::StrFormat("%s%d.%06d", negative ? "-" : "", magnitude / kMicrosPerUnit,
                                     magnitude % kMicrosPerUnit);
  // Keep two decimals at least: "3.20", not "3.2".
  const size_t keep = text.find('.') + 3;
  while (text.size() > keep && text.back() == '0') text.pop_back();
  return text;
}

}  // namespace gpufed::cli
