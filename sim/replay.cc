#include "sim/replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <queue>
#include <random>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "federation/placement.h"
#include "federation/policy.h"
#include "federation/pool.h"
#include "sim/headroom.h"
#include "sim/trace_pool.h"

namespace gpufed::sim {
namespace {

using Clock = std::chrono::steady_clock;

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// What both modes start from: the pool, one spec per original pod, the engine.
struct Setup {
  Pool pool;
  std::vector<WorkloadSpec> specs;  // parallel to trace.pods
  uint64_t capacity_milli = 0;
  uint32_t gpus_total = 0;
  std::unique_ptr<PlacementEngine> engine;
  uint64_t allocated_milli = 0;  // by the replay's own count, at the end
};

absl::StatusOr<Setup> Prepare(const Trace& trace, const ReplayOptions& options) {
  Setup setup;
  for (const OpenbNode& node : trace.nodes) setup.gpus_total += node.gpus;
  if (setup.gpus_total == 0) {
    return absl::InvalidArgumentError("the node list has no GPUs; nothing to replay against");
  }
  if (trace.pods.empty()) return absl::InvalidArgumentError("the pod list is empty");
  setup.capacity_milli = uint64_t{setup.gpus_total} * kMilliPerGpu;
  // The engine takes the first of equal nodes in the pool's node order, which is the order the
  // cluster lists them in.
  if (options.tie_order == TieOrder::kSeeded) {
    std::vector<OpenbNode> nodes;
    nodes.reserve(trace.nodes.size());
    for (uint32_t i : SeededNodeOrder(trace.nodes.size(), options.seed)) {
      nodes.push_back(trace.nodes[i]);
    }
    setup.pool.UpsertCluster(ClusterOf(nodes));
  } else {
    setup.pool.UpsertCluster(ClusterOf(trace.nodes));
  }
  setup.specs.reserve(trace.pods.size());
  for (const OpenbPod& pod : trace.pods) setup.specs.push_back(SpecOf(pod));

  PlacementOptions engine_options;
  engine_options.policy = options.policy;
  engine_options.seed = options.seed;
  engine_options.random_ties = options.tie_order == TieOrder::kRandom;
  absl::StatusOr<std::unique_ptr<PlacementEngine>> engine = PlacementEngine::Create(engine_options);
  if (!engine.ok()) return engine.status();
  setup.engine = *std::move(engine);
  // The typical workloads: the original pod list, never the resampled one (as the authors'
  // simulator does).
  setup.engine->SetMix(MixOf(setup.pool, setup.specs));
  return setup;
}

// Free milli-GPUs across the pool, from its own books.
uint64_t PoolFreeMilli(const Pool& pool) {
  uint64_t free = 0;
  for (const ClusterSlots& cluster : pool.clusters()) {
    for (const NodeSlots& node : cluster.nodes) {
      for (const GpuSlot& gpu : node.gpus) free += gpu.milli_free;
    }
  }
  return free;
}

// Milli-GPUs per GPU the pod asks for (0 for CPU-only).
uint64_t PerGpuMilli(const OpenbPod& pod) {
  return pod.num_gpu == 0 ? 0 : pod.GpuMilli() / pod.num_gpu;
}

absl::Status AllocateOrExplain(Pool& pool, WorkloadId id, const Assignment& assignment,
                               const OpenbPod& pod) {
  absl::Status status = pool.Allocate(id, assignment, HostDemand{pod.cpu_milli, pod.memory_mib});
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("the pool refused the engine's placement of pod ",
                                            pod.name, " (line ", pod.line,
                                            "): ", status.message()));
  }
  return absl::OkStatus();
}

// Reports progress about every 0.5 % of `total`, and at the end.
class ProgressReporter {
 public:
  ProgressReporter(const ProgressCallback& callback, uint64_t total)
      : callback_(callback), total_(total), step_(std::max<uint64_t>(1, total / 200)) {}

  void Update(uint64_t done) {
    if (!callback_) return;
    if (done < next_ && done < total_) return;
    next_ = done + step_;
    callback_(ReplayProgress{done, total_});
  }

