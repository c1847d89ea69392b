// Simulated spot reclaims (docs/agent.md#spot-reclaims-simulated): the schedule's arithmetic, and
// the agent running it on an injected clock against a small real AgentService
// (tests/agent/test_agent_server.h) with the sim backend.

#include "agent/spot_reclaim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/agent.h"
#include "agent/sim_backend.h"
#include "agent/topology.h"
#include "federation/clock.h"
#include "tests/agent/event_collector.h"
#include "tests/agent/test_agent_server.h"
#include "tests/support/status_matchers.h"

namespace gpufed::agent {
namespace {

using ::gpufed::testing::MakeAssignment;
using ::gpufed::testing::StatusesOn;
using ::gpufed::testing::TestAgentServer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Log = TestAgentServer::Log;
using std::chrono::minutes;

// One on-demand node and two spot nodes of four L4s each.
constexpr char kSpotTopology[] = R"(
cluster: {name: test, provider: aws, region: eu-west-1, jurisdiction: eu}
node_groups:
  - name_prefix: od-
    count: 1
    labels: {gpufed.io/capacity-type: on-demand}
    gpus: {count: 4, model: L4}
  - name_prefix: spot-
    count: 2
    labels: {gpufed.io/capacity-type: spot, pool: batch}
    gpus: {count: 4, model: L4}
)";

// ---- The schedule alone -----------------------------------------------------------------------

TEST(SpotReclaimScheduleTest, ReclaimsAreDueEveryPeriodAfterTheOriginAndALateReturnSkipsASlot) {
  const MonotonicTime origin(std::chrono::hours(5));
  const absl::Duration every = absl::Minutes(10);
  EXPECT_EQ(NextSpotReclaim(origin, every, origin), origin + minutes(10));
  EXPECT_EQ(NextSpotReclaim(origin, every, origin - minutes(3)), origin + minutes(10));
  EXPECT_EQ(NextSpotReclaim(origin, every, origin + minutes(9)), origin + minutes(10));
  // Back after 2 minutes: the next slot.
  EXPECT_EQ(NextSpotReclaim(origin, every, origin + minutes(12)), origin + minutes(20));
  // Exactly at a slot: strictly after it, so nodes are never taken the moment they return.
  EXPECT_EQ(NextSpotReclaim(origin, every, origin + minutes(20)), origin + minutes(30));
  // Back late, past the next slot (the server had not acknowledged the stops): that slot is
  // skipped.
  EXPECT_EQ(NextSpotReclaim(origin, every, origin + minutes(21)), origin + minutes(30));
}

TEST(SpotReclaimScheduleTest, ValidatesTheFlags) {
  EXPECT_OK(ValidateSpotReclaimSchedule({}));
  EXPECT_OK(ValidateSpotReclaimSchedule({absl::Minutes(10), absl::Minutes(2)}));
  EXPECT_FALSE(SpotReclaimSchedule{}.enabled());
  EXPECT_TRUE((SpotReclaimSchedule{absl::Minutes(10), absl::Minutes(2)}.enabled()));
  auto message = [](SpotReclaimSchedule s) {
    return std::string(ValidateSpotReclaimSchedule(s).message());
  };
  EXPECT_THAT(message({absl::Minutes(10), absl::ZeroDuration()}),
              HasSubstr("--spot-reclaim-for: must be > 0 and shorter than --spot-reclaim-every"));
  EXPECT_THAT(message({absl::Minutes(10), absl::Minutes(10)}),
              HasSubstr("--spot-reclaim-for: must be > 0 and shorter"));
  EXPECT_THAT(message({absl::ZeroDuration(), absl::Minutes(1)}),
              HasSubstr("--spot-reclaim-for: needs --spot-reclaim-every"));
  EXPECT_THAT(message({-absl::Minutes(1), absl::ZeroDuration()}),
              HasSubstr("--spot-reclaim-every: must be a finite duration >= 0"));
  EXPECT_THAT(message({absl::InfiniteDuration(), absl::Minutes(1)}),
              HasSubstr("--spot-reclaim-every"));
}

TEST(SpotReclaimScheduleTest, SpotNodesAreThoseLabelledSpot) {
  absl::StatusOr<ClusterTopology> topology = ParseClusterTopology(kSpotTopology, "test.yaml");
  ASSERT_OK(topology);
  EXPECT_THAT(SpotNodes(topology->inventory), ElementsAre("spot-01", "spot-02"));
  // Other values, and no label, are not spot.
  v1::Inventory other;
  (*other.add_nodes()->mutable_labels())["gpufed.io/capacity-type"] = "committed";
  other.add_nodes()->set_name("plain");
  (*other.add_nodes()->mutable_labels())["gpufed.io/capacity-type"] = "Spot";
  EXPECT_TRUE(SpotNodes(other).empty());
}

// ---- The agent running it --------------------------------------------------------------------

// A workload of one GPU on `node` that the sim backend runs for an hour.
v1::WorkAssignment OnNode(const std::string& id, const std::string& node) {
  v1::WorkAssignment a = MakeAssignment(id);
  a.mutable_spec()->mutable_estimated_duration()->set_seconds(3600);
  a.mutable_assignment()->set_epoch(7);
  v1::ReplicaAssignment* r = a.mutable_assignment()->mutable_replicas(0);
  r->set_node(node);
  r->set_gpu_uuids(0, absl::StrCat("GPU-test-", node, "-0"));
  return a;
}

v1::ServerMessage Assign(const v1::WorkAssignment& a) {
  v1::ServerMessage m;
  *m.mutable_assign()->add_assignments() = a;
  return m;
}

// The index of the first message on `stream` for which `pred` holds; -1 if none.
int FirstMessage(const TestAgentServer::StreamLog& stream,
                 const std::function<bool(const v1::AgentMessage&)>& pred) {
  for (size_t i = 0; i < stream.messages.size(); ++i) {
    if (pred(stream.messages[i])) return static_cast<int>(i);
  }
  return -1;
}

// The index of the first StatusReport on `stream` holding (id, state); -1 if none.
int StatusMessage(const TestAgentServer::StreamLog& stream, const std::string& id,
                  v1::WorkloadState state) {
  return FirstMessage(stream, [&](const v1::AgentMessage& m) {
    for (const v1::WorkloadStatus& s : m.status().updates()) {
      if (s.workload_id() == id && s.state() == state) return true;
    }
    return false;
  });
}

// The node names of every InventoryUpdate on `stream`, in order.
std::vector<std::vector<std::string>> InventoryUpdates(const TestAgentServer::StreamLog& stream) {
  std::vector<std::vector<std::string>> out;
  for (const v1::AgentMessage& m : stream.messages) {
    if (!m.has_inventory()) continue;
    std::vector<std::string> names;
    for (const v1::Node& n : m.inventory().inventory().nodes()) names.push_back(n.name());
    out.push_back(std::move(names));
  }
  return out;
}

size_t InventoryUpdateCount(const Log& log, size_t stream = 0) {
  return log.streams.size() > stream ? InventoryUpdates(log.streams[stream]).size() : 0;
}

bool Reported(const Log& log, const std::string& id, v1::WorkloadState state, size_t stream = 0) {
  return log.streams.size() > stream && StatusMessage(log.streams[stream], id, state) >= 0;
}

std::string MessageOf(const Log& log, const std::string& id, v1::WorkloadState state) {
  for (const auto& stream : log.streams) {
    for (const v1::WorkloadStatus& s : StatusesOn(stream)) {
      if (s.workload_id() == id && s.state() == state) return s.message();
    }
  }
  return "";
}

// Spot reclaims every 10 minutes for 2, on a FakeClock the test moves.
class SpotReclaimAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TestAgentServer::Start();
    ASSERT_NE(server_, nullptr);
    server_->set_epoch(7);
    server_->set_heartbeat_interval(absl::Milliseconds(50));
  }

  void TearDown() override {
    if (agent_ == nullptr) return;
    // First the server: Shutdown would wait for unacknowledged statuses up to a deadline on the
    // fake clock, which does not move by itself.
    server_->Stop();
    agent_->Shutdown();
    runner_.join();
    agent_.reset();
  }

  void StartAgent() {
    absl::StatusOr<ClusterTopology> topology = ParseClusterTopology(kSpotTopology, "test.yaml");
    ASSERT_OK(topology);
    AgentOptions options;
    options.server_address = server_->address();
    options.token = "tok";
    options.credentials = grpc::InsecureChannelCredentials();  // the test server is plaintext
    options.agent_version = "test";
    options.shutdown_flush_timeout = absl::Milliseconds(200);
    options.initial_backoff = absl::Milliseconds(20);
    options.max_backoff = absl::Milliseconds(200);
    options.status_resend_interval = absl::Seconds(30);
    options.spot_reclaim = {absl::Minutes(10), absl::Minutes(2)};
    options.clock = &clock_;
    auto agent = Agent::Create(
        options, *std::move(topology),
        [](EventCallback cb) -> absl::StatusOr<std::unique_ptr<Backend>> {
          auto sim = SimBackend::Create(std::move(cb));  // real time: the work runs an hour
          if (!sim.ok()) return sim.status();
          return std::unique_ptr<Backend>(std::move(*sim));
        });
    ASSERT_OK(agent);
    agent_ = std::move(*agent);
    runner_ = std::thread([this] { agent_->Run(); });
    // Until it registers, the clock moves in small steps so that a first attempt that fails (a
    // loaded machine) is retried after its backoff.
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!agent_->Stats().registered && absl::Now() < deadline) {
      Advance(std::chrono::milliseconds(5));
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_TRUE(agent_->Stats().registered);
  }

  template <typename D>
  void Advance(D d) {
    clock_.Advance(d);
    agent_->ClockMoved();
  }

  // Runs "on-spot" on spot-01 and "on-demand" on od-01 and waits until both are RUNNING.
  void RunOneOnEachKind() {
    ASSERT_TRUE(server_->Send(Assign(OnNode("on-spot", "spot-01"))));
    ASSERT_TRUE(server_->Send(Assign(OnNode("on-demand", "od-01"))));
    ASSERT_TRUE(server_->WaitFor([](const Log& log) {
      return Reported(log, "on-spot", v1::WORKLOAD_STATE_RUNNING) &&
             Reported(log, "on-demand", v1::WORKLOAD_STATE_RUNNING);
    }));
  }

  FakeClock clock_;
  std::unique_ptr<TestAgentServer> server_;
  std::unique_ptr<Agent> agent_;
  std::thread runner_;
};

