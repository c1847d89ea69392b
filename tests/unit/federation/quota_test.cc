// Quotas (federation/quota.h): amounts, resources, the capacity a resource draws on, and whether
// a quota fits among the others; then the use cases (ControlPlane::SetQuota, DeleteQuota,
// ListQuotas) on the in-memory store: who may set what, and the refusals that name the
// resource and the shortfall.

#include "federation/quota.h"

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/quota_fixtures.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/placement_fixtures.h"
#include "tests/unit/federation/plane_test_base.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using ::gpufed::testing::Admin;
using ::gpufed::testing::IsOkAndHolds;
using ::gpufed::testing::MakeQuota;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::User;
using ::gpufed::testing::Viewer;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using Code = absl::StatusCode;

TEST(QuotaTest, AmountsAreThousandthsOfAGpuOrAnInstance) {
  int64_t milli = -1;
  ASSERT_OK(ParseQuotaAmount("guaranteed", "32", &milli));
  EXPECT_EQ(milli, 32000);
  ASSERT_OK(ParseQuotaAmount("guaranteed", "0.5", &milli));
  EXPECT_EQ(milli, 500);
  ASSERT_OK(ParseQuotaAmount("guaranteed", "1.125", &milli));
  EXPECT_EQ(milli, 1125);
  for (const char* bad : {"", "-1", "1.2345", "1e3", "x", "1.", ".5", "1.2.3", "99999999"}) {
    EXPECT_THAT(ParseQuotaAmount("limit", bad, &milli),
                StatusIs(Code::kInvalidArgument, HasSubstr("limit")))
        << bad;
  }
  EXPECT_EQ(FormatQuotaAmount(32000), "32");
  EXPECT_EQ(FormatQuotaAmount(500), "0.5");
  EXPECT_EQ(FormatQuotaAmount(1125), "1.125");
  EXPECT_EQ(FormatQuotaAmount(1050), "1.05");
  // Bad input is named in messages as given.
  EXPECT_EQ(FormatQuotaAmount(-5), "-0.005");
  EXPECT_EQ(FormatQuotaAmount(std::numeric_limits<int64_t>::min()), "-9223372036854775.808");
  EXPECT_THAT(ValidateQuota(MakeQuota("acme", "", "gpu", 0, -5)),
              StatusIs(Code::kInvalidArgument, HasSubstr("-0.005")));
}

TEST(QuotaTest, AResourceIsGpuAModelOrAMigProfile) {
  QuotaResourceKind kind;
  ASSERT_OK(ValidateQuotaResource("resource", "gpu", &kind));
  EXPECT_EQ(kind, QuotaResourceKind::kGpuEquivalents);
  ASSERT_OK(ValidateQuotaResource("resource", "H100-80GB", &kind));
  EXPECT_EQ(kind, QuotaResourceKind::kGpuModel);
  ASSERT_OK(ValidateQuotaResource("resource", "3g.40gb", &kind));
  EXPECT_EQ(kind, QuotaResourceKind::kMigProfile);
  EXPECT_THAT(ValidateQuotaResource("resource", "H900", nullptr),
              StatusIs(Code::kInvalidArgument, HasSubstr("resource")));
  EXPECT_THAT(ValidateQuota(MakeQuota("acme", "", "gpu", 2000, 1000)),
              StatusIs(Code::kInvalidArgument, HasSubstr("limit")));
  EXPECT_THAT(ValidateQuota(MakeQuota("acme", "", "gpu", -1)),
              StatusIs(Code::kInvalidArgument, HasSubstr("guaranteed")));
  EXPECT_THAT(ValidateQuota(MakeQuota("Acme!", "", "gpu", 1)),
              StatusIs(Code::kInvalidArgument, HasSubstr("tenant")));
  EXPECT_THAT(ValidateQuota(MakeQuota("acme", "", "gpu", kMaxQuotaMilli + 1)),
              StatusIs(Code::kInvalidArgument, HasSubstr("guaranteed")));
}

