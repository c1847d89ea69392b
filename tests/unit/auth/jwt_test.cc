// JWTs from an identity provider (auth/jwt.h) with keys made at test time and tokens signed with
// cpp-jwt: RS256 and ES256 tokens from the JWKS verify; every kind of forgery, and every token
// outside its times, issuer or audience, is UNAUTHENTICATED with the same message; bad JWKS files
// and options are INVALID_ARGUMENT naming the setting.

#include "auth/jwt.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_jwt.h"

namespace gpufed::auth {
namespace {

using ::gpufed::testing::MakeEcJwtKey;
using ::gpufed::testing::MakeRsaJwtKey;
using ::gpufed::testing::SignTestJwt;
using ::gpufed::testing::SignTestJwtHs256;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::TestJwtClaims;
using ::gpufed::testing::TestJwtKey;
using ::gpufed::testing::UnsignedTestJwt;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kIssuer[] = "https://idp.example.com";
constexpr char kAudience[] = "gpufed";

class JwtTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Key generation (RSA especially) is the slow part: once for the suite.
    rsa_ = new TestJwtKey(*MakeRsaJwtKey("rsa-1"));
    ec_ = new TestJwtKey(*MakeEcJwtKey("ec-1"));
    other_rsa_ = new TestJwtKey(*MakeRsaJwtKey("rsa-1"));  // same kid, another key
  }
  static void TearDownTestSuite() {
    delete rsa_;
    delete ec_;
    delete other_rsa_;
  }

  void SetUp() override {
    now_ = absl::Now();
    options_.issuer = kIssuer;
    options_.audience = kAudience;
    options_.role_claim = "gpufed_role";
    auto verifier = JwtVerifier::FromJwks(options_, testing::JwksOf({*rsa_, *ec_}));
    ASSERT_OK(verifier);
    verifier_ = *std::move(verifier);
  }

  [[nodiscard]] TestJwtClaims Claims() const {
    TestJwtClaims claims;
    claims.issuer = kIssuer;
    claims.audience = kAudience;
    claims.subject = "alice";
    claims.expire_time = now_ + absl::Minutes(10);
    return claims;
  }

  absl::StatusOr<JwtClaims> Verify(const std::string& token) const {
    return verifier_->Verify(token, now_);
  }

  static TestJwtKey* rsa_;
  static TestJwtKey* ec_;
  static TestJwtKey* other_rsa_;
  absl::Time now_;
  JwtOptions options_;
  std::unique_ptr<JwtVerifier> verifier_;
};
TestJwtKey* JwtTest::rsa_ = nullptr;
TestJwtKey* JwtTest::ec_ = nullptr;
TestJwtKey* JwtTest::other_rsa_ = nullptr;

MATCHER(IsRefused, "") {
  return arg.status().code() == absl::StatusCode::kUnauthenticated &&
         arg.status().message() == "invalid token";
}

TEST_F(JwtTest, AcceptsRs256) {
  TestJwtClaims claims = Claims();
  claims.extra["gpufed_role"] = "tenant-user";
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*rsa_, claims));
  ASSERT_OK_AND_ASSIGN(JwtClaims got, Verify(token));
  EXPECT_EQ(got.subject, "alice");
  EXPECT_EQ(got.role, "tenant-user");
  EXPECT_EQ(got.tenant, std::nullopt);  // no tenant claim configured
  EXPECT_EQ(got.expire_time, absl::FromUnixSeconds(absl::ToUnixSeconds(claims.expire_time)));
}

TEST_F(JwtTest, AcceptsEs256) {
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*ec_, Claims()));
  ASSERT_OK_AND_ASSIGN(JwtClaims got, Verify(token));
  EXPECT_EQ(got.subject, "alice");
  EXPECT_EQ(got.role, std::nullopt);
}

TEST_F(JwtTest, AcceptsAudienceArray) {
  TestJwtClaims claims = Claims();
  claims.audience_as_array = true;
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*ec_, claims));
  EXPECT_OK(Verify(token));
  claims.audience = "another-service";
  ASSERT_OK_AND_ASSIGN(token, SignTestJwt(*ec_, claims));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, AcceptsTimesWithinLeeway) {
  TestJwtClaims claims = Claims();
  claims.expire_time = now_ - absl::Seconds(30);  // the leeway is 60 s
  claims.not_before = now_ + absl::Seconds(30);
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*ec_, claims));
  EXPECT_OK(Verify(token));
}