// At each reclaim the agent reports the inventory without its spot nodes, then stops the work
// on them (the server hears the loss of the node first, so it takes the stop for its eviction);
// on-demand work runs on. After the reclaim's duration the nodes are reported again, and work
// placed on them meanwhile (the server placed it before it heard) starts only then.
TEST_F(SpotReclaimAgentTest, TakesTheSpotNodesOnScheduleStopsTheirWorkAndBringsThemBack) {
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_NO_FATAL_FAILURE(RunOneOnEachKind());

  // Not yet due.
  Advance(minutes(9));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(InventoryUpdateCount(server_->Snapshot()), 0u);
  EXPECT_EQ(agent_->Stats().spot_reclaims, 0u);

  Advance(minutes(1));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "on-spot", v1::WORKLOAD_STATE_CANCELLED); }));
  {
    const Log log = server_->Snapshot();
    const auto& stream = log.streams[0];
    ASSERT_THAT(InventoryUpdates(stream), ElementsAre(ElementsAre("od-01")));
    const int update =
        FirstMessage(stream, [](const v1::AgentMessage& m) { return m.has_inventory(); });
    EXPECT_LT(update, StatusMessage(stream, "on-spot", v1::WORKLOAD_STATE_CANCELLED))
        << "the server must hear of the node before the stop";
    EXPECT_EQ(MessageOf(log, "on-spot", v1::WORKLOAD_STATE_CANCELLED),
              "stopped: its spot node spot-01 was reclaimed by the provider");
    EXPECT_FALSE(Reported(log, "on-demand", v1::WORKLOAD_STATE_CANCELLED));
  }
  AgentStats stats = agent_->Stats();
  EXPECT_EQ(stats.spot_reclaims, 1u);
  EXPECT_EQ(stats.spot_reclaim_stops, 1u);
  EXPECT_EQ(stats.spot_nodes_away, 2u);
  EXPECT_EQ(agent_->Inventory().nodes_size(), 1);

  // Placed on a spot node before the server heard: held, not started. One of them the server
  // cancels (its eviction), which ends it at once.
  ASSERT_TRUE(server_->Send(Assign(OnNode("late", "spot-02"))));
  ASSERT_TRUE(server_->Send(Assign(OnNode("evicted", "spot-02"))));
  v1::ServerMessage cancel;
  cancel.mutable_cancel()->add_workload_ids("evicted");
  ASSERT_TRUE(server_->Send(cancel));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "evicted", v1::WORKLOAD_STATE_CANCELLED); }));
  {
    const Log log = server_->Snapshot();
    EXPECT_EQ(MessageOf(log, "evicted", v1::WORKLOAD_STATE_CANCELLED),
              "cancelled before it started: its spot node was away");
    EXPECT_FALSE(Reported(log, "late", v1::WORKLOAD_STATE_RUNNING));
    EXPECT_FALSE(Reported(log, "evicted", v1::WORKLOAD_STATE_RUNNING));
  }
  EXPECT_EQ(agent_->backend().Active(), 1u) << "only on-demand runs";

  // The nodes come back after two minutes; the held work starts after they are reported.
  Advance(minutes(2));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "late", v1::WORKLOAD_STATE_RUNNING); }));
  {
    const Log log = server_->Snapshot();
    const auto& stream = log.streams[0];
    ASSERT_THAT(InventoryUpdates(stream),
                ElementsAre(ElementsAre("od-01"), ElementsAre("od-01", "spot-01", "spot-02")));
    int second_update = -1;
    for (size_t i = 0; i < stream.messages.size(); ++i) {
      if (stream.messages[i].has_inventory()) second_update = static_cast<int>(i);
    }
    EXPECT_LT(second_update, StatusMessage(stream, "late", v1::WORKLOAD_STATE_RUNNING));
  }
  EXPECT_EQ(agent_->Stats().spot_nodes_away, 0u);
  EXPECT_EQ(agent_->Inventory().nodes_size(), 3);

  // The next one, ten minutes after the first, takes "late" with it.
  Advance(minutes(8));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "late", v1::WORKLOAD_STATE_CANCELLED); }));
  stats = agent_->Stats();
  EXPECT_EQ(stats.spot_reclaims, 2u);
  EXPECT_EQ(stats.spot_reclaim_stops, 2u);
  EXPECT_FALSE(Reported(server_->Snapshot(), "on-demand", v1::WORKLOAD_STATE_CANCELLED));
}

