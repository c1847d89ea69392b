#ifndef GPUFED_API_CONTEXT_H_
#define GPUFED_API_CONTEXT_H_

#include <chrono>

#include "absl/time/time.h"
#include "api/authn.h"
#include "api/executor.h"
#include "api/metrics.h"
#include "api/rate_limit.h"
#include "api/watch_hub.h"
#include "federation/clock.h"
#include "federation/control_plane.h"

namespace gpufed::api {

// What the handlers share; wired by the server (the composition root). All pointers outlive the
// services.
struct ApiContext {
  ControlPlane* plane = nullptr;  // every use case
  Authenticator* authn = nullptr;
  // User calls run here; agent streams on agent_executor, so that a burst of user traffic
  // never delays heartbeats or status reports.
  Executor* executor = nullptr;
  Executor* agent_executor = nullptr;
  WatchHub* watch = nullptr;  // Watch streams subscribe here
  Metrics* metrics = nullptr;
  const Clock* clock = nullptr;
  // Writes per caller (api/rate_limit.h); null: not limited. Agent reports are not writes here:
  // agents have their own protocol and one stream per cluster.
  RateLimiter* writes = nullptr;
  // A unary call is served under its client's deadline, but never past this long after it
  // arrived (a client without a deadline, or with one days away, included).
  absl::Duration max_call_duration = absl::InfiniteDuration();
  // How often agents must heartbeat (told to each agent when it registers).
  std::chrono::milliseconds heartbeat_interval{2000};
  // The lease each registration and answered heartbeat grants an agent (shorter than the
  // heartbeat timeout by a safety margin).
  std::chrono::milliseconds agent_lease{8000};
  // How long an agent stream may stay open without registering.
  std::chrono::milliseconds agent_register_timeout{10000};
};

}  // namespace gpufed::api

#endif  // GPUFED_API_CONTEXT_H_
