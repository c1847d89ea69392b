// The agent's protocol loop against a small real AgentService (tests/agent/test_agent_server.h)
// on 127.0.0.1, with the sim backend.

#include "agent/agent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): POSIX mkdtemp

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "agent/sim_backend.h"
#include "agent/topology.h"
#include "federation/clock.h"
#include "tests/agent/event_collector.h"
#include "tests/agent/test_agent_server.h"
#include "tests/support/status_matchers.h"

namespace gpufed::agent {
namespace {

using ::gpufed::testing::CountReports;
using ::gpufed::testing::MakeAssignment;
using ::gpufed::testing::StatusesOn;
using ::gpufed::testing::TestAgentServer;
using Log = TestAgentServer::Log;

// Counts Start calls per workload id, then hands them to the sim backend.
class CountingBackend final : public Backend {
 public:
  struct Counts {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, int> starts ABSL_GUARDED_BY(mu);
    // When > 0, a Start waits (up to 1 s) until this many Starts are in flight, so that a test
    // sees how many the agent runs at once; once reached, the gate stays open.
    int gate ABSL_GUARDED_BY(mu) = 0;
    int in_flight ABSL_GUARDED_BY(mu) = 0;
    int peak ABSL_GUARDED_BY(mu) = 0;
    int Peak() {
      absl::MutexLock lock(&mu);
      return peak;
    }
    std::vector<std::string> repartitioned ABSL_GUARDED_BY(mu);  // GPU uuids, in order
    std::vector<std::string> Repartitioned() {
      absl::MutexLock lock(&mu);
      return repartitioned;
    }
    int Get(const std::string& id) {
      absl::MutexLock lock(&mu);
      auto it = starts.find(id);
      return it == starts.end() ? 0 : it->second;
    }
  };

  CountingBackend(std::unique_ptr<Backend> inner, std::shared_ptr<Counts> counts)
      : inner_(std::move(inner)), counts_(std::move(counts)) {}
  [[nodiscard]] std::string_view name() const override { return "counting-sim"; }
  absl::Status Start(const v1::WorkAssignment& work) override {
    {
      absl::MutexLock lock(&counts_->mu);
      ++counts_->starts[work.workload_id()];
      counts_->peak = std::max(counts_->peak, ++counts_->in_flight);
      auto reached = [this]() ABSL_SHARED_LOCKS_REQUIRED(counts_->mu) {
        return counts_->in_flight >= counts_->gate;  // gate 0: open
      };
      if (counts_->mu.AwaitWithTimeout(absl::Condition(&reached), absl::Seconds(1))) {
        counts_->gate = 0;  // opened once: later Starts go straight through
      }
    }
    absl::Status started = inner_->Start(work);
    absl::MutexLock lock(&counts_->mu);
    --counts_->in_flight;
    return started;
  }
  absl::Status Cancel(std::string_view id) override { return inner_->Cancel(id); }
  absl::Status Repartition(const v1::Repartition& change) override {
    {
      absl::MutexLock lock(&counts_->mu);
      counts_->repartitioned.push_back(change.gpu_uuid());
    }
    return inner_->Repartition(change);
  }
  [[nodiscard]] size_t Active() const override { return inner_->Active(); }
  void Shutdown() override { inner_->Shutdown(); }

 private:
  std::unique_ptr<Backend> inner_;
  std::shared_ptr<Counts> counts_;
};

v1::WorkAssignment SimWork(const std::string& id, absl::Duration d, uint64_t epoch = 7) {
  v1::WorkAssignment a = MakeAssignment(id);
  a.mutable_spec()->mutable_estimated_duration()->set_seconds(absl::ToInt64Seconds(d));
  a.mutable_spec()->mutable_estimated_duration()->set_nanos(
      static_cast<int32_t>(absl::ToInt64Nanoseconds(d % absl::Seconds(1))));
  a.mutable_assignment()->set_epoch(epoch);
  return a;
}

v1::ServerMessage Assign(std::initializer_list<v1::WorkAssignment> work) {
  v1::ServerMessage m;
  for (const v1::WorkAssignment& a : work) *m.mutable_assign()->add_assignments() = a;
  return m;
}

v1::ServerMessage Cancel(std::initializer_list<std::string> ids) {
  v1::ServerMessage m;
  for (const std::string& id : ids) m.mutable_cancel()->add_workload_ids(id);
  return m;
}

v1::ServerMessage Ack(std::initializer_list<std::pair<std::string, v1::WorkloadState>> keys) {
  v1::ServerMessage m;
  for (const auto& [id, state] : keys) {
    v1::WorkloadStatus* s = m.mutable_ack()->add_statuses();
    s->set_workload_id(id);
    s->set_state(state);
  }
  return m;
}

// A status (id, state) arrived in a StatusReport on stream `stream` (-1: any stream).
bool Reported(const Log& log, const std::string& id, v1::WorkloadState state, int stream = -1) {
  for (size_t i = 0; i < log.streams.size(); ++i) {
    if (stream >= 0 && static_cast<int>(i) != stream) continue;
    for (const v1::WorkloadStatus& s : StatusesOn(log.streams[i])) {
      if (s.workload_id() == id && s.state() == state) return true;
    }
  }
  return false;
}

// Stream `i` exists and opened with a Register.
bool BeganWithRegister(const Log& log, size_t i) {
  return log.streams.size() > i && !log.streams[i].messages.empty() &&
         log.streams[i].messages[0].has_register_();
}

// Every stream: seq counts up from 1; Register first; every later message carries `epoch`.
void ExpectWellFormed(const Log& log, uint64_t epoch) {
  for (size_t i = 0; i < log.streams.size(); ++i) {
    const auto& msgs = log.streams[i].messages;
    for (size_t m = 0; m < msgs.size(); ++m) {
      EXPECT_EQ(msgs[m].seq(), m + 1) << "stream " << i << " message " << m;
      if (m == 0) {
        EXPECT_TRUE(msgs[m].has_register_()) << "stream " << i;
      } else {
        EXPECT_FALSE(msgs[m].has_register_()) << "stream " << i << " message " << m;
        EXPECT_EQ(msgs[m].epoch(), epoch) << "stream " << i << " message " << m;
      }
    }
  }
}

// Heartbeats on stream `stream` so far.
int Heartbeats(const Log& log, size_t stream = 0) {
  if (log.streams.size() <= stream) return 0;
  int n = 0;
  for (const auto& m : log.streams[stream].messages) n += m.has_heartbeat() ? 1 : 0;
  return n;
}

// Heartbeats on every stream so far (a first stream that failed on a loaded machine leaves the
// rest on a later one).
int AllHeartbeats(const Log& log) {
  int n = 0;
  for (size_t i = 0; i < log.streams.size(); ++i) n += Heartbeats(log, i);
  return n;
}

// Real time whose wall reading an operator (or NTP) can step; the monotonic reading is the
// machine's. Thread-safe.
class SteppableWallClock final : public Clock {
 public:
  Timestamp Now() const override {
    absl::MutexLock lock(&mu_);
    return std::chrono::system_clock::now() + offset_;
  }
  MonotonicTime Monotonic() const override { return std::chrono::steady_clock::now(); }
  void Step(std::chrono::seconds d) {
    absl::MutexLock lock(&mu_);
    offset_ += d;
  }

