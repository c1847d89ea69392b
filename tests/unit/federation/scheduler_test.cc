// The scheduler (federation/scheduler.h) on the in-memory stores, with the store's times from a
// FakeClock: no PostgreSQL, no threads, no sleeps. tests/storage/scheduler_test.cc runs the
// scheduler against PostgreSQL (the real parts, and rebuilding from them); this file covers what
// a cycle decides: what is placed, in which order, how much of the queue is looked at, the
// reasons left on what waits and when they are rewritten, work cancelled meanwhile, gangs.

#include "federation/scheduler.h"

#include <chrono>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "federation/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/memory_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using ::gpufed::testing::Gpus;
using ::gpufed::testing::MemoryStore;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

// The workload port the scheduler is given: the memory store, with every SetPendingReasons
// call recorded (what the scheduler chose to write, before the store drops unchanged ones) and
// ApplyTransitions made to fail on demand.
class RecordingWorkloads final : public WorkloadStore {
 public:
  explicit RecordingWorkloads(MemoryStore* store) : store_(store) {}

  using WorkloadStore::Submit;
  absl::StatusOr<SubmitResult> Submit(const WorkloadSpec& spec, const PendingReason& reason,
                                      const std::string& actor) override {
    return store_->Submit(spec, reason, actor);
  }
  absl::StatusOr<Workload> Get(WorkloadId id) override { return store_->Get(id); }
  absl::StatusOr<WorkloadPage> List(const ListFilter& filter) override {
    return store_->List(filter);
  }
  absl::StatusOr<std::vector<Workload>> ListChangedAfter(const std::string& tenant,
                                                         Timestamp after_time, WorkloadId after_id,
                                                         int limit) override {
    return store_->ListChangedAfter(tenant, after_time, after_id, limit);
  }
  absl::StatusOr<std::vector<Workload>> ListPending(int limit) override {
    return store_->ListPending(limit);
  }
  absl::StatusOr<std::vector<PendingVersion>> ListPendingVersions(int limit) override {
    return store_->ListPendingVersions(limit);
  }
  absl::StatusOr<std::vector<Workload>> GetWorkloads(std::vector<WorkloadId> ids) override {
    reads.insert(reads.end(), ids.begin(), ids.end());
    return store_->GetWorkloads(std::move(ids));
  }
  absl::StatusOr<std::vector<WorkloadId>> ListHeldIds(const std::string& tenant,
                                                      const std::string& project) override {
    return store_->ListHeldIds(tenant, project);
  }
  absl::StatusOr<std::vector<Workload>> ListActive(const std::string& cluster) override {
    return store_->ListActive(cluster);
  }
  absl::StatusOr<std::vector<TransitionResult>> ApplyTransitions(
      const std::vector<Transition>& transitions) override {
    if (fail_transitions) return absl::UnavailableError("database gone");
    return store_->ApplyTransitions(transitions);
  }
  absl::Status SetPendingReasons(
      const std::vector<std::pair<WorkloadId, PendingReason>>& reasons) override {
    reason_writes.push_back(reasons);
    return store_->SetPendingReasons(reasons);
  }
  absl::StatusOr<CancelResult> RequestCancel(WorkloadId id, const std::string& actor,
                                             const std::string& reason,
                                             const AuditEvent& record) override {
    return store_->RequestCancel(id, actor, reason, record);
  }
  absl::StatusOr<int> ArchiveFinished(Timestamp ended_before, int limit) override {
    return store_->ArchiveFinished(ended_before, limit);
  }
  absl::StatusOr<std::vector<Workload>> RequestEvictions(
      const std::vector<Eviction>& evictions) override {
    return store_->RequestEvictions(evictions);
  }
  absl::StatusOr<PreemptionResult> RequestPreemptions(const std::vector<Preemption>& preemptions,
                                                      const AuditEvent& record) override {
    return store_->RequestPreemptions(preemptions, record);
  }
  absl::StatusOr<std::vector<PreemptionRecord>> ListPreemptions(const std::string& tenant,
                                                                int64_t before_id,
                                                                int limit) override {
    return store_->ListPreemptions(tenant, before_id, limit);
  }
  absl::StatusOr<std::vector<std::pair<WorkloadState, int64_t>>> CountByState() override {
    return store_->CountByState();
  }