// Capacity: healthy GPUs, not on a cordoned node or an unreachable cluster; a MIG profile counts
// the instances a MIG-capable GPU could hold of it.
TEST(QuotaTest, TheCapacityAResourceDrawsOn) {
  Cluster h100 = testing::MakeCluster("a", 2, 8, "H100-80GB");
  h100.nodes[0].gpus[0].healthy = false;
  h100.nodes[1].gpus[0].mig_capable = true;
  Cluster l4 = testing::MakeCluster("b", 1, 4, "L4", 23034);
  Cluster gone = testing::MakeCluster("c", 1, 8, "H100-80GB");
  gone.state = ClusterState::kUnreachable;
  Cluster cordoned = testing::MakeCluster("d", 1, 8, "H100-80GB");
  cordoned.nodes[0].cordoned = true;
  const std::vector<Cluster> pool = {h100, l4, gone, cordoned};
  EXPECT_EQ(QuotaCapacity(pool, "gpu"), 19000);
  EXPECT_EQ(QuotaCapacity(pool, "H100-80GB"), 15000);
  EXPECT_EQ(QuotaCapacity(pool, "L4"), 4000);
  EXPECT_EQ(QuotaCapacity(pool, "A100-80GB"), 0);
  EXPECT_EQ(QuotaCapacity(pool, "1g.10gb"), 7000);  // one MIG-capable H100: seven 1g.10gb
  EXPECT_EQ(QuotaCapacity(pool, "3g.40gb"), 2000);
}

TEST(QuotaTest, TenantGuaranteesMustFitTheCapacityUnlessOvercommitted) {
  const std::vector<Quota> stored = {MakeQuota("acme", "", "H100-80GB", 24000),
                                     MakeQuota("beta", "", "H100-80GB", 4000)};
  Quota fits = MakeQuota("gamma", "", "H100-80GB", 4000);
  EXPECT_OK(CheckQuotaFits(fits, stored, 32000, false));
  Quota over = MakeQuota("gamma", "", "H100-80GB", 12000);
  EXPECT_THAT(CheckQuotaFits(over, stored, 32000, false),
              StatusIs(Code::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr("H100-80GB"), HasSubstr("40 of 32"),
                                        HasSubstr("8 short"))));
  ASSERT_OK(CheckQuotaFits(over, stored, 32000, true));
  EXPECT_TRUE(over.overcommitted);
  // Replacing a quota counts the new amount, not both.
  Quota acme_again = MakeQuota("acme", "", "H100-80GB", 28000);
  EXPECT_OK(CheckQuotaFits(acme_again, stored, 32000, false));
  EXPECT_FALSE(acme_again.overcommitted);
}

TEST(QuotaTest, ProjectQuotasLiveInsideTheirTenants) {
  const std::vector<Quota> stored = {MakeQuota("acme", "", "gpu", 16000, 24000),
                                     MakeQuota("acme", "research", "gpu", 10000, 20000)};
  Quota prod = MakeQuota("acme", "prod", "gpu", 8000);
  EXPECT_THAT(CheckQuotaFits(prod, stored, 100000, false),
              StatusIs(Code::kFailedPrecondition, HasSubstr("2 short")));
  Quota prod_small = MakeQuota("acme", "prod", "gpu", 6000, 30000);
  EXPECT_THAT(CheckQuotaFits(prod_small, stored, 100000, false),
              StatusIs(Code::kFailedPrecondition, HasSubstr("limit")));
  prod_small.limit_milli = 24000;
  EXPECT_OK(CheckQuotaFits(prod_small, stored, 100000, false));
  // Nor may the tenant's shrink below what its projects hold.
  Quota shrink = MakeQuota("acme", "", "gpu", 8000, 24000);
  EXPECT_THAT(CheckQuotaFits(shrink, stored, 100000, false),
              StatusIs(Code::kFailedPrecondition, HasSubstr("projects of tenant acme")));
  // A tenant's guarantee covers its projects' (they are not counted twice against the pool);
  // the projects of a tenant with no quota on the resource promise the pool what they add up to.
  Quota beta_p = MakeQuota("beta", "p", "gpu", 84000);
  EXPECT_OK(CheckQuotaFits(beta_p, stored, 100000, false));
  Quota beta_too_much = MakeQuota("beta", "p", "gpu", 85000);
  EXPECT_THAT(CheckQuotaFits(beta_too_much, stored, 100000, false),
              StatusIs(Code::kFailedPrecondition, HasSubstr("1 short")));
}

TEST(QuotaTest, LoweringAGuaranteeIsAcceptedEvenWhenThePoolShrankBelowThem) {
  const std::vector<Quota> stored = {MakeQuota("acme", "", "gpu", 30000),
                                     MakeQuota("beta", "", "gpu", 10000)};
  Quota lower = MakeQuota("acme", "", "gpu", 20000);
  EXPECT_OK(CheckQuotaFits(lower, stored, 16000, false));
  Quota higher = MakeQuota("beta", "", "gpu", 11000);
  EXPECT_THAT(CheckQuotaFits(higher, stored, 16000, false), StatusIs(Code::kFailedPrecondition));
}

