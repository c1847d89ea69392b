#include "auth/token.h"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <array>
#include <stdexcept>

#include "absl/strings/escaping.h"

namespace gpufed::auth {

std::string GenerateToken() {
  std::array<unsigned char, 32> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    // No entropy means no safe token; there is nothing sensible to continue with.
    throw std::runtime_error("RAND_bytes failed");
  }
  return "gpf_" + absl::WebSafeBase64Escape(
                      absl::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::string HashToken(absl::string_view token) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_Digest(token.data(), token.size(), digest.data(), &length, EVP_sha256(), nullptr);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), length));
}

}  // namespace gpufed::auth
