#include "auth/jwt.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>

#include <algorithm>
#include <fstream>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

// cpp-jwt 1.4 still calls OpenSSL's EC_KEY functions, deprecated in OpenSSL 3; they work, and the
// warnings are not ours to fix.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include "jwt/jwt.hpp"
#pragma GCC diagnostic pop

namespace gpufed::auth {
namespace {

using Json = nlohmann::json;

struct Free {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(EVP_PKEY_CTX* p) const { EVP_PKEY_CTX_free(p); }
  void operator()(OSSL_PARAM_BLD* p) const { OSSL_PARAM_BLD_free(p); }
  void operator()(OSSL_PARAM* p) const { OSSL_PARAM_free(p); }
};
using BioPtr = std::unique_ptr<BIO, Free>;
using BnPtr = std::unique_ptr<BIGNUM, Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Free>;
using KeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, Free>;
using ParamBldPtr = std::unique_ptr<OSSL_PARAM_BLD, Free>;
using ParamsPtr = std::unique_ptr<OSSL_PARAM, Free>;

constexpr int kMinRsaBits = 2048;

// One answer for every refusal: which check failed helps an attacker more than an operator.
absl::Status Refused() { return absl::UnauthenticatedError("invalid token"); }

bool IsBase64Url(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  });
}

// A base64url value of the JWKS or the token (no padding, as RFC 7515 writes them).
std::optional<std::string> DecodeBase64Url(absl::string_view s) {
  if (!IsBase64Url(s)) return std::nullopt;
  std::string out;
  if (!absl::WebSafeBase64Unescape(s, &out)) return std::nullopt;
  return out;
}

std::optional<std::string> StringMember(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

// The key, as PEM SubjectPublicKeyInfo; empty when it cannot be written.
std::string PublicPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_PUBKEY(bio.get(), key) != 1) return "";
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return size > 0 ? std::string(data, static_cast<size_t>(size)) : "";
}

KeyPtr FromData(const char* type, OSSL_PARAM* params) {
  KeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr));
  EVP_PKEY* key = nullptr;
  if (ctx == nullptr || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params) != 1) {
    return nullptr;
  }
  KeyPtr owned(key);
  // fromdata takes the numbers as given: ask OpenSSL whether they make a valid public key (an EC
  // point on the curve, a sane RSA modulus).
  KeyCtxPtr check(EVP_PKEY_CTX_new_from_pkey(nullptr, owned.get(), nullptr));
  if (check == nullptr || EVP_PKEY_public_check(check.get()) != 1) return nullptr;
  return owned;
}

// An RSA JWK (n, e) of at least kMinRsaBits; nullptr otherwise.
KeyPtr RsaKey(const Json& jwk) {
  std::optional<std::string> n_text = StringMember(jwk, "n");
  std::optional<std::string> e_text = StringMember(jwk, "e");
  if (!n_text || !e_text) return nullptr;
  std::optional<std::string> n = DecodeBase64Url(*n_text);
  std::optional<std::string> e = DecodeBase64Url(*e_text);
  if (!n || !e) return nullptr;
  BnPtr n_bn(BN_bin2bn(reinterpret_cast<const unsigned char*>(n->data()),
                       static_cast<int>(n->size()), nullptr));
  BnPtr e_bn(BN_bin2bn(reinterpret_cast<const unsigned char*>(e->data()),
                       static_cast<int>(e->size()), nullptr));
  if (n_bn == nullptr || e_bn == nullptr || BN_num_bits(n_bn.get()) < kMinRsaBits) return nullptr;
  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  if (bld == nullptr || OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_N, n_bn.get()) != 1 ||
      OSSL_PARAM_BLD_push_BN(bld.get(), OSSL_PKEY_PARAM_RSA_E, e_bn.get()) != 1) {
    return nullptr;
  }
  ParamsPtr params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (params == nullptr) return nullptr;
  return FromData("RSA", params.get());
}

