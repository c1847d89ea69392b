// JWTs through the Authenticator (api/authn.h) on the in-memory store: how a verified token's
// claims and its subject's role bindings make a principal (the role claim capped by the binding,
// no binding and no claim refused, never agent, platform-admin only from a platform binding),
// and that verified tokens are cached like opaque ones while forged ones are refused.

#include <memory>
#include <string>

#include "api/authn.h"
#include "auth/jwt.h"
#include "auth/token.h"
#include "federation/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/memory_store.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_jwt.h"

namespace gpufed::api {
namespace {

using ::gpufed::testing::IsOk;
using ::gpufed::testing::MemoryStore;
using ::gpufed::testing::SignTestJwt;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::TestJwtClaims;
using ::gpufed::testing::TestJwtKey;
using ::testing::Not;
using Code = absl::StatusCode;

constexpr char kIssuer[] = "https://idp.example.com";
constexpr char kAudience[] = "gpufed";

class AuthnJwtTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { key_ = new TestJwtKey(*testing::MakeEcJwtKey("idp-1")); }
  static void TearDownTestSuite() { delete key_; }

  void SetUp() override {
    ASSERT_OK(store_.CreateTenant(Tenant{"acme", "", {}}));
    ASSERT_OK(store_.CreateTenant(Tenant{"globex", "", {}}));
    ASSERT_OK(store_.CreateProject(Project{"acme", "research", {}}));
    auth::JwtOptions options;
    options.issuer = kIssuer;
    options.audience = kAudience;
    options.role_claim = "gpufed_role";
    options.tenant_claim = "gpufed_tenant";
    options.project_claim = "gpufed_project";
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<auth::JwtVerifier> verifier,
                         auth::JwtVerifier::FromJwks(options, testing::JwksOf({*key_})));
    authn_.SetJwtVerifier(std::move(verifier));
  }

  void Bind(const std::string& subject, auth::Role role, const std::string& tenant,
            const std::string& project = "") {
    RoleBinding binding;
    binding.subject = subject;
    binding.role = role;
    binding.tenant = tenant;
    binding.project = project;
    ASSERT_OK(store_.SetRoleBinding(binding));
  }

  // A token for `subject` from the identity provider, with these gpufed_* claims ("" leaves one
  // out). Valid by the system clock (cpp-jwt's) and by the fake one, which is earlier.
  std::string Token(const std::string& subject, const std::string& role = "",
                    const std::string& tenant = "", const std::string& project = "") {
    TestJwtClaims claims;
    claims.issuer = kIssuer;
    claims.audience = kAudience;
    claims.subject = subject;
    claims.expire_time = absl::Now() + absl::Minutes(10);
    if (!role.empty()) claims.extra["gpufed_role"] = role;
    if (!tenant.empty()) claims.extra["gpufed_tenant"] = tenant;
    if (!project.empty()) claims.extra["gpufed_project"] = project;
    absl::StatusOr<std::string> token = SignTestJwt(*key_, claims);
    EXPECT_OK(token);
    return token.value_or("");
  }

  static TestJwtKey* key_;
  FakeClock clock_;
  MemoryStore store_{&clock_};
  Authenticator authn_{&store_, &clock_};
};
TestJwtKey* AuthnJwtTest::key_ = nullptr;

TEST_F(AuthnJwtTest, OneBindingDecidesWithoutClaims) {
  Bind("alice", auth::Role::kTenantAdmin, "acme", "research");
  ASSERT_OK_AND_ASSIGN(auth::Principal who, authn_.AuthenticateToken(Token("alice")));
  EXPECT_EQ(who.subject, "alice");
  EXPECT_EQ(who.role, auth::Role::kTenantAdmin);
  EXPECT_EQ(who.tenant, "acme");
  EXPECT_EQ(who.project, "research");
  EXPECT_EQ(who.token_id, 0);
}