 private:
  mutable absl::Mutex mu_;
  std::chrono::seconds offset_ ABSL_GUARDED_BY(mu_){0};
};

class AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = TestAgentServer::Start();
    ASSERT_NE(server_, nullptr);
    server_->set_epoch(7);
    server_->set_heartbeat_interval(absl::Milliseconds(50));
  }

  void TearDown() override { StopAgent(); }

  // `topology_yaml` empty: deploy/topologies/edge-l4.yaml.
  void StartAgent(AgentOptions options = {}, const std::string& topology_yaml = "") {
    absl::StatusOr<ClusterTopology> topology =
        topology_yaml.empty() ? LoadClusterTopology(absl::StrCat(GPUFED_SOURCE_DIR,
                                                                 "/deploy/topologies/edge-l4.yaml"))
                              : ParseClusterTopology(topology_yaml, "test.yaml");
    ASSERT_OK(topology);
    options.server_address = server_->address();
    options.token = "tok-123";
    options.credentials = grpc::InsecureChannelCredentials();  // the test server is plaintext
    options.agent_version = "test";
    options.shutdown_flush_timeout = absl::Milliseconds(200);
    options.initial_backoff = absl::Milliseconds(20);
    options.max_backoff = absl::Milliseconds(200);
    if (options.status_resend_interval == AgentOptions().status_resend_interval) {
      options.status_resend_interval = absl::Milliseconds(200);
    }
    auto counts = counts_;
    auto agent =
        Agent::Create(options, *std::move(topology),
                      [counts](EventCallback cb) -> absl::StatusOr<std::unique_ptr<Backend>> {
                        auto sim = SimBackend::Create(std::move(cb));
                        if (!sim.ok()) return sim.status();
                        return std::make_unique<CountingBackend>(std::move(*sim), counts);
                      });
    ASSERT_OK(agent);
    agent_ = std::move(*agent);
    runner_ = std::thread([this] { agent_->Run(); });
  }

  void StopAgent() {
    if (agent_ == nullptr) return;
    agent_->Shutdown();
    runner_.join();
    agent_.reset();
  }

  // For an agent on fake_clock_: until it registers, moves the clock in steps shorter than the
  // heartbeat interval, so that a first attempt that fails (a loaded machine) is retried after
  // its backoff. False if it has not registered within a minute.
  bool RegisterOnFakeClock() {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (!agent_->Stats().registered && absl::Now() < deadline) {
      fake_clock_.Advance(std::chrono::milliseconds(5));
      agent_->ClockMoved();
      absl::SleepFor(absl::Milliseconds(10));
    }
    return agent_->Stats().registered;
  }

  bool WaitRegistered(size_t stream) {
    return server_->WaitFor([stream](const Log& log) {
      // The agent sends anything after Register only once Registered arrived.
      return BeganWithRegister(log, stream) && log.streams[stream].messages.size() >= 2;
    });
  }

  // Clocks a test may give the agent; members, so that they outlive it even when a test
  // returns early (TearDown stops the agent).
  FakeClock fake_clock_;
  SteppableWallClock wall_clock_;
  std::unique_ptr<TestAgentServer> server_;
  std::shared_ptr<CountingBackend::Counts> counts_ = std::make_shared<CountingBackend::Counts>();
  std::unique_ptr<Agent> agent_;
  std::thread runner_;
};