 private:
  const ProgressCallback& callback_;
  uint64_t total_;
  uint64_t step_;
  uint64_t next_ = 0;
};

}  // namespace

absl::string_view TieOrderName(TieOrder order) {
  switch (order) {
    case TieOrder::kSeeded:
      return "seeded";
    case TieOrder::kList:
      return "list";
    case TieOrder::kRandom:
      return "random";
  }
  return "seeded";
}

std::optional<TieOrder> ParseTieOrder(absl::string_view name) {
  for (TieOrder order : {TieOrder::kSeeded, TieOrder::kList, TieOrder::kRandom}) {
    if (name == TieOrderName(order)) return order;
  }
  return std::nullopt;
}

std::vector<uint32_t> SeededNodeOrder(size_t count, uint64_t seed) {
  // A stream of its own, so that the node order and the arrival order are independent draws.
  std::seed_seq seq{seed, uint64_t{0x6e6f6465}};  // "node"
  std::mt19937_64 rng(seq);
  std::vector<uint32_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

std::vector<uint32_t> SnapshotArrivalOrder(const std::vector<OpenbPod>& pods,
                                           uint64_t capacity_milli, double inflation,
                                           uint64_t seed) {
  const auto target_milli =
      static_cast<uint64_t>(std::llround(inflation * static_cast<double>(capacity_milli)));
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> order(pods.size());
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  uint64_t requested = 0;
  for (const OpenbPod& pod : pods) requested += pod.GpuMilli();
  if (pods.empty()) return order;
  if (requested <= target_milli) {
    std::uniform_int_distribution<size_t> draw(0, pods.size() - 1);
    while (true) {
      const size_t i = draw(rng);
      if (requested + PerGpuMilli(pods[i]) > target_milli) break;
      requested += pods[i].GpuMilli();
      order.push_back(static_cast<uint32_t>(i));
    }
  } else {
    while (requested > target_milli && !order.empty()) {
      std::uniform_int_distribution<size_t> draw(0, order.size() - 1);
      const size_t k = draw(rng);
      requested -= pods[order[k]].GpuMilli();
      order.erase(order.begin() + static_cast<ptrdiff_t>(k));
    }
  }
  return order;
}

namespace {

absl::Status ReplaySnapshot(const Trace& trace, const ReplayOptions& options, Setup& setup,
                            const ProgressCallback& progress, ReplayResult& result) {
  const std::vector<OpenbPod>& pods = trace.pods;
  uint64_t requested = 0;
  for (const OpenbPod& pod : pods) requested += pod.GpuMilli();
  if (requested == 0) {
    return absl::InvalidArgumentError(
        "the pod list requests no GPUs; snapshot mode inflates GPU demand");
  }
  const auto capacity = static_cast<double>(setup.capacity_milli);
  const std::vector<uint32_t> arrivals =
      SnapshotArrivalOrder(pods, setup.capacity_milli, options.inflation, options.seed);
  result.pods = arrivals.size();
  const Headroom headroom = SliverBound(pods, arrivals, setup.capacity_milli);
  result.allocation_bound = headroom.allocation_bound;
  std::vector<bool> failed_in_prefix(headroom.prefix_pods, false);

  // The authors' figure: mean allocation over the per-pod samples whose arrived demand rounds to
  // the inflation's whole percent; failing that, within one percent of it.
  const double window_pct = std::nearbyint(options.inflation * 100);
  double window_sum = 0, near_sum = 0;
  uint64_t window_count = 0, near_count = 0;

  ProgressReporter reporter(progress, arrivals.size());
  uint64_t arrived = 0;
  uint64_t allocated = 0;
  int next_pct = 1;
  for (size_t k = 0; k < arrivals.size(); ++k) {
    const OpenbPod& pod = pods[arrivals[k]];
    const WorkloadSpec& spec = setup.specs[arrivals[k]];
    const auto id = static_cast<WorkloadId>(k + 1);
    arrived += pod.GpuMilli();
    PlacementDecision decision = setup.engine->Place(setup.pool, spec, id);
    if (decision.assignment) {
      if (absl::Status s = AllocateOrExplain(setup.pool, id, *decision.assignment, pod); !s.ok()) {
        return s;
      }
      allocated += pod.GpuMilli();
      ++result.placed;
    } else {
      ++result.failed;
      result.failed_gpu_milli += pod.GpuMilli();
      if (k < headroom.prefix_pods) {
        failed_in_prefix[k] = true;
        if (IsLargeShare(pod)) ++result.bound_premise_failures;
      }
    }
    const double arrived_ratio = static_cast<double>(arrived) / capacity;
    const double allocation_ratio = static_cast<double>(allocated) / capacity;
    const double pct = std::nearbyint(arrived_ratio * 100);
    if (pct == window_pct) {
      window_sum += allocation_ratio;
      ++window_count;
    }
    if (std::abs(pct - window_pct) <= 1) {
      near_sum += allocation_ratio;
      ++near_count;
    }
    if (arrived_ratio * 100 >= next_pct) {
      result.curve.push_back(CurvePoint{arrived_ratio, allocation_ratio});
      next_pct = static_cast<int>(std::floor(arrived_ratio * 100)) + 1;
    }
    reporter.Update(k + 1);
  }
  const CurvePoint last{static_cast<double>(arrived) / capacity,
                        static_cast<double>(allocated) / capacity};
  if (result.curve.empty() || result.curve.back().arrived_ratio != last.arrived_ratio) {
    result.curve.push_back(last);
  }
  result.final_allocation_ratio = last.allocation_ratio;
  result.run_allocation_bound =
      SliverBound(pods, arrivals, setup.capacity_milli, &failed_in_prefix).allocation_bound;

  setup.allocated_milli = allocated;
  if (window_count > 0) {
    result.paper_allocation_ratio = window_sum / static_cast<double>(window_count);
  } else if (near_count > 0) {
    result.paper_allocation_ratio = near_sum / static_cast<double>(near_count);
  } else {
    result.paper_allocation_ratio = last.allocation_ratio;
  }
  reporter.Update(arrivals.size());
  return absl::OkStatus();
}

// ---- Time mode ----

// Pods with the same request are interchangeable for "does it fit now".
using Shape = std::tuple<uint32_t, uint32_t, uint64_t, uint64_t, std::vector<std::string>>;

double Percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank.
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

absl::Status ReplayTime(const Trace& trace, const ReplayOptions& options, Setup& setup,
                        const ProgressCallback& progress, ReplayResult& result) {
  const std::vector<OpenbPod>& pods = trace.pods;
  for (const OpenbPod& pod : pods) {
    for (auto [name, value] : {std::pair{"creation_time", &pod.creation_time},
                               std::pair{"deletion_time", &pod.deletion_time}}) {
      if (!value->has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("pod ", pod.name, " (line ", pod.line, ") has no ", name,
                         "; --mode time needs creation_time and deletion_time for every pod (the "
                         "multigpu* pod lists have neither: use --mode snapshot)"));
      }
    }
  }
  if (!(options.compression >= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("compression: must be at least 1 (got ", options.compression, ")"));
  }
  const size_t n = pods.size();
  int64_t first = std::numeric_limits<int64_t>::max();
  for (const OpenbPod& pod : pods) first = std::min(first, *pod.creation_time);
  // When each pod arrives: the trace's time, or (compressed) its distance from the first
  // arrival divided by the factor.
  std::vector<int64_t> arrive(n);
  std::vector<int64_t> duration(n);
  std::vector<uint32_t> shape_of(n);
  std::map<Shape, uint32_t> shapes;
  int64_t horizon = 0;
  for (size_t i = 0; i < n; ++i) {
    const OpenbPod& pod = pods[i];
    arrive[i] = first + static_cast<int64_t>(std::llround(
                            static_cast<double>(*pod.creation_time - first) / options.compression));
    int64_t start = *pod.creation_time;
    if (pod.scheduled_time && *pod.scheduled_time >= start) start = *pod.scheduled_time;
    duration[i] = std::max<int64_t>(0, *pod.deletion_time - start);
    // The trace's end: its last deletion_time, shifted with its pod's arrival.
    horizon = std::max(horizon, arrive[i] + (*pod.deletion_time - *pod.creation_time));
    const WorkloadSpec& s = setup.specs[i];
    Shape shape{s.gpus_per_replica, s.gpu_milli, s.cpu_millis, s.memory_mib, s.gpu_models};
    shape_of[i] =
        shapes.emplace(std::move(shape), static_cast<uint32_t>(shapes.size())).first->second;
  }
  std::vector<uint32_t> arrivals(n);
  std::iota(arrivals.begin(), arrivals.end(), 0);
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [&](uint32_t a, uint32_t b) { return arrive[a] < arrive[b]; });
  result.pods = n;

  TimeModeResult time;
  time.compression = options.compression;
  time.start_time = arrive[arrivals.front()];
  time.end_time = horizon;
  const auto capacity = static_cast<double>(setup.capacity_milli);
  const int points = options.utilisation_points;
  const auto span = static_cast<double>(horizon - time.start_time);
  int next_point = 0;
  auto point_time = [&](int k) {
    return time.start_time + static_cast<int64_t>(std::llround(span * k / std::max(1, points - 1)));
  };

  // (end time, workload id, pod index), earliest first.
  using Departure = std::tuple<int64_t, WorkloadId, uint32_t>;
  std::priority_queue<Departure, std::vector<Departure>, std::greater<>> departures;
  std::vector<uint32_t> queue;  // pod indices, FIFO
  size_t known_stuck = 0;       // queue[0..known_stuck) did not fit and nothing was freed since
  std::vector<char> shape_failed(shapes.size(), 0);
  std::vector<double> waits;
  uint64_t allocated = 0;
  uint64_t running = 0;
  WorkloadId next_id = 1;
  double area = 0;  // integral of allocated milli over time
  int64_t last_t = time.start_time;
  size_t next_arrival = 0;
  ProgressReporter reporter(progress, n);

  auto emit_points_before = [&](int64_t t, bool inclusive) {
    while (next_point < points &&
           (point_time(next_point) < t || (inclusive && point_time(next_point) == t))) {
      time.utilisation.push_back(UtilisationPoint{point_time(next_point),
                                                  static_cast<double>(allocated) / capacity,
                                                  queue.size(), running});
      ++next_point;
    }
  };

  while (true) {
    int64_t t = horizon + 1;
    if (next_arrival < n) t = arrive[arrivals[next_arrival]];
    if (!departures.empty()) t = std::min(t, std::get<0>(departures.top()));
    if (t > horizon) break;
    emit_points_before(t, /*inclusive=*/false);
    area += static_cast<double>(allocated) * static_cast<double>(t - last_t);
    last_t = t;

    bool freed = false;
    while (!departures.empty() && std::get<0>(departures.top()) == t) {
      const auto [end, id, i] = departures.top();
      departures.pop();
      setup.pool.Release(id);
      allocated -= pods[i].GpuMilli();
      --running;
      ++time.completed;
      freed = true;
    }
    while (next_arrival < n && arrive[arrivals[next_arrival]] == t) {
      queue.push_back(arrivals[next_arrival]);
      ++next_arrival;
    }
    if (freed) known_stuck = 0;

    // Head of line first, then backfill: every queued pod in order.
    std::fill(shape_failed.begin(), shape_failed.end(), 0);
    std::vector<uint32_t> still;
    still.reserve(queue.size());
    for (size_t q = 0; q < queue.size(); ++q) {
      const uint32_t i = queue[q];
      if (q < known_stuck || shape_failed[shape_of[i]]) {
        still.push_back(i);
        continue;
      }
      const WorkloadId id = next_id;
      PlacementDecision decision = setup.engine->Place(setup.pool, setup.specs[i], id);
      if (decision.assignment) {
        ++next_id;
        if (absl::Status s = AllocateOrExplain(setup.pool, id, *decision.assignment, pods[i]);
            !s.ok()) {
          return s;
        }
        allocated += pods[i].GpuMilli();
        ++running;
        ++result.placed;
        waits.push_back(static_cast<double>(t - arrive[i]));
        departures.emplace(t + duration[i], id, i);
      } else if (decision.reason.never_fits()) {
        ++time.rejected;
        result.failed_gpu_milli += pods[i].GpuMilli();
      } else {
        shape_failed[shape_of[i]] = 1;
        still.push_back(i);
      }
    }
    queue.swap(still);
    known_stuck = queue.size();
    time.peak_allocation_ratio =
        std::max(time.peak_allocation_ratio, static_cast<double>(allocated) / capacity);
    time.peak_queued = std::max<uint64_t>(time.peak_queued, queue.size());
    reporter.Update(next_arrival);
  }
  area += static_cast<double>(allocated) * static_cast<double>(horizon - last_t);
  emit_points_before(horizon, /*inclusive=*/true);
  reporter.Update(n);

  time.started = result.placed;
  time.still_running = running;
  time.still_queued = queue.size();
  result.failed = time.rejected;
  std::sort(waits.begin(), waits.end());
  if (!waits.empty()) {
    time.wait.mean_seconds =
        std::accumulate(waits.begin(), waits.end(), 0.0) / static_cast<double>(waits.size());
    time.wait.p50_seconds = Percentile(waits, 0.50);
    time.wait.p99_seconds = Percentile(waits, 0.99);
    time.wait.max_seconds = waits.back();
  }
  time.mean_allocation_ratio =
      span > 0 ? area / (span * capacity) : static_cast<double>(allocated) / capacity;
  result.final_allocation_ratio = static_cast<double>(allocated) / capacity;
  setup.allocated_milli = allocated;
  result.time = std::move(time);
  return absl::OkStatus();
}

}  // namespace

