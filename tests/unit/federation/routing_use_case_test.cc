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

TEST_F(RoutingUseCaseTest, ExplainListsEveryCandidateWithItsRulesAndPrices) {
  Register("a");
  Register("b");
  ClusterDeclaration a = Declared("a", "eu", 3'000'000);
  a.rtt_micros["eu-west"] = 9'000;
  ASSERT_OK(plane_.ApplyDeclarations(Admin(), {a, Declared("b", "us", 1'000'000)}, false));
  Step();
  WorkloadSpec spec = Ruled("eu");
  spec.placement.client_region = "eu-west";
  spec.estimated_duration_ms = int64_t{2} * 3'600'000;

  ASSERT_OK_AND_ASSIGN(RoutingExplanation what_if, plane_.WhatIf(User("acme"), spec));
  ASSERT_TRUE(what_if.decision.assignment);
  EXPECT_EQ(what_if.decision.assignment->cluster, "a");
  EXPECT_EQ(what_if.price_per_hour, 8 * 3'000'000);
  EXPECT_EQ(what_if.estimated_cost, 2 * 8 * 3'000'000);
  ASSERT_EQ(what_if.candidates.size(), 2u);
  const ClusterCandidate& ca = what_if.candidates[0];
  const ClusterCandidate& cb = what_if.candidates[1];
  EXPECT_TRUE(ca.chosen);
  EXPECT_TRUE(ca.allowed);
  ASSERT_EQ(ca.rules.size(), 1u);
  EXPECT_EQ(ca.rules[0].rule, "jurisdiction");
  EXPECT_TRUE(ca.rules[0].passed);
  ASSERT_EQ(ca.offers.size(), 1u);
  EXPECT_TRUE(ca.offers[0].fits_now);
  EXPECT_EQ(ca.offers[0].rtt_micros, 9'000);
  EXPECT_FALSE(cb.allowed);
  EXPECT_FALSE(cb.rules[0].passed);
  EXPECT_EQ(cb.rules[0].detail, "us");
  EXPECT_FALSE(cb.offers[0].fits_now) << "not allowed: not tried";
  ASSERT_OK_AND_ASSIGN(std::vector<Workload> none, store_.ListPending(10));
  EXPECT_TRUE(none.empty()) << "a what-if submits nothing";

  // Nothing fits: explain of a submitted workload shows the same candidates.
  ASSERT_OK_AND_ASSIGN(SubmitResult first, Submit(User("acme"), spec));
  Step();
  ASSERT_OK_AND_ASSIGN(SubmitResult second, Submit(User("acme"), spec));
  ASSERT_OK_AND_ASSIGN(Explanation why, plane_.Explain(User("acme"), second.workload.id));
  ASSERT_TRUE(why.routing);
  EXPECT_FALSE(why.routing->decision.assignment);
  EXPECT_FALSE(why.routing->candidates[0].offers[0].fits_now);
  EXPECT_TRUE(why.routing->candidates[0].allowed);

  // Checked like a submission.
  EXPECT_THAT(plane_.WhatIf(User("other"), spec), StatusIs(absl::StatusCode::kPermissionDenied));
  spec.placement.max_rtt_micros = -1;
  EXPECT_THAT(plane_.WhatIf(User("acme"), spec), StatusIs(absl::StatusCode::kInvalidArgument));
  (void)first;
}

}  // namespace
}  // namespace gpufed
