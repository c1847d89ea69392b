#ifndef GPUFED_SIM_REPLAY_H_
#define GPUFED_SIM_REPLAY_H_

// Trace replay: the openb node list becomes a Pool, its pods WorkloadSpecs, and the placement
// engine of the live scheduler (federation/placement.h) places them one at a time. Nothing of
// the engine is copied here; the simulator only decides the order and keeps the books.
//
// Snapshot mode (default) follows the protocol of the FGD paper's simulator (Weng et al., USENIX
// ATC '23; docs/simulator.md):
//   1. The workload mix fragmentation-aware policies measure against is built from the original
//      pod list (MixOf).
//   2. The original pods are shuffled (std::mt19937_64 seeded with `seed`).
//   3. Clones drawn uniformly with replacement from the original pods are appended, in draw
//      order, until the next draw would push the requested GPUs past inflation x capacity. As in
//      the authors' simulator, that stop test adds the drawn pod's milli-GPUs per GPU, while the
//      running total adds num_gpu x that. When the original pods already ask for more, random
//      pods are dropped instead until the total is within the target.
//   4. Pods arrive in that order and are placed one at a time; a pod that does not fit fails and
//      is not retried; nothing departs. A pod counts as arrived before its attempt.
//   5. Ties between equally scored nodes go to the first node of a random node order drawn once
//      per seed (TieOrder::kSeeded), as in the authors' simulator, which prefixes every node name
//      with a random per-seed index and takes the smallest name among equal scores.
// Allocation ratio = allocated milli-GPUs / total milli-GPUs; arrived ratio = requested
// milli-GPUs of the arrived pods / total milli-GPUs.
//
// Time mode replays the pods at their creation_time and removes them when they have run for as
// long as the trace says (deletion_time - scheduled_time, or - creation_time when the pod was
// never scheduled), in a discrete-event simulation: arrivals join a FIFO queue; at every event
// time, after departures have freed their resources, each queued pod is tried in order (a pod
// behind one that does not fit may still go: backfill). A pod that could not run even on the
// empty cluster is rejected. The replay ends at the trace's last deletion_time.
//
// Deterministic: the same trace, options and engine give the same result (wall_seconds aside).
// Thread safety: Replay may run on several threads at once; each call has its own pool and
// engine.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sim/openb.h"

