// Declaring clusters (ControlPlane::ApplyDeclarations) and routing through the whole plane: the
// in-memory stores, the scheduler and the control loop with a fake clock.

#include <chrono>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/plane_test_base.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using ::gpufed::testing::Admin;
using ::gpufed::testing::Gpus;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::User;
using ::testing::ElementsAre;

class RoutingUseCaseTest : public testing::PlaneLoopTestBase {
 protected:
  ClusterDeclaration Declared(const std::string& cluster, const std::string& jurisdiction,
                              int64_t micros) {
    ClusterDeclaration d;
    d.cluster = cluster;
    d.jurisdiction = jurisdiction;
    PriceEntry e;
    e.gpu_model = "H100-80GB";
    e.micros_per_hour = micros;
    e.effective_from = clock_.Now() - std::chrono::hours(1);
    d.prices.push_back(e);
    return d;
  }

  static WorkloadSpec Eight(const std::string& name) {
    WorkloadSpec spec = Gpus(name, 8);
    spec.project = "p";
    return spec;
  }

  WorkloadSpec Ruled(const std::string& jurisdiction) {
    WorkloadSpec spec = Eight("job");
    spec.placement.jurisdictions = {jurisdiction};
    spec.placement.objective = Objective::kCost;
    return spec;
  }
};

TEST_F(RoutingUseCaseTest, ApplyIsDeclarativeAndADryRunStoresNothing) {
  const std::vector<ClusterDeclaration> file = {Declared("a", "eu", 3'000'000),
                                                Declared("b", "us", 2'000'000)};
  ASSERT_OK_AND_ASSIGN(std::vector<DeclarationDiff> dry,
                       plane_.ApplyDeclarations(Admin(), file, /*dry_run=*/true));
  ASSERT_EQ(dry.size(), 2u);
  EXPECT_EQ(dry[0].kind, DeclarationDiff::Kind::kAdded);
  ASSERT_OK_AND_ASSIGN(std::vector<ClusterDeclaration> stored, store_.ListDeclarations());
  EXPECT_TRUE(stored.empty());

  ASSERT_OK_AND_ASSIGN(std::vector<DeclarationDiff> applied,
                       plane_.ApplyDeclarations(Admin(), file, false));
  EXPECT_EQ(applied[1].kind, DeclarationDiff::Kind::kAdded);
  EXPECT_FALSE(applied[1].changes.empty());
  ASSERT_OK_AND_ASSIGN(std::vector<DeclarationDiff> again,
                       plane_.ApplyDeclarations(Admin(), file, false));
  for (const DeclarationDiff& d : again) {
    EXPECT_EQ(d.kind, DeclarationDiff::Kind::kUnchanged) << d.cluster;
    EXPECT_TRUE(d.changes.empty());
  }
  // A change shows as one line, and a dry run of it changes nothing.
  std::vector<ClusterDeclaration> moved = file;
  moved[0].jurisdiction = "de";
  ASSERT_OK_AND_ASSIGN(dry, plane_.ApplyDeclarations(Admin(), moved, true));
  EXPECT_EQ(dry[0].kind, DeclarationDiff::Kind::kChanged);
  EXPECT_THAT(dry[0].changes, ElementsAre("jurisdiction: eu -> de"));
  ASSERT_OK_AND_ASSIGN(stored, store_.ListDeclarations());
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[0].jurisdiction, "eu");
}

