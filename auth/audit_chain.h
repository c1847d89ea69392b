#ifndef GPUFED_AUTH_AUDIT_CHAIN_H_
#define GPUFED_AUTH_AUDIT_CHAIN_H_

// The hash that chains audit rows (docs/security.md#audit): one function, used by the stores
// that append rows and by the verifier that walks them, so the two cannot disagree.
//
//   hash_n = HMAC-SHA256(key, prev_hash_n || field_1 || ... || field_k)
//
// where prev_hash_n is hash_{n-1} as stored (lower-case hex; empty for the first row) and each
// field is its 8-byte big-endian length followed by its bytes: an encoding no two different rows
// share, whatever their fields contain. The key is the server's (audit_key_file): someone who can
// write the table through SQL but does not hold the key cannot make a row that verifies.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace gpufed::auth {

// The fields of one audit row that the hash covers: every column but the hash itself.
struct AuditFields {
  int64_t id = 0;
  int64_t time_us = 0;  // microseconds since the Unix epoch, as stored
  absl::string_view actor;
  absl::string_view tenant;
  absl::string_view project;
  absl::string_view action;
  absl::string_view object;
  absl::string_view outcome;
  absl::string_view reason;
  absl::string_view detail;
  absl::string_view prev_hash;
};

// Lower-case hex HMAC-SHA256 (64 characters) of `fields` under `key`.
std::string AuditHash(absl::string_view key, const AuditFields& fields);

// Shortest key the server accepts (bytes): 32, HMAC-SHA256's block of entropy.
inline constexpr size_t kMinAuditKeyBytes = 32;

}  // namespace gpufed::auth

#endif  // GPUFED_AUTH_AUDIT_CHAIN_H_
