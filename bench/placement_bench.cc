#include "bench/placement_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "federation/gpu_catalog.h"
#include "federation/mig.h"
#include "federation/placement.h"
#include "federation/pool.h"
#include "federation/types.h"
#include "nlohmann/json.hpp"

namespace gpufed::bench {
namespace {

using Clock = std::chrono::steady_clock;

// ---- The federation ----

// A kind of node: GPUs of one model, with its host.
struct NodeKind {
  const char* model;
  uint32_t gpus;
  bool nvlink;  // one NVLink domain over all the node's GPUs (DGX/HGX); else PCIe pairs
  uint64_t cpu_millis;
  uint64_t memory_mib;
};

constexpr uint64_t kGiB = 1024;
const NodeKind kDgxH100{"H100-80GB", 8, true, 224000, 2048 * kGiB};
const NodeKind kDgxA100{"A100-80GB", 8, true, 256000, 1024 * kGiB};
const NodeKind kL4x4{"L4", 4, false, 64000, 512 * kGiB};
const NodeKind kA10x4{"A10", 4, false, 64000, 256 * kGiB};

// A cluster's flavour: which nodes it is made of, and how often each.
struct Flavour {
  double weight;
  std::vector<std::pair<const NodeKind*, double>> nodes;
};

const std::vector<Flavour>& Flavours() {
  static const auto* const kFlavours = new std::vector<Flavour>{
      {0.30, {{&kDgxH100, 0.90}, {&kL4x4, 0.10}}},                     // H100 training
      {0.25, {{&kDgxA100, 0.85}, {&kA10x4, 0.15}}},                    // A100 training
      {0.25, {{&kDgxH100, 0.45}, {&kDgxA100, 0.25}, {&kL4x4, 0.30}}},  // mixed
      {0.20, {{&kL4x4, 0.60}, {&kA10x4, 0.30}, {&kDgxA100, 0.10}}},    // inference
  };
  return *kFlavours;
}

// MIG layouts found on the few MIG-enabled GPUs (valid for A100-80GB and H100-80GB).
const std::vector<std::vector<MigInstance>>& MigLayouts() {
  static const auto* const kLayouts = new std::vector<std::vector<MigInstance>>{
      {{"1g.10gb", 0},
       {"1g.10gb", 1},
       {"1g.10gb", 2},
       {"1g.10gb", 3},
       {"1g.10gb", 4},
       {"1g.10gb", 5},
       {"1g.10gb", 6}},
      {{"3g.40gb", 0}, {"3g.40gb", 4}},
      {{"4g.40gb", 0}, {"3g.40gb", 4}},
      {{"2g.20gb", 0}, {"2g.20gb", 2}, {"3g.40gb", 4}},
  };
  return *kLayouts;
}

NodeInfo MakeNode(const std::string& name, const NodeKind& kind, uint32_t gpus,
                  std::mt19937_64& rng) {
  NodeInfo node;
  node.name = name;
  node.cpu_millis = kind.cpu_millis;
  node.memory_mib = kind.memory_mib;
  const GpuModel model = *FindGpuModel(kind.model);
  // About one 8-GPU MIG-capable node in ten runs two of its GPUs in MIG mode.
  const bool mig = kind.nvlink && model.mig_capable && gpus == 8 &&
                   std::uniform_real_distribution<double>(0, 1)(rng) < 0.10;
  for (uint32_t g = 0; g < gpus; ++g) {
    GpuInfo gpu;
    gpu.uuid = absl::StrCat("GPU-", name, "-", g);
    gpu.index = g;
    gpu.model = kind.model;
    gpu.memory_mib = model.memory_mib;
    gpu.nvlink_domain = kind.nvlink ? absl::StrCat(name, "-nvl") : "";
    gpu.pcie_switch = absl::StrCat("pcie", g / 2);
    gpu.numa_node = static_cast<int32_t>(g / std::max<uint32_t>(1, gpus / 2));
    gpu.mig_capable = model.mig_capable;
    if (mig && g >= 6) {
      const auto& layouts = MigLayouts();
      gpu.mig_enabled = true;
      gpu.mig_layout = layouts[std::uniform_int_distribution<size_t>(0, layouts.size() - 1)(rng)];
    }
    node.gpus.push_back(std::move(gpu));
  }
  return node;
}

// `clusters` clusters of `gpus` GPUs in all (the remainder goes to the first ones). Each cluster
// has a flavour; its nodes stand in racks of 4-8, four racks to a block.
std::vector<Cluster> MakeFederation(uint32_t gpus, uint32_t clusters, std::mt19937_64& rng,
                                    uint64_t* nodes_out) {
  std::vector<Cluster> out;
  std::vector<double> flavour_weights;
  for (const Flavour& f : Flavours()) flavour_weights.push_back(f.weight);
  std::discrete_distribution<size_t> pick_flavour(flavour_weights.begin(), flavour_weights.end());
  uint64_t nodes = 0;
  for (uint32_t c = 0; c < clusters; ++c) {
    Cluster cluster;
    cluster.info.name = absl::StrFormat("c%04u", c);
    cluster.info.provider = c % 3 == 0 ? "onprem" : "cloud";
    cluster.info.region = absl::StrCat("region-", c % 7);
    cluster.state = ClusterState::kReady;
    const Flavour& flavour = Flavours()[pick_flavour(rng)];
    std::vector<double> w;
    for (const auto& [kind, weight] : flavour.nodes) w.push_back(weight);
    std::discrete_distribution<size_t> pick_kind(w.begin(), w.end());
    uint32_t left = gpus / clusters + (c < gpus % clusters ? 1 : 0);
    uint32_t rack = 0;
    uint32_t in_rack = 0;
    uint32_t rack_size = std::uniform_int_distribution<uint32_t>(4, 8)(rng);
    while (left > 0) {
      const NodeKind* kind = flavour.nodes[pick_kind(rng)].first;
      if (kind->gpus > left) kind = &kL4x4;  // the last few GPUs: a small inference node
      const uint32_t n_gpus = std::min(kind->gpus, left);
      NodeInfo node = MakeNode(absl::StrFormat("%s-n%03u", cluster.info.name,
                                               static_cast<uint32_t>(cluster.nodes.size())),
                               *kind, n_gpus, rng);
      if (in_rack == rack_size) {
        ++rack;
        in_rack = 0;
        rack_size = std::uniform_int_distribution<uint32_t>(4, 8)(rng);
      }
      ++in_rack;
      node.rack = absl::StrCat(cluster.info.name, "-r", rack);
      node.block = absl::StrCat(cluster.info.name, "-b", rack / 4);
      cluster.nodes.push_back(std::move(node));
      left -= n_gpus;
    }
    nodes += cluster.nodes.size();
    out.push_back(std::move(cluster));
  }
  *nodes_out = nodes;
  return out;
}

// ---- The workload stream ----

struct Shape {
  double weight;
  WorkloadSpec spec;
  uint64_t milli = 0;  // GPU capacity held, in milli-GPUs (a MIG instance: its compute share)
};

// "3 x 1 GPU", "1 x 500 milli of L4|A10", "1 x MIG 1g.10gb", for the summary.
std::string ShapeName(const WorkloadSpec& s) {
  std::string what = !s.mig_profile.empty() ? absl::StrCat("MIG ", s.mig_profile)
                     : s.gpu_milli > 0      ? absl::StrCat(s.gpu_milli, " milli")
                                            : absl::StrCat(s.gpus_per_replica, " GPU");
  std::string name = absl::StrCat(s.replicas, " x ", what);
  if (!s.gpu_models.empty()) absl::StrAppend(&name, " of ", absl::StrJoin(s.gpu_models, "|"));
  if (s.topology != Topology::kNone) absl::StrAppend(&name, ", ", TopologyName(s.topology));
  return name;
}

WorkloadSpec Spec(uint32_t replicas, uint32_t gpus, std::vector<std::string> models = {},
                  Topology topology = Topology::kNone) {
  WorkloadSpec s;
  s.tenant = "bench";
  s.project = "bench";
  s.name = "w";
  s.workload_class = WorkloadClass::kBatch;
  s.replicas = replicas;
  s.gpus_per_replica = gpus;
  s.gpu_models = std::move(models);
  s.topology = topology;
  s.cpu_millis = uint64_t{8000} * gpus;
  s.memory_mib = uint64_t{64} * kGiB * gpus;
  return s;
}

WorkloadSpec Share(uint32_t milli, std::vector<std::string> models = {}) {
  WorkloadSpec s = Spec(1, 1, std::move(models));
  s.gpu_milli = milli;
  s.cpu_millis = 2000;
  s.memory_mib = 16 * kGiB;
  return s;
}

WorkloadSpec Mig(const std::string& profile) {
  WorkloadSpec s = Spec(1, 1);
  s.mig_profile = profile;
  s.cpu_millis = 2000;
  s.memory_mib = 16 * kGiB;
  return s;
}

// A fleet's mix: mostly one GPU or less, some 2/4/8-GPU replicas, a few multi-node gangs, some
// model constraints and MIG profiles.
std::vector<Shape> Shapes() {
  const std::vector<std::string> h100 = {"H100-80GB"};
  const std::vector<std::string> big = {"A100-80GB", "H100-80GB"};
  const std::vector<std::string> small = {"L4", "A10"};
  std::vector<Shape> shapes = {
      {30, Spec(1, 1)},
      {6, Spec(1, 1, h100)},
      {4, Spec(1, 1, small)},
      {8, Share(500)},
      {6, Share(250, small)},
      {4, Share(250)},
      {3, Share(500, {"L4"})},
      {8, Spec(1, 2)},
      {6, Spec(1, 4)},
      {3, Spec(1, 4, big)},
      {4, Spec(1, 8, h100)},
      {3, Spec(1, 8, big)},
      {4, Spec(3, 1)},  // replicated inference, no topology
      {1.5, Spec(2, 8, h100, Topology::kSameRack)},
      {0.5, Spec(4, 8, big)},
      {2, Mig("1g.10gb")},
      {1, Mig("3g.40gb")},
  };
  const MigGeometry* geo = FindMigGeometry("H100-80GB");
  for (Shape& s : shapes) {
    const WorkloadSpec& w = s.spec;
    if (!w.mig_profile.empty()) {
      s.milli = uint64_t{kMilliPerGpu} * geo->Find(w.mig_profile)->compute_slices /
                static_cast<uint64_t>(geo->compute_slices);
    } else if (w.gpu_milli > 0) {
      s.milli = w.gpu_milli;
    } else {
      s.milli = uint64_t{kMilliPerGpu} * w.TotalGpus();
    }
  }
  return shapes;
}

// ---- Measuring ----

double ResidentMib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = absl::StrCat(field, ":");
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) == 0) {
      return std::strtod(line.c_str() + prefix.size(), nullptr) / 1024.0;  // kB
    }
  }
  return 0;
}