TEST_F(AgentTest, RegistersWithInventoryTokenAndHeartbeats) {
  StartAgent();
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    if (log.streams.empty()) return false;
    int heartbeats = 0;
    for (const auto& m : log.streams[0].messages) heartbeats += m.has_heartbeat() ? 1 : 0;
    return heartbeats >= 3;
  }));
  const Log log = server_->Snapshot();
  const TestAgentServer::StreamLog& s = log.streams[0];
  EXPECT_EQ(s.authorization, "Bearer tok-123");
  const v1::AgentMessage& first = s.messages[0];
  ASSERT_TRUE(first.has_register_());
  EXPECT_EQ(first.seq(), 1u);
  EXPECT_EQ(first.epoch(), 0u);  // nothing believed before the first registration
  const v1::Register& reg = first.register_();
  EXPECT_EQ(reg.cluster(), "edge-l4");
  EXPECT_EQ(reg.info().provider(), "edge");
  EXPECT_EQ(reg.info().jurisdiction(), "us");
  EXPECT_EQ(reg.agent_version(), "test");
  ASSERT_EQ(reg.inventory().nodes_size(), 2);
  EXPECT_EQ(CountGpus(reg.inventory()), 8);
  EXPECT_EQ(reg.inventory().nodes(0).gpus(0).uuid(), "GPU-edge-l4-edge-01-0");
  EXPECT_EQ(reg.known_workloads_size(), 0);
  ExpectWellFormed(log, 7);
  for (const auto& m : s.messages) {
    if (m.has_heartbeat()) {
      EXPECT_EQ(m.heartbeat().running(), 0u);
    }
  }
  const AgentStats stats = agent_->Stats();
  EXPECT_TRUE(stats.registered);
  EXPECT_EQ(stats.epoch, 7u);
  EXPECT_EQ(stats.registrations, 1u);
}

// Intervals are measured on the monotonic reading: the wall clock stepped an hour back (as NTP
// or an operator may) must not hold heartbeats back for that hour.
TEST_F(AgentTest, AWallClockStepDoesNotStopHeartbeats) {
  AgentOptions options;
  options.clock = &wall_clock_;
  StartAgent(options);
  ASSERT_TRUE(WaitRegistered(0));
  wall_clock_.Step(-std::chrono::hours(1));
  const int before = Heartbeats(server_->Snapshot());
  EXPECT_TRUE(server_->WaitFor([before](const Log& log) { return Heartbeats(log) >= before + 3; }));
}

// Driven by a FakeClock, the agent sends a heartbeat only when the clock has moved by the
// interval the server gave, and notices the move at once when told.
TEST_F(AgentTest, HeartbeatsFollowAnInjectedClock) {
  AgentOptions options;
  options.clock = &fake_clock_;
  StartAgent(options);
  ASSERT_TRUE(RegisterOnFakeClock());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  // The clock moves: heartbeats come. It moves in small steps until one has arrived, since on a
  // loaded machine the agent may arm its first heartbeat only after a single big step.
  while (AllHeartbeats(server_->Snapshot()) == 0 && absl::Now() < deadline) {
    fake_clock_.Advance(std::chrono::milliseconds(10));
    agent_->ClockMoved();
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_GE(AllHeartbeats(server_->Snapshot()), 1);
  absl::SleepFor(absl::Milliseconds(100));  // one that was due with it reaches the server too
  const int seen = AllHeartbeats(server_->Snapshot());
  // The clock stands still: four intervals of real time pass and no further heartbeat comes.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(AllHeartbeats(server_->Snapshot()), seen);
}

// Telemetry (docs/chargeback.md#telemetry): samples of what runs, every interval of the agent's
// clock, go out as one minute once that minute has ended.
TEST_F(AgentTest, SendsEachEndedMinuteOfTelemetryForWhatRuns) {
  AgentOptions options;
  options.clock = &fake_clock_;
  options.telemetry = std::make_shared<SimTelemetry>();
  options.telemetry_interval = absl::Seconds(10);
  StartAgent(options);
  ASSERT_TRUE(RegisterOnFakeClock());
  v1::WorkAssignment work = SimWork("busy", absl::Hours(1));
  work.mutable_spec()->set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  work.set_attempt(3);
  work.mutable_assignment()->mutable_replicas(0)->set_node("edge-01");
  work.mutable_assignment()->mutable_replicas(0)->set_gpu_uuids(0, "GPU-edge-l4-edge-01-0");
  ASSERT_TRUE(server_->Send(Assign({work})));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "busy", v1::WORKLOAD_STATE_RUNNING); }));

  auto minutes = [](const Log& log) {
    std::vector<v1::GpuMinute> out;
    for (const auto& stream : log.streams) {
      for (const v1::AgentMessage& m : stream.messages) {
        for (const v1::GpuMinute& g : m.telemetry().minutes()) out.push_back(g);
      }
    }
    return out;
  };
  // Two minutes of the agent's clock, in steps of the interval.
  for (int i = 0; i < 13 && minutes(server_->Snapshot()).empty(); ++i) {
    fake_clock_.Advance(std::chrono::seconds(10));
    agent_->ClockMoved();
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(server_->WaitFor([&](const Log& log) { return !minutes(log).empty(); }));
  const v1::GpuMinute m = minutes(server_->Snapshot()).front();
  EXPECT_EQ(m.workload_id(), "busy");
  EXPECT_EQ(m.attempt(), 3u);
  EXPECT_EQ(m.gpu_uuid(), "GPU-edge-l4-edge-01-0");
  EXPECT_EQ(m.minute().seconds() % 60, 0);
  EXPECT_GE(m.covered_seconds(), 10u);
  EXPECT_LE(m.covered_seconds(), 60u);
  ASSERT_TRUE(m.has_sm_active());
  EXPECT_GT(m.sm_active(), 0.5);  // training
  EXPECT_TRUE(m.has_gpu_util() && m.has_power_watts() && m.has_fb_used_mib());
  EXPECT_GE(agent_->Stats().telemetry_minutes_sent, 1u);
  ExpectWellFormed(server_->Snapshot(), 7);
}

