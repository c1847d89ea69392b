// Admission and reclaim (docs/quotas.md) through the control plane and its loop, on the in-memory
// stores with a FakeClock and fake agents: limits hold, waiting work is ADMITTED and keeps its
// quota, and an owner within its guarantee gets back what borrowers hold within two cycles, at
// the cost of the fewest, least valuable borrowed workloads.

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/quota_fixtures.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/plane_test_base.h"

namespace gpufed {
namespace {

using ::gpufed::testing::Admin;
using ::gpufed::testing::FakeChannel;
using ::gpufed::testing::MakeQuota;
using ::gpufed::testing::User;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

constexpr char kH100[] = "H100-80GB";

// `gpus` whole GPUs on one node for `tenant`, placed again after a preemption.
WorkloadSpec Job(const std::string& tenant, uint32_t gpus, int32_t priority = 0) {
  WorkloadSpec s;
  s.tenant = tenant;
  s.project = "p";
  s.name = "job";
  s.gpus_per_replica = gpus;
  s.priority = priority;
  s.retry.max_attempts = 5;
  s.retry.on_preemption = true;
  return s;
}

class ReclaimTest : public testing::PlaneLoopTestBase {
 protected:
  ReclaimTest() {
    EXPECT_OK(store_.CreateTenant(Tenant{"gamma", "gamma", {}}));
    EXPECT_OK(store_.CreateProject(Project{"gamma", "p", {}}));
  }

  void SetQuota(const std::string& tenant, const std::string& resource, int64_t guaranteed,
                std::optional<int64_t> limit = std::nullopt) {
    ASSERT_OK(plane_.SetQuota(Admin(), MakeQuota(tenant, "", resource, guaranteed, limit),
                              /*overcommit=*/false));
  }

  WorkloadId Run(const WorkloadSpec& spec) {
    absl::StatusOr<SubmitResult> r = Submit(User(spec.tenant), spec);
    EXPECT_OK(r);
    return r.ok() ? r->workload.id : 0;
  }

  // Places what was submitted and has its agent report it running, one second apart.
  void StartAll(const std::string& cluster, const std::vector<WorkloadId>& ids) {
    Step();
    for (WorkloadId id : ids) {
      ASSERT_EQ(MustGet(id).state, WorkloadState::kPlaced) << id;
      clock_.Advance(std::chrono::seconds(1));
      ASSERT_OK(Report(cluster, id, WorkloadState::kRunning));
    }
  }

