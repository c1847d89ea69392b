// Randomised quota properties (docs/quotas.md): thousands of cycles of the control loop over the
// in-memory stores, several tenants and projects with quotas, mixed sizes, gangs, MIG and whole
// GPUs, agents that start, finish and stop work at random. After every cycle:
//   - no tenant or project holds more than its limit of any resource;
//   - every reclaim evicts at most 1.25 x the GPU-equivalents its owner needs, only work of
//     other holders, and each victim only while its holder keeps every guarantee covering it
//     without it (QuotaLedger::Reclaimable), so an owner never preempts work that is within its
//     holder's guarantee and no reclaim can be answered by one the other way (A preempts B
//     preempts A: B would have to be within its guarantee, and A above its own);
//   - an owner whose victims have all stopped is placed in the next cycle;
//   - no owner within its guarantee is left waiting more than 2 cycles while borrowers hold what
//     it needs: an owner a cycle leaves waiting (CycleResult::owners_waiting) with no reclaim
//     under way, for which an oracle independent of PlanReclaim (ReclaimPossible) finds a node
//     where stopping reclaimable borrowed work lets it in within 1.25 x what it needs, is left so
//     at most 2 cycles in a row (the first, when its admission changes the pool, and the second,
//     which plans the reclaim). The oracle runs only for owners already left waiting 2 cycles in
//     a row, which is rare, so the run stays fast.

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/placement.h"
#include "federation/pool.h"
#include "federation/quota_ledger.h"
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

  // The pool as the store has it: every cluster, every active workload allocated.
  Pool PoolFromStore(const std::vector<Workload>& active) {
    Pool pool;
    absl::StatusOr<std::vector<Cluster>> clusters = store_.ListClusters(true);
    EXPECT_OK(clusters);
    for (const Cluster& c : *clusters) pool.UpsertCluster(c);
    for (const Workload& w : active) {
      EXPECT_OK(pool.Allocate(w.id, w.assignment, HostDemand{w.spec.cpu_millis, w.spec.memory_mib}))
          << "workload " << w.id;
    }
    return pool;
  }

  // A node where stopping borrowed work lets an owner in.
  struct ReclaimChance {
    std::string cluster;
    std::string node;
    std::string victims;  // "id (tenant/project, milli-GPU)" each
    int64_t evicted_milli = 0;
    int64_t needed_milli = 0;
  };

  // The oracle, independent of PlanReclaim: whether borrowed work holds what `owner` needs. Victim
  // candidates are the `active` workloads not stopping, not of the owner's tenant and project,
  // and Reclaimable in `ledger`. Per node, those holding a GPU there (lowest priority first, at
  // most kMaxCandidatesPerNode) are released one at a time from a copy of `pool`, each dropped
  // from a copy of `ledger`, skipping any no longer Reclaimable there (its holder is down to a
  // guarantee); as soon as the owner places on that cluster, a reclaim was possible if the
  // GPU-equivalents released so far are at most 1.25 x what the owner needs. nullopt: no node.
  // It looks at one node at a time in one order, so it may miss a possible reclaim. Its order
  // (priority, then the newest id first) is not PlanReclaim's (priority, then the least work
  // lost), so that it does not share PlanReclaim's blind spots.
  std::optional<ReclaimChance> ReclaimPossible(const Workload& owner, const Pool& pool,
                                               const QuotaLedger& ledger,
                                               const std::vector<Workload>& active,
                                               PlacementEngine& engine) {
    constexpr size_t kMaxCandidatesPerNode = 64;
    const WorkloadSpec& spec = owner.spec;
    const ResourceAmounts demand = DemandOf(spec, "H100-80GB");  // the pool's one model
    auto need_it = demand.find(kGpuEquivalents);
    const int64_t need = need_it == demand.end() ? 0 : need_it->second;
    if (need <= 0) return std::nullopt;
    const GpuModelLookup model_of = Models();
    std::vector<const Workload*> candidates;
    for (const Workload& w : active) {
      if (w.evicting || w.cancel_requested) continue;
      if (w.spec.tenant == spec.tenant && w.spec.project == spec.project) continue;
      if (!ledger.Reclaimable(w.id)) continue;
      candidates.push_back(&w);
    }
    std::sort(candidates.begin(), candidates.end(), [](const Workload* a, const Workload* b) {
      if (a->spec.priority != b->spec.priority) return a->spec.priority < b->spec.priority;
      return a->id > b->id;
    });
    for (const ClusterSlots& c : pool.clusters()) {
      for (const NodeSlots& n : c.nodes) {
        Pool trial = pool;
        QuotaLedger trial_ledger = ledger;
        ReclaimChance chance{c.info.name, n.info.name, "", 0, need};
        size_t taken = 0;
        for (const Workload* v : candidates) {
          if (taken == kMaxCandidatesPerNode) break;
          if (v->assignment.cluster != c.info.name) continue;
          const bool on_node =
              std::any_of(v->assignment.replicas.begin(), v->assignment.replicas.end(),
                          [&](const ReplicaAssignment& r) {
                            return r.node == n.info.name && !r.gpu_uuids.empty();
                          });
          if (!on_node) continue;
          ++taken;
          if (!trial_ledger.Reclaimable(v->id)) continue;
          trial.Release(v->id);
          trial_ledger.Drop(v->id);
          const ResourceAmounts held = HeldResources(*v, model_of);
          auto gpu = held.find(kGpuEquivalents);
          const int64_t milli = gpu == held.end() ? 0 : gpu->second;
          chance.evicted_milli += milli;
          absl::StrAppend(&chance.victims, chance.victims.empty() ? "" : ", ", v->id, " (",
                          v->spec.tenant, "/", v->spec.project, ", ", milli, " milli-GPU)");
          const PlacementDecision d = engine.Place(trial, spec, owner.id);
          if (!d.assignment || d.assignment->cluster != c.info.name) continue;
          if (static_cast<double>(chance.evicted_milli) <= 1.25 * static_cast<double>(need)) {
            return chance;
          }
          break;  // it fits, but only by evicting too much: more victims will not help
        }
      }
    }
    return std::nullopt;
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
  // The oracle's engine: as PlanReclaim's, default options without random ties.
  PlacementOptions placement;
  placement.random_ties = false;
  absl::StatusOr<std::unique_ptr<PlacementEngine>> engine = PlacementEngine::Create(placement);
  ASSERT_OK(engine);
  // Per owner: the cycles in a row it was left waiting with no reclaim under way, and of those
  // the last in a row in which the oracle found a reclaim possible (counted from the second:
  // the oracle runs from then on).
  std::map<WorkloadId, int> waited;
  std::map<WorkloadId, int> waited_while_possible;
  int oracle_runs = 0;
  int oracle_possible = 0;
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
    // Owners left waiting while borrowers hold what they need. The agent confirms every stop
    // before the next cycle, so a reclaim is under way in the cycle that planned it and the next
    // (`reclaiming`, `due`); the check above covers those owners.
    std::map<WorkloadId, int> waited_now;
    std::map<WorkloadId, int> possible_now;
    std::optional<std::vector<Workload>> active_after;
    std::optional<Pool> pool;
    for (WorkloadId id : step.cycle->owners_waiting) {
      if (due.contains(id) || reclaiming.contains(id) || waited_now.contains(id)) continue;
      // Left waiting 2 cycles in a row before the oracle looks (a reclaim is planned, if at all,
      // in the cycle that first leaves an owner waiting or in the next: its admission changes
      // the pool).
      auto before = waited.find(id);
      const int waits = waited_now[id] = (before == waited.end() ? 0 : before->second) + 1;
      if (waits < 2) continue;
      if (!pool) {
        absl::StatusOr<std::vector<Workload>> listed = store_.ListActive("");
        ASSERT_OK(listed);
        active_after = *std::move(listed);
        pool = PoolFromStore(*active_after);
      }
      const Workload owner = MustGet(id);
      ++oracle_runs;
      const std::optional<ReclaimChance> chance =
          ReclaimPossible(owner, *pool, after, *active_after, **engine);
      if (!chance) continue;
      ++oracle_possible;
      auto streak = waited_while_possible.find(id);
      const int possible = possible_now[id] =
          (streak == waited_while_possible.end() ? 0 : streak->second) + 1;
      EXPECT_LE(possible, 1) << "cycle " << cycle << ": owner " << id << " of " << owner.spec.tenant
                             << "/" << owner.spec.project << " (" << owner.spec.gpus_per_replica
                             << "x" << owner.spec.replicas << " " << owner.spec.mig_profile
                             << ", priority " << owner.spec.priority << ", "
                             << StateName(owner.state) << ": "
                             << ReasonCodeName(owner.pending_reason.code) << ") waited " << waits
                             << " cycles, " << possible
                             << " of them while borrowers held what it needs: stopping "
                             << chance->victims << " on " << chance->cluster << "/" << chance->node
                             << " (" << chance->evicted_milli << " milli-GPU for its "
                             << chance->needed_milli
                             << ") lets it in; this cycle: " << step.cycle->owners_waiting.size()
                             << " owners waiting, " << step.cycle->reclaims.size()
                             << " reclaims planned";
    }
    waited = std::move(waited_now);
    waited_while_possible = std::move(possible_now);
    if (HasFailure()) break;
  }
  // The run exercised what it checks.
  EXPECT_GT(reclaims, 5);
  EXPECT_GT(placed_after_reclaim, 5);
  // Seeds 1-5: the oracle ran 4 to 24 times and found a reclaim possible 0 to 2 times (each in an
  // owner's second cycle of waiting, reclaimed for in the next), so only its runs are asserted.
  // Before PlanReclaim looked past a victim too large for the ratio, seed 3 failed: an owner of
  // 2 GPUs waited 4 cycles beside a 4-GPU and a 2-GPU borrower on one node.
  EXPECT_GT(oracle_runs, 2);
  RecordProperty("reclaims", reclaims);
  RecordProperty("oracle_runs", oracle_runs);
  RecordProperty("oracle_possible", oracle_possible);
}

INSTANTIATE_TEST_SUITE_P(Seeds, QuotaPropertyTest, ::testing::Range(1u, 6u));

}  // namespace
}  // namespace gpufed