TEST_F(AgentTest, RunsAssignmentsAndResendsStatusesUntilAcked) {
  server_->set_auto_ack(false);
  StartAgent();
  ASSERT_TRUE(WaitRegistered(0));

  v1::WorkAssignment fail = SimWork("w2", absl::ZeroDuration());
  fail.mutable_spec()->mutable_run()->set_sim_outcome(v1::SIM_OUTCOME_FAIL);
  fail.mutable_spec()->mutable_run()->set_sim_exit_code(3);
  ASSERT_TRUE(server_->Send(
      Assign({SimWork("w1", absl::ZeroDuration()), fail, SimWork("w3", absl::Hours(1))})));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return Reported(log, "w1", v1::WORKLOAD_STATE_SUCCEEDED) &&
           Reported(log, "w2", v1::WORKLOAD_STATE_FAILED) &&
           Reported(log, "w3", v1::WORKLOAD_STATE_RUNNING);
  }));
  {
    const Log log = server_->Snapshot();
    for (const v1::WorkloadStatus& s : StatusesOn(log.streams[0])) {
      if (s.workload_id() == "w2" && s.state() == v1::WORKLOAD_STATE_FAILED) {
        EXPECT_EQ(s.exit_code(), 3);
      }
      EXPECT_EQ(s.epoch(), 7u);
      EXPECT_GT(s.time().seconds(), 0);
    }
  }
  // Nothing acknowledged: the same statuses come again.
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return CountReports(log, "w1", v1::WORKLOAD_STATE_SUCCEEDED) >= 2 &&
           CountReports(log, "w2", v1::WORKLOAD_STATE_FAILED) >= 2 &&
           CountReports(log, "w3", v1::WORKLOAD_STATE_RUNNING) >= 2;
  }));
  // The heartbeat counts the one still running.
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    const auto& msgs = log.streams[0].messages;
    return !msgs.empty() && msgs.back().has_heartbeat() && msgs.back().heartbeat().running() == 1;
  }));

  ASSERT_TRUE(server_->Send(Ack({{"w1", v1::WORKLOAD_STATE_SUCCEEDED},
                                 {"w2", v1::WORKLOAD_STATE_FAILED},
                                 {"w3", v1::WORKLOAD_STATE_RUNNING}})));
  // The agent handles server messages in order, so once the marker's CANCELLED arrives the ack
  // has been applied; from then on the acknowledged statuses must never come again, while the
  // unacknowledged marker keeps coming.
  ASSERT_TRUE(server_->Send(Cancel({"marker"})));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "marker", v1::WORKLOAD_STATE_CANCELLED); }));
  const Log at_ack = server_->Snapshot();
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return CountReports(log, "marker", v1::WORKLOAD_STATE_CANCELLED) >= 3;
  }));
  const Log later = server_->Snapshot();
  for (const auto& [id, state] :
       std::vector<std::pair<std::string, v1::WorkloadState>>{{"w1", v1::WORKLOAD_STATE_SUCCEEDED},
                                                              {"w2", v1::WORKLOAD_STATE_FAILED},
                                                              {"w3", v1::WORKLOAD_STATE_RUNNING}}) {
    EXPECT_EQ(CountReports(later, id, state), CountReports(at_ack, id, state)) << id;
  }
  EXPECT_EQ(agent_->Stats().unacked_statuses, 1u);  // the marker
  ExpectWellFormed(later, 7);
  EXPECT_EQ(counts_->Get("w1"), 1);
  EXPECT_EQ(counts_->Get("marker"), 0);
}

TEST_F(AgentTest, ReconnectsAfterServerRestartAndNeverRunsTwice) {
  StartAgent();  // auto-ack on
  ASSERT_TRUE(WaitRegistered(0));
  ASSERT_TRUE(server_->Send(
      Assign({SimWork("done", absl::ZeroDuration()), SimWork("long", absl::Hours(1)),
              SimWork("to-cancel", absl::Hours(1)), SimWork("ends-offline", absl::Seconds(3))})));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return Reported(log, "done", v1::WORKLOAD_STATE_SUCCEEDED) &&
           Reported(log, "long", v1::WORKLOAD_STATE_RUNNING) &&
           Reported(log, "to-cancel", v1::WORKLOAD_STATE_RUNNING) &&
           Reported(log, "ends-offline", v1::WORKLOAD_STATE_RUNNING);
  }));
  // Let the acks land before the crash.
  const absl::Time acked_by = absl::Now() + absl::Seconds(20);
  while (agent_->Stats().unacked_statuses > 0 && absl::Now() < acked_by) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(agent_->Stats().unacked_statuses, 0u);

  // The server dies; "ends-offline" finishes while it is away.
  const int port = server_->port();
  server_->Stop();
  const absl::Time offline_by = absl::Now() + absl::Seconds(20);
  while (agent_->Stats().unacked_statuses == 0 && absl::Now() < offline_by) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(agent_->Stats().unacked_statuses, 1u);  // ends-offline SUCCEEDED, owed
  EXPECT_FALSE(agent_->Stats().registered);

  server_ = TestAgentServer::Start(port);
  ASSERT_NE(server_, nullptr) << "could not rebind port " << port;
  server_->set_epoch(7);
  server_->set_heartbeat_interval(absl::Milliseconds(50));
  ASSERT_TRUE(WaitRegistered(0));

  {
    const Log log = server_->Snapshot();
    const v1::AgentMessage& first = log.streams[0].messages[0];
    EXPECT_EQ(first.epoch(), 7u);  // the epoch it believed in
    absl::flat_hash_map<std::string, v1::WorkloadState> known;
    for (const v1::WorkloadStatus& s : first.register_().known_workloads()) {
      known[s.workload_id()] = s.state();
      EXPECT_EQ(s.epoch(), 7u);
    }
    EXPECT_EQ(known.size(), 3u);
    EXPECT_EQ(known["long"], v1::WORKLOAD_STATE_RUNNING);
    EXPECT_EQ(known["to-cancel"], v1::WORKLOAD_STATE_RUNNING);
    EXPECT_EQ(known["ends-offline"], v1::WORKLOAD_STATE_SUCCEEDED);
    EXPECT_FALSE(known.contains("done"));  // acknowledged before the crash
  }
  // The owed status is delivered (and acknowledged) on the new stream.
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return Reported(log, "ends-offline", v1::WORKLOAD_STATE_SUCCEEDED, 0);
  }));

  // A server that lost track re-sends assignments; none of them runs again.
  ASSERT_TRUE(
      server_->Send(Assign({SimWork("done", absl::ZeroDuration()), SimWork("long", absl::Hours(1)),
                            SimWork("ends-offline", absl::Seconds(1))})));
  ASSERT_TRUE(server_->Send(Cancel({"to-cancel"})));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return Reported(log, "to-cancel", v1::WORKLOAD_STATE_CANCELLED, 0) &&
           Reported(log, "done", v1::WORKLOAD_STATE_SUCCEEDED, 0);  // ended ones re-reported
  }));
  for (const char* id : {"done", "long", "to-cancel", "ends-offline"}) {
    EXPECT_EQ(counts_->Get(id), 1) << id;
  }
  EXPECT_EQ(agent_->Stats().duplicate_assignments, 3u);
  EXPECT_EQ(agent_->Stats().registrations, 2u);
  const Log log = server_->Snapshot();
  EXPECT_FALSE(Reported(log, "long", v1::WORKLOAD_STATE_SUCCEEDED));
  ExpectWellFormed(log, 7);
}