TEST_F(JwtTest, RefusesExpired) {
  TestJwtClaims claims = Claims();
  claims.expire_time = now_ - absl::Minutes(2);
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*rsa_, claims));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesTokenWithoutExpiry) {
  TestJwtClaims claims = Claims();
  claims.expire_time = absl::InfinitePast();
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*rsa_, claims));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesNotYetValid) {
  TestJwtClaims claims = Claims();
  claims.not_before = now_ + absl::Minutes(2);
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*rsa_, claims));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesWrongIssuer) {
  TestJwtClaims claims = Claims();
  claims.issuer = "https://evil.example.com";
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*rsa_, claims));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesWrongAudience) {
  TestJwtClaims claims = Claims();
  claims.audience = "another-service";
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*ec_, claims));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesMissingSubject) {
  TestJwtClaims claims = Claims();
  claims.subject = "";
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*ec_, claims));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesUnknownKid) {
  ASSERT_OK_AND_ASSIGN(TestJwtKey stranger, MakeEcJwtKey("ec-2"));
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(stranger, Claims()));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesSignatureByAnotherKey) {
  // Another key claiming the kid of a key in the JWKS.
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*other_rsa_, Claims()));
  EXPECT_THAT(Verify(token), IsRefused());
  ASSERT_OK_AND_ASSIGN(TestJwtKey other_ec, MakeEcJwtKey("ec-1"));
  ASSERT_OK_AND_ASSIGN(token, SignTestJwt(other_ec, Claims()));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesTamperedPayload) {
  ASSERT_OK_AND_ASSIGN(std::string good, SignTestJwt(*rsa_, Claims()));
  TestJwtClaims claims = Claims();
  claims.subject = "mallory";
  ASSERT_OK_AND_ASSIGN(std::string other, SignTestJwt(*rsa_, claims));
  // Mallory's payload with Alice's signature.
  const std::string forged = good.substr(0, good.find('.')) +
                             other.substr(other.find('.'), other.rfind('.') - other.find('.')) +
                             good.substr(good.rfind('.'));
  ASSERT_NE(forged, good);
  EXPECT_THAT(Verify(forged), IsRefused());
}

TEST_F(JwtTest, RefusesAlgNone) {
  EXPECT_THAT(Verify(UnsignedTestJwt("rsa-1", Claims(), "")), IsRefused());
  EXPECT_THAT(Verify(UnsignedTestJwt("rsa-1", Claims(), "c2lnbmF0dXJl")), IsRefused());
  EXPECT_THAT(Verify(UnsignedTestJwt("", Claims(), "c2lnbmF0dXJl")), IsRefused());
}

TEST_F(JwtTest, RefusesHs256SignedWithThePublicKey) {
  // The classic algorithm confusion: the verifier's RSA public key (PEM) used as the HMAC secret.
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwtHs256(rsa_->public_pem, "rsa-1", Claims()));
  EXPECT_THAT(Verify(token), IsRefused());
  ASSERT_OK_AND_ASSIGN(token, SignTestJwtHs256(ec_->public_pem, "ec-1", Claims()));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, RefusesAlgorithmOfAnotherKey) {
  // An ES256 signature presented under the RSA key's kid.
  ASSERT_OK_AND_ASSIGN(TestJwtKey renamed, MakeEcJwtKey("rsa-1"));
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(renamed, Claims()));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, KidIsRequiredUnlessTheJwksHoldsOneKey) {
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*ec_, Claims(), /*kid=*/false));
  EXPECT_THAT(Verify(token), IsRefused());  // two keys: which one?
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JwtVerifier> one,
                       JwtVerifier::FromJwks(options_, testing::JwksOf({*ec_})));
  EXPECT_OK(one->Verify(token, now_));
}

