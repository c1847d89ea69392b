#ifndef GPUFED_TESTS_UNIT_FEDERATION_PLANE_TEST_BASE_H_
#define GPUFED_TESTS_UNIT_FEDERATION_PLANE_TEST_BASE_H_

// What the use-case tests of ControlPlane share: the callers, an event sink that records, and a
// fixture holding the plane's collaborators on the in-memory store with a FakeClock.

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "auth/principal.h"
#include "federation/agent_registry.h"
#include "federation/clock.h"
#include "federation/control_loop.h"
#include "federation/control_plane.h"
#include "federation/ports.h"
#include "federation/scheduler.h"
#include "gtest/gtest.h"
#include "tests/support/memory_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed::testing {

inline auth::Principal Admin() { return {"root", auth::Role::kPlatformAdmin, "", ""}; }
inline auth::Principal User(const std::string& tenant) {
  return {"alice", auth::Role::kTenantUser, tenant, ""};
}
inline auth::Principal Viewer(const std::string& tenant) {
  return {"bob", auth::Role::kViewer, tenant, ""};
}
inline auth::Principal AgentOf(const std::string& cluster) {
  return {.subject = "agent", .role = auth::Role::kAgent, .cluster = cluster};
}

// What the control plane sent one agent connection.
class FakeChannel final : public AgentChannel {
 public:
  void SendRegistered(const Cluster& cluster) override {
    registered_epochs.push_back(cluster.epoch);
  }
  void SendAssignments(const std::vector<Workload>& workloads) override {
    for (const Workload& w : workloads) {
      assigned.push_back(w.id);
      sent.emplace_back('A', w.id);
    }
  }
  void SendCancels(const std::vector<WorkloadId>& ids) override {
    cancelled.insert(cancelled.end(), ids.begin(), ids.end());
    for (WorkloadId id : ids) sent.emplace_back('C', id);
  }
  void Close(CloseReason reason, const std::string& why) override {
    closed = true;
    close_reasons.push_back(reason);
  }

  std::vector<uint64_t> registered_epochs;
  std::vector<WorkloadId> assigned;
  std::vector<WorkloadId> cancelled;
  std::vector<std::pair<char, WorkloadId>> sent;  // in order: 'A' assignment, 'C' cancel
  bool closed = false;
  std::vector<CloseReason> close_reasons;
};

// Grants leadership while `grant` is set.
class FakeLeader final : public LeaderElector {
 public:
  bool TryAcquire() override { return held = grant; }
  bool StillHeld() override { return held && grant; }
  void Release() override { held = false; }
  bool grant = true;
  bool held = false;
};

// Keeps everything published, in order.
class RecordingSink final : public EventSink {
 public:
  void Publish(const std::vector<WorkloadEvent>& published) override {
    events.insert(events.end(), published.begin(), published.end());
  }
  // The states workload `id` was published entering, in order.
  [[nodiscard]] std::vector<WorkloadState> States(WorkloadId id) const {
    std::vector<WorkloadState> out;
    for (const WorkloadEvent& e : events) {
      if (e.workload.id == id) out.push_back(e.to);
    }
    return out;
  }
  std::vector<WorkloadEvent> events;
};

// The plane's collaborators: a MemoryStore whose time is clock_'s, holding tenants "acme" and
// "other" (project "p" each), a scheduler on it, an agent registry and a recording sink. A
// subclass builds its ControlPlane from Ports() (adding what else it needs, e.g. metrics).
class PlaneTestBase : public ::testing::Test {
 protected:
  explicit PlaneTestBase(SchedulerOptions options = SchedulerOptions())
      : store_(&clock_),
        scheduler_(&store_, &store_, std::move(options), &store_, &clock_),
        agents_(&clock_) {
    for (const char* tenant : {"acme", "other"}) {
      EXPECT_OK(store_.CreateTenant(Tenant{tenant, tenant, {}}));
      EXPECT_OK(store_.CreateProject(Project{tenant, "p", {}}));
    }
  }