// CPU time this process has used, in seconds: placements per CPU second are steadier than per
// wall-clock second on a machine shared with other work.
double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double Percentile(std::vector<float>& v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(i), v.end());
  return v[i];
}

// Measured placements of one shape.
struct ShapeStats {
  uint64_t count = 0;
  uint64_t failed = 0;
  double total_us = 0;
  float max_us = 0;
};

struct Running {
  WorkloadId id;
  uint64_t milli;
};

// The steady-state loop: one placement per step; then departures (random running workloads)
// while the pool holds more than the target.
class Stream {
 public:
  Stream(Pool& pool, PlacementEngine& engine, const std::vector<Shape>& shapes,
         uint64_t capacity_milli, double target, uint64_t seed, bool digest)
      : digest_(digest),
        pool_(pool),
        engine_(engine),
        shapes_(shapes),
        target_milli_(static_cast<uint64_t>(target * static_cast<double>(capacity_milli))),
        rng_(seed) {
    std::vector<double> w;
    w.reserve(shapes.size());
    for (const Shape& s : shapes) w.push_back(s.weight);
    pick_ = std::discrete_distribution<size_t>(w.begin(), w.end());
    stats_.resize(shapes.size());
  }

  // One placement (and the departures after it). `latency_us`: Place + Allocate.
  absl::Status Step(float* latency_us) {
    const size_t which = pick_(rng_);
    const Shape& shape = shapes_[which];
    const WorkloadId id = next_id_++;
    const Clock::time_point t0 = Clock::now();
    PlacementDecision d = engine_.Place(pool_, shape.spec, id);
    if (d.assignment) {
      absl::Status s = pool_.Allocate(id, *d.assignment,
                                      HostDemand{shape.spec.cpu_millis, shape.spec.memory_mib});
      if (!s.ok()) {
        return absl::InternalError(absl::StrCat(
            "the pool refused the engine's placement of workload ", id, ": ", s.message()));
      }
    }
    const Clock::time_point t1 = Clock::now();
    if (digest_) Fold(id, d);
    if (latency_us != nullptr) {
      *latency_us = std::chrono::duration<float, std::micro>(t1 - t0).count();
      ShapeStats& st = stats_[which];
      ++st.count;
      st.failed += d.assignment ? 0 : 1;
      st.total_us += *latency_us;
      st.max_us = std::max(st.max_us, *latency_us);
    }
    if (d.assignment) {
      ++placed_;
      held_milli_ += shape.milli;
      running_.push_back({id, shape.milli});
    } else {
      ++failed_;
    }
    while (held_milli_ > target_milli_ && !running_.empty()) {
      const size_t k = std::uniform_int_distribution<size_t>(0, running_.size() - 1)(rng_);
      pool_.Release(running_[k].id);
      held_milli_ -= running_[k].milli;
      running_[k] = running_.back();
      running_.pop_back();
    }
    return absl::OkStatus();
  }

