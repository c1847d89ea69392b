#ifndef GPUFED_TESTS_SUPPORT_TEST_JWT_H_
#define GPUFED_TESTS_SUPPORT_TEST_JWT_H_

// An identity provider made at test time: key pairs (RSA 2048, EC P-256) made with OpenSSL, the
// JWKS that publishes their public halves, and tokens signed with cpp-jwt. Not thread-safe per
// object; nothing is shared between objects.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpufed::testing {

// A key pair, PEM: the private key (PKCS#8) and the public key (SubjectPublicKeyInfo).
struct TestJwtKey {
  std::string kid;
  std::string alg;  // "RS256" or "ES256"
  std::string private_pem;
  std::string public_pem;
};

absl::StatusOr<TestJwtKey> MakeRsaJwtKey(const std::string& kid, int bits = 2048);
absl::StatusOr<TestJwtKey> MakeEcJwtKey(const std::string& kid);

// {"keys": [...]}: each key's public half as a JWK (kty, kid, use "sig", alg, n/e or crv/x/y).
std::string JwksOf(const std::vector<TestJwtKey>& keys);

// What a token says. Times are NumericDates made from absl::Time; nullopt-like zero values are
// left out (absl::InfinitePast() for a time, "" for a string).
struct TestJwtClaims {
  std::string issuer;
  std::string audience;
  bool audience_as_array = false;  // "aud": ["someone-else", audience]
  std::string subject;
  absl::Time expire_time = absl::InfinitePast();
  absl::Time not_before = absl::InfinitePast();
  std::map<std::string, std::string> extra;    // more string claims (role, tenant, ...)
  std::map<std::string, std::string> headers;  // more header parameters (crit, ...)
};

// A compact JWS of `claims` signed by `key` with its algorithm and, with `kid` true, the key's
// kid in the header. An error status if cpp-jwt refuses.
absl::StatusOr<std::string> SignTestJwt(const TestJwtKey& key, const TestJwtClaims& claims,
                                        bool kid = true);
// HS256 with `secret` as the HMAC key (an algorithm-confusion attack passes a public key's PEM).
absl::StatusOr<std::string> SignTestJwtHs256(const std::string& secret, const std::string& kid,
                                             const TestJwtClaims& claims);
// A token whose header says "alg": "none" (and `kid`), with `signature` as its third segment
// (base64url; "" makes the unsigned form "header.payload.").
std::string UnsignedTestJwt(const std::string& kid, const TestJwtClaims& claims,
                            const std::string& signature);

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_TEST_JWT_H_