  // The reasons written since the last call, as (id, code) pairs.
  std::vector<std::pair<WorkloadId, ReasonCode>> TakeWrites() {
    std::vector<std::pair<WorkloadId, ReasonCode>> out;
    for (const auto& call : reason_writes) {
      for (const auto& [id, reason] : call) out.emplace_back(id, reason.code);
    }
    reason_writes.clear();
    return out;
  }

  // The ids read by GetWorkloads since the last call.
  std::vector<WorkloadId> TakeReads() { return std::exchange(reads, {}); }

  std::vector<std::vector<std::pair<WorkloadId, PendingReason>>> reason_writes;
  std::vector<WorkloadId> reads;
  bool fail_transitions = false;

 private:
  MemoryStore* const store_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() : store_(&clock_), workloads_(&store_) {
    EXPECT_OK(store_.CreateTenant(Tenant{"acme", "", {}}));
    EXPECT_OK(store_.CreateProject(Project{"acme", "research", {}}));
  }

  // Cluster `name`: `nodes` nodes of `gpus` H100s each (GPU g of node n: testing::Uuid).
  void AddCluster(const std::string& name, int nodes = 1, int gpus = 8) {
    Cluster c = testing::MakeCluster(name, nodes, gpus, "H100-80GB");
    ASSERT_OK(store_.RegisterCluster(c.info, c.nodes));
  }

  Workload Submit(const WorkloadSpec& spec) {
    absl::StatusOr<SubmitResult> r = store_.Submit(spec);
    EXPECT_OK(r);
    return r.ok() ? r->workload : Workload{};
  }

  // A scheduler on the stores, loaded.
  std::unique_ptr<Scheduler> Start(SchedulerOptions options = {}) {
    auto scheduler = std::make_unique<Scheduler>(&workloads_, &store_, std::move(options));
    EXPECT_OK(scheduler->Rebuild());
    return scheduler;
  }

  Workload Stored(WorkloadId id) {
    absl::StatusOr<Workload> w = store_.Get(id);
    EXPECT_OK(w);
    return w.ok() ? *w : Workload{};
  }

  static std::vector<WorkloadId> Ids(const std::vector<Workload>& workloads) {
    std::vector<WorkloadId> ids;
    ids.reserve(workloads.size());
    for (const Workload& w : workloads) ids.push_back(w.id);
    return ids;
  }

  FakeClock clock_;
  MemoryStore store_;
  RecordingWorkloads workloads_;
};

TEST_F(SchedulerTest, PlacesWhatFitsAndRecordsWhyTheRestWaits) {
  AddCluster("dgx");
  Workload a = Submit(Gpus("a", 4));
  Workload b = Submit(Gpus("b", 4));
  Workload c = Submit(Gpus("c", 8));
  Workload d = Submit(Gpus("d", 16));
  auto scheduler = Start();
  clock_.Advance(std::chrono::seconds(5));

  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), UnorderedElementsAre(a.id, b.id));
  EXPECT_EQ(cycle.stats.pending, 4);
  EXPECT_EQ(cycle.stats.considered, 4);
  EXPECT_EQ(cycle.stats.placed, 2);
  EXPECT_EQ(cycle.stats.lost_races, 0);
  std::set<std::string> gpus;
  for (const Workload& w : cycle.placed) {
    EXPECT_EQ(w.state, WorkloadState::kPlaced);
    EXPECT_EQ(w.assignment.cluster, "dgx");
    ASSERT_THAT(w.assignment.replicas, SizeIs(1));
    EXPECT_THAT(w.assignment.replicas[0].gpu_uuids, SizeIs(4));
    gpus.insert(w.assignment.replicas[0].gpu_uuids.begin(),
                w.assignment.replicas[0].gpu_uuids.end());
    // Committed, at the clock's time.
    const Workload stored = Stored(w.id);
    EXPECT_EQ(stored.state, WorkloadState::kPlaced);
    EXPECT_EQ(stored.assignment, w.assignment);
    EXPECT_EQ(stored.update_time, clock_.Now());
  }
  EXPECT_THAT(gpus, SizeIs(8)) << "the two placements share no GPU";

  // Waiting will help: admitted (its quota granted; none is set), with its reason.
  const Workload waiting = Stored(c.id);
  EXPECT_EQ(waiting.state, WorkloadState::kAdmitted);
  EXPECT_EQ(waiting.pending_reason.code, ReasonCode::kNothingFree) << waiting.pending_reason;
  EXPECT_FALSE(waiting.pending_reason.never_fits());
  EXPECT_EQ(cycle.stats.admitted, 1);
  // Waiting will not help: left PENDING, reserving nothing.
  const Workload never = Stored(d.id);
  EXPECT_EQ(never.state, WorkloadState::kPending);
  EXPECT_EQ(never.pending_reason.code, ReasonCode::kGpuCountUnsatisfiable) << never.pending_reason;
  EXPECT_TRUE(never.pending_reason.never_fits());
  EXPECT_EQ(cycle.stats.reasons_written, 1);
  EXPECT_EQ(scheduler->pending_count(), 2);
}

