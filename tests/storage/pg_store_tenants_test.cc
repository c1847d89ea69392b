// PgStore as a TenantStore (tenants, projects, API tokens), against a real PostgreSQL.

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;

using ::testing::HasSubstr;

using TenantStoreTest = StoreTest;

TEST_F(TenantStoreTest, TenantsAndProjects) {
  auto acme = store_->CreateTenant(Tenant{"acme", "Acme Corp", {}});
  ASSERT_OK(acme);
  EXPECT_EQ(acme->display_name, "Acme Corp");
  EXPECT_GT(acme->create_time.time_since_epoch().count(), 0);
  ASSERT_OK(store_->CreateTenant(Tenant{"globex", "", {}}));
  EXPECT_THAT(store_->CreateTenant(Tenant{"acme", "again", {}}),
              StatusIs(absl::StatusCode::kAlreadyExists));
  auto empty = store_->CreateTenant(Tenant{"", "x", {}});
  EXPECT_THAT(empty, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("tenant.name"));

  auto tenants = store_->ListTenants();
  ASSERT_OK(tenants);
  ASSERT_EQ(tenants->size(), 2u);
  EXPECT_EQ((*tenants)[0].name, "acme");
  EXPECT_EQ((*tenants)[0].display_name, "Acme Corp");
  EXPECT_EQ((*tenants)[1].name, "globex");

  ASSERT_OK(store_->CreateProject(Project{"acme", "research", {}}));
  ASSERT_OK(store_->CreateProject(Project{"acme", "prod", {}}));
  ASSERT_OK(store_->CreateProject(Project{"globex", "research", {}}));
  EXPECT_THAT(store_->CreateProject(Project{"acme", "prod", {}}),
              StatusIs(absl::StatusCode::kAlreadyExists));
  auto orphan = store_->CreateProject(Project{"initech", "x", {}});
  EXPECT_THAT(orphan, StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(std::string(orphan.status().message()), HasSubstr("tenant"));

  auto projects = store_->ListProjects("acme");
  ASSERT_OK(projects);
  ASSERT_EQ(projects->size(), 2u);
  EXPECT_EQ((*projects)[0].name, "prod");
  EXPECT_EQ((*projects)[1].name, "research");
  EXPECT_EQ((*projects)[1].tenant, "acme");
  EXPECT_THAT(store_->ListProjects("initech"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(Scalar("SELECT count(*) FROM projects"), 3);
}

TEST_F(TenantStoreTest, Tokens) {
  ASSERT_OK(store_->CreateTenant(Tenant{"acme", "", {}}));
  EXPECT_EQ(*store_->CountTokens(), 0);

  ASSERT_OK(store_->CreateToken("hash-admin", {"alice", auth::Role::kPlatformAdmin, "", ""}));
  ASSERT_OK(store_->CreateToken("hash-user", {"bob", auth::Role::kTenantUser, "acme", ""}));
  ASSERT_OK(store_->CreateToken(
      "hash-agent", {.subject = "agent-dgx", .role = auth::Role::kAgent, .cluster = "dgx"}));
  EXPECT_EQ(*store_->CountTokens(), 3);

  auto user = store_->LookupToken("hash-user");
  ASSERT_OK(user);
  EXPECT_EQ(user->subject, "bob");
  EXPECT_EQ(user->role, auth::Role::kTenantUser);
  EXPECT_EQ(user->tenant, "acme");
  EXPECT_EQ(user->cluster, "");
  auto agent = store_->LookupToken("hash-agent");
  ASSERT_OK(agent);
  EXPECT_EQ(agent->cluster, "dgx");
  EXPECT_THAT(store_->LookupToken("hash-nobody"), StatusIs(absl::StatusCode::kNotFound));

  EXPECT_THAT(store_->CreateToken("hash-user", {"mallory", auth::Role::kPlatformAdmin, "", ""}),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(store_->LookupToken("hash-user")->subject, "bob");

  // Bad input: refused, nothing stored.
  auto bad_role = store_->CreateToken("h1", {"eve", static_cast<auth::Role>(42), "", ""});
  EXPECT_THAT(bad_role, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(bad_role.status().message()), HasSubstr("role"));
  EXPECT_THAT(
      std::string(
          store_->CreateToken("h2", {"eve", auth::Role::kTenantAdmin, "", ""}).status().message()),
      HasSubstr("tenant"));
  EXPECT_THAT(
      std::string(
          store_->CreateToken("h3", {"eve", auth::Role::kAgent, "", ""}).status().message()),
      HasSubstr("cluster"));
  EXPECT_THAT(store_->CreateToken("", {"eve", auth::Role::kViewer, "", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_->CreateToken("h4", {"eve", auth::Role::kTenantUser, "initech", ""}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(*store_->CountTokens(), 3);

  // A revoked token no longer authenticates and no longer counts.
  Exec("UPDATE api_tokens SET revoked_at = now() WHERE token_hash = 'hash-user'");
  EXPECT_THAT(store_->LookupToken("hash-user"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(*store_->CountTokens(), 2);
}

}  // namespace
}  // namespace gpufed::storage