// A workload holds `gpu` (GPU-equivalents), the model of each GPU it holds, and its MIG profile.
TEST(QuotaTest, WhatAPlacedWorkloadHolds) {
  auto model_of = [](const std::string& cluster, const std::string& /*node*/,
                     const std::string& uuid) {
    return cluster == "dgx" && uuid.rfind("GPU-h", 0) == 0 ? std::string("H100-80GB")
                                                           : std::string();
  };
  Workload whole;
  whole.assignment.cluster = "dgx";
  whole.assignment.replicas = {testing::WholeGpus("h", {0, 1}), testing::WholeGpus("h", {2, 3})};
  EXPECT_EQ(HeldResources(whole, model_of), (ResourceAmounts{{"gpu", 4000}, {"H100-80GB", 4000}}));
  Workload share = whole;
  share.assignment.replicas = {testing::WholeGpus("h", {0})};
  share.assignment.replicas[0].gpu_milli = 250;
  EXPECT_EQ(HeldResources(share, model_of), (ResourceAmounts{{"gpu", 250}, {"H100-80GB", 250}}));
  Workload mig = whole;
  mig.assignment.replicas = {testing::WholeGpus("h", {0}), testing::WholeGpus("h", {1})};
  for (ReplicaAssignment& r : mig.assignment.replicas) {
    r.mig_profile = "3g.40gb";
    r.mig_start = 0;
  }
  // 3 of an H100's 7 compute slices, twice.
  EXPECT_EQ(HeldResources(mig, model_of),
            (ResourceAmounts{{"gpu", 856}, {"H100-80GB", 856}, {"3g.40gb", 2000}}));
  // A GPU of unknown model counts in `gpu` only.
  Workload unknown = whole;
  unknown.assignment.cluster = "elsewhere";
  EXPECT_EQ(HeldResources(unknown, model_of), (ResourceAmounts{{"gpu", 4000}}));
}

class QuotaUseCaseTest : public testing::PlaneTestBase {
 protected:
  QuotaUseCaseTest() : plane_(Ports()) {
    Cluster c = testing::MakeCluster("dgx", 4, 8, "H100-80GB");  // 32 H100
    EXPECT_OK(store_.RegisterCluster(c.info, c.nodes));
  }
  static auth::Principal TenantAdmin(const std::string& tenant) {
    return {"ta", auth::Role::kTenantAdmin, tenant, ""};
  }
  ControlPlane plane_;
};

TEST_F(QuotaUseCaseTest, PlatformAdminsSetTenantQuotasAndTenantAdminsTheirProjects) {
  ASSERT_OK(plane_.SetQuota(Admin(), MakeQuota("acme", "", "H100-80GB", 16000, 32000), false));
  EXPECT_THAT(
      plane_.SetQuota(TenantAdmin("acme"), MakeQuota("acme", "", "H100-80GB", 32000), false),
      StatusIs(Code::kPermissionDenied));
  EXPECT_OK(plane_.SetQuota(TenantAdmin("acme"), MakeQuota("acme", "p", "H100-80GB", 8000), false));
  EXPECT_THAT(
      plane_.SetQuota(TenantAdmin("acme"), MakeQuota("other", "p", "H100-80GB", 1000), false),
      StatusIs(Code::kPermissionDenied));
  EXPECT_THAT(plane_.SetQuota(User("acme"), MakeQuota("acme", "p", "H100-80GB", 1000), false),
              StatusIs(Code::kPermissionDenied));
  EXPECT_THAT(plane_.DeleteQuota(User("acme"), QuotaKey{"acme", "p", "H100-80GB"}),
              StatusIs(Code::kPermissionDenied));
  EXPECT_OK(plane_.DeleteQuota(TenantAdmin("acme"), QuotaKey{"acme", "p", "H100-80GB"}));

  ASSERT_OK_AND_ASSIGN(std::vector<Quota> mine, plane_.ListQuotas(User("acme"), "acme"));
  EXPECT_EQ(mine.size(), 1u);
  // Another tenant's quotas: as if the tenant did not exist.
  EXPECT_THAT(plane_.ListQuotas(User("other"), "acme"), StatusIs(Code::kNotFound));
  // Naming no tenant: the caller's own (none for another tenant's user).
  EXPECT_THAT(plane_.ListQuotas(User("acme"), ""), IsOkAndHolds(SizeIs(1)));
  EXPECT_THAT(plane_.ListQuotas(User("other"), ""), IsOkAndHolds(IsEmpty()));
  ASSERT_OK_AND_ASSIGN(std::vector<Quota> all, plane_.ListQuotas(Viewer(""), ""));
  EXPECT_EQ(all.size(), 1u);
}

