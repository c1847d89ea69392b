#include "auth/audit_chain.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <stdexcept>

#include "absl/strings/escaping.h"

namespace gpufed::auth {
namespace {

void AppendField(std::string& out, absl::string_view field) {
  const uint64_t n = field.size();
  for (int shift = 56; shift >= 0; shift -= 8) {
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  }
  out.append(field.data(), field.size());
}

std::string BigEndian(int64_t value) {
  std::string out(8, '\0');
  const auto v = static_cast<uint64_t>(value);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (56 - 8 * i)) & 0xff);
  return out;
}

}  // namespace

std::string AuditHash(absl::string_view key, const AuditFields& fields) {
  // Every field is length-prefixed, integers included, so that moving bytes from one field to
  // the next always changes the message.
  std::string message;
  message.reserve(128 + fields.actor.size() + fields.object.size() + fields.detail.size() +
                  fields.reason.size());
  AppendField(message, fields.prev_hash);
  AppendField(message, BigEndian(fields.id));
  AppendField(message, BigEndian(fields.time_us));
  AppendField(message, fields.actor);
  AppendField(message, fields.tenant);
  AppendField(message, fields.project);
  AppendField(message, fields.action);
  AppendField(message, fields.object);
  AppendField(message, fields.outcome);
  AppendField(message, fields.reason);
  AppendField(message, fields.detail);

  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), digest.data(),
           &length) == nullptr) {
    // OpenSSL cannot compute SHA-256: nothing sensible can be audited.
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest.data()), length));
}

}  // namespace gpufed::auth