  [[nodiscard]] uint64_t digest() const { return digest_value_; }
  [[nodiscard]] uint64_t held_milli() const { return held_milli_; }
  [[nodiscard]] uint64_t target_milli() const { return target_milli_; }
  [[nodiscard]] uint64_t placed() const { return placed_; }
  [[nodiscard]] uint64_t failed() const { return failed_; }
  [[nodiscard]] size_t running() const { return running_.size(); }
  [[nodiscard]] const std::vector<ShapeStats>& stats() const { return stats_; }
  void ResetCounts() {
    placed_ = failed_ = 0;
    stats_.assign(shapes_.size(), {});
  }

 private:
  // Folds one decision into the digest (std::hash of its text: stable across runs).
  void Fold(WorkloadId id, const PlacementDecision& d) {
    std::string text =
        absl::StrCat(id, d.reason.never_fits() ? " never " : " ", RenderReason(d.reason));
    if (d.assignment) {
      absl::StrAppend(&text, " ", d.assignment->cluster);
      for (const ReplicaAssignment& r : d.assignment->replicas) {
        absl::StrAppend(&text, " ", r.node, ":", absl::StrJoin(r.gpu_indices, ","), ":",
                        r.gpu_milli, ":", r.mig_profile, ":", r.mig_start);
      }
      for (const Repartition& r : d.assignment->repartitions) {
        absl::StrAppend(&text, " ", r.node, "/", r.gpu_uuid, r.mig_enabled ? " on " : " off ",
                        r.reason);
      }
    }
    digest_value_ = (digest_value_ ^ std::hash<std::string>{}(text)) * 1099511628211ULL;
  }