TEST_F(QuotaUseCaseTest, GuaranteesBeyondThePoolAreRefusedNamingTheShortfall) {
  ASSERT_OK(plane_.SetQuota(Admin(), MakeQuota("acme", "", "H100-80GB", 24000), false));
  EXPECT_THAT(plane_.SetQuota(Admin(), MakeQuota("other", "", "H100-80GB", 16000), false),
              StatusIs(Code::kFailedPrecondition, HasSubstr("8 short")));
  ASSERT_OK_AND_ASSIGN(Quota over,
                       plane_.SetQuota(Admin(), MakeQuota("other", "", "H100-80GB", 16000), true));
  EXPECT_TRUE(over.overcommitted);
  // No GPU of a model in the pool: any guarantee on it is a shortfall.
  EXPECT_THAT(plane_.SetQuota(Admin(), MakeQuota("acme", "", "A100-80GB", 1000), false),
              StatusIs(Code::kFailedPrecondition, HasSubstr("A100-80GB")));
  // A limit alone (guarantee 0) borrows only: always accepted.
  EXPECT_OK(plane_.SetQuota(Admin(), MakeQuota("acme", "", "A100-80GB", 0, 8000), false));
  EXPECT_THAT(plane_.SetQuota(Admin(), MakeQuota("acme", "", "H900", 1000), false),
              StatusIs(Code::kInvalidArgument, HasSubstr("resource")));
}

// Usage: what each tenant and project holds now, against its quotas; borrowed is what is held
// above the guarantee.
TEST_F(QuotaUseCaseTest, UsageIsWhatWorkloadsHoldAgainstTheQuotas) {
  auto place = [&](const WorkloadSpec& spec, const std::string& node, std::vector<uint32_t> gpus) {
    absl::StatusOr<SubmitResult> submitted = store_.Submit(spec);
    ASSERT_OK(submitted);
    Transition t;
    t.id = submitted->workload.id;
    t.from = WorkloadState::kPending;
    t.to = WorkloadState::kPlaced;
    t.actor = "scheduler";
    Assignment a;
    a.cluster = "dgx";
    a.epoch = 1;
    a.replicas = {testing::WholeGpus(node, std::move(gpus))};
    t.assignment = a;
    ASSERT_OK_AND_ASSIGN(std::vector<TransitionResult> r, store_.ApplyTransitions({t}));
    ASSERT_TRUE(r[0].applied);
  };
  place(testing::Spec(1, 2), "dgx-n0", {0, 1});
  WorkloadSpec other = testing::Spec(1, 1);
  other.tenant = "other";
  place(other, "dgx-n1", {0});
  ASSERT_OK(plane_.SetQuota(Admin(), MakeQuota("acme", "", "gpu", 1000, 4000), false));

  ASSERT_OK_AND_ASSIGN(std::vector<QuotaUsage> usage, plane_.QuotaUsageOf(User("acme"), "acme"));
  ASSERT_EQ(usage.size(), 4u);
  EXPECT_EQ(usage[0].key, (QuotaKey{"acme", "", "H100-80GB"}));
  EXPECT_EQ(usage[0].used_milli, 2000);
  EXPECT_EQ(usage[0].borrowed_milli, 2000) << "no quota: all of it is borrowed";
  EXPECT_EQ(usage[1].key, (QuotaKey{"acme", "", "gpu"}));
  ASSERT_TRUE(usage[1].quota.has_value());
  EXPECT_EQ(usage[1].used_milli, 2000);
  EXPECT_EQ(usage[1].borrowed_milli, 1000);
  EXPECT_EQ(usage[2].key, (QuotaKey{"acme", "p", "H100-80GB"}));
  EXPECT_EQ(usage[3].key, (QuotaKey{"acme", "p", "gpu"}));
  EXPECT_EQ(usage[3].used_milli, 2000);
  // Another tenant's usage: as if it did not exist; every tenant's: for those who see all.
  EXPECT_THAT(plane_.QuotaUsageOf(User("other"), "acme"), StatusIs(Code::kNotFound));
  ASSERT_OK_AND_ASSIGN(usage, plane_.QuotaUsageOf(Admin(), ""));
  EXPECT_EQ(usage.size(), 8u);
  EXPECT_EQ(usage.back().key, (QuotaKey{"other", "p", "gpu"}));
  EXPECT_EQ(usage.back().used_milli, 1000);
}

}  // namespace
}  // namespace gpufed