// Three A100-80GB GPUs on node-01 (the node MakeAssignment uses); GPU 0 is in MIG mode.
constexpr char kMigTopology[] = R"(
cluster: {name: mig-site, provider: onprem, region: r}
nodes:
  - name: node-01
    gpus:
      - {index: 0, model: A100-80GB, uuid: GPU-test-node-01-0, mig_enabled: true,
         mig_layout: [{profile: 3g.40gb, start: 0}, {profile: 3g.40gb, start: 4}]}
      - {index: 1, model: A100-80GB, uuid: GPU-test-node-01-1}
      - {index: 2, model: A100-80GB, uuid: GPU-test-node-01-2}
)";

v1::MigInstance Mig(const std::string& profile, uint32_t start) {
  v1::MigInstance m;
  m.set_profile(profile);
  m.set_start(start);
  return m;
}

// A workload on GPU `gpu` of node-01 (the MIG instance profile@start when a profile is given)
// that first applies `change` (when it names a GPU).
v1::WorkAssignment OnGpu(const std::string& id, uint32_t gpu, const std::string& profile,
                         uint32_t start, const v1::Repartition& change) {
  v1::WorkAssignment a = SimWork(id, absl::Hours(1));
  v1::ReplicaAssignment& r = *a.mutable_assignment()->mutable_replicas(0);
  r.set_gpu_indices(0, gpu);
  r.set_gpu_uuids(0, absl::StrCat("GPU-test-node-01-", gpu));
  if (!profile.empty()) {
    a.mutable_spec()->mutable_per_replica()->set_mig_profile(profile);
    r.set_mig_profile(profile);
    r.set_mig_start(start);
  }
  if (!change.gpu_uuid().empty()) *a.mutable_assignment()->add_repartitions() = change;
  return a;
}

v1::Repartition Change(uint32_t gpu, bool mig_enabled, const std::vector<v1::MigInstance>& layout,
                       const std::string& reason = "") {
  v1::Repartition c;
  c.set_node("node-01");
  c.set_gpu_uuid(absl::StrCat("GPU-test-node-01-", gpu));
  c.set_mig_enabled(mig_enabled);
  for (const v1::MigInstance& m : layout) *c.add_layout() = m;
  c.set_reason(reason);
  return c;
}

// The GPU `uuid` in an inventory (a default Gpu if absent).
v1::Gpu GpuIn(const v1::Inventory& inventory, const std::string& uuid) {
  for (const v1::Node& n : inventory.nodes()) {
    for (const v1::Gpu& g : n.gpus()) {
      if (g.uuid() == uuid) return g;
    }
  }
  return {};
}

// Index in stream `s` of the first message satisfying `pred`; -1 if none.
int FirstMessage(const TestAgentServer::StreamLog& s,
                 const std::function<bool(const v1::AgentMessage&)>& pred) {
  for (size_t i = 0; i < s.messages.size(); ++i) {
    if (pred(s.messages[i])) return static_cast<int>(i);
  }
  return -1;
}

