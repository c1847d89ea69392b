// PgStore as a TenantStore (tenants, projects, API tokens), against a real PostgreSQL.

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/store_test_util.h"

namespace gpufed::storage {
namespace {

using ::testing::HasSubstr;

using TenantStoreTest = StoreTest;

TEST_F(TenantStoreTest, TenantsAndProjects) {
  auto acme = store_->CreateTenant(Tenant{"acme", "Acme Corp", {}});
  ASSERT_TRUE(acme.ok()) << acme.status();
  EXPECT_EQ(acme->display_name, "Acme Corp");
  EXPECT_GT(acme->create_time.time_since_epoch().count(), 0);
  ASSERT_TRUE(store_->CreateTenant(Tenant{"globex", "", {}}).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(store_->CreateTenant(Tenant{"acme", "again", {}}).status()));
  auto empty = store_->CreateTenant(Tenant{"", "x", {}});
  EXPECT_TRUE(absl::IsInvalidArgument(empty.status()));
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("tenant.name"));

  auto tenants = store_->ListTenants();
  ASSERT_TRUE(tenants.ok());
  ASSERT_EQ(tenants->size(), 2u);
  EXPECT_EQ((*tenants)[0].name, "acme");
  EXPECT_EQ((*tenants)[0].display_name, "Acme Corp");
  EXPECT_EQ((*tenants)[1].name, "globex");

  ASSERT_TRUE(store_->CreateProject(Project{"acme", "research", {}}).ok());
  ASSERT_TRUE(store_->CreateProject(Project{"acme", "prod", {}}).ok());
  ASSERT_TRUE(store_->CreateProject(Project{"globex", "research", {}}).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(store_->CreateProject(Project{"acme", "prod", {}}).status()));
  auto orphan = store_->CreateProject(Project{"initech", "x", {}});
  EXPECT_TRUE(absl::IsNotFound(orphan.status())) << orphan.status();
  EXPECT_THAT(std::string(orphan.status().message()), HasSubstr("tenant"));

  auto projects = store_->ListProjects("acme");
  ASSERT_TRUE(projects.ok());
  ASSERT_EQ(projects->size(), 2u);
  EXPECT_EQ((*projects)[0].name, "prod");
  EXPECT_EQ((*projects)[1].name, "research");
  EXPECT_EQ((*projects)[1].tenant, "acme");
  EXPECT_TRUE(absl::IsNotFound(store_->ListProjects("initech").status()));
  EXPECT_EQ(Scalar("SELECT count(*) FROM projects"), 3);
}

TEST_F(TenantStoreTest, Tokens) {
  ASSERT_TRUE(store_->CreateTenant(Tenant{"acme", "", {}}).ok());
  EXPECT_EQ(*store_->CountTokens(), 0);

  ASSERT_TRUE(store_->CreateToken("hash-admin", {"alice", "platform-admin", "", ""}).ok());
  ASSERT_TRUE(store_->CreateToken("hash-user", {"bob", "tenant-user", "acme", ""}).ok());
  ASSERT_TRUE(store_->CreateToken("hash-agent", {"agent-dgx", "agent", "", "dgx"}).ok());
  EXPECT_EQ(*store_->CountTokens(), 3);

  auto user = store_->LookupToken("hash-user");
  ASSERT_TRUE(user.ok()) << user.status();
  EXPECT_EQ(user->subject, "bob");
  EXPECT_EQ(user->role, "tenant-user");
  EXPECT_EQ(user->tenant, "acme");
  EXPECT_EQ(user->cluster, "");
  auto agent = store_->LookupToken("hash-agent");
  ASSERT_TRUE(agent.ok());
  EXPECT_EQ(agent->cluster, "dgx");
  EXPECT_TRUE(absl::IsNotFound(store_->LookupToken("hash-nobody").status()));

  EXPECT_TRUE(absl::IsAlreadyExists(
      store_->CreateToken("hash-user", {"mallory", "platform-admin", "", ""})));
  EXPECT_EQ(store_->LookupToken("hash-user")->subject, "bob");

  // Bad input: refused, nothing stored.
  auto bad_role = store_->CreateToken("h1", {"eve", "root", "", ""});
  EXPECT_TRUE(absl::IsInvalidArgument(bad_role));
  EXPECT_THAT(std::string(bad_role.message()), HasSubstr("role"));
  EXPECT_THAT(std::string(store_->CreateToken("h2", {"eve", "tenant-admin", "", ""}).message()),
              HasSubstr("tenant"));
  EXPECT_THAT(std::string(store_->CreateToken("h3", {"eve", "agent", "", ""}).message()),
              HasSubstr("cluster"));
  EXPECT_TRUE(absl::IsInvalidArgument(store_->CreateToken("", {"eve", "viewer", "", ""})));
  EXPECT_TRUE(absl::IsNotFound(store_->CreateToken("h4", {"eve", "tenant-user", "initech", ""})));
  EXPECT_EQ(*store_->CountTokens(), 3);

  // A revoked token no longer authenticates and no longer counts.
  Exec("UPDATE api_tokens SET revoked_at = now() WHERE token_hash = 'hash-user'");
  EXPECT_TRUE(absl::IsNotFound(store_->LookupToken("hash-user").status()));
  EXPECT_EQ(*store_->CountTokens(), 2);
}

}  // namespace
}  // namespace gpufed::storage