// A reload reads again only the rows its queue does not hold at their version: submissions made
// through another replica and rows changed there. What left the queue there leaves it here.
TEST_F(SchedulerTest, AReloadReadsOnlyTheRowsThatChanged) {
  AddCluster("dgx");
  Workload a = Submit(Gpus("a", 1));
  Workload b = Submit(Gpus("b", 1));
  auto scheduler = Start();
  EXPECT_THAT(workloads_.TakeReads(), UnorderedElementsAre(a.id, b.id));
  ASSERT_OK(scheduler->ReloadPending());
  EXPECT_THAT(workloads_.TakeReads(), ::testing::IsEmpty());

  Workload c = Submit(Gpus("c", 1));
  ASSERT_OK(store_.RequestCancel(a.id, "user:alice", "not needed"));
  ASSERT_OK(store_.SetPendingReasons({{b.id, PendingReason(ReasonCode::kNoClusters)}}));
  ASSERT_OK(scheduler->ReloadPending());
  EXPECT_THAT(workloads_.TakeReads(), UnorderedElementsAre(b.id, c.id));
  EXPECT_EQ(scheduler->pending_count(), 2);

  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), UnorderedElementsAre(b.id, c.id));
  EXPECT_EQ(scheduler->pending_count(), 0);
  EXPECT_EQ(Stored(a.id).state, WorkloadState::kCancelled);
}

TEST_F(SchedulerTest, HigherPriorityGoesFirstThenSubmissionOrder) {
  AddCluster("dgx");
  WorkloadSpec low = Gpus("low", 8);
  low.priority = 1;
  WorkloadSpec high = Gpus("high", 8);
  high.priority = 10;
  Workload first_low = Submit(low);
  Workload second_low = Submit(low);
  Workload late_high = Submit(high);
  auto scheduler = Start();

  // One 8-GPU workload fits at a time: the later but higher-priority one goes first...
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(late_high.id));
  // ... then, at equal priority, the one submitted first.
  scheduler->NotifyReleased(late_high.id);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(first_low.id));
  scheduler->NotifyReleased(first_low.id);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(second_low.id));

  // Work submitted later with a higher priority overtakes what already waits.
  Workload third_low = Submit(low);
  Workload urgent = Submit(high);
  scheduler->NotifySubmitted(third_low);
  scheduler->NotifySubmitted(urgent);
  scheduler->NotifyReleased(second_low.id);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(urgent.id));
  EXPECT_EQ(Stored(third_low.id).pending_reason.code, ReasonCode::kNothingFree);
}

// Only the first max_considered workloads of the queue are tried in a cycle; the rest get a
// reason that says so (and does not change from cycle to cycle), and their turn comes.
TEST_F(SchedulerTest, ACycleConsidersABoundedSliceOfTheQueue) {
  AddCluster("dgx");
  std::vector<Workload> queued;
  queued.reserve(5);
  for (int i = 0; i < 5; ++i) queued.push_back(Submit(Gpus("one", 1)));
  SchedulerOptions options;
  options.max_considered = 2;
  auto scheduler = Start(options);

  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  EXPECT_EQ(cycle.stats.pending, 5);
  EXPECT_EQ(cycle.stats.considered, 2);
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(queued[0].id, queued[1].id));
  const PendingReason depth = PendingReason(ReasonCode::kQueueDepth).Set(figure::kConsidered, 2);
  for (int i = 2; i < 5; ++i) {
    const Workload w = Stored(queued[i].id);
    EXPECT_EQ(w.state, WorkloadState::kPending);
    EXPECT_EQ(w.pending_reason, depth) << w.pending_reason;
  }
  EXPECT_THAT(workloads_.TakeWrites(), ElementsAre(Pair(queued[2].id, ReasonCode::kQueueDepth),
                                                   Pair(queued[3].id, ReasonCode::kQueueDepth),
                                                   Pair(queued[4].id, ReasonCode::kQueueDepth)));

  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_EQ(cycle.stats.pending, 3);
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(queued[2].id, queued[3].id));
  EXPECT_THAT(workloads_.TakeWrites(), IsEmpty()) << "the last one's reason is unchanged";
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(queued[4].id));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_EQ(cycle.stats.pending, 0);
  EXPECT_EQ(cycle.stats.considered, 0);
}