TEST_F(RoutingUseCaseTest, PricesInForceAreHistory) {
  ClusterDeclaration d = Declared("a", "eu", 3'000'000);
  ASSERT_OK(plane_.ApplyDeclarations(Admin(), {d}, false));
  // Another price for a line in force: refused, naming it.
  ClusterDeclaration changed = d;
  changed.prices[0].micros_per_hour = 1'000'000;
  EXPECT_THAT(plane_.ApplyDeclarations(Admin(), {changed}, false),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // Back-dated where a price is in force: refused.
  ClusterDeclaration back = d;
  back.prices[0].effective_from -= std::chrono::hours(5);
  EXPECT_THAT(plane_.ApplyDeclarations(Admin(), {back}, false),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  // Left out of the file: kept. A new line from tomorrow: added.
  ClusterDeclaration next = d;
  next.prices[0].micros_per_hour = 2'500'000;
  next.prices[0].effective_from = clock_.Now() + std::chrono::hours(24);
  ASSERT_OK_AND_ASSIGN(std::vector<DeclarationDiff> diff,
                       plane_.ApplyDeclarations(Admin(), {next}, false));
  ASSERT_EQ(diff[0].changes.size(), 1u);
  EXPECT_THAT(diff[0].changes[0], ::testing::StartsWith("+ price H100-80GB on-demand"));
  ASSERT_OK_AND_ASSIGN(std::vector<ClusterDeclaration> stored, store_.ListDeclarations());
  ASSERT_EQ(stored.size(), 1u);
  EXPECT_EQ(stored[0].prices.size(), 2u);
  // The future line may still change.
  next.prices[0].micros_per_hour = 2'400'000;
  ASSERT_OK(plane_.ApplyDeclarations(Admin(), {next}, false));
}

TEST_F(RoutingUseCaseTest, OnlyPlatformAdminsDeclareAndBadDeclarationsChangeNothing) {
  EXPECT_THAT(plane_.ApplyDeclarations(User("acme"), {Declared("a", "eu", 1)}, false),
              StatusIs(absl::StatusCode::kPermissionDenied));
  ClusterDeclaration bad = Declared("a", "eu", 1);
  bad.prices[0].gpu_model = "H200-NOPE";
  EXPECT_THAT(plane_.ApplyDeclarations(Admin(), {Declared("b", "eu", 1), bad}, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("declarations[1].prices[0].gpu_model")));
  EXPECT_THAT(
      plane_.ApplyDeclarations(Admin(), {Declared("a", "eu", 1), Declared("a", "us", 1)}, false),
      StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(std::vector<ClusterDeclaration> stored, store_.ListDeclarations());
  EXPECT_TRUE(stored.empty());
}

TEST_F(RoutingUseCaseTest, TheSchedulerRoutesByDeclarationsAndAgentsNeverOverwriteThem) {
  Register("a");
  Register("b");
  ASSERT_OK(plane_.ApplyDeclarations(
      Admin(), {Declared("a", "eu", 3'000'000), Declared("b", "us", 1'000'000)}, false));
  ASSERT_OK_AND_ASSIGN(SubmitResult eu, Submit(User("acme"), Ruled("eu")));
  ASSERT_OK_AND_ASSIGN(SubmitResult de, Submit(User("acme"), Ruled("de")));
  Step();
  EXPECT_EQ(MustGet(eu.workload.id).assignment.cluster, "a");
  const Workload nowhere = MustGet(de.workload.id);
  EXPECT_NE(nowhere.state, WorkloadState::kPlaced);
  EXPECT_EQ(nowhere.pending_reason.code, ReasonCode::kNoClusterAllowed);
  EXPECT_EQ(nowhere.pending_reason.Text(figure::kRule), "in jurisdiction de");

  // The agent of b registers again: b is still in us by its declaration, and cheaper, so a
  // cost-minded job without rules goes there.
  Register("b");
  WorkloadSpec cheap = Eight("cheap");
  cheap.placement.objective = Objective::kCost;
  ASSERT_OK_AND_ASSIGN(SubmitResult c, Submit(User("acme"), cheap));
  Step();
  EXPECT_EQ(MustGet(c.workload.id).assignment.cluster, "b");
  ASSERT_OK_AND_ASSIGN(Cluster b, store_.GetCluster("b"));
  EXPECT_EQ(b.declared.jurisdiction, "us");

  // Declaring b in de lets the waiting workload run there at once.
  ASSERT_OK(plane_.ApplyDeclarations(Admin(), {Declared("b", "de", 1'000'000)}, false));
  ASSERT_OK(Report("b", c.workload.id, WorkloadState::kSucceeded));
  Step();
  EXPECT_EQ(MustGet(de.workload.id).assignment.cluster, "b");
}

}  // namespace
}  // namespace gpufed