  const bool digest_;
  uint64_t digest_value_ = 14695981039346656037ULL;
  Pool& pool_;
  PlacementEngine& engine_;
  const std::vector<Shape>& shapes_;
  uint64_t target_milli_;
  std::mt19937_64 rng_;
  std::discrete_distribution<size_t> pick_;
  WorkloadId next_id_ = 1;
  uint64_t held_milli_ = 0;
  uint64_t placed_ = 0;
  uint64_t failed_ = 0;
  std::vector<Running> running_;
  std::vector<ShapeStats> stats_;
};

int Fail(const std::string& what) {
  std::cerr << "gpufed-bench placement: " << what << "\n";
  return 2;
}

}  // namespace

int RunPlacementBench(const PlacementBenchOptions& options) {
  if (options.clusters == 0) return Fail("--clusters must be at least 1");
  if (options.gpus < options.clusters) {
    return Fail(absl::StrCat("--gpus (", options.gpus, ") must be at least --clusters (",
                             options.clusters, "): every cluster has a GPU"));
  }
  if (!(options.utilisation > 0 && options.utilisation < 1)) {
    return Fail("--utilisation must be between 0 and 1 (exclusive)");
  }
  PlacementOptions engine_options;
  engine_options.policy = options.policy;
  engine_options.seed = options.seed;
  if (options.max_clusters_scored > 0) {
    engine_options.max_clusters_scored = options.max_clusters_scored;
  }
  absl::StatusOr<std::unique_ptr<PlacementEngine>> engine = PlacementEngine::Create(engine_options);
  if (!engine.ok()) return Fail(absl::StrCat("--policy: ", engine.status().message()));

  // The federation.
  const Clock::time_point build_start = Clock::now();
  std::mt19937_64 fed_rng(options.seed);
  uint64_t nodes = 0;
  Pool pool;
  {
    std::vector<Cluster> federation =
        MakeFederation(options.gpus, options.clusters, fed_rng, &nodes);
    for (const Cluster& c : federation) {
      for (const NodeInfo& n : c.nodes) {
        for (const GpuInfo& g : n.gpus) {
          if (!g.mig_enabled) continue;
          absl::Status s = ValidateMigLayout(*FindMigGeometry(g.model), g.mig_layout);
          if (!s.ok()) return Fail(absl::StrCat("generated MIG layout: ", s.message()));
        }
      }
      pool.UpsertCluster(c);
    }
  }
  const double build_seconds = std::chrono::duration<double>(Clock::now() - build_start).count();

  // The typical workloads the fragmentation-aware policies measure against: a sample of the
  // stream itself.
  const std::vector<Shape> shapes = Shapes();
  {
    std::vector<double> w;
    w.reserve(shapes.size());
    for (const Shape& s : shapes) w.push_back(s.weight);
    std::discrete_distribution<size_t> pick(w.begin(), w.end());
    std::mt19937_64 mix_rng(options.seed + 2);
    std::vector<WorkloadSpec> sample;
    sample.reserve(10000);
    for (int i = 0; i < 10000; ++i) sample.push_back(shapes[pick(mix_rng)].spec);
    (*engine)->SetMix(MixOf(pool, sample));
  }

  const uint64_t capacity_milli = uint64_t{options.gpus} * kMilliPerGpu;
  Stream stream(pool, **engine, shapes, capacity_milli, options.utilisation, options.seed + 1,
                options.digest);

  // Fill to the target (bounded: a pool that stops accepting ends the fill).
  const Clock::time_point fill_start = Clock::now();
  uint64_t fill_steps = 0;
  uint64_t fail_streak = 0;
  while (stream.held_milli() < stream.target_milli() && fail_streak < 1000 &&
         fill_steps < uint64_t{20} * options.gpus) {
    const uint64_t failed = stream.failed();
    if (absl::Status s = stream.Step(nullptr); !s.ok()) return Fail(s.ToString());
    fail_streak = stream.failed() > failed ? fail_streak + 1 : 0;
    ++fill_steps;
  }
  const double fill_seconds = std::chrono::duration<double>(Clock::now() - fill_start).count();
  const uint64_t warmup = options.warmup > 0 ? options.warmup : options.count / 10;
  for (uint64_t i = 0; i < warmup; ++i) {
    if (absl::Status s = stream.Step(nullptr); !s.ok()) return Fail(s.ToString());
  }

  // Measured.
  stream.ResetCounts();
  std::vector<float> latencies(options.count);
  const Clock::time_point start = Clock::now();
  const double cpu_start = CpuSeconds();
  for (uint64_t i = 0; i < options.count; ++i) {
    if (absl::Status s = stream.Step(&latencies[i]); !s.ok()) return Fail(s.ToString());
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const double cpu_seconds = CpuSeconds() - cpu_start;
  const double cpu_rate = cpu_seconds > 0 ? static_cast<double>(options.count) / cpu_seconds : 0;
  const double rate = seconds > 0 ? static_cast<double>(options.count) / seconds : 0;
  const double p50 = Percentile(latencies, 0.50);
  const double p99 = Percentile(latencies, 0.99);
  const double max_us =
      latencies.empty() ? 0 : *std::max_element(latencies.begin(), latencies.end());
  const double utilisation =
      static_cast<double>(stream.held_milli()) / static_cast<double>(capacity_milli);
  const double rss = ResidentMib("VmRSS");
  const double peak_rss = ResidentMib("VmHWM");
  const std::string policy(engine.value()->policy().name());

  std::cout << absl::StrFormat(
      "placement bench: %u GPUs on %llu nodes in %u clusters (built in %.2f s), "
      "policy %s, seed %llu\n"
      "  fill to %.0f%%: %llu placements in %.2f s; warm-up %llu placements\n"
      "  measured: %llu placements in %.3f s = %.0f placements/s "
      "(placed %llu, failed %llu);\n"
      "  CPU time %.3f s = %.0f placements per CPU second\n"
      "  per placement (Place + Allocate): p50 %.1f us, p99 %.1f us, max %.0f us\n"
      "  held at the end: %.1f%% of GPU capacity, %zu workloads running; "
      "RSS %.0f MiB (peak %.0f MiB)\n",
      options.gpus, static_cast<unsigned long long>(nodes), options.clusters, build_seconds, policy,
      static_cast<unsigned long long>(options.seed), options.utilisation * 100,
      static_cast<unsigned long long>(fill_steps), fill_seconds,
      static_cast<unsigned long long>(warmup), static_cast<unsigned long long>(options.count),
      seconds, rate, static_cast<unsigned long long>(stream.placed()),
      static_cast<unsigned long long>(stream.failed()), cpu_seconds, cpu_rate, p50, p99, max_us,
      utilisation * 100, stream.running(), rss, peak_rss);
  std::cout << "  per shape (measured): count, failed, mean us, max us\n";
  for (size_t i = 0; i < shapes.size(); ++i) {
    const ShapeStats& st = stream.stats()[i];
    std::cout << absl::StrFormat(
        "    %-38s %8llu %7llu %9.1f %9.0f\n", ShapeName(shapes[i].spec),
        static_cast<unsigned long long>(st.count), static_cast<unsigned long long>(st.failed),
        st.count > 0 ? st.total_us / static_cast<double>(st.count) : 0.0, st.max_us);
  }
  nlohmann::json out = {
      {"bench", "placement"},
      {"gpus", options.gpus},
      {"clusters", options.clusters},
      {"nodes", nodes},
      {"policy", policy},
      {"seed", options.seed},
      {"count", options.count},
      {"placed", stream.placed()},
      {"failed", stream.failed()},
      {"seconds", seconds},
      {"placements_per_second", rate},
      {"cpu_seconds", cpu_seconds},
      {"placements_per_cpu_second", cpu_rate},
      {"p50_us", p50},
      {"p99_us", p99},
      {"max_us", max_us},
      {"utilisation_target", options.utilisation},
      {"utilisation", utilisation},
      {"max_clusters_scored", engine.value()->options().max_clusters_scored},
      {"rss_mib", rss},
      {"peak_rss_mib", peak_rss},
  };
  if (options.digest) out["decisions_digest"] = absl::StrFormat("%016x", stream.digest());
  std::cout << out.dump() << std::endl;
  return 0;
}

}  // namespace gpufed::bench
