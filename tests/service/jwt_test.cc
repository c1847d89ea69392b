// JWTs from an identity provider through a real gRPC channel (docs/security.md#jwts-from-an-
// identity-provider): a server given the provider's JWKS accepts its tokens, with the role the
// subject's binding allows, refuses forged ones, and picks up rotated keys from the file.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/service/in_process_server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_jwt.h"

namespace gpufed {
namespace {

using ::gpufed::testing::SignTestJwt;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::TestJwtClaims;
using ::gpufed::testing::TestJwtKey;
using ::testing::ElementsAre;

constexpr char kIssuer[] = "https://idp.example.com";
constexpr char kAudience[] = "gpufed";

class JwtServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(key_, testing::MakeRsaJwtKey("idp-2026"));
    jwks_file_ = dir_.path() + "/jwks.json";
    std::ofstream(jwks_file_) << testing::JwksOf({key_});
    server::ServerConfig config;
    config.jwt_jwks_file = jwks_file_;
    config.jwt_issuer = kIssuer;
    config.jwt_audience = kAudience;
    config.jwt_role_claim = "gpufed_role";
    config.jwt_tenant_claim = "gpufed_tenant";
    config.tls_reload_interval_seconds = 1;  // the JWKS is looked at as often
    ASSERT_OK_AND_ASSIGN(started_, testing::StartInProcessServer(dir_.path() + "/data", config));
    channel_ = grpc::CreateChannel(started_.address, grpc::InsecureChannelCredentials());
    tenants_ = v1::TenantService::NewStub(channel_);

    // The platform admin makes a tenant and binds alice in it.
    for (const char* name : {"acme", "globex"}) {
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", "Bearer " + started_.admin_token);
      v1::CreateTenantRequest request;
      request.set_name(name);
      v1::Tenant tenant;
      ASSERT_OK(tenants_->CreateTenant(&ctx, request, &tenant));
    }
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + started_.admin_token);
    v1::SetRoleBindingRequest request;
    request.mutable_binding()->set_subject("alice@example.com");
    request.mutable_binding()->set_role(v1::ROLE_TENANT_USER);
    request.mutable_binding()->set_tenant("acme");
    v1::SetRoleBindingResponse response;
    ASSERT_OK(tenants_->SetRoleBinding(&ctx, request, &response));
  }

  static TestJwtClaims Claims(const std::string& subject) {
    TestJwtClaims claims;
    claims.issuer = kIssuer;
    claims.audience = kAudience;
    claims.subject = subject;
    claims.expire_time = absl::Now() + absl::Minutes(10);
    return claims;
  }

  grpc::Status ListTenants(const std::string& token, v1::ListTenantsResponse* out) const {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    return tenants_->ListTenants(&ctx, v1::ListTenantsRequest(), out);
  }
  [[nodiscard]] grpc::Status CreateProject(const std::string& token,
                                           const std::string& tenant) const {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::CreateProjectRequest request;
    request.set_tenant(tenant);
    request.set_name("research");
    v1::Project project;
    return tenants_->CreateProject(&ctx, request, &project);
  }

  static std::vector<std::string> Names(const v1::ListTenantsResponse& response) {
    std::vector<std::string> out;
    for (const v1::Tenant& t : response.tenants()) out.push_back(t.name());
    return out;
  }

  testing::TempDir dir_{"gpufed-jwt-service"};
  TestJwtKey key_;
  std::string jwks_file_;
  testing::InProcessServer started_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TenantService::Stub> tenants_;
};

TEST_F(JwtServiceTest, AJwtOfTheProviderIsACredentialWithItsBindingsRole) {
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(key_, Claims("alice@example.com")));
  v1::ListTenantsResponse tenants;
  ASSERT_OK(ListTenants(token, &tenants));
  EXPECT_THAT(Names(tenants), ElementsAre("acme"));  // what a member of acme sees
  // A tenant user makes no projects.
  EXPECT_THAT(CreateProject(token, "acme"), StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(JwtServiceTest, ARoleClaimAboveTheBindingIsCapped) {
  TestJwtClaims claims = Claims("alice@example.com");
  claims.extra["gpufed_role"] = "tenant-admin";
  claims.extra["gpufed_tenant"] = "acme";
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(key_, claims));
  EXPECT_THAT(CreateProject(token, "acme"), StatusIs(absl::StatusCode::kPermissionDenied));
  // Once the binding says tenant-admin, the same claim holds (a new token: the old one's
  // principal is cached).
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + started_.admin_token);
  v1::SetRoleBindingRequest request;
  request.mutable_binding()->set_subject("alice@example.com");
  request.mutable_binding()->set_role(v1::ROLE_TENANT_ADMIN);
  request.mutable_binding()->set_tenant("acme");
  v1::SetRoleBindingResponse response;
  ASSERT_OK(tenants_->SetRoleBinding(&ctx, request, &response));
  claims.extra["jti"] = "2";
  ASSERT_OK_AND_ASSIGN(token, SignTestJwt(key_, claims));
  EXPECT_OK(CreateProject(token, "acme"));
}

TEST_F(JwtServiceTest, ForgedAndUnboundTokensAreRefused) {
  v1::ListTenantsResponse tenants;
  // Another key under the provider's kid.
  ASSERT_OK_AND_ASSIGN(TestJwtKey forger, testing::MakeRsaJwtKey("idp-2026"));
  ASSERT_OK_AND_ASSIGN(std::string forged, SignTestJwt(forger, Claims("alice@example.com")));
  EXPECT_THAT(ListTenants(forged, &tenants), StatusIs(absl::StatusCode::kUnauthenticated));
  // HS256 keyed with the provider's public key.
  ASSERT_OK_AND_ASSIGN(
      forged, testing::SignTestJwtHs256(key_.public_pem, "idp-2026", Claims("alice@example.com")));
  EXPECT_THAT(ListTenants(forged, &tenants), StatusIs(absl::StatusCode::kUnauthenticated));
  // A genuine token of a subject with no binding and no role claim.
  ASSERT_OK_AND_ASSIGN(std::string unbound, SignTestJwt(key_, Claims("bob@example.com")));
  EXPECT_THAT(ListTenants(unbound, &tenants), StatusIs(absl::StatusCode::kUnauthenticated));
  // Opaque tokens still work beside JWTs.
  EXPECT_OK(ListTenants(started_.admin_token, &tenants));
}

TEST_F(JwtServiceTest, RotatedKeysAreReadFromTheFile) {
  ASSERT_OK_AND_ASSIGN(TestJwtKey next, testing::MakeEcJwtKey("idp-2027"));
  ASSERT_OK_AND_ASSIGN(std::string token, SignTestJwt(next, Claims("alice@example.com")));
  v1::ListTenantsResponse tenants;
  EXPECT_THAT(ListTenants(token, &tenants), StatusIs(absl::StatusCode::kUnauthenticated));
  {
    // Written aside and renamed over, as an operator (or a sidecar fetching the JWKS) would.
    std::ofstream(jwks_file_ + ".new") << testing::JwksOf({key_, next});
    std::filesystem::rename(jwks_file_ + ".new", jwks_file_);
  }
  // Looked at every second; the refusal above is cached for one.
  grpc::Status status;
  for (int i = 0; i < 100; ++i) {
    status = ListTenants(token, &tenants);
    if (status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_OK(status);
}

}  // namespace
}  // namespace gpufed