// The nodes come back only once the server has acknowledged every stop of the reclaim: had they
// come back first, the server could hear of a stop with the node present and take it for a
// user's cancel.
TEST_F(SpotReclaimAgentTest, TheNodesStayAwayUntilTheServerHasAcknowledgedTheStops) {
  server_->set_auto_ack(false);
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_NO_FATAL_FAILURE(RunOneOnEachKind());
  Advance(minutes(10));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "on-spot", v1::WORKLOAD_STATE_CANCELLED); }));
  Advance(minutes(3));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(InventoryUpdateCount(server_->Snapshot()), 1u);
  EXPECT_EQ(agent_->Stats().spot_nodes_away, 2u);

  v1::ServerMessage ack;
  v1::WorkloadStatus* a = ack.mutable_ack()->add_statuses();
  a->set_workload_id("on-spot");
  a->set_state(v1::WORKLOAD_STATE_CANCELLED);
  ASSERT_TRUE(server_->Send(ack));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) { return InventoryUpdateCount(log) == 2; }));
  EXPECT_THAT(InventoryUpdates(server_->Snapshot().streams[0]).back(),
              ElementsAre("od-01", "spot-01", "spot-02"));
  EXPECT_EQ(agent_->Stats().spot_nodes_away, 0u);
}

// A reconnect during a reclaim: Register carries the inventory without the spot nodes and leaves
// out the stopped work, whose end follows in a StatusReport: the server applies Register's
// statuses before it looks at the inventory, so it must evict the work from the missing node
// before it hears the stop.
TEST_F(SpotReclaimAgentTest, ARegisterDuringAReclaimSaysTheStopAfterTheMissingNode) {
  server_->set_auto_ack(false);
  ASSERT_NO_FATAL_FAILURE(StartAgent());
  ASSERT_NO_FATAL_FAILURE(RunOneOnEachKind());
  Advance(minutes(10));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "on-spot", v1::WORKLOAD_STATE_CANCELLED); }));

  const int port = server_->port();
  server_->Stop();
  server_ = TestAgentServer::Start(port);
  ASSERT_NE(server_, nullptr) << "could not rebind port " << port;
  server_->set_epoch(7);
  server_->set_heartbeat_interval(absl::Milliseconds(50));
  server_->set_auto_ack(false);
  // The redial waits out a backoff measured on the fake clock.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (!Reported(server_->Snapshot(), "on-spot", v1::WORKLOAD_STATE_CANCELLED) &&
         absl::Now() < deadline) {
    Advance(std::chrono::milliseconds(20));
    absl::SleepFor(absl::Milliseconds(10));
  }
  const Log log = server_->Snapshot();
  ASSERT_TRUE(Reported(log, "on-spot", v1::WORKLOAD_STATE_CANCELLED));
  const v1::Register& reg = log.streams[0].messages[0].register_();
  std::vector<std::string> nodes;
  for (const v1::Node& n : reg.inventory().nodes()) nodes.push_back(n.name());
  EXPECT_THAT(nodes, ElementsAre("od-01"));
  std::vector<std::string> known;
  for (const v1::WorkloadStatus& s : reg.known_workloads()) known.push_back(s.workload_id());
  EXPECT_THAT(known, ElementsAre("on-demand"));
}

}  // namespace
}  // namespace gpufed::agent