TEST_F(AuthnJwtTest, NoBindingAndNoRoleClaimIsRefused) {
  EXPECT_THAT(authn_.AuthenticateToken(Token("alice")), StatusIs(Code::kUnauthenticated));
  EXPECT_THAT(authn_.AuthenticateToken(Token("bob", "", "acme")), StatusIs(Code::kUnauthenticated));
}

TEST_F(AuthnJwtTest, RoleClaimAboveTheBindingIsCapped) {
  Bind("alice", auth::Role::kTenantUser, "acme");
  ASSERT_OK_AND_ASSIGN(auth::Principal who,
                       authn_.AuthenticateToken(Token("alice", "tenant-admin", "acme")));
  EXPECT_EQ(who.role, auth::Role::kTenantUser);
  EXPECT_EQ(who.tenant, "acme");
  // A project of the tenant: the tenant's binding covers it and caps there too.
  ASSERT_OK_AND_ASSIGN(
      who, authn_.AuthenticateToken(Token("alice", "tenant-admin", "acme", "research")));
  EXPECT_EQ(who.role, auth::Role::kTenantUser);
  EXPECT_EQ(who.project, "research");
  // Without a tenant claim, the one binding gives the scope, and caps the claim.
  ASSERT_OK_AND_ASSIGN(who, authn_.AuthenticateToken(Token("alice", "tenant-admin")));
  EXPECT_EQ(who.role, auth::Role::kTenantUser);
  EXPECT_EQ(who.tenant, "acme");
}

TEST_F(AuthnJwtTest, RoleClaimBelowTheBindingHolds) {
  Bind("alice", auth::Role::kTenantAdmin, "acme");
  ASSERT_OK_AND_ASSIGN(auth::Principal who,
                       authn_.AuthenticateToken(Token("alice", "viewer", "acme")));
  EXPECT_EQ(who.role, auth::Role::kViewer);
}

TEST_F(AuthnJwtTest, RoleClaimWithoutBindingHoldsInsideOneTenantOnly) {
  ASSERT_OK_AND_ASSIGN(auth::Principal who,
                       authn_.AuthenticateToken(Token("carol", "tenant-user", "globex")));
  EXPECT_EQ(who.role, auth::Role::kTenantUser);
  EXPECT_EQ(who.tenant, "globex");
  // At the platform a claim alone gives nothing, not even viewer.
  EXPECT_THAT(authn_.AuthenticateToken(Token("carol", "viewer")), StatusIs(Code::kUnauthenticated));
}

TEST_F(AuthnJwtTest, AgentRoleClaimIsRefused) {
  Bind("alice", auth::Role::kTenantAdmin, "acme");
  EXPECT_THAT(authn_.AuthenticateToken(Token("alice", "agent", "acme")),
              StatusIs(Code::kUnauthenticated));
  EXPECT_THAT(authn_.AuthenticateToken(Token("alice", "agent")), StatusIs(Code::kUnauthenticated));
  EXPECT_THAT(authn_.AuthenticateToken(Token("alice", "root", "acme")),
              StatusIs(Code::kUnauthenticated));
}

TEST_F(AuthnJwtTest, PlatformAdminOnlyFromAPlatformBinding) {
  EXPECT_THAT(authn_.AuthenticateToken(Token("mallory", "platform-admin")),
              StatusIs(Code::kUnauthenticated));
  // Not at a tenant either: platform-admin is no role a tenant can hold.
  EXPECT_THAT(authn_.AuthenticateToken(Token("mallory", "platform-admin", "acme")),
              StatusIs(Code::kUnauthenticated));
  // A tenant binding caps the claim at its own role.
  Bind("mallory", auth::Role::kTenantAdmin, "acme");
  ASSERT_OK_AND_ASSIGN(auth::Principal who,
                       authn_.AuthenticateToken(Token("mallory", "platform-admin", "acme")));
  EXPECT_EQ(who.role, auth::Role::kTenantAdmin);
  EXPECT_FALSE(who.IsPlatformAdmin());
  Bind("root", auth::Role::kPlatformAdmin, "");
  ASSERT_OK_AND_ASSIGN(who, authn_.AuthenticateToken(Token("root")));
  EXPECT_TRUE(who.IsPlatformAdmin());
  EXPECT_EQ(who.tenant, "");
  // A platform viewer binding caps a platform-admin claim.
  Bind("vera", auth::Role::kViewer, "");
  ASSERT_OK_AND_ASSIGN(who, authn_.AuthenticateToken(Token("vera", "platform-admin")));
  EXPECT_EQ(who.role, auth::Role::kViewer);
  EXPECT_FALSE(who.IsPlatformAdmin());
}

