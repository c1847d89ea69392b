#ifndef GPUFED_TESTS_FAULT_FAULT_SUPPORT_H_
#define GPUFED_TESTS_FAULT_FAULT_SUPPORT_H_

// Helpers the fault tests share: waiting for a condition, reading what an agent's own log says
// ran, and a loopback port a restarted server can take again.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpufed::testing {

// Polls `pred` every 50 ms for up to `timeout`; true once it holds.
bool Eventually(const std::function<bool()>& pred, std::chrono::seconds timeout);

// One run of one attempt of a workload as an agent's own log records it.
struct AgentRun {
  std::string workload;
  int attempt = 0;
  absl::Time start = absl::InfinitePast();
  absl::Time end = absl::InfiniteFuture();  // still running when the log was read
  std::string end_state;
  int starts = 0;  // "RUNNING" lines for this attempt: more than one is a run started twice
};

// The runs in an agent's log: its lines "<time> info workload <id> attempt <n>: RUNNING" and
// "... : <END STATE> <message>", one per (workload, attempt), ordered by both. A line still
// being written when the log is read may be cut short; such a line is skipped or, cut inside
// its state, read as an end.
std::vector<AgentRun> RunsInLog(const std::string& path);

// A free 127.0.0.1 port below the kernel's ephemeral range, for a server that is killed and
// started again on the same port: a port the server picked itself (port 0) comes from the
// ephemeral range, where any outgoing connection may take it while the server is down.
absl::StatusOr<int> PortOutsideEphemeralRange();

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_FAULT_FAULT_SUPPORT_H_
