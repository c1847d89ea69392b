// Randomised quota properties (docs/quotas.md): thousands of cycles of the control loop over the
// in-memory stores, several tenants and projects with quotas, mixed sizes, gangs, MIG and whole
// GPUs, agents that start, finish and stop work at random. After every cycle:
//   - no tenant or project holds more than its limit of any resource;
//   - every reclaim evicts at most 1.25 x the GPU-equivalents its owner needs, only work of
//     other holders, and each victim only while its holder was above a guarantee covering it
//     (or covered by none), so an owner never preempts work that is within its own guarantee
//     and no reclaim can be answered by one the other way (A preempts B preempts A);
//   - an owner whose victims have all stopped is placed in the next cycle.

#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/support/quota_fixtures.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/plane_test_base.h"

namespace gpufed {
namespace {

using ::gpufed::testing::Admin;
using ::gpufed::testing::MakeQuota;
using ::gpufed::testing::User;

class QuotaPropertyTest : public testing::PlaneLoopTestBase,
                          public ::testing::WithParamInterface<uint32_t> {
 protected:
  QuotaPropertyTest() {
    EXPECT_OK(store_.CreateTenant(Tenant{"gamma", "gamma", {}}));
    EXPECT_OK(store_.CreateProject(Project{"gamma", "p", {}}));
    EXPECT_OK(store_.CreateProject(Project{"acme", "q", {}}));
  }

  // (cluster, node, uuid) -> model, from the stored inventories.
  GpuModelLookup Models() {
    models_.clear();
    absl::StatusOr<std::vector<Cluster>> clusters = store_.ListClusters(true);
    EXPECT_OK(clusters);
    for (const Cluster& c : *clusters) {
      for (const NodeInfo& n : c.nodes) {
        for (const GpuInfo& g : n.gpus) models_[{c.info.name, g.uuid}] = g.model;
      }
    }
    return [this](const std::string& cluster, const std::string&, const std::string& uuid) {
      auto it = models_.find({cluster, uuid});
      return it == models_.end() ? std::string() : it->second;
    };
  }

  // A ledger of what the stored active workloads hold, under the quotas as stored.
  QuotaLedger Ledger() {
    QuotaLedger ledger;
    absl::StatusOr<std::vector<Quota>> quotas = store_.ListQuotas("");
    EXPECT_OK(quotas);
    ledger.SetQuotas(*quotas);
    const GpuModelLookup model_of = Models();
    absl::StatusOr<std::vector<Workload>> active = store_.ListActive("");
    EXPECT_OK(active);
    for (const Workload& w : *active) {
      ledger.Hold(w.id, w.spec.tenant, w.spec.project, HeldResources(w, model_of));
    }
    return ledger;
  }

  std::map<std::pair<std::string, std::string>, std::string> models_;
};

WorkloadSpec RandomSpec(std::mt19937& rng) {
  static const char* const kHolders[][2] = {
      {"acme", "p"}, {"acme", "q"}, {"other", "p"}, {"gamma", "p"}};
  WorkloadSpec s;
  const auto& holder = kHolders[rng() % 4];
  s.tenant = holder[0];
  s.project = holder[1];
  s.name = "job";
  s.priority = static_cast<int32_t>(rng() % 3);
  s.retry.max_attempts = 20;
  s.retry.on_preemption = rng() % 4 != 0;  // most restart; some end PREEMPTED
  switch (rng() % 6) {
    case 0:
      s.mig_profile = "1g.10gb";
      s.replicas = 1 + rng() % 2;
      break;
    case 1:
      s.replicas = 2;  // a gang
      s.gpus_per_replica = 4;
      break;
    default: {
      static const uint32_t kSizes[] = {1, 2, 4, 8};
      s.gpus_per_replica = kSizes[rng() % 4];
      break;
    }
  }
  return s;
}

TEST_P(QuotaPropertyTest, LimitsRatioVictimsAndOwnerWaitHoldAfterEveryCycle) {
  std::mt19937 rng(GetParam());
  Register("h100", /*nodes=*/3);
  // Guarantees that fit the 24 H100s: acme 8 (limit 16) on the model; on `gpu`, other 8 (limit
  // 20) and acme's project q 2 (limit 6). gamma has none: all it holds is borrowed.
  ASSERT_OK(plane_.SetQuota(Admin(), MakeQuota("acme", "", "H100-80GB", 8000, 16000), false));
  ASSERT_OK(plane_.SetQuota(Admin(), MakeQuota("other", "", "gpu", 8000, 20000), false));
  ASSERT_OK(plane_.SetQuota(Admin(), MakeQuota("acme", "q", "gpu", 2000, 6000), false));
  absl::StatusOr<std::vector<Quota>> quotas = store_.ListQuotas("");
  ASSERT_OK(quotas);

  // Owners whose victims were told to stop in the last cycle, and those victims.
  std::map<WorkloadId, std::vector<WorkloadId>> reclaiming;
  int reclaims = 0;
  int placed_after_reclaim = 0;
  for (int cycle = 0; cycle < 1500; ++cycle) {
    for (int n = static_cast<int>(rng() % 3); n > 0; --n) {
      WorkloadSpec spec = RandomSpec(rng);
      ASSERT_OK(Submit(User(spec.tenant), spec));
    }
    // The agent: confirms every stop asked for, starts what was placed, ends some of what runs.
    absl::StatusOr<std::vector<Workload>> active = store_.ListActive("");
    ASSERT_OK(active);
    for (const Workload& w : *active) {
      if (w.evicting) {
        ASSERT_OK(Report("h100", w.id, WorkloadState::kCancelled));
      } else if (w.state == WorkloadState::kPlaced) {
        ASSERT_OK(Report("h100", w.id, WorkloadState::kRunning));
      } else if (rng() % 12 == 0) {
        ASSERT_OK(Report("h100", w.id, WorkloadState::kSucceeded));
      }
    }
    // Owners whose victims have all stopped now must be placed by this cycle.
    const std::map<WorkloadId, std::vector<WorkloadId>> due = std::exchange(reclaiming, {});

    clock_.Advance(std::chrono::seconds(1));
    StepResult step = Step();
    ASSERT_TRUE(step.cycle.has_value());

    // Limits.
    QuotaLedger after = Ledger();
    for (const Quota& q : *quotas) {
      EXPECT_LE(after.Used(q.key), q.EffectiveLimit())
          << "cycle " << cycle << ": " << q.key.tenant << "/" << q.key.project << " "
          << q.key.resource;
    }
    // Reclaims.
    for (const ReclaimPlan& plan : step.cycle->reclaims) {
      ++reclaims;
      EXPECT_LE(static_cast<double>(plan.record.evicted_milli),
                1.25 * static_cast<double>(plan.record.needed_milli))
          << "cycle " << cycle;
      const Workload owner = MustGet(plan.record.preemptor);
      QuotaLedger trial = after;
      for (const WorkloadStore::Eviction& v : plan.victims) {
        const Workload victim = MustGet(v.id);
        EXPECT_FALSE(victim.spec.tenant == owner.spec.tenant &&
                     victim.spec.project == owner.spec.project)
            << "cycle " << cycle << ": an owner's own work is never its victim";
        EXPECT_TRUE(trial.Reclaimable(v.id)) << "cycle " << cycle << ": victim " << v.id << " of "
                                             << victim.spec.tenant << " was within its guarantee";
        trial.Drop(v.id);
      }
      for (const WorkloadStore::Eviction& v : plan.victims)
        reclaiming[plan.record.preemptor].push_back(v.id);
    }
    for (const auto& [owner, victims] : due) {
      const Workload w = MustGet(owner);
      if (w.state == WorkloadState::kCancelled) continue;
      std::string stopped;
      for (WorkloadId v : victims) {
        const Workload victim = MustGet(v);
        absl::StrAppend(&stopped, " ", v, ":", StateName(victim.state), ":", victim.spec.tenant,
                        "/", victim.spec.project);
      }
      EXPECT_TRUE(HoldsCapacity(w.state))
          << "cycle " << cycle << ": owner " << owner << " of " << w.spec.tenant << "/"
          << w.spec.project << " (" << w.spec.gpus_per_replica << "x" << w.spec.replicas << " "
          << w.spec.mig_profile << ") is " << StateName(w.state) << " (" << w.pending_reason
          << ") after its victims stopped:" << stopped;
      placed_after_reclaim += HoldsCapacity(w.state) ? 1 : 0;
    }
    if (HasFailure()) break;
  }
  // The run exercised what it checks.
  EXPECT_GT(reclaims, 5);
  EXPECT_GT(placed_after_reclaim, 5);
}

INSTANTIATE_TEST_SUITE_P(Seeds, QuotaPropertyTest, ::testing::Range(1u, 6u));

}  // namespace
}  // namespace gpufed
