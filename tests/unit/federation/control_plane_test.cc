// The use cases (federation/control_plane.h) and one step of the control loop
// (federation/control_loop.h), on the in-memory stores with a fake clock: no PostgreSQL, no
// threads, no sleeps.

#include "federation/control_plane.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "auth/token.h"
#include "federation/control_loop.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/memory_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/plane_test_base.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using ::gpufed::testing::Admin;
using ::gpufed::testing::AgentOf;
using ::gpufed::testing::FakeChannel;
using ::gpufed::testing::FakeLeader;
using ::gpufed::testing::IsOkAndHolds;
using ::gpufed::testing::MemoryStore;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::User;
using ::gpufed::testing::Viewer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// What the use cases counted.
class CountingMetrics final : public ControlMetrics {
 public:
  void SubmissionCreated() override { ++created; }
  void SubmissionReplayed() override { ++replayed; }
  void SubmissionRejected() override { ++rejected; }
  void WorkloadsInState(WorkloadState state, int64_t count) override { by_state[state] = count; }
  std::map<WorkloadState, int64_t> by_state;
  int created = 0;
  int replayed = 0;
  int rejected = 0;
};

WorkloadSpec Job(const std::string& tenant = "acme", uint32_t gpus = 1) {
  WorkloadSpec s;
  s.tenant = tenant;
  s.project = "p";
  s.name = "job";
  s.gpus_per_replica = gpus;
  return s;
}

// A job that may be placed again after its cluster is lost, up to `attempts` placements.
WorkloadSpec Restartable(uint32_t attempts = 3, uint32_t gpus = 1) {
  WorkloadSpec s = Job("acme", gpus);
  s.retry.max_attempts = attempts;
  s.retry.on_cluster_lost = true;
  return s;
}

// A job that may be placed again after a preemption and/or a node failure, up to `attempts`
// placements.
WorkloadSpec RetriedOn(bool preemption, bool node_failure, uint32_t attempts = 3,
                       uint32_t gpus = 1) {
  WorkloadSpec s = Job("acme", gpus);
  s.retry.max_attempts = attempts;
  s.retry.on_preemption = preemption;
  s.retry.on_node_failure = node_failure;
  return s;
}

class ControlPlaneTest : public testing::PlaneLoopTestBase {
 protected:
  ControlPlaneTest() : PlaneLoopTestBase(&metrics_) {}

  CountingMetrics metrics_;
};

TEST_F(ControlPlaneTest, SubmitStoresPendingPublishesAndWakes) {
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  EXPECT_TRUE(r.created);
  EXPECT_EQ(r.workload.state, WorkloadState::kPending);
  EXPECT_THAT(events_.States(r.workload.id), ElementsAre(WorkloadState::kPending));
  EXPECT_GT(wakes_, 0);
  ASSERT_OK_AND_ASSIGN(Workload stored, store_.Get(r.workload.id));
  EXPECT_EQ(stored.state, WorkloadState::kPending);
}

TEST_F(ControlPlaneTest, SubmitTakesTheCallersTenantWhenNoneIsGiven) {
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job("")));
  EXPECT_EQ(r.workload.spec.tenant, "acme");
}