absl::string_view ReplayModeName(ReplayMode mode) {
  return mode == ReplayMode::kTime ? "time" : "snapshot";
}

std::optional<ReplayMode> ParseReplayMode(absl::string_view name) {
  if (name == "snapshot") return ReplayMode::kSnapshot;
  if (name == "time") return ReplayMode::kTime;
  return std::nullopt;
}

absl::StatusOr<ReplayResult> Replay(const Trace& trace, const ReplayOptions& options,
                                    const ProgressCallback& progress) {
  if (options.mode == ReplayMode::kSnapshot &&
      !(options.inflation > 0 && std::isfinite(options.inflation))) {
    return absl::InvalidArgumentError(
        absl::StrCat("inflation must be a number > 0, got ", options.inflation));
  }
  if (options.utilisation_points < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("utilisation_points must be >= 2, got ", options.utilisation_points));
  }
  const Clock::time_point start = Clock::now();
  const double cpu_start = ThreadCpuSeconds();
  absl::StatusOr<Setup> setup = Prepare(trace, options);
  if (!setup.ok()) return setup.status();

  ReplayResult result;
  result.policy = options.policy;
  result.seed = options.seed;
  result.mode = options.mode;
  result.tie_order = options.tie_order;
  result.inflation = options.mode == ReplayMode::kSnapshot ? options.inflation : 0;
  result.gpus_total = setup->gpus_total;
  absl::Status status = options.mode == ReplayMode::kSnapshot
                            ? ReplaySnapshot(trace, options, *setup, progress, result)
                            : ReplayTime(trace, options, *setup, progress, result);
  if (!status.ok()) return status;

  // The pool's books and ours must agree; a mismatch is an engine or pool bug.
  const uint64_t free_milli = PoolFreeMilli(setup->pool);
  if (free_milli + setup->allocated_milli != setup->capacity_milli) {
    return absl::InternalError(absl::StrCat("the pool has ", free_milli,
                                            " milli-GPUs free but the replay allocated ",
                                            setup->allocated_milli, " of ", setup->capacity_milli));
  }
  result.unallocated_gpus = static_cast<double>(free_milli) / kMilliPerGpu;
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.cpu_seconds = ThreadCpuSeconds() - cpu_start;
  return result;
}

}  // namespace gpufed::sim
