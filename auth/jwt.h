#ifndef GPUFED_AUTH_JWT_H_
#define GPUFED_AUTH_JWT_H_

// JWTs from an identity provider (docs/security.md#jwts-from-an-identity-provider): verifies a
// token signed RS256 or ES256 by one of the public keys of a JWKS file, and reads the claims the
// server maps to a principal. Deciding the role is the authenticator's (api/authn.h): it knows
// the subject's role bindings.
//
// What is accepted: a compact JWS (three base64url segments) of at most kMaxTokenBytes, whose
// header names a key of the JWKS by `kid` (or no kid, when the JWKS holds exactly one key) and
// whose `alg` is the one that key is for: RS256 for an RSA key of at least 2048 bits, ES256 for
// an EC P-256 key. The algorithm comes from the key, never from the token alone, so `none`,
// HS256 signed with a public key as the secret, and any other algorithm confusion are refused.
// The payload must carry `exp` (and `nbf`, when present, must have passed), `iss` equal to the
// configured issuer, and `aud` equal to (or, as an array, containing) the configured audience,
// all with `leeway` either side.

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace gpufed::auth {

struct JwtOptions {
  std::string jwks_file;  // the identity provider's public keys (a JWKS, JSON)
  std::string issuer;     // required: the `iss` every token must carry
  std::string audience;   // required: what `aud` must be (or contain)
  std::string subject_claim = "sub";
  // Claims read for the authenticator; empty: not read (the role comes from role bindings only).
  std::string role_claim;
  std::string tenant_claim;
  std::string project_claim;
  // Clock skew allowed on `exp` and `nbf`.
  std::chrono::seconds leeway{60};
};

// What a verified token says.
struct JwtClaims {
  std::string subject;  // never empty
  // The role, tenant and project claims, when configured and present as strings; nullopt
  // otherwise. Unvalidated: the authenticator decides what they mean.
  std::optional<std::string> role;
  std::optional<std::string> tenant;
  std::optional<std::string> project;
  absl::Time expire_time;  // `exp`
};

// Whether `token` has the shape of a compact JWS: three non-empty base64url segments separated
// by dots. Says nothing of its validity; opaque API tokens never have this shape.
bool LooksLikeJwt(absl::string_view token);

// The keys of one JWKS file and the checks of JwtOptions. Immutable once made: thread-safe.
class JwtVerifier {
 public:
  // Larger tokens are refused before anything is parsed.
  static constexpr size_t kMaxTokenBytes = size_t{8} * 1024;
  // A JWKS file is a few kilobytes; anything much bigger is not one.
  static constexpr size_t kMaxJwksBytes = size_t{1024} * 1024;

  // Reads `options.jwks_file`. INVALID_ARGUMENT naming the setting ("jwt_issuer", "jwt_audience",
  // "jwt_jwks_file", "jwt_subject_claim") when the issuer, the audience or the subject claim is
  // empty, the file cannot be read, is not a JWKS, or holds no usable key, or two usable keys
  // share one kid (or both have none). Keys that are not RSA (>= 2048 bits) or EC P-256, or that
  // say they are for another use (`use` other than "sig", `alg` other than their own), are
  // skipped.
  static absl::StatusOr<std::unique_ptr<JwtVerifier>> FromJwksFile(const JwtOptions& options);
  // As FromJwksFile, from the JWKS's text.
  static absl::StatusOr<std::unique_ptr<JwtVerifier>> FromJwks(const JwtOptions& options,
                                                               absl::string_view jwks);

  // The claims of `token` at `now`. UNAUTHENTICATED "invalid token" whatever is wrong with it
  // (its shape, size, key, algorithm, signature, times, issuer, audience, or a missing or
  // non-string subject claim): the caller learns nothing of which check failed, and the token is
  // never echoed. cpp-jwt checks `exp` and `nbf` against the system clock too (it takes no
  // clock), so `now` should be the system clock's time: the checks with `now` are the ones that
  // count, and a `now` other than the present can only refuse more.
  [[nodiscard]] absl::StatusOr<JwtClaims> Verify(absl::string_view token, absl::Time now) const;

  // How many keys were loaded (for the start-up log line).
  [[nodiscard]] size_t key_count() const { return keys_.size(); }

 private:
  struct Key {
    std::string kid;
    std::string alg;         // "RS256" or "ES256"
    std::string public_pem;  // SubjectPublicKeyInfo, what cpp-jwt verifies with
  };
  JwtVerifier(JwtOptions options, std::vector<Key> keys)
      : options_(std::move(options)), keys_(std::move(keys)) {}

  const JwtOptions options_;
  const std::vector<Key> keys_;
};

}  // namespace gpufed::auth

#endif  // GPUFED_AUTH_JWT_H_
