#include "tests/support/test_jwt.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>

#include <memory>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "jwt/jwt.hpp"
#pragma GCC diagnostic pop

namespace gpufed::testing {
namespace {

struct Free {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, Free>;
using BnPtr = std::unique_ptr<BIGNUM, Free>;

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<TestJwtKey> Finish(EVP_PKEY* raw, const std::string& kid, const std::string& alg) {
  KeyPtr key(raw);
  if (key == nullptr) return absl::InternalError("key generation failed");
  std::unique_ptr<BIO, Free> priv(BIO_new(BIO_s_mem()));
  std::unique_ptr<BIO, Free> pub(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(priv.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1 ||
      PEM_write_bio_PUBKEY(pub.get(), key.get()) != 1) {
    return absl::InternalError("PEM encoding failed");
  }
  return TestJwtKey{kid, alg, BioText(priv.get()), BioText(pub.get())};
}

KeyPtr ReadPublic(const std::string& pem) {
  std::unique_ptr<BIO, Free> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return KeyPtr(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
}

std::string B64(const std::string& bytes) { return absl::WebSafeBase64Escape(bytes); }

std::string BnBytes(const BIGNUM* bn, int pad = 0) {
  std::string out(pad > 0 ? pad : BN_num_bytes(bn), '\0');
  BN_bn2binpad(bn, reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size()));
  return out;
}

nlohmann::json ClaimsJson(const TestJwtClaims& claims) {
  nlohmann::json json = nlohmann::json::object();
  if (!claims.issuer.empty()) json["iss"] = claims.issuer;
  if (!claims.audience.empty()) {
    json["aud"] = claims.audience_as_array
                      ? nlohmann::json::array({"someone-else", claims.audience})
                      : nlohmann::json(claims.audience);
  }
  if (!claims.subject.empty()) json["sub"] = claims.subject;
  if (claims.expire_time != absl::InfinitePast()) {
    json["exp"] = absl::ToUnixSeconds(claims.expire_time);
  }
  if (claims.not_before != absl::InfinitePast()) {
    json["nbf"] = absl::ToUnixSeconds(claims.not_before);
  }
  for (const auto& [name, value] : claims.extra) json[name] = value;
  return json;
}

absl::StatusOr<std::string> Sign(const std::string& alg, const std::string& key_text,
                                 const std::string& kid, const TestJwtClaims& claims) {
  using namespace jwt::params;  // NOLINT(google-build-using-namespace)
  jwt::jwt_object obj{algorithm(alg), secret(key_text)};
  if (!kid.empty()) obj.header().add_header("kid", kid);
  for (const auto& [name, value] : claims.headers) obj.header().add_header(name, value);
  const nlohmann::json payload = ClaimsJson(claims);  // outlives the loop over its items
  for (const auto& [name, value] : payload.items()) obj.add_claim(name, value);
  std::error_code ec;
  std::string token = obj.signature(ec);
  if (ec) return absl::InternalError(absl::StrCat("cpp-jwt: ", ec.message()));
  return token;
}

}  // namespace

absl::StatusOr<TestJwtKey> MakeRsaJwtKey(const std::string& kid, int bits) {
  return Finish(EVP_RSA_gen(static_cast<unsigned int>(bits)), kid, "RS256");
}

absl::StatusOr<TestJwtKey> MakeEcJwtKey(const std::string& kid) {
  return Finish(EVP_EC_gen("P-256"), kid, "ES256");
}

std::string JwksOf(const std::vector<TestJwtKey>& keys) {
  nlohmann::json jwks = {{"keys", nlohmann::json::array()}};
  for (const TestJwtKey& key : keys) {
    KeyPtr pkey = ReadPublic(key.public_pem);
    nlohmann::json jwk = {{"kid", key.kid}, {"use", "sig"}, {"alg", key.alg}};
    if (key.alg == "RS256") {
      BIGNUM* n = nullptr;
      BIGNUM* e = nullptr;
      EVP_PKEY_get_bn_param(pkey.get(), OSSL_PKEY_PARAM_RSA_N, &n);
      EVP_PKEY_get_bn_param(pkey.get(), OSSL_PKEY_PARAM_RSA_E, &e);
      BnPtr n_owned(n), e_owned(e);
      jwk["kty"] = "RSA";
      jwk["n"] = B64(BnBytes(n));
      jwk["e"] = B64(BnBytes(e));
    } else {
      BIGNUM* x = nullptr;
      BIGNUM* y = nullptr;
      EVP_PKEY_get_bn_param(pkey.get(), OSSL_PKEY_PARAM_EC_PUB_X, &x);
      EVP_PKEY_get_bn_param(pkey.get(), OSSL_PKEY_PARAM_EC_PUB_Y, &y);
      BnPtr x_owned(x), y_owned(y);
      jwk["kty"] = "EC";
      jwk["crv"] = "P-256";
      jwk["x"] = B64(BnBytes(x, 32));
      jwk["y"] = B64(BnBytes(y, 32));
    }
    jwks["keys"].push_back(jwk);
  }
  return jwks.dump(2);
}

absl::StatusOr<std::string> SignTestJwt(const TestJwtKey& key, const TestJwtClaims& claims,
                                        bool kid) {
  return Sign(key.alg, key.private_pem, kid ? key.kid : "", claims);
}

absl::StatusOr<std::string> SignTestJwtHs256(const std::string& secret, const std::string& kid,
                                             const TestJwtClaims& claims) {
  return Sign("HS256", secret, kid, claims);
}

std::string UnsignedTestJwt(const std::string& kid, const TestJwtClaims& claims,
                            const std::string& signature) {
  nlohmann::json header = {{"alg", "none"}, {"typ", "JWT"}};
  if (!kid.empty()) header["kid"] = kid;
  return absl::StrCat(B64(header.dump()), ".", B64(ClaimsJson(claims).dump()), ".", signature);
}

}  // namespace gpufed::testing
