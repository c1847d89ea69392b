#ifndef GPUFED_BENCH_SPOT_BENCH_H_
#define GPUFED_BENCH_SPOT_BENCH_H_

// `gpufed-bench spot`: spot reclaims against real processes (issue #11, point 4). A running
// gpufed-server, two sim clusters started here (bench/topologies/spot-a.yaml with two spot
// nodes, whose agent reclaims them on a schedule, and bench/topologies/ondemand-b.yaml), and
// spot-tolerant restartable workloads on the spot nodes. For each reclaim it measures, per
// workload, the time from the reclaim (the agent's log line, written as it reports its inventory
// without the spot nodes) to the workload's next placement (the PLACED event's time on a Watch),
// in two cases:
//   - elsewhere: workloads allowed on either cluster; ondemand-b has room;
//   - none: workloads kept to spot-a, whose on-demand node is full: they wait for the spot nodes
//     to come back (also measured from their return).

#include <string>

#include "absl/time/time.h"

namespace gpufed::bench {

struct SpotBenchOptions {
  int runs = 5;                              // reclaims measured
  int jobs = 8;                              // one-GPU workloads per case, 1..8
  absl::Duration every = absl::Seconds(30);  // --spot-reclaim-every of spot-a's agent
  absl::Duration away = absl::Seconds(10);   // --spot-reclaim-for
};

// The server to use, and a folder for the agents' state and logs.
struct SpotBenchTarget {
  std::string address;
  std::string admin_token;
  std::string token;  // a user of tenant `tenant`, project "bench"
  std::string tenant;
  std::string dir;
};

// Runs the bench; progress on stderr, one JSON object as the last line of stdout. Returns the
// process exit code.
int RunSpotBench(const SpotBenchTarget& target, const SpotBenchOptions& options);

}  // namespace gpufed::bench

#endif  // GPUFED_BENCH_SPOT_BENCH_H_