// Whether a reason is news is decided on codes and figures, never on words: a new code is
// written at once, the same code with figures that moved only after reason_refresh_cycles, and
// an unchanged reason never.
TEST_F(SchedulerTest, ANewReasonCodeIsWrittenAtOnceMovedFiguresOnlyNowAndThen) {
  AddCluster("dgx");
  Submit(Gpus("six", 6));
  const Workload eight = Submit(Gpus("eight", 8));
  SchedulerOptions options;
  options.reason_refresh_cycles = 3;
  auto scheduler = Start(options);
  auto stored = [&] { return Stored(eight.id).pending_reason; };

  // Cycle 1: six is placed; eight is admitted with its first reason (written with the
  // transition): 2 GPUs free on the node.
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  ASSERT_THAT(cycle.placed, SizeIs(1));
  EXPECT_EQ(cycle.stats.admitted, 1);
  EXPECT_EQ(cycle.stats.reasons_written, 0);
  EXPECT_THAT(workloads_.TakeWrites(), IsEmpty());
  EXPECT_EQ(stored().code, ReasonCode::kGpusBusy) << stored();
  EXPECT_EQ(stored().Int(figure::kLargest), 2);
  const Timestamp first_written = Stored(eight.id).update_time;

  // Cycle 2: one GPU more is taken (looked at after eight: it is behind it in the queue).
  clock_.Advance(std::chrono::seconds(1));
  scheduler->NotifySubmitted(Submit(Gpus("one", 1)));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  ASSERT_THAT(cycle.placed, SizeIs(1));
  EXPECT_EQ(cycle.stats.reasons_written, 0);
  // Cycle 3: the same code with other figures (1 free) is not written yet...
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_EQ(cycle.stats.reasons_written, 0);
  EXPECT_THAT(workloads_.TakeWrites(), IsEmpty());
  EXPECT_EQ(stored().Int(figure::kLargest), 2);
  EXPECT_EQ(Stored(eight.id).update_time, first_written) << "the row was not touched";
  // ... but is once reason_refresh_cycles have passed since it was (cycle 4).
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_EQ(cycle.stats.reasons_written, 1);
  EXPECT_THAT(workloads_.TakeWrites(), ElementsAre(Pair(eight.id, ReasonCode::kGpusBusy)));
  EXPECT_EQ(stored().code, ReasonCode::kGpusBusy);
  EXPECT_EQ(stored().Int(figure::kLargest), 1);
  EXPECT_EQ(Stored(eight.id).update_time, clock_.Now());

  // Cycle 5 takes the last GPU; nothing free is a new code, written at once (cycle 6).
  scheduler->NotifySubmitted(Submit(Gpus("last", 1)));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  ASSERT_THAT(cycle.placed, SizeIs(1));
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_EQ(cycle.stats.reasons_written, 1);
  EXPECT_THAT(workloads_.TakeWrites(), ElementsAre(Pair(eight.id, ReasonCode::kNothingFree)));
  EXPECT_EQ(stored().code, ReasonCode::kNothingFree) << stored();
  // Unchanged, however many cycles go by: nothing more is written.
  for (int i = 0; i < 5; ++i) {
    ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
    EXPECT_EQ(cycle.stats.reasons_written, 0);
  }
  EXPECT_THAT(workloads_.TakeWrites(), IsEmpty());
}

// A reason read back from the store is what the scheduler compares against: a restarted
// scheduler does not rewrite the reasons its predecessor left.
TEST_F(SchedulerTest, AStoredReasonThatStillHoldsIsNotRewritten) {
  AddCluster("dgx");
  const Workload never = Submit(Gpus("never", 16));
  {
    auto first = Start();
    ASSERT_OK_AND_ASSIGN(CycleResult cycle, first->RunCycle());
    EXPECT_EQ(cycle.stats.reasons_written, 1);
  }
  ASSERT_EQ(Stored(never.id).pending_reason.code, ReasonCode::kGpuCountUnsatisfiable);
  workloads_.TakeWrites();
  auto second = Start();
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, second->RunCycle());
  EXPECT_EQ(cycle.stats.reasons_written, 0);
  EXPECT_THAT(workloads_.TakeWrites(), IsEmpty());
}