  // Every port but metrics.
  ControlPlanePorts Ports() {
    ControlPlanePorts ports;
    ports.workloads = &store_;
    ports.clusters = &store_;
    ports.tenants = &store_;
    ports.quotas = &store_;
    ports.certificates = &store_;
    ports.events = &events_;
    ports.agents = &agents_;
    ports.scheduler = &scheduler_;
    ports.clock = &clock_;
    ports.metering = &store_;
    return ports;
  }

  FakeClock clock_;
  MemoryStore store_;
  Scheduler scheduler_;
  RecordingSink events_;
  AgentRegistry agents_;
};

// PlaneTestBase with the plane itself and a control loop over it (leadership granted), and the
// steps a test takes as a user, an agent or the loop.
class PlaneLoopTestBase : public PlaneTestBase {
 protected:
  // `metrics` (optional) may be a member of the derived fixture: it is only stored here.
  explicit PlaneLoopTestBase(ControlMetrics* metrics = nullptr,
                             SchedulerOptions options = SchedulerOptions())
      : PlaneTestBase(std::move(options)),
        plane_(PortsWith(metrics)),
        loop_(&plane_, &scheduler_, &agents_, &leader_, &clock_, nullptr, LoopOptions()) {
    plane_.SetWake([this] { ++wakes_; });
  }

  ControlPlanePorts PortsWith(ControlMetrics* metrics) {
    ControlPlanePorts ports = Ports();
    ports.metrics = metrics;
    return ports;
  }

  static ControlLoopOptions LoopOptions() {
    ControlLoopOptions options;
    options.heartbeat_timeout = std::chrono::seconds(30);
    options.check_interval = std::chrono::seconds(1);
    return options;
  }

  absl::StatusOr<SubmitResult> Submit(const auth::Principal& who,
                                      absl::StatusOr<WorkloadSpec> spec) {
    absl::StatusOr<SubmitResult> out = absl::InternalError("callback not run");
    plane_.Submit(who, std::move(spec), absl::InfiniteFuture(),
                  [&](absl::StatusOr<SubmitResult> r) { out = std::move(r); });
    return out;
  }

  // Registers cluster `name` (`nodes` nodes of 8 H100s) through a fake agent connection.
  std::shared_ptr<FakeChannel> Register(const std::string& name, int nodes = 1,
                                        const std::vector<AgentReport>& known = {}) {
    auto channel = std::make_shared<FakeChannel>();
    Cluster c = testing::MakeCluster(name, nodes, 8, "H100-80GB");
    absl::StatusOr<std::shared_ptr<AgentLink>> link =
        plane_.RegisterAgent(AgentOf(name), c.info, c.nodes, known, channel);
    EXPECT_OK(link);
    if (link.ok()) links_[name] = *link;
    return channel;
  }

  StepResult Step() { return loop_.RunOnce(clock_.Monotonic()); }

  absl::Status Report(const std::string& cluster, WorkloadId id, WorkloadState state) {
    AgentReport r;
    r.id = id;
    r.state = state;
    return plane_.ApplyAgentReports(*links_.at(cluster), {r});
  }

  absl::Status ReportAttempt(const std::string& cluster, WorkloadId id, WorkloadState state,
                             uint32_t attempt) {
    AgentReport r;
    r.id = id;
    r.state = state;
    r.attempt = attempt;
    return plane_.ApplyAgentReports(*links_.at(cluster), {r});
  }

  Workload MustGet(WorkloadId id) {
    absl::StatusOr<Workload> w = store_.Get(id);
    EXPECT_OK(w);
    return w.ok() ? *w : Workload{};
  }

  // Keeps `cluster` heard from, as its agent's heartbeats would.
  void Heartbeat(const std::string& cluster) { ASSERT_OK(plane_.Heartbeat(*links_.at(cluster))); }

  FakeLeader leader_;
  ControlPlane plane_;
  ControlLoop loop_;
  std::map<std::string, std::shared_ptr<AgentLink>> links_;
  int wakes_ = 0;
};

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_UNIT_FEDERATION_PLANE_TEST_BASE_H_
