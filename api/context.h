#ifndef GPUFED_API_CONTEXT_H_
#define GPUFED_API_CONTEXT_H_

#include <functional>

#include "api/authn.h"
#include "api/executor.h"
#include "api/metrics.h"
#include "api/watch_hub.h"
#include "federation/scheduler.h"
#include "federation/store.h"

namespace gpufed::api {

class AgentHub;

// What the handlers share; wired by the server (the composition root). All pointers outlive the
// services.
struct ApiContext {
  WorkloadStore* workloads = nullptr;
  ClusterStore* clusters = nullptr;
  TenantStore* tenants = nullptr;
  Authenticator* authn = nullptr;
  Executor* executor = nullptr;
  WatchHub* watch = nullptr;
  Scheduler* scheduler = nullptr;
  AgentHub* agents = nullptr;
  Metrics* metrics = nullptr;
  // Wakes the scheduler loop (new work or freed capacity).
  std::function<void()> wake_scheduler;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_CONTEXT_H_
