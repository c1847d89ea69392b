#include "auth/policy.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace gpufed::auth {
namespace {

Principal Bound(Role role, std::string tenant = "", std::string project = "") {
  return {.subject = "s", .role = role, .tenant = std::move(tenant), .project = std::move(project)};
}

TEST(PolicyTest, ATenantBindingCoversItsTenantAndItsProjectsOnly) {
  const Principal user = Bound(Role::kTenantUser, "acme");
  EXPECT_TRUE(Allows(user, Permission::kWorkloadsWrite, {"acme", "research"}));
  EXPECT_TRUE(Allows(user, Permission::kWorkloadsRead, {"acme", ""}));
  EXPECT_FALSE(Allows(user, Permission::kWorkloadsRead, {"globex", "research"}));
  EXPECT_FALSE(Allows(user, Permission::kWorkloadsRead, {}));  // the platform
  EXPECT_FALSE(Allows(user, Permission::kTenancyAdmin, {"acme", ""}));
}

TEST(PolicyTest, AProjectBindingCoversThatProjectAndReachesIntoItsTenant) {
  const Principal user = Bound(Role::kTenantUser, "acme", "research");
  EXPECT_TRUE(Allows(user, Permission::kWorkloadsWrite, {"acme", "research"}));
  EXPECT_FALSE(Allows(user, Permission::kWorkloadsRead, {"acme", "ops"}));
  EXPECT_FALSE(Allows(user, Permission::kWorkloadsRead, {"acme", ""}));
  EXPECT_TRUE(AllowsSomeOf(user, Permission::kTenancyRead, {"acme", ""}));
  EXPECT_FALSE(AllowsSomeOf(user, Permission::kTenancyRead, {"globex", ""}));
}

TEST(PolicyTest, ViewersReadAndNeverWrite) {
  const Principal finance = Bound(Role::kViewer);
  EXPECT_TRUE(Allows(finance, Permission::kWorkloadsRead, {"acme", "research"}));
  EXPECT_TRUE(Allows(finance, Permission::kQuotasRead, {}));
  EXPECT_FALSE(Allows(finance, Permission::kWorkloadsWrite, {"acme", "research"}));
  EXPECT_FALSE(Allows(finance, Permission::kPoolAdmin, {}));
}

TEST(PolicyTest, AgentsSpeakForTheirClusterAndReachNothingElse) {
  const Principal agent{.subject = "edge", .role = Role::kAgent, .cluster = "edge"};
  EXPECT_TRUE(MaySpeakFor(agent, "edge"));
  EXPECT_FALSE(MaySpeakFor(agent, "dgx"));
  EXPECT_FALSE(MaySpeakFor(Bound(Role::kPlatformAdmin), "edge"));
  for (Permission p : {Permission::kWorkloadsRead, Permission::kPoolRead, Permission::kTenancyRead,
                       Permission::kQuotasRead}) {
    EXPECT_FALSE(Allows(agent, p, {})) << PermissionName(p);
    EXPECT_FALSE(Grants(Role::kAgent, p)) << PermissionName(p);
  }
}

TEST(PolicyTest, NobodyGrantsARoleAboveTheirOwnOrOutsideTheirScope) {
  const Principal admin = Bound(Role::kTenantAdmin, "acme");
  EXPECT_TRUE(MayGrant(admin, Role::kTenantAdmin, {"acme", ""}));
  EXPECT_TRUE(MayGrant(admin, Role::kViewer, {"acme", "research"}));
  EXPECT_FALSE(MayGrant(admin, Role::kPlatformAdmin, {}));
  EXPECT_FALSE(MayGrant(admin, Role::kAgent, {}));
  EXPECT_FALSE(MayGrant(admin, Role::kViewer, {}));  // a platform-wide viewer
  EXPECT_FALSE(MayGrant(admin, Role::kTenantUser, {"globex", ""}));
  const Principal project_admin = Bound(Role::kTenantAdmin, "acme", "research");
  EXPECT_TRUE(MayGrant(project_admin, Role::kTenantUser, {"acme", "research"}));
  EXPECT_FALSE(MayGrant(project_admin, Role::kTenantUser, {"acme", ""}));
  EXPECT_FALSE(MayGrant(project_admin, Role::kTenantUser, {"acme", "ops"}));
  EXPECT_FALSE(MayGrant(Bound(Role::kTenantUser, "acme"), Role::kViewer, {"acme", ""}));
  EXPECT_TRUE(MayGrant(Bound(Role::kPlatformAdmin), Role::kAgent, {}));
}

TEST(PolicyTest, AuditRowsAreReadInTheReadersScopeAndVerifiedByPlatformAdminsOnly) {
  EXPECT_TRUE(Allows(Bound(Role::kPlatformAdmin), Permission::kAuditVerify, {}));
  EXPECT_TRUE(Allows(Bound(Role::kViewer), Permission::kAuditRead, {"acme", ""}));
  EXPECT_TRUE(Allows(Bound(Role::kTenantAdmin, "acme"), Permission::kAuditRead, {"acme", ""}));
  EXPECT_FALSE(Allows(Bound(Role::kTenantAdmin, "acme"), Permission::kAuditRead, {"globex", ""}));
  EXPECT_FALSE(Allows(Bound(Role::kTenantAdmin, "acme"), Permission::kAuditVerify, {}));
  EXPECT_FALSE(Grants(Role::kTenantUser, Permission::kAuditRead));
  EXPECT_FALSE(Grants(Role::kAgent, Permission::kAuditRead));
  EXPECT_FALSE(Grants(Role::kViewer, Permission::kAuditVerify));
  EXPECT_EQ(PermissionName(Permission::kAuditRead), "audit.read");
}

TEST(PolicyTest, EveryMethodHasOneRowAndRowsAreFound) {
  std::set<std::string> seen;
  for (const MethodPolicy& m : MethodPolicies()) {
    EXPECT_TRUE(seen.insert(std::string(m.method)).second) << m.method << " twice";
    ASSERT_TRUE(PolicyFor(m.method).has_value());
    EXPECT_EQ(PolicyFor(m.method)->permission, m.permission);
  }
  EXPECT_FALSE(PolicyFor("gpufed.v1.WorkloadService.Nothing").has_value());
}

}  // namespace
}  // namespace gpufed::auth
