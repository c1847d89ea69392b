#ifndef GPUFED_BENCH_FLEET_BENCH_H_
#define GPUFED_BENCH_FLEET_BENCH_H_

// `gpufed-bench fleet`: a thousand clusters against one server (issue #11, point 8;
// docs/benchmarks.md, "A thousand clusters").
//
// Starts a gpufed-server on an embedded PostgreSQL (agents told to heartbeat every 5 s),
// declares `clusters` clusters through ClusterService.ApplyClusters (jurisdiction, compliance
// labels, default capacity, price book, round-trip times from four client regions), creates an
// agent token per cluster and registers every cluster from this process, all at once: each
// simulated agent is one gRPC stream (callback API, one connection per cluster unless
// `connections` says otherwise) that registers an inventory of gpus / clusters GPUs, heartbeats,
// and runs what it is assigned as the `sim` backend does (RUNNING at once, SUCCEEDED after the
// spec's estimated duration; MIG repartitions applied and reported as an InventoryUpdate;
// statuses kept until acknowledged, sent again after a reconnect). Then it fills `fill` of the
// GPUs with long work, measures `idle_seconds` of heartbeats only, opens a Watch of every
// workload of its tenant and runs a paced submission load of a mix with placement rules
// (jurisdictions, compliance labels, cost / latency / balanced objectives, spot tolerance, a
// price cap; gangs, shares, MIG) for `warmup_seconds` + `seconds`. Over the last `seconds` it
// measures the server's CPU (/proc/PID/stat), its memory (VmHWM, VmRSS), submit-acknowledged-to-
// PLACED (the PLACED event's arrival on the Watch), the heartbeats the server answered (each
// LeaseRenewal the agents received), PostgreSQL's CPU and its own, and the scheduler's cycles
// (/metrics). One JSON object is the last line of stdout; progress goes to stderr.

#include <cstdint>

#include "CLI/CLI.hpp"

namespace gpufed::bench {

struct FleetBenchOptions {
  int clusters = 1000;
  int gpus = 100000;           // spread evenly over the clusters
  double seconds = 60;         // the measured window
  double warmup_seconds = 10;  // steady load before the window
  double rate = 0;             // submissions per second of the steady load; 0: 20 per 100,000 GPUs
  double fill = 0.5;           // share of the GPUs taken by long work before the load
  double idle_seconds = 10;    // heartbeats only, after the fill: the floor under the load
  int heartbeat_interval_ms = 5000;
  int connections = 0;  // TCP connections the agents' streams share; 0: one each
  uint64_t seed = 1;
};

// Adds the options of `fleet` to its subcommand.
void AddFleetOptions(CLI::App* fleet, FleetBenchOptions* options);

// Runs the bench; returns the process exit code.
int RunFleetBench(const FleetBenchOptions& options);

}  // namespace gpufed::bench

#endif  // GPUFED_BENCH_FLEET_BENCH_H_
