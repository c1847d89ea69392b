#ifndef GPUFED_AUTH_TOKEN_H_
#define GPUFED_AUTH_TOKEN_H_

#include <string>

#include "absl/strings/string_view.h"

namespace gpufed::auth {

// A new bearer secret: "gpf_" + 256 random bits (OpenSSL RAND_bytes), base64url. Shown once.
std::string GenerateToken();

// What the store keeps instead of the secret: lower-case hex SHA-256 of the token.
std::string HashToken(absl::string_view token);

}  // namespace gpufed::auth

#endif  // GPUFED_AUTH_TOKEN_H_