namespace gpufed::sim {

enum class ReplayMode { kSnapshot, kTime };
absl::string_view ReplayModeName(ReplayMode mode);  // "snapshot", "time"
std::optional<ReplayMode> ParseReplayMode(absl::string_view name);

// Which of equally scored nodes a placement takes.
enum class TieOrder {
  kSeeded,  // the first in a random node order drawn once per seed: the paper's simulator
  kList,    // the first in the node list's order
  kRandom,  // one at random, drawn afresh for each decision (seeded)
};
absl::string_view TieOrderName(TieOrder order);  // "seeded", "list", "random"
std::optional<TieOrder> ParseTieOrder(absl::string_view name);

// The node order TieOrder::kSeeded uses for `seed`: a permutation of 0..count-1, drawn from its
// own stream (not the one that orders the arrivals).
std::vector<uint32_t> SeededNodeOrder(size_t count, uint64_t seed);

struct Trace {
  std::vector<OpenbNode> nodes;
  std::vector<OpenbPod> pods;
};

struct ReplayOptions {
  std::string policy = "gpufed";  // a name from PolicyNames()
  uint64_t seed = 1;
  ReplayMode mode = ReplayMode::kSnapshot;
  // Snapshot mode: requested GPUs as a multiple of the cluster's GPUs. > 0.
  double inflation = 1.3;
  // Time mode: points of the utilisation curve, evenly spaced over the replay. >= 2.
  int utilisation_points = 200;
  // Time mode: arrivals come this many times closer together (times after the first arrival
  // are divided by it) while each pod runs as long as before, which turns a sparse trace into
  // one that contends for the cluster. >= 1; 1 replays the trace's own times.
  double compression = 1;
  // Among equally scored nodes. kSeeded reproduces the published FGD figures (docs/simulator.md);
  // kList happens to favour or hurt policies by the file's order, kRandom scatters work.
  TieOrder tie_order = TieOrder::kSeeded;
};

struct CurvePoint {
  double arrived_ratio = 0;
  double allocation_ratio = 0;
};

struct UtilisationPoint {
  int64_t time = 0;  // seconds, trace clock
  double allocation_ratio = 0;
  uint64_t queued = 0;   // pods waiting
  uint64_t running = 0;  // pods holding resources
};

struct WaitStats {
  double mean_seconds = 0;
  double p50_seconds = 0;
  double p99_seconds = 0;
  double max_seconds = 0;
};

struct TimeModeResult {
  double compression = 1;  // ReplayOptions::compression
  int64_t start_time = 0;  // first arrival
  int64_t end_time = 0;    // last deletion_time of the trace (compressed: the last arrival's
                           // time plus how long the pod lived in the trace, at the latest)
  uint64_t started = 0;    // pods placed (= ReplayResult::placed)
  uint64_t completed = 0;  // started and departed by end_time
  uint64_t still_running = 0;
  uint64_t still_queued = 0;
  uint64_t rejected = 0;  // could not run even on the empty cluster
  WaitStats wait;         // over started pods, from creation_time to start
  // Time-weighted mean of the allocation ratio over [start_time, end_time].
  double mean_allocation_ratio = 0;
  // The most allocated, and the longest queue, after any event (exact, not sampled).
  double peak_allocation_ratio = 0;
  uint64_t peak_queued = 0;
  std::vector<UtilisationPoint> utilisation;
};

struct ReplayResult {
  std::string policy;
  uint64_t seed = 0;
  ReplayMode mode = ReplayMode::kSnapshot;
  TieOrder tie_order = TieOrder::kSeeded;
  double inflation = 0;  // snapshot mode
  uint32_t gpus_total = 0;
  uint64_t pods = 0;  // pods that arrived (snapshot: originals + clones)
  uint64_t placed = 0;
  uint64_t failed = 0;                // snapshot: did not fit on arrival; time: rejected
  double final_allocation_ratio = 0;  // at the end of the replay, 0..1
  // Snapshot mode, the authors' reported figure: the mean allocation ratio over the per-pod
  // samples whose arrived demand rounds (half to even) to the same whole percent as the
  // inflation; 0..1.
  double paper_allocation_ratio = 0;
  // Snapshot mode, headroom (sim/headroom.h), 0..1: the bound on allocation for any run of these
  // arrivals that places every large share of the bound's prefix; how many of those this run
  // failed (when not 0, the run may pass that bound); and the run's own bound, which counts only
  // the ones it placed and always holds.
  double allocation_bound = 0;
  uint64_t bound_premise_failures = 0;
  double run_allocation_bound = 0;
  double unallocated_gpus = 0;    // free milli-GPUs at the end / 1000
  uint64_t failed_gpu_milli = 0;  // requested by failed pods
  double wall_seconds = 0;
  double cpu_seconds = 0;  // CPU time of the replaying thread (wall time on a busy machine lies)
  // Snapshot mode: one point each time arrived demand crosses another 1 % of capacity, and the
  // final state.
  std::vector<CurvePoint> curve;
  std::optional<TimeModeResult> time;
};

struct ReplayProgress {
  uint64_t done = 0;   // pods placed or failed (snapshot), events handled (time)
  uint64_t total = 0;  // of as many
};
// Called from the replaying thread, about every 0.5 % of the work and at the end.
using ProgressCallback = std::function<void(const ReplayProgress&)>;

// Snapshot mode's arrival order (steps 2 and 3 above) as indices into `pods`: what Replay uses
// for the same seed. `capacity_milli` is the cluster's GPUs x 1000.
std::vector<uint32_t> SnapshotArrivalOrder(const std::vector<OpenbPod>& pods,
                                           uint64_t capacity_milli, double inflation,
                                           uint64_t seed);

// INVALID_ARGUMENT for an unknown policy, bad options, a trace without GPUs or GPU demand, and
// in time mode a pod without creation_time or deletion_time (naming it and its line). INTERNAL
// if the pool refuses an assignment the engine made (a bug).
absl::StatusOr<ReplayResult> Replay(const Trace& trace, const ReplayOptions& options,
                                    const ProgressCallback& progress = nullptr);

}  // namespace gpufed::sim

#endif  // GPUFED_SIM_REPLAY_H_