// An EC P-256 JWK (x, y, 32 bytes each); nullptr otherwise.
KeyPtr EcP256Key(const Json& jwk) {
  if (StringMember(jwk, "crv") != "P-256") return nullptr;
  std::optional<std::string> x_text = StringMember(jwk, "x");
  std::optional<std::string> y_text = StringMember(jwk, "y");
  if (!x_text || !y_text) return nullptr;
  std::optional<std::string> x = DecodeBase64Url(*x_text);
  std::optional<std::string> y = DecodeBase64Url(*y_text);
  if (!x || !y || x->size() != 32 || y->size() != 32) return nullptr;
  const std::string point = absl::StrCat(std::string(1, '\x04'), *x, *y);  // uncompressed
  ParamBldPtr bld(OSSL_PARAM_BLD_new());
  if (bld == nullptr ||
      OSSL_PARAM_BLD_push_utf8_string(bld.get(), OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) !=
          1 ||
      OSSL_PARAM_BLD_push_octet_string(bld.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                       point.size()) != 1) {
    return nullptr;
  }
  ParamsPtr params(OSSL_PARAM_BLD_to_param(bld.get()));
  if (params == nullptr) return nullptr;
  return FromData("EC", params.get());
}

// Seconds since the epoch of a NumericDate claim; nullopt when absent or not a number.
std::optional<absl::Time> TimeClaim(const Json& payload, const char* name) {
  auto it = payload.find(name);
  if (it == payload.end() || !it->is_number()) return std::nullopt;
  // Up to the year 9999: past that the cast would overflow, and no real token says so.
  const double seconds = it->get<double>();
  if (!(seconds >= 0 && seconds <= 253402300799.0)) return std::nullopt;
  return absl::FromUnixSeconds(static_cast<int64_t>(seconds));
}

bool AudienceMatches(const Json& payload, const std::string& audience) {
  auto it = payload.find("aud");
  if (it == payload.end()) return false;
  if (it->is_string()) return it->get<std::string>() == audience;
  if (!it->is_array()) return false;
  return std::any_of(it->begin(), it->end(), [&audience](const Json& value) {
    return value.is_string() && value.get<std::string>() == audience;
  });
}

}  // namespace

bool LooksLikeJwt(absl::string_view token) {
  std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  return parts.size() == 3 && std::all_of(parts.begin(), parts.end(), IsBase64Url);
}

absl::StatusOr<std::unique_ptr<JwtVerifier>> JwtVerifier::FromJwksFile(const JwtOptions& options) {
  std::ifstream in(options.jwks_file, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("jwt_jwks_file: cannot read ", options.jwks_file));
  }
  std::string text(kMaxJwksBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > kMaxJwksBytes) {
    return absl::InvalidArgumentError(absl::StrCat("jwt_jwks_file: ", options.jwks_file,
                                                   " is larger than ", kMaxJwksBytes, " bytes"));
  }
  return FromJwks(options, text);
}

absl::StatusOr<std::unique_ptr<JwtVerifier>> JwtVerifier::FromJwks(const JwtOptions& options,
                                                                   absl::string_view jwks) {
  if (options.issuer.empty()) {
    return absl::InvalidArgumentError("jwt_issuer: required with jwt_jwks_file");
  }
  if (options.audience.empty()) {
    return absl::InvalidArgumentError("jwt_audience: required with jwt_jwks_file");
  }
  if (options.subject_claim.empty()) {
    return absl::InvalidArgumentError("jwt_subject_claim: must not be empty");
  }
  const Json root = Json::parse(jwks.begin(), jwks.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object() || !root.contains("keys") ||
      !root["keys"].is_array()) {
    return absl::InvalidArgumentError("jwt_jwks_file: not a JWKS (a JSON object with \"keys\")");
  }
  std::vector<Key> keys;
  for (const Json& jwk : root["keys"]) {
    if (!jwk.is_object()) continue;
    // A key for encryption, or announced for another algorithm, is not one to verify with.
    if (std::optional<std::string> use = StringMember(jwk, "use"); use && *use != "sig") continue;
    const std::optional<std::string> kty = StringMember(jwk, "kty");
    Key key;
    KeyPtr pkey;
    if (kty == "RSA") {
      key.alg = "RS256";
      pkey = RsaKey(jwk);
    } else if (kty == "EC") {
      key.alg = "ES256";
      pkey = EcP256Key(jwk);
    }
    if (pkey == nullptr) continue;
    if (std::optional<std::string> alg = StringMember(jwk, "alg"); alg && *alg != key.alg) continue;
    key.kid = StringMember(jwk, "kid").value_or("");
    key.public_pem = PublicPem(pkey.get());
    if (key.public_pem.empty()) continue;
    for (const Key& other : keys) {
      if (other.kid == key.kid) {
        return absl::InvalidArgumentError(
            absl::StrCat("jwt_jwks_file: two keys with kid \"", key.kid, "\""));
      }
    }
    keys.push_back(std::move(key));
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(
        "jwt_jwks_file: no usable key (RSA of at least 2048 bits, or EC P-256, for signing)");
  }
  return std::unique_ptr<JwtVerifier>(new JwtVerifier(options, std::move(keys)));
}

