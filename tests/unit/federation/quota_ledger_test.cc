// The scheduler's quota ledger (federation/quota_ledger.h): what a workload asks for, admission
// against limits and guarantees of the tenant and its project, and which held work is borrowed.

#include "federation/quota_ledger.h"

#include <chrono>
#include <cmath>

#include "federation/fair_share.h"
#include "gtest/gtest.h"
#include "tests/support/quota_fixtures.h"

namespace gpufed {
namespace {

using ::gpufed::testing::MakeQuota;

WorkloadSpec Whole(uint32_t replicas, uint32_t gpus) {
  WorkloadSpec s;
  s.tenant = "acme";
  s.project = "research";
  s.replicas = replicas;
  s.gpus_per_replica = gpus;
  return s;
}

TEST(QuotaLedgerTest, DemandCountsGpuEquivalentsTheModelAndTheMigProfile) {
  EXPECT_EQ(DemandOf(Whole(2, 4), "H100-80GB"),
            (ResourceAmounts{{"gpu", 8000}, {"H100-80GB", 8000}}));
  EXPECT_EQ(DemandOf(Whole(2, 4), ""), (ResourceAmounts{{"gpu", 8000}}));
  WorkloadSpec share = Whole(3, 1);
  share.gpu_milli = 250;
  EXPECT_EQ(DemandOf(share, "A100-80GB"), (ResourceAmounts{{"gpu", 750}, {"A100-80GB", 750}}));
  WorkloadSpec mig = Whole(2, 1);
  mig.mig_profile = "3g.40gb";
  // 3 of the H100's 7 compute slices, per instance as HeldResources counts it.
  EXPECT_EQ(DemandOf(mig, "H100-80GB"),
            (ResourceAmounts{{"gpu", 856}, {"H100-80GB", 856}, {"3g.40gb", 2000}}));
  EXPECT_EQ(DemandOf(mig, ""), (ResourceAmounts{{"3g.40gb", 2000}}));
}

TEST(QuotaLedgerTest, AdmitsWithinGuaranteeAsOwnedAboveItAsBorrowedAndRefusesPastTheLimit) {
  QuotaLedger ledger;
  ledger.SetQuotas({MakeQuota("acme", "", "H100-80GB", 8000, 12000)});
  const ResourceAmounts four = DemandOf(Whole(1, 4), "H100-80GB");

  AdmissionVerdict v = ledger.Judge("acme", "research", four);
  EXPECT_EQ(v.kind, AdmissionVerdict::kOwned);
  EXPECT_EQ(v.guaranteed_resource, "H100-80GB");
  ledger.Hold(1, "acme", "research", four);
  ledger.Hold(2, "acme", "research", four);
  EXPECT_EQ(ledger.Used(QuotaKey{"acme", "", "H100-80GB"}), 8000);
  EXPECT_EQ(ledger.Used(QuotaKey{"acme", "research", "H100-80GB"}), 8000);

  EXPECT_EQ(ledger.Judge("acme", "research", four).kind, AdmissionVerdict::kBorrowed);
  ledger.Hold(3, "acme", "research", four);
  v = ledger.Judge("acme", "research", DemandOf(Whole(1, 1), "H100-80GB"));
  ASSERT_EQ(v.kind, AdmissionVerdict::kOverLimit);
  EXPECT_EQ(v.limit->key, (QuotaKey{"acme", "", "H100-80GB"}));
  EXPECT_EQ(v.held_milli, 12000);
  EXPECT_EQ(v.asked_milli, 1000);

  // Another model is not limited by the H100 quota, and no quota covers it: borrowed.
  EXPECT_EQ(ledger.Judge("acme", "research", DemandOf(Whole(1, 4), "A100-80GB")).kind,
            AdmissionVerdict::kBorrowed);
  ledger.Drop(3);
  EXPECT_EQ(ledger.Judge("acme", "research", four).kind, AdmissionVerdict::kBorrowed);
  ledger.Drop(2);
  EXPECT_EQ(ledger.Judge("acme", "research", four).kind, AdmissionVerdict::kOwned);
}

// A reservation counts against limits, not against the guarantee: waiting work does not use up
// what its tenant is owed.
TEST(QuotaLedgerTest, ReservationsCountAgainstLimitsButOnlyFirmHoldingsAgainstGuarantees) {
  QuotaLedger ledger;
  ledger.SetQuotas({MakeQuota("acme", "", "gpu", 8000, 12000)});
  ledger.Hold(1, "acme", "p", DemandOf(Whole(1, 8), ""), /*firm=*/false);
  EXPECT_EQ(ledger.Used(QuotaKey{"acme", "", "gpu"}), 8000);
  EXPECT_EQ(ledger.FirmUsed(QuotaKey{"acme", "", "gpu"}), 0);
  EXPECT_EQ(ledger.Judge("acme", "p", DemandOf(Whole(1, 4), "")).kind, AdmissionVerdict::kOwned);
  EXPECT_EQ(ledger.Judge("acme", "p", DemandOf(Whole(1, 5), "")).kind,
            AdmissionVerdict::kOverLimit);
  ledger.Hold(2, "acme", "p", DemandOf(Whole(1, 8), ""));
  EXPECT_FALSE(ledger.Reclaimable(2));
  EXPECT_EQ(ledger.Judge("acme", "p", DemandOf(Whole(1, 1), "")).kind,
            AdmissionVerdict::kOverLimit);
}

TEST(QuotaLedgerTest, AProjectIsHeldToItsOwnQuotaInsideItsTenants) {
  QuotaLedger ledger;
  ledger.SetQuotas({MakeQuota("acme", "", "gpu", 16000, 32000),
                    MakeQuota("acme", "research", "gpu", 4000, 8000)});
  ledger.Hold(1, "acme", "research", DemandOf(Whole(1, 8), "H100-80GB"));
  AdmissionVerdict v = ledger.Judge("acme", "research", DemandOf(Whole(1, 1), "H100-80GB"));
  ASSERT_EQ(v.kind, AdmissionVerdict::kOverLimit);
  EXPECT_EQ(v.limit->key, (QuotaKey{"acme", "research", "gpu"}));
  // Another project of the tenant is held only to the tenant's.
  EXPECT_EQ(ledger.Judge("acme", "web", DemandOf(Whole(1, 8), "H100-80GB")).kind,
            AdmissionVerdict::kOwned);
}

// A victim never takes its holder below a guarantee: beta holds 12 of a guarantee of 8, so its 4
// are borrowed but its 8 are not (without them beta would hold 4).
TEST(QuotaLedgerTest, WorkIsReclaimableOnlyWhileItsHolderKeepsItsGuaranteeWithoutIt) {
  QuotaLedger ledger;
  ledger.SetQuotas(
      {MakeQuota("beta", "", "gpu", 8000, 16000), MakeQuota("delta", "", "gpu", 0, 8000),
       MakeQuota("eps", "", "gpu", 4000, 16000), MakeQuota("eps", "p", "gpu", 6000, 16000)});
  ledger.Hold(1, "beta", "p", DemandOf(Whole(1, 8), "H100-80GB"));
  EXPECT_FALSE(ledger.Reclaimable(1));
  ledger.Hold(2, "beta", "p", DemandOf(Whole(1, 4), "H100-80GB"));
  EXPECT_FALSE(ledger.Reclaimable(1)) << "beta would hold 4 of its 8";
  EXPECT_TRUE(ledger.Reclaimable(2));
  ledger.Drop(2);
  EXPECT_FALSE(ledger.Reclaimable(2)) << "holds nothing";
  // A project's guarantee binds as its tenant's does.
  ledger.Hold(3, "eps", "p", DemandOf(Whole(1, 6), "H100-80GB"));
  ledger.Hold(4, "eps", "q", DemandOf(Whole(1, 6), "H100-80GB"));
  EXPECT_FALSE(ledger.Reclaimable(3)) << "eps keeps 6 of its 4, but project p 0 of its 6";
  EXPECT_TRUE(ledger.Reclaimable(4));
  ledger.Hold(5, "gamma", "p", DemandOf(Whole(1, 1), "H100-80GB"));
  EXPECT_TRUE(ledger.Reclaimable(5)) << "no quota covers gamma";
  ledger.Hold(6, "delta", "", DemandOf(Whole(1, 1), "H100-80GB"));
  EXPECT_TRUE(ledger.Reclaimable(6)) << "delta's quota guarantees nothing";
}

// Usage decays by half each half-life; what is held adds its GPU-seconds, each decaying from
// when it was used.
TEST(DecayedUsageTest, HoldingsAccrueAndDecayByHalfEachHalfLife) {
  const auto hour = std::chrono::hours(1);
  DecayedUsage usage(hour);
  const DecayedUsage::Holder acme{"acme", ""};
  Timestamp t{};
  usage.Advance(t, {{acme, 2000}});  // sets the clock only
  EXPECT_EQ(usage.GpuSeconds(acme), 0);
  t += hour;
  usage.Advance(t, {{acme, 2000}});
  // 2 GPUs over one half-life: 2 * 3600 / ln 2 * (1 - 1/2).
  const double one = 2 * 3600 / std::log(2.0) * 0.5;
  EXPECT_NEAR(usage.GpuSeconds(acme), one, 1e-6);
  t += hour;
  usage.Advance(t, {});
  EXPECT_NEAR(usage.GpuSeconds(acme), one / 2, 1e-6);
  usage.Advance(t - hour, {{acme, 1000000}});  // time never runs back
  EXPECT_NEAR(usage.GpuSeconds(acme), one / 2, 1e-6);
  // Held for many half-lives, the average reads what is held.
  for (int i = 0; i < 40; ++i) {
    t += hour;
    usage.Advance(t, {{acme, 3000}});
  }
  EXPECT_NEAR(usage.AverageGpus(acme), 3.0, 1e-6);
}

}  // namespace
}  // namespace gpufed