TEST_F(ControlPlaneTest, SubmitToAnotherTenantIsDeniedAndStoresNothing) {
  EXPECT_THAT(Submit(User("acme"), Job("other")), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(Submit(Viewer("acme"), Job("acme")), StatusIs(absl::StatusCode::kPermissionDenied));
  ASSERT_OK_AND_ASSIGN(WorkloadPage page, store_.List(ListFilter{}));
  EXPECT_THAT(page.workloads, IsEmpty());
  EXPECT_THAT(events_.events, IsEmpty());
}

TEST_F(ControlPlaneTest, SubmitWithABadSpecIsInvalidAndStoresNothing) {
  WorkloadSpec spec = Job();
  spec.replicas = 0;
  EXPECT_THAT(Submit(User("acme"), spec), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(WorkloadPage page, store_.List(ListFilter{}));
  EXPECT_THAT(page.workloads, IsEmpty());
}

// Whatever refuses it (the transport's conversion, validation, authorisation, the store), a
// rejected submission is counted once.
TEST_F(ControlPlaneTest, EveryRejectedSubmissionIsCountedOnce) {
  ASSERT_OK(Submit(User("acme"), Job()));
  EXPECT_THAT(Submit(User("acme"), absl::InvalidArgumentError("spec: required")),
              StatusIs(absl::StatusCode::kInvalidArgument, "spec: required"));
  WorkloadSpec bad = Job();
  bad.replicas = 0;
  EXPECT_THAT(Submit(User("acme"), bad), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Submit(User("acme"), Job("other")), StatusIs(absl::StatusCode::kPermissionDenied));
  WorkloadSpec nowhere = Job();
  nowhere.project = "nope";
  EXPECT_THAT(Submit(User("acme"), nowhere), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(metrics_.created, 1);
  EXPECT_EQ(metrics_.rejected, 4);
}

TEST_F(ControlPlaneTest, GaugesCountTheStoredWorkloadsOfEveryState) {
  ASSERT_OK(Submit(User("acme"), Job()));
  ASSERT_OK_AND_ASSIGN(SubmitResult ended, Submit(User("acme"), Job()));
  ASSERT_OK(plane_.Cancel(User("acme"), ended.workload.id, ""));
  ASSERT_OK(plane_.RefreshGauges());
  EXPECT_EQ(metrics_.by_state.size(), 9u);  // PENDING .. LOST, none left out
  EXPECT_EQ(metrics_.by_state[WorkloadState::kPending], 1);
  EXPECT_EQ(metrics_.by_state[WorkloadState::kCancelled], 1);
  EXPECT_EQ(metrics_.by_state[WorkloadState::kRunning], 0);
}

TEST_F(ControlPlaneTest, ReplayedSubmitPublishesNothingNew) {
  WorkloadSpec spec = Job();
  spec.idempotency_key = "k1";
  ASSERT_OK_AND_ASSIGN(SubmitResult first, Submit(User("acme"), spec));
  ASSERT_OK_AND_ASSIGN(SubmitResult again, Submit(User("acme"), spec));
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.workload.id, first.workload.id);
  EXPECT_THAT(events_.events, SizeIs(1));
}

TEST_F(ControlPlaneTest, AnotherTenantsWorkloadLooksAbsent) {
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  EXPECT_THAT(plane_.GetWorkload(User("other"), r.workload.id),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(plane_.Cancel(User("other"), r.workload.id, ""),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(plane_.Explain(User("other"), r.workload.id), StatusIs(absl::StatusCode::kNotFound));
  ListFilter acme;
  acme.tenant = "acme";
  EXPECT_THAT(plane_.ListWorkloads(User("other"), acme),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(ControlPlaneTest, AViewerMayReadButNotCancel) {
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  EXPECT_OK(plane_.GetWorkload(Viewer("acme"), r.workload.id));
  EXPECT_THAT(plane_.Cancel(Viewer("acme"), r.workload.id, ""),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(ControlPlaneTest, OnlyTheClustersAgentMayRegisterIt) {
  Cluster c = testing::MakeCluster("c1", 1, 8, "H100-80GB");
  auto channel = std::make_shared<FakeChannel>();
  EXPECT_THAT(plane_.RegisterAgent(AgentOf("c2"), c.info, c.nodes, {}, channel),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.RegisterAgent(Admin(), c.info, c.nodes, {}, channel),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(store_.GetCluster("c1"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(channel->registered_epochs, IsEmpty());
}

TEST_F(ControlPlaneTest, ABadInventoryIsRefusedAndNothingIsStored) {
  Cluster c = testing::MakeCluster("c1", 1, 8, "H100-80GB");
  c.nodes[0].gpus[1].uuid = c.nodes[0].gpus[0].uuid;  // duplicate GPU
  auto channel = std::make_shared<FakeChannel>();
  EXPECT_THAT(plane_.RegisterAgent(AgentOf("c1"), c.info, c.nodes, {}, channel),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(store_.GetCluster("c1"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ControlPlaneTest, AWorkloadGoesFromSubmitToSucceededThroughTheLoop) {
  std::shared_ptr<FakeChannel> agent = Register("c1");
  EXPECT_THAT(agent->registered_epochs, SizeIs(1));
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  const WorkloadId id = r.workload.id;

  StepResult step = Step();
  EXPECT_TRUE(step.leading);
  ASSERT_TRUE(step.cycle.has_value());
  EXPECT_EQ(step.cycle->stats.placed, 1);
  EXPECT_TRUE(step.more);
  EXPECT_THAT(agent->assigned, ElementsAre(id));

  ASSERT_OK(Report("c1", id, WorkloadState::kRunning));
  ASSERT_OK(Report("c1", id, WorkloadState::kSucceeded));
  ASSERT_OK_AND_ASSIGN(Workload done, store_.Get(id));
  EXPECT_EQ(done.state, WorkloadState::kSucceeded);
  EXPECT_THAT(events_.States(id), ElementsAre(WorkloadState::kPending, WorkloadState::kPlaced,
                                              WorkloadState::kRunning, WorkloadState::kSucceeded));
  // Once it ended, the agent may no longer speak for it.
  EXPECT_FALSE(links_.at("c1")->IsAssigned(id));
}

TEST_F(ControlPlaneTest, FinishedWorkFreesItsCapacityForTheNext) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult big, Submit(User("acme"), Job("acme", 8)));
  ASSERT_OK_AND_ASSIGN(SubmitResult next, Submit(User("acme"), Job("acme", 8)));
  ASSERT_EQ(Step().cycle->stats.placed, 1);
  EXPECT_EQ(Step().cycle->stats.placed, 0);  // the node is full
  ASSERT_OK(Report("c1", big.workload.id, WorkloadState::kRunning));
  ASSERT_OK(Report("c1", big.workload.id, WorkloadState::kFailed));
  EXPECT_EQ(Step().cycle->stats.placed, 1);
  ASSERT_OK_AND_ASSIGN(Workload w, store_.Get(next.workload.id));
  EXPECT_EQ(w.state, WorkloadState::kPlaced);
}

TEST_F(ControlPlaneTest, AnAgentCannotReportOnWorkItWasNotHanded) {
  Register("c1");
  Register("c2");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  Step();
  ASSERT_OK_AND_ASSIGN(Workload placed, store_.Get(r.workload.id));
  const std::string elsewhere = placed.assignment.cluster == "c1" ? "c2" : "c1";
  ASSERT_OK(Report(elsewhere, r.workload.id, WorkloadState::kRunning));
  ASSERT_OK_AND_ASSIGN(Workload after, store_.Get(r.workload.id));
  EXPECT_EQ(after.state, WorkloadState::kPlaced);
}

TEST_F(ControlPlaneTest, AgentsMayReportOnlyRunningOrEndStates) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  Step();
  EXPECT_THAT(Report("c1", r.workload.id, WorkloadState::kPending),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Report("c1", r.workload.id, WorkloadState::kPlaced),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ControlPlaneTest, CancellingPendingWorkEndsItAndTheSchedulerDropsIt) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  ASSERT_OK_AND_ASSIGN(Workload w, plane_.Cancel(User("acme"), r.workload.id, ""));
  EXPECT_EQ(w.state, WorkloadState::kCancelled);
  EXPECT_EQ(Step().cycle->stats.placed, 0);
  EXPECT_THAT(events_.States(r.workload.id),
              ElementsAre(WorkloadState::kPending, WorkloadState::kCancelled));
}

TEST_F(ControlPlaneTest, CancellingPlacedWorkAsksItsAgentToStopIt) {
  std::shared_ptr<FakeChannel> agent = Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  Step();
  ASSERT_OK_AND_ASSIGN(Workload w, plane_.Cancel(User("acme"), r.workload.id, "no longer needed"));
  EXPECT_TRUE(w.cancel_requested);
  EXPECT_EQ(w.state, WorkloadState::kPlaced);
  EXPECT_THAT(agent->cancelled, ElementsAre(r.workload.id));
  ASSERT_OK(Report("c1", r.workload.id, WorkloadState::kCancelled));
  ASSERT_OK_AND_ASSIGN(Workload after, store_.Get(r.workload.id));
  EXPECT_EQ(after.state, WorkloadState::kCancelled);
}

TEST_F(ControlPlaneTest, CancellingEndedWorkIsAFailedPrecondition) {
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  ASSERT_OK(plane_.Cancel(User("acme"), r.workload.id, ""));
  EXPECT_THAT(plane_.Cancel(User("acme"), r.workload.id, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ControlPlaneTest, ASilentClusterIsMarkedUnreachableAndGetsNoNewWork) {
  Register("c1");
  clock_.Advance(std::chrono::seconds(29));
  EXPECT_THAT(Step().lost_clusters, IsEmpty());
  clock_.Advance(std::chrono::seconds(2));
  StepResult step = Step();
  EXPECT_THAT(step.lost_clusters, ElementsAre("c1"));
  ASSERT_OK_AND_ASSIGN(Cluster c, store_.GetCluster("c1"));
  EXPECT_EQ(c.state, ClusterState::kUnreachable);
  EXPECT_EQ(c.epoch, 2u);  // fenced
  // Reported once, not on every step.
  clock_.Advance(std::chrono::seconds(5));
  EXPECT_THAT(Step().lost_clusters, IsEmpty());

  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  EXPECT_EQ(Step().cycle->stats.placed, 0);
  ASSERT_OK_AND_ASSIGN(Workload w, store_.Get(r.workload.id));
  EXPECT_EQ(w.state, WorkloadState::kAdmitted);
}

// ---- Cordons ----------------------------------------------------------------------------------

TEST_F(ControlPlaneTest, ACordonedClusterGetsNoNewWorkUntilUncordoned) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult running, Submit(User("acme"), Job()));
  Step();
  ASSERT_OK_AND_ASSIGN(ClusterListing cordoned, plane_.Cordon(Admin(), "c1", "", true));
  EXPECT_EQ(cordoned.clusters.front().state, ClusterState::kDraining);
  ASSERT_OK_AND_ASSIGN(SubmitResult waits, Submit(User("acme"), Job()));
  EXPECT_EQ(Step().cycle->stats.placed, 0);
  EXPECT_EQ(MustGet(waits.workload.id).state, WorkloadState::kAdmitted);
  EXPECT_EQ(MustGet(running.workload.id).state, WorkloadState::kPlaced);  // keeps its place

  Register("c1");  // its agent comes back: still cordoned
  EXPECT_EQ(Step().cycle->stats.placed, 0);
  ASSERT_OK(plane_.Cordon(Admin(), "c1", "", false));
  EXPECT_EQ(Step().cycle->stats.placed, 1);
  EXPECT_EQ(MustGet(waits.workload.id).state, WorkloadState::kPlaced);
}

TEST_F(ControlPlaneTest, ACordonedNodeGetsNoNewWork) {
  Register("c1", 2);  // c1-n0 and c1-n1, 8 GPUs each
  ASSERT_OK_AND_ASSIGN(ClusterListing listing, plane_.Cordon(Admin(), "c1", "c1-n0", true));
  ASSERT_EQ(listing.clusters.front().nodes.size(), 2u);
  EXPECT_TRUE(listing.clusters.front().nodes[0].cordoned);
  ASSERT_OK_AND_ASSIGN(SubmitResult a, Submit(User("acme"), Job("acme", 8)));
  ASSERT_OK_AND_ASSIGN(SubmitResult b, Submit(User("acme"), Job("acme", 8)));
  Step();
  Step();
  const Workload placed_a = MustGet(a.workload.id);
  ASSERT_EQ(placed_a.state, WorkloadState::kPlaced);
  EXPECT_EQ(placed_a.assignment.replicas.front().node, "c1-n1");
  EXPECT_EQ(MustGet(b.workload.id).state, WorkloadState::kAdmitted);  // c1-n0 is cordoned
  ASSERT_OK(plane_.Cordon(Admin(), "c1", "c1-n0", false));
  Step();
  EXPECT_EQ(MustGet(b.workload.id).assignment.replicas.front().node, "c1-n0");
}

TEST_F(ControlPlaneTest, OnlyAPlatformAdminMayCordonAndBadNamesAreRefused) {
  Register("c1");
  EXPECT_THAT(plane_.Cordon(User("acme"), "c1", "", true),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.Cordon(AgentOf("c1"), "c1", "", true),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.Cordon(Admin(), "C1!", "", true),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(plane_.Cordon(Admin(), "c1", "no de", true),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(plane_.Cordon(Admin(), "c9", "", true), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(Cluster c, store_.GetCluster("c1"));
  EXPECT_FALSE(c.cordoned);
  EXPECT_EQ(c.state, ClusterState::kReady);
}

// A drain with eviction stops the restartable work first and requeues it only when the agent
// confirms the stop, so that it never runs in two places; the rest keeps running.
TEST_F(ControlPlaneTest, ADrainEvictsRestartableWorkOnlyOnceItsAgentConfirmsTheStop) {
  std::shared_ptr<FakeChannel> c1 = Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult moves, Submit(User("acme"), RetriedOn(true, false)));
  ASSERT_OK_AND_ASSIGN(SubmitResult stays, Submit(User("acme"), RetriedOn(false, true)));
  Step();
  ASSERT_OK(Report("c1", moves.workload.id, WorkloadState::kRunning));
  ASSERT_OK(Report("c1", stays.workload.id, WorkloadState::kRunning));
  std::shared_ptr<FakeChannel> c2 = Register("c2");

  ASSERT_OK_AND_ASSIGN(DrainResult drained, plane_.Drain(Admin(), "c1", "", /*evict=*/true));
  EXPECT_EQ(drained.listing.clusters.front().state, ClusterState::kDraining);
  EXPECT_THAT(drained.evicted, ElementsAre(moves.workload.id));
  EXPECT_THAT(drained.staying, ElementsAre(stays.workload.id));
  EXPECT_THAT(c1->cancelled, ElementsAre(moves.workload.id));
  Workload w = MustGet(moves.workload.id);
  EXPECT_EQ(w.state, WorkloadState::kRunning) << "not requeued before the stop is confirmed";
  EXPECT_EQ(w.evicting, AttemptEnd::kPreempted);
  EXPECT_EQ(Step().cycle->stats.placed, 0);

  // Drained again: nothing new is asked; the eviction already asked for still counts.
  ASSERT_OK_AND_ASSIGN(drained, plane_.Drain(Admin(), "c1", "", true));
  EXPECT_THAT(drained.evicted, ElementsAre(moves.workload.id));
  EXPECT_THAT(c1->cancelled, ElementsAre(moves.workload.id));

  ASSERT_OK(Report("c1", moves.workload.id, WorkloadState::kCancelled));
  w = MustGet(moves.workload.id);
  EXPECT_EQ(w.state, WorkloadState::kPending);
  EXPECT_FALSE(w.evicting.has_value());
  Step();
  w = MustGet(moves.workload.id);
  EXPECT_EQ(w.state, WorkloadState::kPlaced);
  EXPECT_EQ(w.assignment.cluster, "c2");
  EXPECT_EQ(w.attempts, 2u);
  EXPECT_EQ(MustGet(stays.workload.id).state, WorkloadState::kRunning);
  const auto requeue =
      std::find_if(events_.events.begin(), events_.events.end(), [&](const WorkloadEvent& e) {
        return e.workload.id == moves.workload.id && e.to == WorkloadState::kPending &&
               e.from == WorkloadState::kRunning;
      });
  ASSERT_NE(requeue, events_.events.end());
  EXPECT_EQ(requeue->workload.pending_reason.code, ReasonCode::kPreempted);
  EXPECT_EQ(requeue->workload.pending_reason.Text(figure::kCluster), "c1");
  EXPECT_EQ(requeue->workload.pending_reason.Int(figure::kAttempt), 1);
}

TEST_F(ControlPlaneTest, ADrainWithoutEvictionOnlyCordonsAndAUserCancelStillWins) {
  std::shared_ptr<FakeChannel> c1 = Register("c1", 2);
  ASSERT_OK_AND_ASSIGN(SubmitResult a, Submit(User("acme"), RetriedOn(true, false, 3, 8)));
  ASSERT_OK_AND_ASSIGN(SubmitResult b, Submit(User("acme"), RetriedOn(true, false, 3, 8)));
  Step();
  ASSERT_EQ(MustGet(a.workload.id).state, WorkloadState::kPlaced);
  ASSERT_EQ(MustGet(b.workload.id).state, WorkloadState::kPlaced);
  const std::string node_a = MustGet(a.workload.id).assignment.replicas.front().node;

  ASSERT_OK_AND_ASSIGN(DrainResult drained, plane_.Drain(Admin(), "c1", node_a, false));
  EXPECT_THAT(drained.evicted, IsEmpty());
  EXPECT_THAT(drained.staying, ElementsAre(a.workload.id));  // only the node's work
  EXPECT_THAT(c1->cancelled, IsEmpty());
  EXPECT_EQ(drained.listing.clusters.front().state, ClusterState::kReady);

  ASSERT_OK_AND_ASSIGN(drained, plane_.Drain(Admin(), "c1", node_a, true));
  EXPECT_THAT(drained.evicted, ElementsAre(a.workload.id));
  // The user cancels before the agent confirms: the stop ends it CANCELLED, not requeued.
  ASSERT_OK(plane_.Cancel(User("acme"), a.workload.id, "no longer needed"));
  ASSERT_OK(Report("c1", a.workload.id, WorkloadState::kCancelled));
  EXPECT_EQ(MustGet(a.workload.id).state, WorkloadState::kCancelled);
  EXPECT_EQ(MustGet(b.workload.id).state, WorkloadState::kPlaced);
}

TEST_F(ControlPlaneTest, OnlyAPlatformAdminMayDrain) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult a, Submit(User("acme"), RetriedOn(true, false)));
  Step();
  EXPECT_THAT(plane_.Drain(User("acme"), "c1", "", true),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.Drain(Admin(), "c9", "", true), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(MustGet(a.workload.id).evicting.has_value());
  ASSERT_OK_AND_ASSIGN(Cluster c, store_.GetCluster("c1"));
  EXPECT_FALSE(c.cordoned);
}

// A node that leaves the agent's inventory, or a GPU it reports unhealthy, is handled like a
// small lost cluster: its capacity leaves the pool, and the work on it is stopped and then
// requeued (retry on node failure) or ended LOST.
TEST_F(ControlPlaneTest, WorkOnAFailedNodeOrGpuIsStoppedThenRequeuedOrEnded) {
  std::shared_ptr<FakeChannel> c1 = Register("c1", 2);
  ASSERT_OK_AND_ASSIGN(SubmitResult on_n0, Submit(User("acme"), RetriedOn(false, true, 3, 8)));
  ASSERT_OK_AND_ASSIGN(SubmitResult on_n1, Submit(User("acme"), RetriedOn(false, false, 1, 4)));
  ASSERT_OK_AND_ASSIGN(SubmitResult safe, Submit(User("acme"), RetriedOn(false, true, 3, 4)));
  Step();
  const auto node_of = [&](WorkloadId id) { return MustGet(id).assignment.replicas.front().node; };
  ASSERT_NE(node_of(on_n0.workload.id), node_of(on_n1.workload.id));
  ASSERT_EQ(node_of(on_n1.workload.id), node_of(safe.workload.id));
  const std::string failed_node = node_of(on_n0.workload.id);

  // The agent reports one node gone and, on the other, the GPU under on_n1 unhealthy.
  Cluster now = testing::MakeCluster("c1", 2, 8, "H100-80GB");
  std::vector<NodeInfo> nodes;
  const std::string bad_gpu = MustGet(on_n1.workload.id).assignment.replicas.front().gpu_uuids[0];
  for (NodeInfo& n : now.nodes) {
    if (n.name == failed_node) continue;
    for (GpuInfo& g : n.gpus) g.healthy = g.uuid != bad_gpu;
    nodes.push_back(n);
  }
  ASSERT_OK(plane_.UpdateInventory(*links_.at("c1"), nodes));
  EXPECT_THAT(c1->cancelled, ::testing::UnorderedElementsAre(on_n0.workload.id, on_n1.workload.id));
  EXPECT_EQ(MustGet(on_n0.workload.id).evicting, AttemptEnd::kNodeFailure);
  EXPECT_EQ(MustGet(on_n0.workload.id).state, WorkloadState::kPlaced);
  EXPECT_FALSE(MustGet(safe.workload.id).evicting.has_value());

  ASSERT_OK(Report("c1", on_n0.workload.id, WorkloadState::kCancelled));
  ASSERT_OK(Report("c1", on_n1.workload.id, WorkloadState::kCancelled));
  const Workload requeued = MustGet(on_n0.workload.id);
  EXPECT_EQ(requeued.state, WorkloadState::kPending);
  EXPECT_EQ(MustGet(on_n1.workload.id).state, WorkloadState::kLost);
  EXPECT_EQ(MustGet(safe.workload.id).state, WorkloadState::kPlaced);
  // The failed node's capacity is gone: 8 GPUs on one node, 4 held, 1 unhealthy.
  Step();
  EXPECT_EQ(MustGet(on_n0.workload.id).state, WorkloadState::kPending);
}

// Registering again with hardware missing evicts its work the same way.
TEST_F(ControlPlaneTest, AnAgentRegisteringWithoutANodeHasItsWorkStopped) {
  Register("c1", 2);
  ASSERT_OK_AND_ASSIGN(SubmitResult a, Submit(User("acme"), RetriedOn(false, true, 3, 8)));
  ASSERT_OK_AND_ASSIGN(SubmitResult b, Submit(User("acme"), RetriedOn(false, true, 3, 8)));
  Step();
  ASSERT_OK(Report("c1", a.workload.id, WorkloadState::kRunning));
  const std::string node_b = MustGet(b.workload.id).assignment.replicas.front().node;
  Cluster smaller = testing::MakeCluster("c1", 2, 8, "H100-80GB");
  std::vector<NodeInfo> nodes;
  for (const NodeInfo& n : smaller.nodes) {
    if (n.name != node_b) nodes.push_back(n);
  }
  auto channel = std::make_shared<FakeChannel>();
  ASSERT_OK_AND_ASSIGN(links_["c1"],
                       plane_.RegisterAgent(AgentOf("c1"), smaller.info, nodes, {}, channel));
  EXPECT_THAT(channel->cancelled, ::testing::Contains(b.workload.id));
  EXPECT_THAT(channel->cancelled, ::testing::Not(::testing::Contains(a.workload.id)));
  // Its assignment goes out first: a restarted agent that got the cancel first would start it.
  const auto assign =
      std::find(channel->sent.begin(), channel->sent.end(), std::make_pair('A', b.workload.id));
  const auto cancel =
      std::find(channel->sent.begin(), channel->sent.end(), std::make_pair('C', b.workload.id));
  ASSERT_NE(cancel, channel->sent.end());
  EXPECT_LT(assign, cancel);
  ASSERT_OK(Report("c1", b.workload.id, WorkloadState::kCancelled));
  EXPECT_EQ(MustGet(b.workload.id).state, WorkloadState::kPending);
  EXPECT_EQ(MustGet(a.workload.id).state, WorkloadState::kRunning);
}

// The control loop moves workloads that ended more than archive_after ago out of the hot table;
// they are still found by id.
TEST_F(ControlPlaneTest, TheLoopArchivesWorkThatEndedLongAgo) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult done, Submit(User("acme"), Job()));
  ASSERT_OK_AND_ASSIGN(SubmitResult live, Submit(User("acme"), Job()));
  Step();
  ASSERT_OK(Report("c1", done.workload.id, WorkloadState::kRunning));
  ASSERT_OK(Report("c1", done.workload.id, WorkloadState::kSucceeded));
  const auto listed = [&] {
    ListFilter f;
    f.tenant = "acme";
    absl::StatusOr<WorkloadPage> page = store_.List(f);
    EXPECT_OK(page);
    std::vector<WorkloadId> ids;
    if (page.ok()) {
      for (const Workload& w : page->workloads) ids.push_back(w.id);
    }
    return ids;
  };
  clock_.Advance(std::chrono::hours(24 * 7) - std::chrono::minutes(1));
  Heartbeat("c1");
  Step();
  EXPECT_THAT(listed(), ::testing::UnorderedElementsAre(done.workload.id, live.workload.id));
  clock_.Advance(std::chrono::minutes(2));
  Heartbeat("c1");
  Step();
  EXPECT_THAT(listed(), ElementsAre(live.workload.id));
  EXPECT_EQ(MustGet(done.workload.id).state, WorkloadState::kSucceeded);
  EXPECT_EQ(MustGet(live.workload.id).state, WorkloadState::kPlaced);
}

// Registering, a new inventory and a state change each reach the scheduler (its next cycle
// decides by them) and wake the loop.
TEST_F(ControlPlaneTest, EveryClusterChangeReachesTheSchedulerAndWakesTheLoop) {
  Step();  // leading, with an empty pool
  ASSERT_OK_AND_ASSIGN(SubmitResult first, Submit(User("acme"), Job("acme", 8)));
  ASSERT_OK(Submit(User("acme"), Job("acme", 8)));
  ASSERT_OK(Submit(User("acme"), Job("acme", 8)));
  EXPECT_EQ(Step().cycle->stats.placed, 0);

  int wakes = wakes_;
  Register("c1");  // one node of 8 GPUs
  EXPECT_GT(wakes_, wakes);
  EXPECT_EQ(Step().cycle->stats.placed, 1);

  wakes = wakes_;
  Cluster bigger = testing::MakeCluster("c1", 2, 8, "H100-80GB");
  ASSERT_OK(plane_.UpdateInventory(*links_.at("c1"), bigger.nodes));  // a second node
  EXPECT_GT(wakes_, wakes);
  EXPECT_EQ(Step().cycle->stats.placed, 1);

  wakes = wakes_;
  ASSERT_OK(plane_.MarkClusterState("c1", ClusterState::kUnreachable));
  EXPECT_GT(wakes_, wakes);
  ASSERT_OK(Report("c1", first.workload.id, WorkloadState::kRunning));
  ASSERT_OK(Report("c1", first.workload.id, WorkloadState::kSucceeded));
  EXPECT_EQ(Step().cycle->stats.placed, 0);  // a node is free, but the cluster is unreachable
}

// A cluster stored before this server started is watched from the start: if its agent never
// comes back, it is marked unreachable after the timeout.
TEST_F(ControlPlaneTest, StartWatchesTheStoredClustersForHeartbeats) {
  Cluster c = testing::MakeCluster("c1", 1, 8, "H100-80GB");
  ASSERT_OK(store_.RegisterCluster(c.info, c.nodes));
  ASSERT_OK(plane_.Start());
  Step();
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_THAT(Step().lost_clusters, ElementsAre("c1"));
}

TEST_F(ControlPlaneTest, HeartbeatsKeepAClusterReachableAndAreWrittenCoarsely) {
  Register("c1");
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(std::chrono::seconds(5));
    ASSERT_OK(plane_.Heartbeat(*links_.at("c1")));
    EXPECT_THAT(Step().lost_clusters, IsEmpty());
  }
  ASSERT_OK_AND_ASSIGN(Cluster c, store_.GetCluster("c1"));
  EXPECT_EQ(c.state, ClusterState::kReady);
  ASSERT_TRUE(c.last_heartbeat.has_value());
  // Written at most every 10 s: the last write is within 10 s of now, not necessarily now.
  EXPECT_LE(clock_.Now() - *c.last_heartbeat, std::chrono::seconds(10));
}

TEST_F(ControlPlaneTest, WithoutLeadershipNothingIsPlaced) {
  Register("c1");
  ASSERT_OK(Submit(User("acme"), Job()));
  leader_.grant = false;
  StepResult step = Step();
  EXPECT_FALSE(step.leading);
  EXPECT_FALSE(step.cycle.has_value());
  leader_.grant = true;
  step = Step();
  EXPECT_TRUE(step.leading);
  EXPECT_EQ(step.cycle->stats.placed, 1);
}

TEST_F(ControlPlaneTest, LosingLeadershipStopsScheduling) {
  Register("c1");
  Step();
  leader_.grant = false;
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_OK(Submit(User("acme"), Job()));
  StepResult step = Step();
  EXPECT_FALSE(step.leading);
  EXPECT_FALSE(step.cycle.has_value());
}

TEST_F(ControlPlaneTest, ARegisteringAgentGetsItsWorkBackAndStopsWhatItMustNotRun) {
  std::shared_ptr<FakeChannel> first = Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult kept, Submit(User("acme"), Job()));
  Step();
  ASSERT_OK_AND_ASSIGN(SubmitResult stray, Submit(User("acme"), Job()));
  ASSERT_OK(plane_.Cancel(User("acme"), stray.workload.id, ""));  // ended while pending

  AgentReport running{kept.workload.id, WorkloadState::kRunning, 0, "", std::nullopt};
  AgentReport unknown{stray.workload.id, WorkloadState::kRunning, 0, "", std::nullopt};
  std::shared_ptr<FakeChannel> second = Register("c1", 1, {running, unknown});
  EXPECT_TRUE(first->closed);  // the newer connection took over
  EXPECT_THAT(second->assigned, ElementsAre(kept.workload.id));
  EXPECT_THAT(second->cancelled, ElementsAre(stray.workload.id));
  ASSERT_OK_AND_ASSIGN(Workload w, store_.Get(kept.workload.id));
  EXPECT_EQ(w.state, WorkloadState::kRunning);  // what it reported while away was applied
}

TEST_F(ControlPlaneTest, ExplainSaysWhyPendingWorkWaits) {
  Register("c1");
  Step();
  ASSERT_OK_AND_ASSIGN(SubmitResult never, Submit(User("acme"), Job("acme", 16)));
  ASSERT_OK_AND_ASSIGN(Explanation e, plane_.Explain(User("acme"), never.workload.id));
  EXPECT_TRUE(e.never_fits);
  EXPECT_TRUE(e.fits_now_on.empty());

  ASSERT_OK_AND_ASSIGN(SubmitResult fits, Submit(User("acme"), Job("acme", 1)));
  ASSERT_OK_AND_ASSIGN(Explanation f, plane_.Explain(User("acme"), fits.workload.id));
  EXPECT_EQ(f.fits_now_on, "c1");
}

TEST_F(ControlPlaneTest, TenancyFollowsTheRoles) {
  EXPECT_THAT(plane_.CreateTenant(User("acme"), Tenant{"x", "", {}}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  ASSERT_OK_AND_ASSIGN(Tenant t, plane_.CreateTenant(Admin(), Tenant{"x", "", {}}));
  EXPECT_EQ(t.display_name, "x");
  ASSERT_OK_AND_ASSIGN(std::vector<Tenant> seen, plane_.ListTenants(User("acme")));
  ASSERT_THAT(seen, SizeIs(1));
  EXPECT_EQ(seen[0].name, "acme");

  auth::Principal tenant_admin{"carol", auth::Role::kTenantAdmin, "acme", ""};
  EXPECT_OK(plane_.CreateProject(tenant_admin, Project{"acme", "q", {}}));
  EXPECT_THAT(plane_.CreateProject(tenant_admin, Project{"other", "q", {}}),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_OK(plane_.CreateToken(
      tenant_admin,
      TokenRequest{
          .subject = "ci", .role = auth::Role::kTenantUser, .tenant = "acme", .cluster = ""}));
  EXPECT_THAT(
      plane_.CreateToken(
          tenant_admin,
          TokenRequest{.subject = "x", .role = auth::Role::kAgent, .tenant = "", .cluster = "c1"}),
      StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.CreateToken(Admin(), TokenRequest{.subject = "x",
                                                       .role = auth::Role::kTenantUser,
                                                       .tenant = "acme",
                                                       .cluster = "c1"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ControlPlaneTest, ProjectsAndTenantsAreDeletedByTheirAdminsOnly) {
  auth::Principal acme_admin{"carol", auth::Role::kTenantAdmin, "acme", ""};
  auth::Principal other_admin{"dave", auth::Role::kTenantAdmin, "other", ""};
  ASSERT_OK(plane_.CreateProject(acme_admin, Project{"acme", "scratch", {}}));

  EXPECT_THAT(plane_.DeleteProject(User("acme"), "acme", "scratch"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // Another tenant's project is as unknown as one that does not exist.
  EXPECT_THAT(plane_.DeleteProject(other_admin, "acme", "scratch"),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(plane_.DeleteProject(acme_admin, "acme", "Bad Name"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(plane_.DeleteProject(acme_admin, "acme", "scratch"));
  EXPECT_THAT(plane_.DeleteProject(acme_admin, "acme", "scratch"),
              StatusIs(absl::StatusCode::kNotFound));

  // A project work was submitted to stays.
  ASSERT_OK(Submit(User("acme"), Job()));
  EXPECT_THAT(plane_.DeleteProject(acme_admin, "acme", "p"),
              StatusIs(absl::StatusCode::kFailedPrecondition));

  EXPECT_THAT(plane_.DeleteTenant(acme_admin, "other"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.DeleteTenant(Admin(), "other"),
              StatusIs(absl::StatusCode::kFailedPrecondition));  // it has a project
  ASSERT_OK(plane_.DeleteProject(other_admin, "other", "p"));
  ASSERT_OK(plane_.DeleteTenant(Admin(), "other"));
  ASSERT_OK_AND_ASSIGN(std::vector<Tenant> left, plane_.ListTenants(Admin()));
  ASSERT_THAT(left, SizeIs(1));
  EXPECT_EQ(left[0].name, "acme");
}

TEST_F(ControlPlaneTest, RevokingATokenEndsItsUseAndItsAgentConnectionAtOnce) {
  auth::Principal tenant_admin{"carol", auth::Role::kTenantAdmin, "acme", ""};
  const auto token = [&](const auth::Principal& by, const TokenRequest& request) {
    absl::StatusOr<CreatedToken> made = plane_.CreateToken(by, request);
    EXPECT_OK(made);
    return made.ok() ? *made : CreatedToken{};
  };
  const CreatedToken ci =
      token(tenant_admin,
            {.subject = "ci", .role = auth::Role::kTenantUser, .tenant = "acme", .cluster = ""});
  const CreatedToken rival = token(
      Admin(), {.subject = "x", .role = auth::Role::kTenantUser, .tenant = "other", .cluster = ""});
  const CreatedToken agent = token(
      Admin(), {.subject = "agent-c1", .role = auth::Role::kAgent, .tenant = "", .cluster = "c1"});
  EXPECT_GT(ci.id, 0);

  // Who may: a tenant's admin its own tenant's; another tenant's token is as unknown as none.
  EXPECT_THAT(plane_.RevokeToken(User("acme"), ci.id),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.RevokeToken(tenant_admin, rival.id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(plane_.RevokeToken(tenant_admin, agent.id), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(plane_.RevokeToken(Admin(), 0), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_OK(store_.LookupToken(auth::HashToken(rival.secret)));

  ASSERT_OK(plane_.RevokeToken(tenant_admin, ci.id));
  EXPECT_THAT(store_.LookupToken(auth::HashToken(ci.secret)),
              StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK(plane_.RevokeToken(tenant_admin, ci.id));  // again: nothing more to do

  // An agent connection registered with a token is closed when the token is revoked; one
  // registered with another credential stays.
  auto channel = std::make_shared<FakeChannel>();
  auth::Principal agent_who = AgentOf("c1");
  agent_who.token_id = agent.id;
  Cluster c1 = testing::MakeCluster("c1", 1, 8, "H100-80GB");
  ASSERT_OK(plane_.RegisterAgent(agent_who, c1.info, c1.nodes, {}, channel));
  std::shared_ptr<FakeChannel> other = Register("c2");
  ASSERT_OK(plane_.RevokeToken(Admin(), agent.id));
  EXPECT_TRUE(channel->closed);
  EXPECT_THAT(channel->close_reasons, ElementsAre(AgentChannel::CloseReason::kRevoked));
  EXPECT_FALSE(other->closed);
}

TEST_F(ControlPlaneTest, TenantAdminsManageTheirOwnMembersAndGrantNoRoleAboveTheirOwn) {
  using auth::Role;
  const auth::Principal acme_admin{
      .subject = "carol", .role = Role::kTenantAdmin, .tenant = "acme"};
  const auth::Principal p_admin{
      .subject = "pat", .role = Role::kTenantAdmin, .tenant = "acme", .project = "p"};
  const auto code = [](const auto& result) { return result.status().code(); };

  // Inside their scope, up to their own role.
  ASSERT_OK(plane_.SetRoleBinding(acme_admin, {"bob", Role::kTenantUser, "acme", ""}));
  ASSERT_OK(plane_.SetRoleBinding(acme_admin, {"ann", Role::kTenantAdmin, "acme", "p"}));
  ASSERT_OK(plane_.SetRoleBinding(p_admin, {"dan", Role::kViewer, "acme", "p"}));
  ASSERT_OK(plane_.SetRoleBinding(Admin(), {"fin", Role::kViewer, "", ""}));
  // Above their role, outside their scope, or without tenancy.admin: refused, nothing stored.
  EXPECT_EQ(code(plane_.SetRoleBinding(acme_admin, {"eve", Role::kPlatformAdmin, "", ""})),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(code(plane_.SetRoleBinding(acme_admin, {"eve", Role::kViewer, "other", ""})),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(code(plane_.SetRoleBinding(acme_admin, {"eve", Role::kViewer, "", ""})),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(code(plane_.SetRoleBinding(p_admin, {"eve", Role::kViewer, "acme", ""})),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(code(plane_.SetRoleBinding(User("acme"), {"eve", Role::kViewer, "acme", ""})),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(code(plane_.SetRoleBinding(acme_admin, {"eve", Role::kAgent, "", ""})),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(plane_.SetRoleBinding(acme_admin, {"", Role::kViewer, "acme", ""})),
            absl::StatusCode::kInvalidArgument);

  // Each administrator lists the bindings of its own scope only.
  const auto subjects = [](const std::vector<RoleBinding>& bindings) {
    std::vector<std::string> out;
    out.reserve(bindings.size());
    for (const RoleBinding& b : bindings) out.push_back(b.subject);
    return out;
  };
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> acme, plane_.ListRoleBindings(acme_admin, "", ""));
  EXPECT_THAT(subjects(acme), ElementsAre("bob", "ann", "dan"));
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> p, plane_.ListRoleBindings(p_admin, "acme", ""));
  EXPECT_THAT(subjects(p), ElementsAre("ann", "dan"));
  ASSERT_OK_AND_ASSIGN(std::vector<RoleBinding> all, plane_.ListRoleBindings(Admin(), "", ""));
  EXPECT_THAT(subjects(all), ElementsAre("fin", "bob", "ann", "dan"));
  EXPECT_EQ(code(plane_.ListRoleBindings(acme_admin, "other", "")), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(plane_.ListRoleBindings(User("acme"), "", "")),
            absl::StatusCode::kPermissionDenied);

  // A member's tokens follow its binding: none above it; lowered with it; revoked with it.
  EXPECT_EQ(code(plane_.CreateToken(
                acme_admin, {.subject = "bob", .role = Role::kTenantAdmin, .tenant = "acme"})),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_OK_AND_ASSIGN(CreatedToken bob, plane_.CreateToken(acme_admin, {.subject = "bob",
                                                                         .role = Role::kTenantUser,
                                                                         .tenant = "acme"}));
  ASSERT_OK_AND_ASSIGN(BindingChange lowered,
                       plane_.SetRoleBinding(acme_admin, {"bob", Role::kViewer, "acme", ""}));
  EXPECT_THAT(lowered.tokens, ElementsAre(bob.id));
  ASSERT_OK_AND_ASSIGN(TokenRecord as_viewer, store_.LookupToken(auth::HashToken(bob.secret)));
  EXPECT_EQ(as_viewer.role, Role::kViewer);

  // Removing: only inside the caller's scope (another scope's binding is as absent as none).
  EXPECT_EQ(code(plane_.DeleteRoleBinding(p_admin, "bob", "acme", "")),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(code(plane_.DeleteRoleBinding(acme_admin, "fin", "", "")), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(plane_.DeleteRoleBinding(Viewer("acme"), "bob", "acme", "")),
            absl::StatusCode::kPermissionDenied);
  ASSERT_OK_AND_ASSIGN(BindingChange removed,
                       plane_.DeleteRoleBinding(acme_admin, "bob", "acme", ""));
  EXPECT_THAT(removed.tokens, ElementsAre(bob.id));
  EXPECT_EQ(code(store_.LookupToken(auth::HashToken(bob.secret))), absl::StatusCode::kNotFound);
  EXPECT_EQ(code(plane_.DeleteRoleBinding(acme_admin, "bob", "acme", "")),
            absl::StatusCode::kNotFound);
}

TEST_F(ControlPlaneTest, ADeletedClusterIsForgottenByItsRegistryAndOffersNothing) {
  std::shared_ptr<FakeChannel> c1 = Register("c1");
  std::shared_ptr<FakeChannel> c2 = Register("c2");
  EXPECT_EQ(plane_.DeleteCluster(User("acme"), "c1").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(plane_.DeleteCluster(Admin(), "c1").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(plane_.DeleteCluster(Admin(), "-bad").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(c1->closed);

  ASSERT_OK(plane_.Cordon(Admin(), "c1", "", true));
  ASSERT_OK(plane_.DeleteCluster(Admin(), "c1"));
  // Its connection ends; the other cluster's stays.
  EXPECT_THAT(c1->close_reasons, ElementsAre(AgentChannel::CloseReason::kRevoked));
  EXPECT_FALSE(c2->closed);
  EXPECT_EQ(agents_.connected(), 1);
  // The scheduler has nothing there: work that only c1 could hold does not fit.
  Step();
  std::shared_ptr<const Pool> pool = scheduler_.Snapshot();
  const ClusterSlots* gone = pool->FindCluster("c1");
  if (gone != nullptr) {
    EXPECT_TRUE(gone->nodes.empty());
    EXPECT_EQ(gone->state, ClusterState::kUnreachable);
  }
  ASSERT_NE(pool->FindCluster("c2"), nullptr);
  EXPECT_FALSE(pool->FindCluster("c2")->nodes.empty());
  // Never reported silent: nothing waits for its agent any more.
  clock_.Advance(std::chrono::hours(1));
  EXPECT_THAT(agents_.TakeTimedOut(clock_.Monotonic(), std::chrono::seconds(30)),
              ElementsAre("c2"));
  EXPECT_EQ(plane_.DeleteCluster(Admin(), "c1").code(), absl::StatusCode::kNotFound);
}

TEST_F(ControlPlaneTest, TokensExpireByDefaultAndAreListedToTheirAdministratorsOnly) {
  const auth::Principal acme_admin{
      .subject = "carol", .role = auth::Role::kTenantAdmin, .tenant = "acme"};
  const Timestamp now = clock_.Now();
  ASSERT_OK_AND_ASSIGN(
      CreatedToken user,
      plane_.CreateToken(acme_admin,
                         {.subject = "ci", .role = auth::Role::kTenantUser, .tenant = "acme"}));
  ASSERT_TRUE(user.expire_time.has_value());
  EXPECT_EQ(*user.expire_time, now + std::chrono::hours(24 * 90));  // the default
  ASSERT_OK_AND_ASSIGN(CreatedToken agent, plane_.CreateToken(Admin(), {.subject = "agent-c1",
                                                                        .role = auth::Role::kAgent,
                                                                        .cluster = "c1"}));
  EXPECT_FALSE(agent.expire_time.has_value());
  TokenRequest brief{.subject = "brief", .role = auth::Role::kViewer, .tenant = "acme"};
  brief.ttl = std::chrono::seconds(60);
  ASSERT_OK_AND_ASSIGN(CreatedToken short_lived, plane_.CreateToken(acme_admin, brief));
  for (std::chrono::seconds bad : {std::chrono::seconds(0), std::chrono::seconds(-5),
                                   std::chrono::seconds(std::chrono::hours(24 * 400))}) {
    brief.ttl = bad;
    EXPECT_THAT(plane_.CreateToken(acme_admin, brief),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ttl")));
  }

  // It authenticates until it expires.
  EXPECT_OK(store_.LookupToken(auth::HashToken(short_lived.secret)));
  clock_.Advance(std::chrono::seconds(61));
  EXPECT_THAT(store_.LookupToken(auth::HashToken(short_lived.secret)),
              StatusIs(absl::StatusCode::kNotFound));

  // Its administrators list it (no secret in a TokenRecord); others do not see it.
  ASSERT_OK_AND_ASSIGN(std::vector<TokenRecord> mine, plane_.ListTokens(acme_admin, "", ""));
  ASSERT_THAT(mine, SizeIs(2));
  EXPECT_EQ(mine[0].subject, "ci");
  ASSERT_TRUE(mine[0].last_used_time.has_value() == false);
  ASSERT_OK_AND_ASSIGN(std::vector<TokenRecord> all, plane_.ListTokens(Admin(), "", ""));
  EXPECT_THAT(all, SizeIs(3));
  EXPECT_THAT(plane_.ListTokens(User("acme"), "acme", ""),
              StatusIs(absl::StatusCode::kPermissionDenied));
  const auth::Principal other_admin{
      .subject = "dave", .role = auth::Role::kTenantAdmin, .tenant = "other"};
  EXPECT_THAT(plane_.ListTokens(other_admin, "acme", ""), StatusIs(absl::StatusCode::kNotFound));
  ASSERT_OK_AND_ASSIGN(std::vector<TokenRecord> theirs, plane_.ListTokens(other_admin, "", ""));
  EXPECT_THAT(theirs, IsEmpty());
}

// ---- The pool --------------------------------------------------------------------------------

TEST_F(ControlPlaneTest, ListClustersShowsEveryClusterWithTheSchedulersView) {
  Register("c1", 2);
  Register("c2");
  ASSERT_OK(Submit(User("acme"), Job("acme", 8)));
  Step();

  ASSERT_OK_AND_ASSIGN(ClusterListing bare, plane_.ListClusters(Viewer("acme"), false));
  ASSERT_THAT(bare.clusters, SizeIs(2));
  EXPECT_EQ(bare.clusters[0].info.name, "c1");
  EXPECT_EQ(bare.clusters[1].info.name, "c2");
  EXPECT_THAT(bare.clusters[0].nodes, IsEmpty()) << "nodes only when asked";
  ASSERT_NE(bare.pool, nullptr);

  ASSERT_OK_AND_ASSIGN(ClusterListing full, plane_.ListClusters(User("other"), true));
  ASSERT_THAT(full.clusters, SizeIs(2));
  EXPECT_THAT(full.clusters[0].nodes, SizeIs(2));
  EXPECT_THAT(full.clusters[1].nodes, SizeIs(1));
  // The pool is the scheduler's latest: the 8 GPUs placed are taken.
  ASSERT_NE(full.pool, nullptr);
  uint32_t total = 0, free = 0;
  for (const char* name : {"c1", "c2"}) {
    const ClusterSlots* slots = full.pool->FindCluster(name);
    ASSERT_NE(slots, nullptr) << name;
    const ClusterCapacity capacity = Pool::CapacityOf(*slots);
    total += capacity.total;
    free += capacity.free;
  }
  EXPECT_EQ(total, 24u);
  EXPECT_EQ(free, 16u);
}

TEST_F(ControlPlaneTest, GetClusterFindsOneByNameWithItsNodes) {
  Register("c1", 2);
  ASSERT_OK_AND_ASSIGN(ClusterListing got, plane_.GetCluster(Viewer("acme"), "c1"));
  ASSERT_THAT(got.clusters, SizeIs(1));
  EXPECT_EQ(got.clusters[0].info.name, "c1");
  EXPECT_EQ(got.clusters[0].state, ClusterState::kReady);
  EXPECT_THAT(got.clusters[0].nodes, SizeIs(2));
  ASSERT_NE(got.pool, nullptr);

  EXPECT_THAT(plane_.GetCluster(Viewer("acme"), "nope"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(plane_.GetCluster(Viewer("acme"), "Not A Name"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(plane_.GetCluster(Viewer("acme"), std::string("c1\0x", 4)),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ControlPlaneTest, AgentsMayNotReadThePool) {
  Register("c1");
  EXPECT_THAT(plane_.ListClusters(AgentOf("c1"), true),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(plane_.GetCluster(AgentOf("c1"), "c1"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

// ---- Agents ----------------------------------------------------------------------------------

// After a MIG repartition (or any change) the agent sends its whole inventory; it replaces the
// stored one, keeps the cluster's epoch, counts as hearing from the agent, and the scheduler
// places on what is there now.
TEST_F(ControlPlaneTest, UpdateInventoryReplacesTheInventoryAndTheSchedulerUsesIt) {
  Register("c1", 1);
  Step();
  ASSERT_OK_AND_ASSIGN(Cluster before, store_.GetCluster("c1"));
  ASSERT_OK_AND_ASSIGN(SubmitResult full, Submit(User("acme"), Job("acme", 8)));
  WorkloadSpec two_nodes = Job("acme", 8);
  two_nodes.replicas = 2;
  ASSERT_OK_AND_ASSIGN(SubmitResult wide, Submit(User("acme"), two_nodes));
  StepResult step = Step();
  ASSERT_TRUE(step.cycle.has_value());
  EXPECT_EQ(step.cycle->stats.placed, 1) << "one node: the 2 x 8 GPU gang waits";

  // The agent reports a second node.
  Cluster grown = testing::MakeCluster("c1", 2, 8, "H100-80GB");
  clock_.Advance(std::chrono::seconds(20));
  const int wakes = wakes_;
  ASSERT_OK(plane_.UpdateInventory(*links_.at("c1"), grown.nodes));
  EXPECT_GT(wakes_, wakes);
  ASSERT_OK_AND_ASSIGN(Cluster after, store_.GetCluster("c1"));
  EXPECT_THAT(after.nodes, SizeIs(2));
  EXPECT_EQ(after.epoch, before.epoch) << "an inventory update does not fence the agent";
  // Heard from: 20 s + 20 s since registration is past the 30 s timeout, 20 s since the update
  // is not.
  clock_.Advance(std::chrono::seconds(20));
  step = Step();
  EXPECT_THAT(step.lost_clusters, IsEmpty());
  ASSERT_TRUE(step.cycle.has_value());
  EXPECT_EQ(step.cycle->stats.placed, 0) << "the first node is still full";
  ASSERT_OK(Report("c1", full.workload.id, WorkloadState::kRunning));
  ASSERT_OK(Report("c1", full.workload.id, WorkloadState::kSucceeded));
  step = Step();
  ASSERT_TRUE(step.cycle.has_value());
  EXPECT_EQ(step.cycle->stats.placed, 1);
  ASSERT_OK_AND_ASSIGN(Workload placed, store_.Get(wide.workload.id));
  EXPECT_EQ(placed.state, WorkloadState::kPlaced);
  ASSERT_THAT(placed.assignment.replicas, SizeIs(2));
}

TEST_F(ControlPlaneTest, ABadInventoryUpdateIsRefusedAndTheStoredOneKept) {
  Register("c1", 2);
  Cluster bad = testing::MakeCluster("c1", 1, 8, "H100-80GB");
  bad.nodes[0].gpus[1].uuid = bad.nodes[0].gpus[0].uuid;  // duplicate GPU
  EXPECT_THAT(plane_.UpdateInventory(*links_.at("c1"), bad.nodes),
              StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK_AND_ASSIGN(Cluster stored, store_.GetCluster("c1"));
  EXPECT_THAT(stored.nodes, SizeIs(2));
}

// A stream that ends is forgotten: nothing more is sent to it, placements wait for the agent to
// come back, and the cluster is marked unreachable only when the heartbeat timeout passes.
TEST_F(ControlPlaneTest, ADisconnectedAgentGetsNothingMoreAndItsWorkWaitsForItsReturn) {
  std::shared_ptr<FakeChannel> gone = Register("c1");
  EXPECT_EQ(agents_.connected(), 1);
  plane_.AgentDisconnected(*links_.at("c1"));
  EXPECT_EQ(agents_.connected(), 0);

  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  StepResult step = Step();
  ASSERT_TRUE(step.cycle.has_value());
  EXPECT_EQ(step.cycle->stats.placed, 1) << "the cluster is still ready";
  EXPECT_THAT(gone->assigned, IsEmpty());
  ASSERT_OK(plane_.Cancel(User("acme"), r.workload.id, ""));
  EXPECT_THAT(gone->cancelled, IsEmpty());
  clock_.Advance(std::chrono::seconds(29));
  EXPECT_THAT(Step().lost_clusters, IsEmpty()) << "not before the heartbeat timeout";

  // The agent comes back: it gets the placement and the cancel it missed.
  std::shared_ptr<FakeChannel> back = Register("c1");
  EXPECT_THAT(back->assigned, ElementsAre(r.workload.id));
  EXPECT_THAT(back->cancelled, ElementsAre(r.workload.id));
  EXPECT_EQ(agents_.connected(), 1);
}

TEST_F(ControlPlaneTest, ADisconnectedAgentThatNeverReturnsIsMarkedUnreachable) {
  Register("c1");
  Step();
  plane_.AgentDisconnected(*links_.at("c1"));
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_THAT(Step().lost_clusters, ElementsAre("c1"));
  ASSERT_OK_AND_ASSIGN(Cluster c, store_.GetCluster("c1"));
  EXPECT_EQ(c.state, ClusterState::kUnreachable);
}

// An agent frozen past the heartbeat timeout (SIGSTOP) that wakes on the same connection: the
// cluster was marked unreachable and its epoch moved on, so what it says there changes nothing
// and it is told to register again; registering brings the cluster back, at the newer epoch.
TEST_F(ControlPlaneTest, AnAgentFrozenPastTheTimeoutIsFencedUntilItRegistersAgain) {
  std::shared_ptr<FakeChannel> frozen = Register("c1");
  const std::shared_ptr<AgentLink> old_link = links_.at("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  Step();
  ASSERT_THAT(frozen->assigned, ElementsAre(r.workload.id));
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_THAT(Step().lost_clusters, ElementsAre("c1"));
  ASSERT_OK_AND_ASSIGN(Cluster lost, store_.GetCluster("c1"));
  EXPECT_EQ(lost.state, ClusterState::kUnreachable);
  EXPECT_GT(lost.epoch, old_link->epoch());

  // It wakes and speaks on the old connection.
  EXPECT_THAT(plane_.Heartbeat(*old_link), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_THAT(Report("c1", r.workload.id, WorkloadState::kRunning),
              StatusIs(absl::StatusCode::kUnavailable));
  Cluster c = testing::MakeCluster("c1", 1, 8, "H100-80GB");
  EXPECT_THAT(plane_.UpdateInventory(*old_link, c.nodes), StatusIs(absl::StatusCode::kUnavailable));
  // What it said changed nothing; the loss itself ended the work (no retry policy).
  ASSERT_OK_AND_ASSIGN(Workload still, store_.Get(r.workload.id));
  EXPECT_EQ(still.state, WorkloadState::kLost);
  EXPECT_THAT(events_.States(r.workload.id),
              ElementsAre(WorkloadState::kPending, WorkloadState::kPlaced, WorkloadState::kLost));
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_THAT(Step().lost_clusters, IsEmpty()) << "reported once";
  ASSERT_OK_AND_ASSIGN(Cluster still_lost, store_.GetCluster("c1"));
  EXPECT_EQ(still_lost.state, ClusterState::kUnreachable);

  // It registers again, still running the work: the cluster is back, at the newer epoch. The
  // work has no retry policy, so the loss ended it LOST: nothing is re-sent, and the agent is
  // told to stop it.
  AgentReport still_running{r.workload.id, WorkloadState::kRunning, 0, "", std::nullopt};
  std::shared_ptr<FakeChannel> back = Register("c1", 1, {still_running});
  ASSERT_OK_AND_ASSIGN(Cluster ready, store_.GetCluster("c1"));
  EXPECT_EQ(ready.state, ClusterState::kReady);
  EXPECT_EQ(links_.at("c1")->epoch(), lost.epoch);
  EXPECT_THAT(back->assigned, IsEmpty());
  EXPECT_THAT(back->cancelled, ElementsAre(r.workload.id));
  ASSERT_OK_AND_ASSIGN(Workload ended, store_.Get(r.workload.id));
  EXPECT_EQ(ended.state, WorkloadState::kLost);
}

// ---- Failover ---------------------------------------------------------------------------------

// A cluster silent past the timeout is declared lost: its restartable work goes back to PENDING
// with a reason that says where and when, and is placed on another cluster as attempt 2; work
// without a retry policy ends LOST. Each step is published, and the lost cluster's epoch moves
// on.
TEST_F(ControlPlaneTest, ALostClustersRestartableWorkMovesAndTheRestEndsLost) {
  std::shared_ptr<FakeChannel> c1 = Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult moves, Submit(User("acme"), Restartable()));
  ASSERT_OK_AND_ASSIGN(SubmitResult stays, Submit(User("acme"), Job()));
  Step();
  ASSERT_THAT(c1->assigned, ElementsAre(moves.workload.id, stays.workload.id));
  EXPECT_EQ(MustGet(moves.workload.id).attempts, 1u);
  std::shared_ptr<FakeChannel> c2 = Register("c2");

  clock_.Advance(std::chrono::seconds(31));
  Heartbeat("c2");
  StepResult step = Step();
  EXPECT_THAT(step.lost_clusters, ElementsAre("c1"));
  ASSERT_OK_AND_ASSIGN(Cluster lost, store_.GetCluster("c1"));
  EXPECT_EQ(lost.state, ClusterState::kUnreachable);
  EXPECT_EQ(lost.epoch, 2u);

  const Workload ended = MustGet(stays.workload.id);
  EXPECT_EQ(ended.state, WorkloadState::kLost);
  EXPECT_TRUE(ended.end_time.has_value());
  EXPECT_THAT(events_.States(stays.workload.id),
              ElementsAre(WorkloadState::kPending, WorkloadState::kPlaced, WorkloadState::kLost));

  // The same step placed it again, on c2.
  const Workload moved = MustGet(moves.workload.id);
  EXPECT_EQ(moved.state, WorkloadState::kPlaced);
  EXPECT_EQ(moved.assignment.cluster, "c2");
  EXPECT_EQ(moved.attempts, 2u);
  EXPECT_THAT(c2->assigned, ElementsAre(moves.workload.id));
  EXPECT_THAT(events_.States(moves.workload.id),
              ElementsAre(WorkloadState::kPending, WorkloadState::kPlaced, WorkloadState::kPending,
                          WorkloadState::kPlaced));
}

TEST_F(ControlPlaneTest, ARequeuedWorkloadWaitsWithAReasonNamingTheLoss) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Restartable(2)));
  Step();
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_THAT(Step().lost_clusters, ElementsAre("c1"));  // nowhere else to go
  const Workload w = MustGet(r.workload.id);
  EXPECT_EQ(w.state, WorkloadState::kAdmitted);
  // The scheduler's judgement (nothing fits now) replaces the loss's reason in a later cycle;
  // the event the loss published carries the loss's.
  const auto requeue =
      std::find_if(events_.events.begin(), events_.events.end(), [&](const WorkloadEvent& e) {
        return e.workload.id == r.workload.id && e.from == WorkloadState::kPlaced &&
               e.to == WorkloadState::kPending;
      });
  ASSERT_NE(requeue, events_.events.end());
  const PendingReason& why = requeue->workload.pending_reason;
  EXPECT_EQ(why.code, ReasonCode::kClusterLost);
  EXPECT_EQ(why.Text(figure::kCluster), "c1");
  EXPECT_EQ(why.Int(figure::kAttempt), 1);
  EXPECT_EQ(why.Int(figure::kMaxAttempts), 2);
}

TEST_F(ControlPlaneTest, WorkOnItsLastAttemptEndsLostInsteadOfMoving) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Restartable(1)));
  Step();
  clock_.Advance(std::chrono::seconds(31));
  Step();
  EXPECT_EQ(MustGet(r.workload.id).state, WorkloadState::kLost);
}

TEST_F(ControlPlaneTest, ACancelPendingWhenTheClusterIsLostEndsCancelled) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Restartable()));
  Step();
  ASSERT_OK(plane_.Cancel(User("acme"), r.workload.id, "no longer needed"));
  clock_.Advance(std::chrono::seconds(31));
  Step();
  EXPECT_EQ(MustGet(r.workload.id).state, WorkloadState::kCancelled);
}

// A report about an earlier attempt (the workload was moved away and placed on this cluster
// again) must not move the current attempt; one about the current attempt does.
TEST_F(ControlPlaneTest, AReportAboutAnEarlierAttemptChangesNothing) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Restartable()));
  Step();
  clock_.Advance(std::chrono::seconds(31));
  Step();
  Register("c1");  // back, and the only place for it
  Step();
  const Workload again = MustGet(r.workload.id);
  ASSERT_EQ(again.state, WorkloadState::kPlaced);
  ASSERT_EQ(again.attempts, 2u);

  ASSERT_OK(ReportAttempt("c1", r.workload.id, WorkloadState::kFailed, 1));
  EXPECT_EQ(MustGet(r.workload.id).state, WorkloadState::kPlaced);
  ASSERT_OK(ReportAttempt("c1", r.workload.id, WorkloadState::kRunning, 2));
  EXPECT_EQ(MustGet(r.workload.id).state, WorkloadState::kRunning);
}

// An agent whose lease ran out stopped its restartable work and says so (LOST) before the
// server declared the cluster lost: the attempt ends as a loss (back to PENDING), the cluster
// stays as it is.
TEST_F(ControlPlaneTest, AnAgentsLeaseStopEndsTheAttemptAsALoss) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult moves, Submit(User("acme"), Restartable()));
  ASSERT_OK_AND_ASSIGN(SubmitResult stays, Submit(User("acme"), Job()));
  Step();
  ASSERT_OK(Report("c1", moves.workload.id, WorkloadState::kRunning));
  ASSERT_OK(ReportAttempt("c1", moves.workload.id, WorkloadState::kLost, 2));  // not its attempt
  EXPECT_EQ(MustGet(moves.workload.id).state, WorkloadState::kRunning);
  ASSERT_OK(ReportAttempt("c1", moves.workload.id, WorkloadState::kLost, 1));
  const Workload w = MustGet(moves.workload.id);
  EXPECT_EQ(w.state, WorkloadState::kPending);
  EXPECT_EQ(w.pending_reason.code, ReasonCode::kClusterLost);
  ASSERT_OK(Report("c1", stays.workload.id, WorkloadState::kLost));
  EXPECT_EQ(MustGet(stays.workload.id).state, WorkloadState::kLost);
  ASSERT_OK_AND_ASSIGN(Cluster c, store_.GetCluster("c1"));
  EXPECT_EQ(c.state, ClusterState::kReady);
  EXPECT_EQ(c.epoch, 1u);
}

// A loss interrupted before its workloads were moved (the cluster is stored unreachable, its
// work still on it) is finished by whichever server next becomes the active scheduler.
TEST_F(ControlPlaneTest, AnInterruptedLossIsFinishedByTheNextLeader) {
  Register("c1");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Restartable()));
  Step();
  ASSERT_OK(store_.SetClusterState("c1", ClusterState::kUnreachable));  // and then it crashed
  ASSERT_EQ(MustGet(r.workload.id).state, WorkloadState::kPlaced);

  Scheduler next_scheduler(&store_, &store_);
  AgentRegistry next_agents(&clock_);
  ControlPlanePorts ports = Ports();
  ports.scheduler = &next_scheduler;
  ports.agents = &next_agents;
  ControlPlane next_plane(ports);
  FakeLeader next_leader;
  ControlLoop next_loop(&next_plane, &next_scheduler, &next_agents, &next_leader, &clock_, nullptr,
                        LoopOptions());
  EXPECT_TRUE(next_loop.RunOnce(clock_.Monotonic()).leading);
  EXPECT_EQ(MustGet(r.workload.id).state, WorkloadState::kAdmitted);  // c1 was its only place
  // Requeued, then admitted again to wait for a cluster.
  const auto requeue =
      std::find_if(events_.events.begin(), events_.events.end(), [&](const WorkloadEvent& e) {
        return e.workload.id == r.workload.id && e.to == WorkloadState::kPending &&
               e.from == WorkloadState::kPlaced;
      });
  ASSERT_NE(requeue, events_.events.end());
  EXPECT_EQ(requeue->workload.pending_reason.code, ReasonCode::kClusterLost);
  EXPECT_EQ(events_.events.back().to, WorkloadState::kAdmitted);
}

// What the loop reported of the pool and the queue (ControlMetrics::PoolState), in order.
class PoolRecorder final : public ControlMetrics {
 public:
  void PoolState(const PoolReport& report) override { reports.push_back(report); }
  std::vector<PoolReport> reports;
};

// The active scheduler reports its pool by cluster and model and its queue by reason after a
// cycle, at most once per pool_report_interval; once it stands by it reports an empty pool, so
// that only the active scheduler's figures are exported.
TEST_F(ControlPlaneTest, TheLoopReportsThePoolAndTheQueueWhileItLeads) {
  Register("c1");  // 8 H100s
  ASSERT_OK(Submit(User("acme"), Job("acme", 1)).status());
  ASSERT_OK(Submit(User("acme"), Job("acme", 16)).status());  // no node has 16
  PoolRecorder recorder;
  FakeLeader leader;
  ControlLoop loop(&plane_, &scheduler_, &agents_, &leader, &clock_, &recorder, LoopOptions());
  ASSERT_TRUE(loop.RunOnce(clock_.Monotonic()).leading);
  ASSERT_EQ(recorder.reports.size(), 1U);
  const PoolReport& first = recorder.reports[0];
  ASSERT_EQ(first.models.size(), 1U);
  EXPECT_EQ(first.models[0].cluster, "c1");
  EXPECT_EQ(first.models[0].model, "H100-80GB");
  EXPECT_EQ(first.models[0].gpus.total, 8U);
  EXPECT_EQ(first.models[0].gpus.allocated, 1U);
  EXPECT_EQ(first.models[0].gpus.free, 7U);
  EXPECT_THAT(first.pending,
              ElementsAre(std::pair<ReasonCode, int64_t>{ReasonCode::kGpuCountUnsatisfiable, 1}));

  loop.RunOnce(clock_.Monotonic());  // within the interval: not again
  EXPECT_EQ(recorder.reports.size(), 1U);
  clock_.Advance(std::chrono::seconds(1));
  loop.RunOnce(clock_.Monotonic());
  EXPECT_EQ(recorder.reports.size(), 2U);

  leader.grant = false;
  clock_.Advance(std::chrono::seconds(1));
  EXPECT_FALSE(loop.RunOnce(clock_.Monotonic()).leading);
  ASSERT_EQ(recorder.reports.size(), 3U);
  EXPECT_THAT(recorder.reports.back().models, IsEmpty());
  EXPECT_THAT(recorder.reports.back().pending, IsEmpty());
}

// A connection that registered at the old epoch while the loss was being declared is closed
// (fenced) so that its agent registers again and learns the new epoch.
TEST_F(ControlPlaneTest, DeclaringALossFencesAConnectionAtTheOldEpoch) {
  std::shared_ptr<FakeChannel> current = Register("c1");
  ASSERT_OK(plane_.LoseCluster("c1", "test"));
  EXPECT_TRUE(current->closed);
  EXPECT_THAT(current->close_reasons, ElementsAre(AgentChannel::CloseReason::kFenced));
  std::shared_ptr<FakeChannel> back = Register("c1");
  EXPECT_THAT(back->registered_epochs, ElementsAre(2u));
  EXPECT_FALSE(back->closed);
}

// An old stream that ends after a newer one took over must not unhook the newer one.
TEST_F(ControlPlaneTest, AnOldStreamEndingLeavesTheNewerConnected) {
  Register("c1");
  const std::shared_ptr<AgentLink> old_link = links_.at("c1");
  std::shared_ptr<FakeChannel> current = Register("c1");
  plane_.AgentDisconnected(*old_link);
  EXPECT_EQ(agents_.connected(), 1);
  ASSERT_OK_AND_ASSIGN(SubmitResult r, Submit(User("acme"), Job()));
  Step();
  EXPECT_THAT(current->assigned, ElementsAre(r.workload.id));
}

// ---- Tenancy ---------------------------------------------------------------------------------

TEST_F(ControlPlaneTest, BootstrapMakesOneAdminTokenOnAnEmptyStore) {
  std::vector<std::string> kept;
  auto keep = [&](const std::string& secret) {
    kept.push_back(secret);
    return absl::OkStatus();
  };
  ASSERT_OK_AND_ASSIGN(bool made, plane_.BootstrapAdminToken(keep));
  EXPECT_TRUE(made);
  ASSERT_THAT(kept, SizeIs(1));
  EXPECT_THAT(store_.CountTokens(), IsOkAndHolds(int64_t{1}));
  // What was kept is the token stored: a platform admin's.
  ASSERT_OK_AND_ASSIGN(TokenRecord record, store_.LookupToken(auth::HashToken(kept[0])));
  EXPECT_EQ(record.role, auth::Role::kPlatformAdmin);
  EXPECT_TRUE(record.tenant.empty());

  // Once there is a token, never again.
  ASSERT_OK_AND_ASSIGN(made, plane_.BootstrapAdminToken(keep));
  EXPECT_FALSE(made);
  EXPECT_THAT(kept, SizeIs(1));
  EXPECT_THAT(store_.CountTokens(), IsOkAndHolds(int64_t{1}));
}

TEST_F(ControlPlaneTest, BootstrapMakesNoTokenWhenOneExists) {
  ASSERT_OK(plane_.CreateToken(
      Admin(),
      TokenRequest{
          .subject = "ci", .role = auth::Role::kTenantUser, .tenant = "acme", .cluster = ""}));
  bool called = false;
  ASSERT_OK_AND_ASSIGN(bool made, plane_.BootstrapAdminToken([&](const std::string&) {
    called = true;
    return absl::OkStatus();
  }));
  EXPECT_FALSE(made);
  EXPECT_FALSE(called);
  EXPECT_THAT(store_.CountTokens(), IsOkAndHolds(int64_t{1}));
}

// The secret is kept before its hash is stored: if it cannot be kept, no token exists that
// nobody could use, and the next start tries again.
TEST_F(ControlPlaneTest, BootstrapStoresNothingWhenTheSecretCannotBeKept) {
  EXPECT_THAT(plane_.BootstrapAdminToken(
                  [](const std::string&) { return absl::PermissionDeniedError("read-only"); }),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(store_.CountTokens(), IsOkAndHolds(int64_t{0}));
  std::string kept;
  ASSERT_OK_AND_ASSIGN(bool made, plane_.BootstrapAdminToken([&](const std::string& secret) {
    kept = secret;
    return absl::OkStatus();
  }));
  EXPECT_TRUE(made);
  EXPECT_OK(store_.LookupToken(auth::HashToken(kept)));
}

}  // namespace
}  // namespace gpufed