  // GPUs workload `id` holds.
  int64_t Gpus(WorkloadId id) {
    int64_t n = 0;
    for (const ReplicaAssignment& r : MustGet(id).assignment.replicas) {
      n += static_cast<int64_t>(r.gpu_uuids.size());
    }
    return n;
  }
};

TEST_F(ReclaimTest, AWorkloadPastItsTenantsLimitWaitsAndSaysWhichQuota) {
  Register("c1");
  SetQuota("acme", kH100, 4000, 4000);
  const WorkloadId first = Run(Job("acme", 4));
  Step();
  EXPECT_EQ(MustGet(first).state, WorkloadState::kPlaced);

  const WorkloadId second = Run(Job("acme", 1));
  Step();
  const Workload w = MustGet(second);
  EXPECT_EQ(w.state, WorkloadState::kPending);
  EXPECT_EQ(w.pending_reason.code, ReasonCode::kQuotaLimit);
  EXPECT_EQ(w.pending_reason.Text(figure::kHolder), "tenant acme");
  EXPECT_EQ(w.pending_reason.Text(figure::kResource), kH100);
  EXPECT_EQ(w.pending_reason.Int(figure::kHeld), 4000);
  EXPECT_EQ(w.pending_reason.Int(figure::kLimit), 4000);
  EXPECT_EQ(w.pending_reason.Int(figure::kAsked), 1000);
  ASSERT_OK_AND_ASSIGN(Explanation e, plane_.Explain(User("acme"), second));
  EXPECT_EQ(e.reason.code, ReasonCode::kQuotaLimit);

  // Another tenant is not held by acme's quota.
  const WorkloadId others = Run(Job("other", 4));
  Step();
  EXPECT_EQ(MustGet(others).state, WorkloadState::kPlaced);

  // The first one ends: the second fits its quota again.
  ASSERT_OK(Report("c1", first, WorkloadState::kRunning));
  ASSERT_OK(Report("c1", first, WorkloadState::kSucceeded));
  Step();
  EXPECT_EQ(MustGet(second).state, WorkloadState::kPlaced);
}

TEST_F(ReclaimTest, WorkWaitingForCapacityIsAdmittedAndKeepsItsQuota) {
  Register("c1");
  SetQuota("acme", "gpu", 0, 12000);
  const WorkloadId held = Run(Job("other", 4));
  const WorkloadId small = Run(Job("acme", 4));
  StartAll("c1", {held, small});

  const WorkloadId big = Run(Job("acme", 8));
  Step();
  Workload w = MustGet(big);
  EXPECT_EQ(w.state, WorkloadState::kAdmitted);
  EXPECT_THAT(events_.States(big), ElementsAre(WorkloadState::kPending, WorkloadState::kAdmitted));
  EXPECT_FALSE(w.pending_reason.empty()) << "an ADMITTED workload says what it waits for";
  EXPECT_FALSE(IsQuotaReason(w.pending_reason.code));

  // 4 held + 8 reserved: one more GPU would pass the limit of 12.
  const WorkloadId one = Run(Job("acme", 1));
  Step();
  w = MustGet(one);
  EXPECT_EQ(w.state, WorkloadState::kPending);
  EXPECT_EQ(w.pending_reason.code, ReasonCode::kQuotaLimit);
  EXPECT_EQ(w.pending_reason.Int(figure::kHeld), 12000);

  // Capacity comes: the ADMITTED one is placed first.
  ASSERT_OK(Report("c1", held, WorkloadState::kSucceeded));
  ASSERT_OK(Report("c1", small, WorkloadState::kSucceeded));
  Step();
  EXPECT_EQ(MustGet(big).state, WorkloadState::kPlaced);
  EXPECT_THAT(events_.States(big), ElementsAre(WorkloadState::kPending, WorkloadState::kAdmitted,
                                               WorkloadState::kPlaced));
}

TEST_F(ReclaimTest, AnOwnerGetsItsGuaranteeBackFromBorrowersWithinTwoCycles) {
  std::shared_ptr<FakeChannel> agent = Register("c1", /*nodes=*/2);
  SetQuota("acme", kH100, 8000, 8000);
  std::vector<WorkloadId> borrowed;
  borrowed.reserve(4);
  for (int i = 0; i < 4; ++i) borrowed.push_back(Run(Job("other", 4)));
  StartAll("c1", borrowed);

  const WorkloadId owner = Run(Job("acme", 8));
  StepResult first = Step();
  ASSERT_TRUE(first.cycle.has_value());
  EXPECT_EQ(first.cycle->stats.reclaims, 1);
  ASSERT_THAT(first.cycle->reclaims, SizeIs(1));
  const ReclaimPlan& plan = first.cycle->reclaims.front();
  EXPECT_EQ(plan.record.preemptor, owner);
  EXPECT_EQ(plan.record.cause, PreemptionCause::kGuaranteeReclaim);
  EXPECT_EQ(plan.record.resource, kH100);
  EXPECT_EQ(plan.record.needed_milli, 8000);
  EXPECT_EQ(plan.record.evicted_milli, 8000) << "evicted / needed must stay within 1.25";
  // other held all 16, acme nothing; once the owner is placed, 8 each.
  EXPECT_THAT(plan.record.shares, UnorderedElementsAre(TenantShare{"acme", 0, 8000},
                                                       TenantShare{"other", 16000, 8000}));

  // Two borrowed workloads on one node are told to stop; nothing else.
  ASSERT_THAT(agent->cancelled, SizeIs(2));
  std::set<std::string> nodes;
  for (WorkloadId v : agent->cancelled) {
    const Workload victim = MustGet(v);
    EXPECT_EQ(victim.spec.tenant, "other");
    EXPECT_EQ(victim.evicting, AttemptEnd::kPreempted);
    EXPECT_EQ(victim.state, WorkloadState::kRunning) << "runs until its agent confirms the stop";
    nodes.insert(victim.assignment.replicas.front().node);
  }
  EXPECT_THAT(nodes, SizeIs(1));
  Workload w = MustGet(owner);
  EXPECT_EQ(w.state, WorkloadState::kAdmitted);
  EXPECT_EQ(w.pending_reason.code, ReasonCode::kReclaiming);
  EXPECT_EQ(w.pending_reason.Text(figure::kCluster), "c1");

  // The agent confirms; the victims return to PENDING saying who took their place.
  for (WorkloadId v : agent->cancelled) {
    ASSERT_OK(Report("c1", v, WorkloadState::kCancelled));
    const Workload victim = MustGet(v);
    EXPECT_EQ(victim.state, WorkloadState::kPending);
    EXPECT_EQ(victim.pending_reason.code, ReasonCode::kPreempted);
    // Nothing of the owner's tenant reaches another tenant's victims.
    EXPECT_EQ(victim.pending_reason.Text(figure::kText),
              "preempted to reclaim guaranteed H100-80GB for its owner");
  }
  Step();  // the second cycle
  w = MustGet(owner);
  EXPECT_EQ(w.state, WorkloadState::kPlaced);
  EXPECT_EQ(w.assignment.replicas.front().node, *nodes.begin()) << "where the victims were";

  // The victims may not borrow H100s again at once.
  for (WorkloadId v : agent->cancelled) {
    const Workload victim = MustGet(v);
    EXPECT_EQ(victim.state, WorkloadState::kPending);
    EXPECT_EQ(victim.pending_reason.code, ReasonCode::kReborrowBackoff) << victim.pending_reason;
  }
}

TEST_F(ReclaimTest, EveryReclaimIsRecordedAndEachTenantSeesItsPart) {
  Register("c1");
  SetQuota("acme", kH100, 4000, 4000);
  const WorkloadId bystander = Run(Job("gamma", 4));
  const WorkloadId victim = Run(Job("other", 4));
  StartAll("c1", {bystander, victim});
  const WorkloadId owner = Run(Job("acme", 4));
  Step();

  ASSERT_OK_AND_ASSIGN(PreemptionPage all, plane_.ListPreemptions(Admin(), "", 0, 0));
  ASSERT_THAT(all.records, SizeIs(1));
  const PreemptionRecord& r = all.records[0];
  EXPECT_EQ(r.cause, PreemptionCause::kGuaranteeReclaim);
  EXPECT_EQ(r.preemptor, owner);
  EXPECT_EQ(r.tenant, "acme");
  EXPECT_EQ(r.resource, kH100);
  EXPECT_EQ(r.cluster, "c1");
  EXPECT_EQ(r.needed_milli, 4000);
  EXPECT_EQ(r.evicted_milli, 4000);
  EXPECT_EQ(r.time, clock_.Now());
  EXPECT_THAT(r.victims, ElementsAre(PreemptionVictim{victim, "other", "p", 4000}));
  EXPECT_THAT(r.shares,
              UnorderedElementsAre(TenantShare{"acme", 0, 4000}, TenantShare{"other", 4000, 0}));
  EXPECT_EQ(all.next_before, 0);

  // Each tenant sees its own part: the preemptor's, what it took (not from whom); the victim's,
  // its workload and what it lost (not to whom). Neither learns the other's name.
  ASSERT_OK_AND_ASSIGN(PreemptionPage mine, plane_.ListPreemptions(User("acme"), "acme", 0, 0));
  ASSERT_THAT(mine.records, SizeIs(1));
  EXPECT_EQ(mine.records[0].preemptor, r.preemptor);
  EXPECT_EQ(mine.records[0].evicted_milli, 4000);
  EXPECT_THAT(mine.records[0].victims, IsEmpty());
  EXPECT_THAT(mine.records[0].shares, ElementsAre(TenantShare{"acme", 0, 4000}));
  ASSERT_OK_AND_ASSIGN(PreemptionPage theirs, plane_.ListPreemptions(User("other"), "other", 0, 0));
  ASSERT_THAT(theirs.records, SizeIs(1));
  EXPECT_THAT(theirs.records[0].victims, ElementsAre(PreemptionVictim{victim, "other", "p", 4000}));
  EXPECT_EQ(theirs.records[0].preemptor, 0);
  EXPECT_EQ(theirs.records[0].tenant, "");
  EXPECT_EQ(theirs.records[0].project, "");
  EXPECT_THAT(theirs.records[0].shares, ElementsAre(TenantShare{"other", 4000, 0}));
  // Not involved: nothing. Another tenant's: as if it did not exist.
  ASSERT_OK_AND_ASSIGN(PreemptionPage none, plane_.ListPreemptions(User("gamma"), "gamma", 0, 0));
  EXPECT_THAT(none.records, IsEmpty());
  EXPECT_THAT(plane_.ListPreemptions(User("acme"), "other", 0, 0),
              testing::StatusIs(absl::StatusCode::kNotFound));
  // Naming no tenant reads the caller's own; an agent reads none.
  ASSERT_OK_AND_ASSIGN(PreemptionPage own, plane_.ListPreemptions(User("acme"), "", 0, 0));
  EXPECT_EQ(own.records, mine.records);
  EXPECT_THAT(plane_.ListPreemptions(testing::AgentOf("c1"), "", 0, 0),
              testing::StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.ListPreemptions(Admin(), "", 0, kMaxPreemptionPage + 1),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

// Fair share: the window takes workloads by weighted fair queueing over usage, so a saturated
// pool's free GPUs go to tenants by weight, whatever the order they were submitted in.
TEST_F(ReclaimTest, FreeCapacityGoesToTenantsByWeight) {
  Register("c1");
  ASSERT_OK(plane_.SetShareWeight(Admin(), {"other", "", 3}));
  for (int i = 0; i < 10; ++i) Run(Job("acme", 1));
  for (int i = 0; i < 10; ++i) Run(Job("other", 1));
  StepResult step = Step();
  std::map<std::string, int> placed;
  for (const Workload& w : step.cycle->placed) ++placed[w.spec.tenant];
  EXPECT_EQ(placed["acme"], 2);
  EXPECT_EQ(placed["other"], 6);

  ASSERT_OK_AND_ASSIGN(std::vector<FairShare> shares, plane_.FairSharesOf(Admin(), ""));
  std::map<std::pair<std::string, std::string>, FairShare> by;
  for (const FairShare& f : shares) by[{f.tenant, f.project}] = f;
  const FairShare& acme = by[std::make_pair("acme", "")];
  const FairShare& other = by[std::make_pair("other", "")];
  EXPECT_DOUBLE_EQ(acme.share, 0.25);
  EXPECT_DOUBLE_EQ(other.share, 0.75);
  EXPECT_EQ(other.weight, 3);
  EXPECT_EQ(other.held_milli, 6000);
  EXPECT_EQ(by[std::make_pair("acme", "p")].waiting, 8u);
  // A tenant reader sees its own rows only.
  ASSERT_OK_AND_ASSIGN(shares, plane_.FairSharesOf(User("acme"), "acme"));
  for (const FairShare& f : shares) EXPECT_EQ(f.tenant, "acme");
}

// Decayed usage is saved by the active scheduler and a newly active one goes on from it: a
// failover does not wipe out who has used what.
TEST_F(ReclaimTest, FairShareUsageGoesOnUnderANewActiveScheduler) {
  Register("c1");
  const WorkloadId job = Run(Job("acme", 4));
  StartAll("c1", {job});
  for (int i = 0; i < 180; ++i) {  // an hour
    clock_.Advance(std::chrono::seconds(20));
    Heartbeat("c1");
    Step();
  }
  auto acme_hours = [](const std::vector<FairShare>& shares) {
    for (const FairShare& f : shares) {
      if (f.tenant == "acme" && f.project.empty()) return f.decayed_gpu_hours;
    }
    return 0.0;
  };
  Scheduler successor(&store_, &store_, SchedulerOptions(), &store_, &clock_);
  ASSERT_OK(successor.Rebuild());
  // 4 GPUs for an hour, decayed over a week's half-life: 3.99 GPU-hours (0 had it started afresh).
  EXPECT_NEAR(acme_hours(successor.FairShareReport()), 4.0, 0.05);
}

TEST_F(ReclaimTest, WeightsAreSetByAdminsWithinRange) {
  EXPECT_THAT(plane_.SetShareWeight(User("acme"), {"acme", "", 2}),
              testing::StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.SetShareWeight(Admin(), {"acme", "", 0}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(plane_.SetShareWeight(Admin(), {"acme", "", kMaxShareWeight + 1}),
              testing::StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(plane_.SetShareWeight(Admin(), {"nobody", "", 2}),
              testing::StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(plane_.SetShareWeight(Admin(), {"acme", "nope", 2}),
              testing::StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(plane_.SetShareWeight(Admin(), {"acme", "p", 5}));
  ASSERT_OK_AND_ASSIGN(std::vector<ShareWeight> weights, store_.ListShareWeights());
  EXPECT_THAT(weights, ElementsAre(ShareWeight{"acme", "p", 5}));
}

TEST_F(ReclaimTest, VictimsAreLowestPriorityThenMostRecentlyStarted) {
  std::shared_ptr<FakeChannel> agent = Register("c1");
  SetQuota("acme", kH100, 2000, 2000);
  const WorkloadId important = Run(Job("other", 2, /*priority=*/10));
  const WorkloadId oldest = Run(Job("other", 2));
  const WorkloadId newest = Run(Job("other", 2));
  const WorkloadId also_important = Run(Job("gamma", 2, /*priority=*/10));
  StartAll("c1", {important, oldest, newest, also_important});

  Run(Job("acme", 2));
  Step();
  EXPECT_THAT(agent->cancelled, ElementsAre(newest));
}

// Checkpointable work loses only what it did since its last checkpoint: it is taken before other
// work of its priority, the one losing least first, and the record counts only that loss.
TEST_F(ReclaimTest, VictimsAreCheckpointableFirstThenTheLeastWorkLost) {
  std::shared_ptr<FakeChannel> agent = Register("c1");
  SetQuota("acme", kH100, 2000, 2000);
  WorkloadSpec rarely = Job("other", 2);
  rarely.checkpoint_interval_ms = int64_t{60} * 60 * 1000;
  WorkloadSpec often = Job("other", 2);
  often.checkpoint_interval_ms = int64_t{10} * 60 * 1000;
  const WorkloadId saves_rarely = Run(rarely);
  const WorkloadId saves_often = Run(often);
  const WorkloadId plain = Run(Job("other", 2));
  const WorkloadId older_plain = Run(Job("gamma", 2));
  Step();
  ASSERT_OK(Report("c1", saves_rarely, WorkloadState::kRunning));
  clock_.Advance(std::chrono::minutes(10));
  Heartbeat("c1");
  ASSERT_OK(Report("c1", saves_often, WorkloadState::kRunning));
  ASSERT_OK(Report("c1", older_plain, WorkloadState::kRunning));
  clock_.Advance(std::chrono::minutes(25));
  Heartbeat("c1");
  ASSERT_OK(Report("c1", plain, WorkloadState::kRunning));
  clock_.Advance(std::chrono::minutes(1));
  Heartbeat("c1");
  // Lost if stopped now: saves_rarely 36 min, saves_often 6 (26 % 10), plain 1, older_plain 26.

  Run(Job("acme", 2));
  StepResult step = Step();
  EXPECT_THAT(agent->cancelled, ElementsAre(saves_often));
  ASSERT_THAT(step.cycle->reclaims, SizeIs(1));
  EXPECT_EQ(step.cycle->reclaims[0].record.gpu_seconds_lost, 2 * 6 * 60);
}

TEST_F(ReclaimTest, WorkWithinItsOwnGuaranteeIsNeverAVictim) {
  std::shared_ptr<FakeChannel> agent = Register("c1");
  SetQuota("acme", kH100, 4000, 4000);
  SetQuota("other", kH100, 4000, 4000);
  const WorkloadId owned = Run(Job("other", 4));
  const WorkloadId borrowed = Run(Job("gamma", 4));
  StartAll("c1", {owned, borrowed});

  const WorkloadId owner = Run(Job("acme", 4));
  Step();
  EXPECT_THAT(agent->cancelled, ElementsAre(borrowed));
  ASSERT_OK(Report("c1", borrowed, WorkloadState::kCancelled));
  Step();
  EXPECT_EQ(MustGet(owner).state, WorkloadState::kPlaced);
  EXPECT_EQ(MustGet(owned).state, WorkloadState::kRunning);
}

TEST_F(ReclaimTest, NoReclaimEvictsMoreThanAQuarterAboveWhatTheOwnerNeeds) {
  std::shared_ptr<FakeChannel> agent = Register("c1");
  SetQuota("acme", kH100, 4000, 4000);
  const WorkloadId whole_node = Run(Job("other", 8));
  StartAll("c1", {whole_node});

  const WorkloadId owner = Run(Job("acme", 4));
  StepResult step = Step();
  EXPECT_THAT(step.cycle->reclaims, IsEmpty()) << "8 evicted for 4 needed is 2.0";
  EXPECT_THAT(agent->cancelled, IsEmpty());
  const Workload w = MustGet(owner);
  EXPECT_EQ(w.state, WorkloadState::kAdmitted);
  EXPECT_FALSE(IsQuotaReason(w.pending_reason.code)) << w.pending_reason;
}

TEST_F(ReclaimTest, BorrowingDoesNotTakeTheCapacityAReclaimFrees) {
  std::shared_ptr<FakeChannel> agent = Register("c1");
  SetQuota("acme", kH100, 8000, 8000);
  const WorkloadId a = Run(Job("other", 4));
  const WorkloadId b = Run(Job("other", 4));
  StartAll("c1", {a, b});
  const WorkloadId owner = Run(Job("acme", 8));
  Step();
  ASSERT_THAT(agent->cancelled, UnorderedElementsAre(a, b));

  // One victim stops; a borrower arrives before the other does.
  ASSERT_OK(Report("c1", a, WorkloadState::kCancelled));
  const WorkloadId late = Run(Job("gamma", 2));
  Step();
  Workload w = MustGet(late);
  EXPECT_EQ(w.state, WorkloadState::kAdmitted);
  EXPECT_EQ(w.pending_reason.code, ReasonCode::kKeptForReclaim) << w.pending_reason;
  ASSERT_OK(Report("c1", b, WorkloadState::kCancelled));
  Step();
  EXPECT_EQ(MustGet(owner).state, WorkloadState::kPlaced);
}

}  // namespace
}  // namespace gpufed