TEST_F(AgentTest, AppliesRepartitionsBeforeStartingAndReportsTheNewInventory) {
  StartAgent({}, kMigTopology);
  ASSERT_TRUE(WaitRegistered(0));
  {
    const Log log = server_->Snapshot();
    const v1::Gpu g0 =
        GpuIn(log.streams[0].messages[0].register_().inventory(), "GPU-test-node-01-0");
    EXPECT_TRUE(g0.mig_enabled());
    EXPECT_EQ(g0.mig_layout_size(), 2);
  }

  // GPU 1 goes into MIG mode with two 1g.10gb and a 2g.20gb; the workload takes 1g.10gb@1.
  const v1::Repartition split = Change(
      1, true, {Mig("1g.10gb", 0), Mig("1g.10gb", 1), Mig("2g.20gb", 2)}, "1g.10gb for split");
  ASSERT_TRUE(server_->Send(Assign({OnGpu("split", 1, "1g.10gb", 1, split)})));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "split", v1::WORKLOAD_STATE_RUNNING); }));
  {
    const Log log = server_->Snapshot();
    const auto& stream = log.streams[0];
    const int update =
        FirstMessage(stream, [](const v1::AgentMessage& m) { return m.has_inventory(); });
    ASSERT_GE(update, 0) << "no InventoryUpdate";
    const int running = FirstMessage(stream, [](const v1::AgentMessage& m) {
      return m.has_status() && m.status().updates_size() > 0 &&
             m.status().updates(0).workload_id() == "split";
    });
    EXPECT_LT(update, running) << "the layout must reach the server before the status";
    const v1::Gpu g1 = GpuIn(stream.messages[update].inventory().inventory(), "GPU-test-node-01-1");
    EXPECT_TRUE(g1.mig_enabled());
    ASSERT_EQ(g1.mig_layout_size(), 3);
    EXPECT_EQ(g1.mig_layout(2).profile(), "2g.20gb");
    EXPECT_EQ(g1.mig_layout(2).start(), 2u);
    // The rest of the inventory is reported whole, unchanged.
    EXPECT_EQ(GpuIn(stream.messages[update].inventory().inventory(), "GPU-test-node-01-0")
                  .mig_layout_size(),
              2);
    EXPECT_EQ(stream.messages[update].epoch(), 7u);
  }
  EXPECT_EQ(agent_->Stats().repartitions_applied, 1u);
  EXPECT_EQ(agent_->Stats().inventory_updates_sent, 1u);
  EXPECT_EQ(counts_->Repartitioned(), std::vector<std::string>{"GPU-test-node-01-1"});

  // The same change again (a second workload on another instance) is already in effect.
  ASSERT_TRUE(server_->Send(Assign({OnGpu("split-2", 1, "1g.10gb", 0, split)})));
  // MIG off on GPU 0, which nothing uses, for a whole-GPU workload.
  ASSERT_TRUE(server_->Send(Assign({OnGpu("whole", 0, "", 0, Change(0, false, {}, "whole"))})));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return Reported(log, "split-2", v1::WORKLOAD_STATE_RUNNING) &&
           Reported(log, "whole", v1::WORKLOAD_STATE_RUNNING);
  }));
  EXPECT_EQ(agent_->Stats().repartitions_applied, 2u);
  EXPECT_FALSE(GpuIn(agent_->Inventory(), "GPU-test-node-01-0").mig_enabled());
  EXPECT_EQ(GpuIn(agent_->Inventory(), "GPU-test-node-01-0").mig_layout_size(), 0);

  // Refused, and the workload FAILED without starting: a change that would take away what
  // running workloads hold, an invalid layout, a GPU the agent does not have.
  ASSERT_TRUE(server_->Send(Assign({
      OnGpu("evict", 1, "", 0, Change(1, true, {Mig("7g.80gb", 0)})),
      OnGpu("bad-layout", 2, "3g.40gb", 2, Change(2, true, {Mig("3g.40gb", 2)})),
      OnGpu("no-gpu", 2, "", 0, Change(9, false, {})),
  })));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return Reported(log, "evict", v1::WORKLOAD_STATE_FAILED) &&
           Reported(log, "bad-layout", v1::WORKLOAD_STATE_FAILED) &&
           Reported(log, "no-gpu", v1::WORKLOAD_STATE_FAILED);
  }));
  {
    absl::flat_hash_map<std::string, std::string> messages;
    for (const v1::WorkloadStatus& s : StatusesOn(server_->Snapshot().streams[0])) {
      messages[s.workload_id()] = s.message();
    }
    EXPECT_THAT(messages["evict"],
                ::testing::HasSubstr("assignment.repartitions[0]: GPU GPU-test-node-01-1 on "
                                     "node node-01 is in use by workload split"));
    EXPECT_EQ(messages["bad-layout"],
              "not started: assignment.repartitions[0].layout: 3g.40gb at slot 2: allowed starts "
              "are 0, 4");
    EXPECT_THAT(messages["no-gpu"], ::testing::HasSubstr("no GPU GPU-test-node-01-9"));
  }
  for (const char* id : {"evict", "bad-layout", "no-gpu"}) EXPECT_EQ(counts_->Get(id), 0) << id;
  EXPECT_EQ(agent_->Stats().repartitions_applied, 2u);
  EXPECT_EQ(GpuIn(agent_->Inventory(), "GPU-test-node-01-1").mig_layout_size(), 3);

  // After a reconnect, Register carries the inventory as it is now.
  const int port = server_->port();
  server_->Stop();
  server_ = TestAgentServer::Start(port);
  ASSERT_NE(server_, nullptr) << "could not rebind port " << port;
  server_->set_epoch(7);
  server_->set_heartbeat_interval(absl::Milliseconds(50));
  ASSERT_TRUE(WaitRegistered(0));
  const Log log = server_->Snapshot();
  const v1::Inventory& reported = log.streams[0].messages[0].register_().inventory();
  EXPECT_EQ(GpuIn(reported, "GPU-test-node-01-1").mig_layout_size(), 3);
  EXPECT_FALSE(GpuIn(reported, "GPU-test-node-01-0").mig_enabled());
  ExpectWellFormed(log, 7);
}

