#ifndef GPUFED_TESTS_UNIT_FEDERATION_PLANE_TEST_BASE_H_
#define GPUFED_TESTS_UNIT_FEDERATION_PLANE_TEST_BASE_H_

// What the use-case tests of ControlPlane share: the callers, an event sink that records, and a
// fixture holding the plane's collaborators on the in-memory store with a FakeClock.

#include <string>
#include <vector>

#include "auth/principal.h"
#include "federation/agent_registry.h"
#include "federation/clock.h"
#include "federation/control_plane.h"
#include "federation/ports.h"
#include "federation/scheduler.h"
#include "gtest/gtest.h"
#include "tests/support/memory_store.h"
#include "tests/support/status_matchers.h"

namespace gpufed::testing {

inline auth::Principal Admin() { return {"root", auth::Role::kPlatformAdmin, "", ""}; }
inline auth::Principal User(const std::string& tenant) {
  return {"alice", auth::Role::kTenantUser, tenant, ""};
}
inline auth::Principal Viewer(const std::string& tenant) {
  return {"bob", auth::Role::kViewer, tenant, ""};
}
inline auth::Principal AgentOf(const std::string& cluster) {
  return {"agent", auth::Role::kAgent, "", cluster};
}

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
  PlaneTestBase() : store_(&clock_), scheduler_(&store_, &store_), agents_(&clock_) {
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
    ports.events = &events_;
    ports.agents = &agents_;
    ports.scheduler = &scheduler_;
    ports.clock = &clock_;
    return ports;
  }

  FakeClock clock_;
  MemoryStore store_;
  Scheduler scheduler_;
  RecordingSink events_;
  AgentRegistry agents_;
};

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_UNIT_FEDERATION_PLANE_TEST_BASE_H_