TEST_F(AuthnJwtTest, SeveralBindingsNeedATenantClaim) {
  Bind("alice", auth::Role::kTenantAdmin, "acme");
  Bind("alice", auth::Role::kViewer, "globex");
  EXPECT_THAT(authn_.AuthenticateToken(Token("alice")), StatusIs(Code::kUnauthenticated));
  ASSERT_OK_AND_ASSIGN(auth::Principal who, authn_.AuthenticateToken(Token("alice", "", "globex")));
  EXPECT_EQ(who.role, auth::Role::kViewer);
  EXPECT_EQ(who.tenant, "globex");
}

TEST_F(AuthnJwtTest, VerifiedTokensAreCachedForAtMostTheCacheTtl) {
  Bind("alice", auth::Role::kTenantUser, "acme");
  const std::string token = Token("alice");
  ASSERT_OK(authn_.AuthenticateToken(token));
  ASSERT_OK(store_.DeleteRoleBinding("alice", "acme", ""));
  // Remembered: no new verification, no store lookup...
  EXPECT_OK(authn_.AuthenticateToken(token));
  clock_.Advance(Authenticator::kCacheTtl + std::chrono::seconds(1));
  // ...until the cache entry lapses, and the binding is gone.
  EXPECT_THAT(authn_.AuthenticateToken(token), StatusIs(Code::kUnauthenticated));
}

TEST_F(AuthnJwtTest, ForgedAndUnverifiableTokensAreRefused) {
  Bind("alice", auth::Role::kTenantUser, "acme");
  ASSERT_OK_AND_ASSIGN(TestJwtKey other, testing::MakeEcJwtKey("idp-1"));
  TestJwtClaims claims;
  claims.issuer = kIssuer;
  claims.audience = kAudience;
  claims.subject = "alice";
  claims.expire_time = absl::Now() + absl::Minutes(10);
  ASSERT_OK_AND_ASSIGN(std::string forged, SignTestJwt(other, claims));
  EXPECT_THAT(authn_.AuthenticateToken(forged), StatusIs(Code::kUnauthenticated, "invalid token"));
  // Without a verifier, a JWT is one more unknown token.
  const std::string good = Token("alice");
  authn_.SetJwtVerifier(nullptr);
  EXPECT_THAT(authn_.AuthenticateToken(good), StatusIs(Code::kUnauthenticated));
}

TEST_F(AuthnJwtTest, OpaqueTokensStillWork) {
  const std::string token = auth::GenerateToken();
  TokenRecord record;
  record.subject = "bot";
  record.role = auth::Role::kTenantUser;
  record.tenant = "acme";
  ASSERT_OK_AND_ASSIGN(TokenRecord stored, store_.CreateToken(auth::HashToken(token), record));
  ASSERT_OK_AND_ASSIGN(auth::Principal who, authn_.AuthenticateToken(token));
  EXPECT_EQ(who.subject, "bot");
  EXPECT_EQ(who.token_id, stored.id);
  EXPECT_THAT(authn_.AuthenticateToken("not-a-token"), Not(IsOk()));
}

}  // namespace
}  // namespace gpufed::api