TEST_F(AgentTest, CancelBeforeAssignmentWinsAndStaleEpochsAreRefused) {
  StartAgent();
  ASSERT_TRUE(WaitRegistered(0));
  ASSERT_TRUE(server_->Send(Cancel({"early"})));
  ASSERT_TRUE(server_->Send(
      Assign({SimWork("early", absl::ZeroDuration()), SimWork("stale", absl::ZeroDuration(), 3),
              SimWork("unfenced", absl::ZeroDuration(), 0)})));
  ASSERT_TRUE(server_->Send(Cancel({"marker"})));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return Reported(log, "marker", v1::WORKLOAD_STATE_CANCELLED) &&
           Reported(log, "unfenced", v1::WORKLOAD_STATE_SUCCEEDED);
  }));
  const Log log = server_->Snapshot();
  EXPECT_TRUE(Reported(log, "early", v1::WORKLOAD_STATE_CANCELLED));
  // Fenced: never started, and the server hears why instead of waiting forever.
  EXPECT_TRUE(Reported(log, "stale", v1::WORKLOAD_STATE_FAILED));
  for (const v1::WorkloadStatus& s : StatusesOn(log.streams[0])) {
    if (s.workload_id() == "stale") {
      EXPECT_EQ(s.message(),
                "not started: placed under cluster epoch 3 but the cluster is at epoch 7");
      EXPECT_EQ(s.epoch(), 3u);
    }
  }
  EXPECT_EQ(counts_->Get("early"), 0);
  EXPECT_EQ(counts_->Get("stale"), 0);
  EXPECT_EQ(counts_->Get("unfenced"), 1);  // epoch 0: not fenced
}

TEST_F(AgentTest, RedialsWhenRegisteredNeverComes) {
  server_->set_auto_register(false);
  AgentOptions options;
  options.register_timeout = absl::Milliseconds(300);
  StartAgent(options);
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return log.streams.size() >= 2 && !log.streams[0].open; }));
  EXPECT_FALSE(agent_->Stats().registered);
  server_->set_auto_register(true);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!agent_->Stats().registered && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(agent_->Stats().registered);
}

// The backend's Starts of one batch run side by side, at most parallel_starts at once: a process
// backend waits for each exec, and one at a time capped a cluster at a few hundred starts/s.
TEST_F(AgentTest, StartsABatchInParallelUpToTheLimit) {
  {
    absl::MutexLock lock(&counts_->mu);
    counts_->gate = 4;
  }
  AgentOptions options;
  options.parallel_starts = 4;
  StartAgent(options);
  ASSERT_TRUE(WaitRegistered(0));
  v1::ServerMessage batch;
  for (int i = 0; i < 12; ++i) {
    *batch.mutable_assign()->add_assignments() =
        SimWork(absl::StrCat("p", i), absl::ZeroDuration());
  }
  ASSERT_TRUE(server_->Send(batch));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    absl::flat_hash_set<std::string> done;
    for (const v1::WorkloadStatus& s : StatusesOn(log.streams[0])) {
      if (s.state() == v1::WORKLOAD_STATE_SUCCEEDED) done.insert(s.workload_id());
    }
    return done.size() == 12;
  }));
  EXPECT_EQ(counts_->Peak(), 4);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(counts_->Get(absl::StrCat("p", i)), 1);
}

// A status (id, state) about attempt `attempt` arrived in a StatusReport on any stream.
bool ReportedAttempt(const Log& log, const std::string& id, v1::WorkloadState state,
                     uint32_t attempt) {
  for (const auto& stream : log.streams) {
    for (const v1::WorkloadStatus& s : StatusesOn(stream)) {
      if (s.workload_id() == id && s.state() == state && s.attempt() == attempt) return true;
    }
  }
  return false;
}

// The server stops renewing the lease (a partition in effect): when it runs out the agent
// stops what the server would move elsewhere, reports it LOST, and keeps the rest running; a
// renewed lease stops nothing more.
TEST_F(AgentTest, WhenTheLeaseRunsOutOnlyWorkTheServerWillMoveIsStopped) {
  server_->set_lease(absl::Seconds(1));
  StartAgent();
  ASSERT_TRUE(WaitRegistered(0));
  v1::WorkAssignment movable = SimWork("movable", absl::Hours(1));
  movable.set_attempt(1);
  movable.set_stop_when_lease_expires(true);
  v1::WorkAssignment stays = SimWork("stays", absl::Hours(1));
  stays.set_attempt(1);
  ASSERT_TRUE(server_->Send(Assign({movable, stays})));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return ReportedAttempt(log, "movable", v1::WORKLOAD_STATE_RUNNING, 1) &&
           ReportedAttempt(log, "stays", v1::WORKLOAD_STATE_RUNNING, 1);
  }));
  // Answered heartbeats keep the lease: several leases' worth of time passes and nothing stops.
  ASSERT_TRUE(server_->WaitFor([](const Log& log) { return Heartbeats(log) >= 60; }));
  EXPECT_EQ(agent_->Stats().lease_expiries, 0u);

  server_->set_renew_leases(false);
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return ReportedAttempt(log, "movable", v1::WORKLOAD_STATE_LOST, 1); }));
  EXPECT_EQ(agent_->Stats().lease_expiries, 1u);
  EXPECT_EQ(agent_->Stats().lease_stops, 1u);

  server_->set_renew_leases(true);
  const int heartbeats = Heartbeats(server_->Snapshot());
  ASSERT_TRUE(server_->WaitFor([&](const Log& log) { return Heartbeats(log) >= heartbeats + 20; }));
  const Log log = server_->Snapshot();
  EXPECT_FALSE(Reported(log, "stays", v1::WORKLOAD_STATE_LOST));
  EXPECT_FALSE(Reported(log, "stays", v1::WORKLOAD_STATE_CANCELLED));
  EXPECT_EQ(agent_->Stats().lease_expiries, 1u);
}

