// The scheduler's own shortcut changes no decision: with SchedulerOptions::reuse_failed_shapes on
// and off, many random federations and queues give the same placements, in the same cycles, and
// the same reasons (codes and figures) for what waits. (The placement engine's accelerations have
// their own differential test in determinism_test.cc.)

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "federation/scheduler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/memory_store.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed::testing {
namespace {

const std::vector<std::string> kModels = {"H100-80GB", "A100-80GB", "L4"};

// A random workload of tenant "acme", project "research": whole GPUs, often gangs, sometimes
// bound to a model or a topology. Few distinct shapes, so that shapes repeat within a cycle.
WorkloadSpec RandomSpec(std::mt19937_64& rng, int n) {
  auto pick = [&rng](int below) { return static_cast<int>(rng() % below); };
  const uint32_t gpus[] = {1, 2, 4, 8};
  WorkloadSpec spec = Gpus(absl::StrCat("w", n), gpus[pick(4)], 1 + pick(3));
  if (pick(3) == 0) spec.gpu_models = {kModels[pick(3)]};
  if (pick(4) == 0)
    spec.topology = spec.gpus_per_replica > 1 ? Topology::kSameNvlinkDomain : Topology::kSameRack;
  spec.priority = pick(3);
  return spec;
}

// One run: a random federation from `seed`, 150 workloads at first and more between cycles, a
// share of what runs ending between cycles. Returns what each cycle decided, one line per cycle:
// what it placed where, and the stored reason of every workload still waiting.
std::vector<std::string> Transcript(uint64_t seed, bool reuse_failed_shapes) {
  std::mt19937_64 rng(seed);
  auto pick = [&rng](int below) { return static_cast<int>(rng() % below); };
  MemoryStore store;
  EXPECT_OK(store.CreateTenant(Tenant{"acme", "", {}}));
  EXPECT_OK(store.CreateProject(Project{"acme", "research", {}}));
  const int clusters = 1 + pick(3);
  for (int c = 0; c < clusters; ++c) {
    Cluster cluster = MakeCluster(absl::StrCat("c", c), 1 + pick(4), pick(2) == 0 ? 4 : 8,
                                  kModels[pick(3)], 81559, pick(2) == 0);
    EXPECT_OK(store.RegisterCluster(cluster.info, cluster.nodes));
  }
  SchedulerOptions options;
  options.max_considered = pick(2) == 0 ? 40 : 2000;
  options.reuse_failed_shapes = reuse_failed_shapes;
  Scheduler scheduler(&store, &store, options);

  int submitted = 0;
  std::vector<WorkloadId> waiting;
  auto submit = [&](int count) {
    for (int i = 0; i < count; ++i) {
      absl::StatusOr<SubmitResult> r =
          store.Submit(RandomSpec(rng, submitted++), scheduler.QueuedReason());
      EXPECT_OK(r);
      if (!r.ok()) continue;
      scheduler.NotifySubmitted(r->workload);
      waiting.push_back(r->workload.id);
    }
  };
  submit(150);
  EXPECT_OK(scheduler.Rebuild());

  std::vector<std::string> transcript;
  std::vector<WorkloadId> running;
  for (int cycle = 0; cycle < 12; ++cycle) {
    absl::StatusOr<CycleResult> result = scheduler.RunCycle();
    EXPECT_OK(result);
    if (!result.ok()) break;
    std::string line;
    for (const Workload& w : result->placed) {
      absl::StrAppend(&line, w.id, "@", w.assignment.cluster);
      for (const ReplicaAssignment& r : w.assignment.replicas) {
        absl::StrAppend(&line, ":", r.node, "[", absl::StrJoin(r.gpu_uuids, ","), "]");
      }
      absl::StrAppend(&line, " ");
      running.push_back(w.id);
    }
    absl::StrAppend(&line, "| ");
    std::vector<WorkloadId> still;
    for (WorkloadId id : waiting) {
      absl::StatusOr<Workload> w = store.Get(id);
      EXPECT_OK(w);
      if (!w.ok() || w->state != WorkloadState::kPending) continue;
      still.push_back(id);
      absl::StrAppend(&line, id, ":", ReasonCodeName(w->pending_reason.code), "{");
      for (const ReasonFigure& f : w->pending_reason.figures) {
        absl::StrAppend(&line, f.name, "=",
                        std::holds_alternative<int64_t>(f.value)
                            ? absl::StrCat(std::get<int64_t>(f.value))
                            : absl::StrReplaceAll(std::get<std::string>(f.value), {{" ", "_"}}),
                        ",");
      }
      absl::StrAppend(&line, "} ");
    }
    waiting = std::move(still);
    transcript.push_back(std::move(line));

    // About a third of what runs ends; a few more workloads arrive.
    std::vector<WorkloadId> kept;
    for (WorkloadId id : running) {
      if (pick(3) != 0) {
        kept.push_back(id);
        continue;
      }
      for (WorkloadState to : {WorkloadState::kRunning, WorkloadState::kSucceeded}) {
        Transition t;
        t.id = id;
        t.from = to == WorkloadState::kRunning ? WorkloadState::kPlaced : WorkloadState::kRunning;
        t.to = to;
        t.actor = "agent:test";
        EXPECT_OK(store.ApplyTransitions({t}));
      }
      scheduler.NotifyReleased(id);
    }
    running = std::move(kept);
    submit(pick(20));
  }
  return transcript;
}

// What differs between two transcript lines, token by token ("" when nothing).
std::string Diff(const std::string& a, const std::string& b) {
  const std::vector<std::string> ta = absl::StrSplit(a, ' ', absl::SkipEmpty());
  const std::vector<std::string> tb = absl::StrSplit(b, ' ', absl::SkipEmpty());
  std::string out;
  for (size_t i = 0; i < std::max(ta.size(), tb.size()); ++i) {
    const std::string x = i < ta.size() ? ta[i] : "-";
    const std::string y = i < tb.size() ? tb[i] : "-";
    if (x != y) absl::StrAppend(&out, x, " vs ", y, "; ");
  }
  return out;
}

TEST(SchedulerDifferentialTest, ReusingFailedShapesChangesNoDecision) {
  int placing = 0;
  int leaving_work = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    const std::vector<std::string> with = Transcript(seed, true);
    const std::vector<std::string> without = Transcript(seed, false);
    ASSERT_EQ(with.size(), without.size()) << "seed " << seed;
    for (size_t c = 0; c < with.size(); ++c) {
      ASSERT_EQ(Diff(with[c], without[c]), "") << "seed " << seed << ", cycle " << c;
    }
    for (const std::string& line : with) {
      placing += line.find('@') != std::string::npos ? 1 : 0;
      leaving_work += line.find(':', line.find('|')) != std::string::npos ? 1 : 0;
    }
  }
  // The runs are not vacuous: many cycles placed work, and many left work waiting.
  EXPECT_GT(placing, 100);
  EXPECT_GT(leaving_work, 100);
}

}  // namespace
}  // namespace gpufed::testing