TEST_F(JwtTest, RefusesGarbageAndOversizedTokensWithoutEchoingThem) {
  for (const std::string& token :
       {std::string(""), std::string("opaque-api-token"), std::string("a.b"),
        std::string("a.b.c.d"), std::string("!!.??.**"), std::string("e30.e30.e30"),
        std::string("eyJhbGciOjF9.e30.c2ln") /* {"alg":1} */}) {
    absl::StatusOr<JwtClaims> got = Verify(token);
    EXPECT_THAT(got, IsRefused()) << token;
  }
  ASSERT_OK_AND_ASSIGN(std::string good, SignTestJwt(*ec_, Claims()));
  TestJwtClaims big = Claims();
  big.extra["padding"] = std::string(JwtVerifier::kMaxTokenBytes, 'x');
  ASSERT_OK_AND_ASSIGN(std::string huge, SignTestJwt(*ec_, big));
  EXPECT_THAT(Verify(huge), IsRefused());
  EXPECT_THAT(Verify(huge).status().message(), Not(HasSubstr(huge.substr(0, 20))));
}

TEST_F(JwtTest, RefusesCriticalExtensions) {
  TestJwtClaims claims = Claims();
  claims.headers["crit"] = "b64";  // an extension this verifier does not understand
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*ec_, claims));
  EXPECT_THAT(Verify(token), IsRefused());
}

TEST_F(JwtTest, LooksLikeJwt) {
  EXPECT_TRUE(LooksLikeJwt("abc.def.ghi"));
  EXPECT_FALSE(LooksLikeJwt("abc.def."));
  EXPECT_FALSE(LooksLikeJwt("abcdef"));
  EXPECT_FALSE(LooksLikeJwt("ab+c.def.ghi"));
}

TEST_F(JwtTest, OptionsAndJwksErrorsNameTheSetting) {
  const std::string jwks = testing::JwksOf({*ec_});
  JwtOptions options = options_;
  options.issuer = "";
  EXPECT_THAT(JwtVerifier::FromJwks(options, jwks),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("jwt_issuer")));
  options = options_;
  options.audience = "";
  EXPECT_THAT(JwtVerifier::FromJwks(options, jwks),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("jwt_audience")));
  for (const char* bad : {"", "[]", "{\"keys\": 1}", "{\"keys\": []}",
                          // an HMAC key and a P-384 key: neither is accepted
                          R"({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]})",
                          R"({"keys": [{"kty": "EC", "crv": "P-384", "x": "AA", "y": "AA"}]})",
                          // a point that is not on the curve
                          R"({"keys": [{"kty": "EC", "crv": "P-256",
                              "x": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE",
                              "y": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE"}]})"}) {
    EXPECT_THAT(JwtVerifier::FromJwks(options_, bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("jwt_jwks_file")))
        << bad;
  }
  EXPECT_THAT(JwtVerifier::FromJwks(options_, testing::JwksOf({*rsa_, *other_rsa_})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("two keys")));
  options = options_;
  options.jwks_file = "/nonexistent/jwks.json";
  EXPECT_THAT(JwtVerifier::FromJwksFile(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("jwt_jwks_file")));
}

TEST_F(JwtTest, RefusesShortRsaKeys) {
  ASSERT_OK_AND_ASSIGN(TestJwtKey small, MakeRsaJwtKey("small", 1024));
  EXPECT_THAT(JwtVerifier::FromJwks(options_, testing::JwksOf({small})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no usable key")));
}

TEST_F(JwtTest, ReadsTheJwksFile) {
  char dir_template[] = "/tmp/gpufed-jwt-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  JwtOptions options = options_;
  options.jwks_file = absl::StrCat(dir_template, "/jwks.json");
  std::ofstream(options.jwks_file) << testing::JwksOf({*rsa_});
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JwtVerifier> verifier, JwtVerifier::FromJwksFile(options));
  EXPECT_EQ(verifier->key_count(), 1U);
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(*rsa_, Claims()));
  EXPECT_OK(verifier->Verify(token, now_));
  std::remove(options.jwks_file.c_str());
  rmdir(dir_template);
}

}  // namespace
}  // namespace gpufed::auth