// The queue is in memory; the store has the truth. A workload cancelled after the scheduler
// read it is refused by the guarded commit, and the capacity it was given comes back.
TEST_F(SchedulerTest, WorkCancelledMeanwhileIsSkippedAndItsCapacityKept) {
  AddCluster("dgx");
  const Workload a = Submit(Gpus("a", 8));
  auto scheduler = Start();  // a is in the in-memory queue now
  ASSERT_OK(store_.RequestCancel(a.id, "user:test", "changed my mind"));

  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  EXPECT_THAT(cycle.placed, IsEmpty());
  EXPECT_EQ(cycle.stats.lost_races, 1);
  EXPECT_EQ(Stored(a.id).state, WorkloadState::kCancelled);
  EXPECT_EQ(scheduler->pending_count(), 0) << "dropped from the queue";
  EXPECT_FALSE(scheduler->Snapshot()->Holds(a.id)) << "its GPUs were given back";

  // Its 8 GPUs were not kept: the next 8-GPU workload fits.
  const Workload next = Submit(Gpus("next", 8));
  scheduler->NotifySubmitted(next);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(next.id));
}

// Cancelled while pending and notified (the control plane's path): gone from the queue before
// the cycle looks at it.
TEST_F(SchedulerTest, ANotifiedCancelLeavesTheQueueBeforeTheCycle) {
  AddCluster("dgx");
  const Workload a = Submit(Gpus("a", 8));
  const Workload b = Submit(Gpus("b", 8));
  auto scheduler = Start();
  ASSERT_OK(store_.RequestCancel(a.id, "user:test", ""));
  scheduler->NotifyReleased(a.id);
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  EXPECT_EQ(cycle.stats.pending, 1);
  EXPECT_EQ(cycle.stats.lost_races, 0);
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(b.id));
}

// A late notification may carry a stale PENDING copy of work already placed: it is neither
// placed twice nor does it free what the workload holds.
TEST_F(SchedulerTest, AStalePendingCopyOfPlacedWorkIsIgnored) {
  AddCluster("dgx");
  const Workload a = Submit(Gpus("a", 4));
  auto scheduler = Start();
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  ASSERT_THAT(Ids(cycle.placed), ElementsAre(a.id));
  scheduler->NotifySubmitted(a);  // the copy taken at submission, still PENDING
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(cycle.placed, IsEmpty());
  EXPECT_EQ(cycle.stats.pending, 0);
  const Workload b = Submit(Gpus("b", 8));
  scheduler->NotifySubmitted(b);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(cycle.placed, IsEmpty()) << "4 of the 8 GPUs are still held by " << a.id;
  scheduler->NotifyReleased(a.id);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(b.id));
}

// A gang is placed whole or not at all: every replica in one cluster, and a gang that does not
// fit holds nothing, so smaller work behind it still runs.
TEST_F(SchedulerTest, GangsArePlacedAllOrNothing) {
  AddCluster("left", /*nodes=*/1, /*gpus=*/8);
  AddCluster("right", /*nodes=*/1, /*gpus=*/8);
  AddCluster("pair", /*nodes=*/2, /*gpus=*/8);
  WorkloadSpec three = Gpus("three", 4, /*replicas=*/3);
  three.priority = 10;
  const Workload gang = Submit(three);
  WorkloadSpec across = Gpus("across", 8, /*replicas=*/3);  // 24 GPUs: no cluster has that many
  across.priority = 10;
  const Workload too_big = Submit(across);
  auto scheduler = Start();

  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  ASSERT_THAT(Ids(cycle.placed), ElementsAre(gang.id));
  const Assignment& placed = cycle.placed[0].assignment;
  EXPECT_EQ(placed.cluster, "pair") << "the only cluster that holds all three replicas";
  ASSERT_THAT(placed.replicas, SizeIs(3));
  std::set<std::string> gpus;
  for (const ReplicaAssignment& r : placed.replicas) {
    EXPECT_THAT(r.gpu_uuids, SizeIs(4));
    gpus.insert(r.gpu_uuids.begin(), r.gpu_uuids.end());
  }
  EXPECT_THAT(gpus, SizeIs(12));
  const Workload never = Stored(too_big.id);
  EXPECT_EQ(never.state, WorkloadState::kPending);
  // No cluster holds all its replicas: the cluster is the group a gang must share.
  EXPECT_EQ(never.pending_reason.code, ReasonCode::kTopologyUnsatisfiable) << never.pending_reason;
  EXPECT_TRUE(never.pending_reason.never_fits());

  // A second gang of two 8-GPU replicas: "pair" has 4 GPUs left, "left" and "right" 8 each,
  // but two clusters are not one. It waits and holds nothing...
  const Workload two = Submit(Gpus("two", 8, /*replicas=*/2));
  scheduler->NotifySubmitted(two);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(cycle.placed, IsEmpty());
  const Workload waiting = Stored(two.id);
  EXPECT_EQ(waiting.state, WorkloadState::kAdmitted);
  EXPECT_EQ(waiting.pending_reason.code, ReasonCode::kGangBusy) << waiting.pending_reason;
  EXPECT_FALSE(waiting.pending_reason.never_fits());
  // ... so 20 single GPUs behind it (every free one) are all placed.
  std::vector<Workload> singles;
  for (int i = 0; i < 20; ++i) {
    singles.push_back(Submit(Gpus("single", 1)));
    scheduler->NotifySubmitted(singles.back());
  }
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(cycle.placed, SizeIs(20));
  EXPECT_EQ(Stored(two.id).state, WorkloadState::kAdmitted);
  EXPECT_EQ(Stored(too_big.id).state, WorkloadState::kPending);
}