// A server that grants no lease (an older one) never has the agent stop work by itself.
TEST_F(AgentTest, WithoutALeaseNothingIsStoppedByTheAgent) {
  server_->set_renew_leases(false);
  StartAgent();
  ASSERT_TRUE(WaitRegistered(0));
  v1::WorkAssignment movable = SimWork("movable", absl::Hours(1));
  movable.set_stop_when_lease_expires(true);
  ASSERT_TRUE(server_->Send(Assign({movable})));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) { return Heartbeats(log) >= 20; }));
  EXPECT_EQ(agent_->Stats().lease_expiries, 0u);
  EXPECT_FALSE(Reported(server_->Snapshot(), "movable", v1::WORKLOAD_STATE_LOST));
}

// A later attempt of a workload the agent still runs (it was moved away and placed here again)
// starts only after the earlier run has ended; the same attempt again is a duplicate.
TEST_F(AgentTest, ALaterAttemptStartsAfterTheEarlierRunEnds) {
  StartAgent();
  ASSERT_TRUE(WaitRegistered(0));
  v1::WorkAssignment first = SimWork("w", absl::Hours(1));
  first.set_attempt(1);
  ASSERT_TRUE(server_->Send(Assign({first})));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return ReportedAttempt(log, "w", v1::WORKLOAD_STATE_RUNNING, 1); }));
  v1::WorkAssignment second = SimWork("w", absl::Hours(1));
  second.set_attempt(2);
  ASSERT_TRUE(server_->Send(Assign({second})));
  ASSERT_TRUE(server_->WaitFor([](const Log& log) {
    return ReportedAttempt(log, "w", v1::WORKLOAD_STATE_CANCELLED, 1) &&
           ReportedAttempt(log, "w", v1::WORKLOAD_STATE_RUNNING, 2);
  }));
  ASSERT_TRUE(server_->Send(Assign({second, first})));
  ASSERT_TRUE(server_->Send(Cancel({"marker"})));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "marker", v1::WORKLOAD_STATE_CANCELLED); }));
  EXPECT_EQ(counts_->Get("w"), 2);
}

// An agent restarted (here: stopped, its work with it) reads its ledger: what ran is reported
// LOST with its attempt, and the server's re-sent assignment of that attempt is not started
// again. (It used to start every such assignment again, while the server recorded one start.)
TEST_F(AgentTest, ARestartedAgentReportsWhatRanAndNeverStartsItAgain) {
  std::string templ = (std::filesystem::temp_directory_path() / "gpufed-state-XXXXXX").string();
  ASSERT_NE(mkdtemp(templ.data()), nullptr);
  AgentOptions options;
  options.state_dir = templ;
  StartAgent(options);
  ASSERT_TRUE(WaitRegistered(0));
  v1::WorkAssignment run = SimWork("41", absl::Hours(1));
  run.set_attempt(1);
  ASSERT_TRUE(server_->Send(Assign({run})));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return ReportedAttempt(log, "41", v1::WORKLOAD_STATE_RUNNING, 1); }));
  StopAgent();

  StartAgent(options);
  ASSERT_TRUE(WaitRegistered(1));
  const Log log = server_->Snapshot();
  const v1::Register& reg = log.streams[1].messages[0].register_();
  ASSERT_EQ(reg.known_workloads_size(), 1);
  EXPECT_EQ(reg.known_workloads(0).workload_id(), "41");
  EXPECT_EQ(reg.known_workloads(0).state(), v1::WORKLOAD_STATE_LOST);
  EXPECT_EQ(reg.known_workloads(0).attempt(), 1u);
  ASSERT_TRUE(server_->Send(Assign({run})));
  ASSERT_TRUE(server_->Send(Cancel({"marker"})));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) { return Reported(log, "marker", v1::WORKLOAD_STATE_CANCELLED, 1); }));
  EXPECT_EQ(counts_->Get("41"), 1);
  StopAgent();
  std::error_code ec;
  std::filesystem::remove_all(templ, ec);
}

TEST_F(AgentTest, BatchesManyUpdatesPerReport) {
  AgentOptions options;
  options.max_updates_per_report = 300;
  StartAgent(options);
  ASSERT_TRUE(WaitRegistered(0));
  constexpr int kWork = 2000;
  v1::ServerMessage batch;
  for (int i = 0; i < kWork; ++i) {
    *batch.mutable_assign()->add_assignments() =
        SimWork(absl::StrCat("b", i), absl::ZeroDuration());
  }
  ASSERT_TRUE(server_->Send(batch));
  ASSERT_TRUE(server_->WaitFor(
      [](const Log& log) {
        absl::flat_hash_set<std::string> done;
        for (const v1::WorkloadStatus& s : StatusesOn(log.streams[0])) {
          if (s.state() == v1::WORKLOAD_STATE_SUCCEEDED) done.insert(s.workload_id());
        }
        return done.size() == static_cast<size_t>(kWork);
      },
      absl::Seconds(60)));
  const Log log = server_->Snapshot();
  int reports = 0;
  int largest = 0;
  for (const auto& m : log.streams[0].messages) {
    if (!m.has_status()) continue;
    ++reports;
    largest = std::max(largest, m.status().updates_size());
  }
  EXPECT_LE(largest, 300);
  EXPECT_GT(largest, 1);
  EXPECT_LT(reports, 2 * kWork);  // not one message per status
  std::printf("[ figures  ] %d workloads -> %d StatusReports (largest %d updates)\n", kWork,
              reports, largest);
}

}  // namespace
}  // namespace gpufed::agent