absl::StatusOr<JwtClaims> JwtVerifier::Verify(absl::string_view token, absl::Time now) const {
  if (token.size() > kMaxTokenBytes || !LooksLikeJwt(token)) return Refused();
  const std::vector<absl::string_view> parts = absl::StrSplit(token, '.');
  std::optional<std::string> header_text = DecodeBase64Url(parts[0]);
  std::optional<std::string> payload_text = DecodeBase64Url(parts[1]);
  if (!header_text || !payload_text) return Refused();
  const Json header = Json::parse(*header_text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return Refused();
  // Extensions the token says must be understood: none is (RFC 7515 4.1.11). Keys named in the
  // header (jwk, jku, x5u, x5c) are never used: only the JWKS file's.
  if (header.contains("crit")) return Refused();

  // The key decides the algorithm. The header's alg must agree with it, and only that algorithm
  // is allowed to cpp-jwt: a token cannot pick HS256 (with the public key as the HMAC secret) or
  // none for a key that is RSA or EC.
  const Key* key = nullptr;
  if (std::optional<std::string> kid = StringMember(header, "kid")) {
    for (const Key& candidate : keys_) {
      if (candidate.kid == *kid) key = &candidate;
    }
  } else if (header.contains("kid")) {
    return Refused();  // a kid that is not a string
  } else if (keys_.size() == 1) {
    key = &keys_.front();
  }
  if (key == nullptr || StringMember(header, "alg") != key->alg) return Refused();

  try {
    using namespace jwt::params;  // NOLINT(google-build-using-namespace): cpp-jwt's named params
    std::error_code ec;
    // cpp-jwt checks the algorithm and the signature (and `exp` against the system clock: the
    // checks below use `now` and are the ones that count).
    jwt::decode(jwt::string_view(token.data(), token.size()), algorithms({key->alg}), ec,
                secret(key->public_pem), verify(true),
                leeway(static_cast<uint32_t>(options_.leeway.count())));
    if (ec) return Refused();
  } catch (...) {  // cpp-jwt throws on some malformed input (a non-string alg, ...)
    return Refused();
  }

  const Json payload = Json::parse(*payload_text, nullptr, /*allow_exceptions=*/false);
  if (payload.is_discarded() || !payload.is_object()) return Refused();
  const absl::Duration leeway = absl::FromChrono(options_.leeway);
  const std::optional<absl::Time> exp = TimeClaim(payload, "exp");
  if (!exp || now > *exp + leeway) return Refused();
  if (payload.contains("nbf")) {
    const std::optional<absl::Time> nbf = TimeClaim(payload, "nbf");
    if (!nbf || now + leeway < *nbf) return Refused();
  }
  if (StringMember(payload, "iss") != options_.issuer) return Refused();
  if (!AudienceMatches(payload, options_.audience)) return Refused();

  JwtClaims claims;
  std::optional<std::string> subject = StringMember(payload, options_.subject_claim.c_str());
  if (!subject || subject->empty()) return Refused();
  claims.subject = *std::move(subject);
  if (!options_.role_claim.empty())
    claims.role = StringMember(payload, options_.role_claim.c_str());
  if (!options_.tenant_claim.empty()) {
    claims.tenant = StringMember(payload, options_.tenant_claim.c_str());
  }
  if (!options_.project_claim.empty()) {
    claims.project = StringMember(payload, options_.project_claim.c_str());
  }
  claims.expire_time = *exp;
  return claims;
}

}  // namespace gpufed::auth