// The gang needs all its replicas in one cluster that is free enough now: when the pool frees
// them, it goes at once and whole.
TEST_F(SchedulerTest, AWaitingGangGoesWholeOnceOneClusterHasRoom) {
  AddCluster("pair", /*nodes=*/2, /*gpus=*/8);
  const Workload blocker = Submit(Gpus("blocker", 8));
  auto scheduler = Start();
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  ASSERT_THAT(Ids(cycle.placed), ElementsAre(blocker.id));

  const Workload gang = Submit(Gpus("gang", 8, /*replicas=*/2));
  scheduler->NotifySubmitted(gang);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(cycle.placed, IsEmpty());
  EXPECT_EQ(Stored(gang.id).pending_reason.code, ReasonCode::kGangBusy);

  scheduler->NotifyReleased(blocker.id);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  ASSERT_THAT(Ids(cycle.placed), ElementsAre(gang.id));
  ASSERT_THAT(cycle.placed[0].assignment.replicas, SizeIs(2));
  EXPECT_NE(cycle.placed[0].assignment.replicas[0].node,
            cycle.placed[0].assignment.replicas[1].node);
}

// Nothing committed, nothing held: when the placements' transaction fails, the cycle says so,
// the pool gives back what it tentatively allocated and the queue keeps the work.
TEST_F(SchedulerTest, AFailedCommitHoldsNoCapacityAndKeepsTheQueue) {
  AddCluster("dgx");
  const Workload a = Submit(Gpus("a", 8));
  auto scheduler = Start();
  workloads_.fail_transitions = true;
  EXPECT_THAT(scheduler->RunCycle(), testing::StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Stored(a.id).state, WorkloadState::kPending);

  // Had the failed cycle kept a's allocation, the scheduler would take a for placed and drop it.
  workloads_.fail_transitions = false;
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(a.id));
  EXPECT_EQ(Stored(a.id).state, WorkloadState::kPlaced);
}

// A cluster that becomes unreachable gets no new work; when it is back, it does.
TEST_F(SchedulerTest, NoNewWorkGoesToAnUnreachableCluster) {
  AddCluster("dgx");
  auto scheduler = Start();
  scheduler->NotifyClusterState("dgx", ClusterState::kUnreachable);
  const Workload a = Submit(Gpus("a", 1));
  scheduler->NotifySubmitted(a);
  ASSERT_OK_AND_ASSIGN(CycleResult cycle, scheduler->RunCycle());
  EXPECT_THAT(cycle.placed, IsEmpty());
  EXPECT_EQ(Stored(a.id).pending_reason.code, ReasonCode::kNoReadyCluster);

  scheduler->NotifyClusterState("dgx", ClusterState::kReady);
  ASSERT_OK_AND_ASSIGN(cycle, scheduler->RunCycle());
  EXPECT_THAT(Ids(cycle.placed), ElementsAre(a.id));
}

}  // namespace
}  // namespace gpufed
