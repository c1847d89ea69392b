// The replay protocol on tiny pools where the answer is known whatever the policy, and
// determinism.

#include "sim/replay.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "federation/policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/headroom.h"
#include "sim/report.h"
#include "tests/support/status_matchers.h"

namespace gpufed::sim {
namespace {

using ::testing::HasSubstr;

OpenbNode Node(const std::string& sn, uint32_t gpus, const std::string& model = "T4") {
  return OpenbNode{sn, 64000, 262144, gpus, gpus > 0 ? model : "", 0};
}

OpenbPod Pod(const std::string& name, uint32_t num_gpu, uint32_t gpu_milli,
             uint64_t cpu_milli = 1000) {
  OpenbPod pod;
  pod.name = name;
  pod.cpu_milli = cpu_milli;
  pod.memory_mib = 1024;
  pod.num_gpu = num_gpu;
  pod.gpu_milli = gpu_milli;
  return pod;
}

OpenbPod TimedPod(const std::string& name, uint32_t num_gpu, uint32_t gpu_milli, int64_t creation,
                  int64_t deletion) {
  OpenbPod pod = Pod(name, num_gpu, gpu_milli);
  pod.creation_time = creation;
  pod.deletion_time = deletion;
  return pod;
}

ReplayOptions Options(const std::string& policy, uint64_t seed, double inflation) {
  ReplayOptions options;
  options.policy = policy;
  options.seed = seed;
  options.inflation = inflation;
  return options;
}

TEST(SnapshotOrderTest, ShuffledOriginalsThenClonesUpToTheTarget) {
  std::vector<OpenbPod> pods = {Pod("a", 1, 1000), Pod("b", 1, 500), Pod("c", 0, 0),
                                Pod("d", 2, 1000)};  // 3,500 milli
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    // 4 GPUs at 2.0: target 8,000 milli.
    std::vector<uint32_t> order = SnapshotArrivalOrder(pods, 4000, 2.0, seed);
    ASSERT_GE(order.size(), 4);
    std::vector<uint32_t> head(order.begin(), order.begin() + 4);
    std::sort(head.begin(), head.end());
    EXPECT_EQ(head, (std::vector<uint32_t>{0, 1, 2, 3})) << "every original pod, once, first";
    uint64_t requested = 0;
    for (uint32_t i : order) requested += pods[i].GpuMilli();
    EXPECT_LE(requested, 8000 + 1000) << "a 2-GPU clone may overshoot by its second GPU";
    // The next draw would have passed the target: it adds at most 1,000 milli per GPU.
    EXPECT_GT(requested, 8000 - 1000);
  }
}

TEST(SnapshotOrderTest, DropsRandomPodsWhenTheOriginalsAskForTooMuch) {
  std::vector<OpenbPod> pods;
  pods.reserve(10);
  for (int i = 0; i < 10; ++i) pods.push_back(Pod(absl::StrCat("p", i), 1, 1000));
  std::vector<uint32_t> order = SnapshotArrivalOrder(pods, 4000, 1.0, 7);
  EXPECT_EQ(order.size(), 4);
  EXPECT_EQ(std::set<uint32_t>(order.begin(), order.end()).size(), 4);
}

TEST(SnapshotOrderTest, SameSeedSameOrderOtherSeedOtherOrder) {
  std::vector<OpenbPod> pods;
  pods.reserve(50);
  for (int i = 0; i < 50; ++i) pods.push_back(Pod(absl::StrCat("p", i), 1, 100 + 10 * i));
  EXPECT_EQ(SnapshotArrivalOrder(pods, 40000, 1.3, 3), SnapshotArrivalOrder(pods, 40000, 1.3, 3));
  EXPECT_NE(SnapshotArrivalOrder(pods, 40000, 1.3, 3), SnapshotArrivalOrder(pods, 40000, 1.3, 4));
}

// Every policy gives the same answer when there is only one way to do it.
class EveryPolicyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPolicyTest, IdenticalSharesFillTwoGpusOneEach) {
  // 2 GPUs, pods of 0.6 GPU, inflation 1.5: 5 pods arrive (3,000 milli); one fits per GPU.
  Trace trace{{Node("n-0", 1), Node("n-1", 1)}, {Pod("p", 1, 600)}};
  absl::StatusOr<ReplayResult> r = Replay(trace, Options(GetParam(), 1, 1.5));
  ASSERT_OK(r);
  EXPECT_EQ(r->policy, GetParam());
  EXPECT_EQ(r->gpus_total, 2);
  EXPECT_EQ(r->pods, 5);
  EXPECT_EQ(r->placed, 2);
  EXPECT_EQ(r->failed, 3);
  EXPECT_EQ(r->failed_gpu_milli, 1800);
  EXPECT_DOUBLE_EQ(r->final_allocation_ratio, 0.6);
  EXPECT_DOUBLE_EQ(r->unallocated_gpus, 0.8);
  ASSERT_FALSE(r->curve.empty());
  EXPECT_DOUBLE_EQ(r->curve.back().arrived_ratio, 1.5);
  EXPECT_DOUBLE_EQ(r->curve.back().allocation_ratio, 0.6);
  // Arrived 0.3, 0.6 (both placed), then 0.9, 1.2, 1.5 at 0.6 allocated.
  ASSERT_EQ(r->curve.size(), 5);
  EXPECT_DOUBLE_EQ(r->curve[0].arrived_ratio, 0.3);
  EXPECT_DOUBLE_EQ(r->curve[0].allocation_ratio, 0.3);
  EXPECT_DOUBLE_EQ(r->curve[2].allocation_ratio, 0.6);
  // Samples whose arrived demand rounds to 150 %: only the last one.
  EXPECT_DOUBLE_EQ(r->paper_allocation_ratio, 0.6);
}

TEST_P(EveryPolicyTest, SharesOfSixAndFiveTenths) {
  // 2 GPUs; pods of 0.6 and 0.5 GPU at inflation 1.0: the two originals and one clone arrive.
  // The 0.6 takes one GPU and the 0.5 the other whatever the order; a third 0.5 fits next to
  // the first 0.5, a third 0.6 fits nowhere.
  Trace trace{{Node("n-0", 1), Node("n-1", 1)}, {Pod("six", 1, 600), Pod("five", 1, 500)}};
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    std::vector<uint32_t> order = SnapshotArrivalOrder(trace.pods, 2000, 1.0, seed);
    ASSERT_EQ(order.size(), 3);
    const bool third_is_six = order[2] == 0;
    absl::StatusOr<ReplayResult> r = Replay(trace, Options(GetParam(), seed, 1.0));
    ASSERT_OK(r);
    EXPECT_EQ(r->pods, 3);
    EXPECT_EQ(r->failed, third_is_six ? 1 : 0) << "seed " << seed;
    EXPECT_EQ(r->placed, third_is_six ? 2 : 3) << "seed " << seed;
    EXPECT_DOUBLE_EQ(r->final_allocation_ratio, third_is_six ? 0.55 : 0.8) << "seed " << seed;
  }
}

TEST_P(EveryPolicyTest, CpuOnlyPodsTakeHostResourcesButNoGpu) {
  // One node, 1 GPU, 64 cores. Two CPU-only pods of 40 cores: the second does not fit. GPU pods
  // ask for 1 core each.
  Trace trace{{Node("n-0", 1)}, {Pod("cpu", 0, 0, 40000), Pod("gpu", 1, 1000)}};
  absl::StatusOr<ReplayResult> r = Replay(trace, Options(GetParam(), 5, 1.0));
  ASSERT_OK(r);
  // Originals: 1,000 milli; the clones stop at the first GPU pod drawn. The GPU pod is placed.
  EXPECT_DOUBLE_EQ(r->final_allocation_ratio, 1.0);
  uint64_t cpu_pods = r->pods - 1;
  EXPECT_EQ(r->placed, 2);
  EXPECT_EQ(r->failed, cpu_pods - 1);
}

TEST_P(EveryPolicyTest, TimeModeQueuesBackfillsAndFreesOnDeparture) {
  // 1 node with 2 GPUs. a: 1 GPU 0..100. x: 2 GPUs at 10, waits until both are free.
  // c: half a GPU at 20, goes past x onto the free GPU (backfill), leaves at 150.
  // big: 3 GPUs, never fits. x starts at 150, runs 390 s: still running at the end (400).
  Trace trace{{Node("n-0", 2)},
              {TimedPod("a", 1, 1000, 0, 100), TimedPod("x", 2, 1000, 10, 400),
               TimedPod("big", 3, 1000, 12, 13), TimedPod("c", 1, 500, 20, 150)}};
  ReplayOptions options = Options(GetParam(), 1, 1.0);
  options.mode = ReplayMode::kTime;
  options.utilisation_points = 5;  // at 0, 100, 200, 300, 400
  absl::StatusOr<ReplayResult> r = Replay(trace, options);
  ASSERT_OK(r);
  ASSERT_TRUE(r->time.has_value());
  const TimeModeResult& t = *r->time;
  EXPECT_EQ(r->pods, 4);
  EXPECT_EQ(t.start_time, 0);
  EXPECT_EQ(t.end_time, 400);
  EXPECT_EQ(t.started, 3);
  EXPECT_EQ(r->placed, 3);
  EXPECT_EQ(t.rejected, 1);
  EXPECT_EQ(r->failed, 1);
  EXPECT_EQ(t.completed, 2);
  EXPECT_EQ(t.still_running, 1);
  EXPECT_EQ(t.still_queued, 0);
  // Waits: a 0, c 0, x 140.
  EXPECT_NEAR(t.wait.mean_seconds, 140.0 / 3, 1e-9);
  EXPECT_DOUBLE_EQ(t.wait.p50_seconds, 0);
  EXPECT_DOUBLE_EQ(t.wait.p99_seconds, 140);
  EXPECT_DOUBLE_EQ(t.wait.max_seconds, 140);
  // 1000 milli for 20 s, 1500 for 80 s, 500 for 50 s, 2000 for 250 s; of 2000 over 400 s.
  EXPECT_DOUBLE_EQ(t.mean_allocation_ratio, 665000.0 / (400 * 2000));
  EXPECT_DOUBLE_EQ(r->final_allocation_ratio, 1.0);
  ASSERT_EQ(t.utilisation.size(), 5);
  EXPECT_EQ(t.utilisation[1].time, 100);
  // After the events at 100: a has left, x still waits.
  EXPECT_DOUBLE_EQ(t.utilisation[0].allocation_ratio, 0.5);
  EXPECT_DOUBLE_EQ(t.utilisation[1].allocation_ratio, 0.25);
  EXPECT_EQ(t.utilisation[1].queued, 1);   // x
  EXPECT_EQ(t.utilisation[1].running, 1);  // c
  EXPECT_DOUBLE_EQ(t.utilisation[4].allocation_ratio, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Policies, EveryPolicyTest, ::testing::ValuesIn(PolicyNames()),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// --compress brings arrivals closer while each pod runs as long as in the trace: b, 1,000 s
// after a in the trace, arrives 10 s after it at 100x and waits for a's GPU.
TEST(ReplayTest, TimeModeCompressionMakesPodsContend) {
  Trace trace{{Node("n-0", 1)},
              {TimedPod("a", 1, 1000, 5000, 5100), TimedPod("b", 1, 1000, 6000, 6100)}};
  ReplayOptions options = Options("gpufed", 1, 1.0);
  options.mode = ReplayMode::kTime;
  absl::StatusOr<ReplayResult> plain = Replay(trace, options);
  ASSERT_OK(plain);
  EXPECT_DOUBLE_EQ(plain->time->compression, 1);
  EXPECT_EQ(plain->time->end_time, 6100);
  EXPECT_DOUBLE_EQ(plain->time->wait.max_seconds, 0);
  EXPECT_EQ(plain->time->peak_queued, 0);
  EXPECT_DOUBLE_EQ(plain->time->peak_allocation_ratio, 1.0);

  options.compression = 100;
  absl::StatusOr<ReplayResult> packed = Replay(trace, options);
  ASSERT_OK(packed);
  const TimeModeResult& t = *packed->time;
  EXPECT_DOUBLE_EQ(t.compression, 100);
  EXPECT_EQ(t.start_time, 5000);
  EXPECT_EQ(t.end_time, 5110);  // b's arrival (5010) plus its 100 s in the trace
  EXPECT_EQ(t.started, 2);
  EXPECT_DOUBLE_EQ(t.wait.max_seconds, 90);  // from 5010 until a leaves at 5100
  EXPECT_EQ(t.peak_queued, 1);
  EXPECT_EQ(t.completed, 1);  // b, started at 5100, runs until 5200
  EXPECT_EQ(t.still_running, 1);

  options.compression = 0.5;
  absl::StatusOr<ReplayResult> bad = Replay(trace, options);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("compression"));
}

TEST(ReplayTest, RejectsBadInput) {
  Trace no_gpus{{Node("n-0", 0)}, {Pod("p", 1, 1000)}};
  EXPECT_THAT(Replay(no_gpus, Options("first-fit", 1, 1.3)).status().message(),
              HasSubstr("no GPUs"));
  Trace cpu_only{{Node("n-0", 1)}, {Pod("p", 0, 0)}};
  EXPECT_THAT(Replay(cpu_only, Options("first-fit", 1, 1.3)).status().message(),
              HasSubstr("requests no GPUs"));
  Trace ok{{Node("n-0", 1)}, {Pod("p", 1, 1000)}};
  EXPECT_EQ(Replay(ok, Options("no-such-policy", 1, 1.3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Replay(ok, Options("first-fit", 1, 0)).status().message(), HasSubstr("inflation"));

  ReplayOptions time = Options("first-fit", 1, 1.0);
  time.mode = ReplayMode::kTime;
  absl::StatusOr<ReplayResult> untimed = Replay(ok, time);
  EXPECT_EQ(untimed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(untimed.status().message(), HasSubstr("pod p"));
  EXPECT_THAT(untimed.status().message(), HasSubstr("creation_time"));
}

// A synthetic cluster big enough for policies and ties to matter.
Trace SyntheticTrace() {
  std::mt19937_64 rng(12345);
  Trace trace;
  const char* models[] = {"T4", "P100", "G2"};
  for (int n = 0; n < 40; ++n) {
    trace.nodes.push_back(Node(absl::StrCat("n-", n), n % 3 == 0 ? 8 : 2, models[n % 3]));
  }
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<int> milli(1, 9);
  for (int p = 0; p < 300; ++p) {
    const int k = kind(rng);
    OpenbPod pod = k < 2   ? Pod("p", 0, 0, 4000)
                   : k < 6 ? Pod("p", 1, static_cast<uint32_t>(100 * milli(rng)))
                   : k < 9 ? Pod("p", 1, 1000)
                           : Pod("p", 4, 1000);
    pod.name = absl::StrCat("p-", p);
    if (p % 7 == 0) pod.gpu_spec = {models[p % 3]};
    trace.pods.push_back(pod);
  }
  return trace;
}

TEST(ReplayTest, SameSeedSameResultOtherSeedOtherResult) {
  const Trace trace = SyntheticTrace();
  for (const std::string& policy : PolicyNames()) {
    absl::StatusOr<ReplayResult> a = Replay(trace, Options(policy, 11, 1.3));
    absl::StatusOr<ReplayResult> b = Replay(trace, Options(policy, 11, 1.3));
    absl::StatusOr<ReplayResult> c = Replay(trace, Options(policy, 12, 1.3));
    ASSERT_OK(a) << policy;
    ASSERT_OK(b) << policy;
    ASSERT_OK(c) << policy;
    nlohmann::json ja = ToJson(*a), jb = ToJson(*b), jc = ToJson(*c);
    for (nlohmann::json* j : {&ja, &jb, &jc}) {
      j->erase("wall_seconds");
      j->erase("cpu_seconds");
      j->erase("seed");
    }
    EXPECT_EQ(ja.dump(), jb.dump()) << policy;
    EXPECT_NE(ja.dump(), jc.dump()) << policy;
    EXPECT_GE(a->final_allocation_ratio, 0);
    EXPECT_LE(a->final_allocation_ratio, 1);
    EXPECT_EQ(a->placed + a->failed, a->pods);
  }
}

TEST(TieOrderTest, NamesRoundTripAndUnknownNamesAreRefused) {
  for (TieOrder order : {TieOrder::kSeeded, TieOrder::kList, TieOrder::kRandom}) {
    EXPECT_EQ(ParseTieOrder(TieOrderName(order)), order);
  }
  EXPECT_EQ(ParseTieOrder("first"), std::nullopt);
  EXPECT_EQ(ReplayOptions().tie_order, TieOrder::kSeeded);  // the paper's protocol by default
}

TEST(TieOrderTest, SeededNodeOrderIsAPermutationDrawnPerSeed) {
  const std::vector<uint32_t> a = SeededNodeOrder(50, 1);
  std::vector<uint32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (uint32_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  EXPECT_EQ(SeededNodeOrder(50, 1), a);
  EXPECT_NE(SeededNodeOrder(50, 2), a);
  // Its own stream: not the order the same seed gives the arrivals.
  std::vector<OpenbPod> pods;
  pods.reserve(50);
  for (int i = 0; i < 50; ++i) pods.push_back(Pod(absl::StrCat("p", i), 1, 1000));
  EXPECT_NE(SnapshotArrivalOrder(pods, 50000, 1.0, 1), a);
}

// Nodes that tie for whole-GPU pods but not for what comes after them: half have CPU for the
// two GPU pods only, half for CPU-only pods too. Which of them the GPU pods take decides how many
// CPU-only pods fit.
Trace LopsidedTrace() {
  Trace trace;
  for (int n = 0; n < 8; ++n) {
    trace.nodes.push_back(
        OpenbNode{absl::StrCat("n-", n), n % 2 == 0 ? 16000U : 64000U, 262144, 2, "T4", n + 2});
  }
  for (int p = 0; p < 10; ++p) trace.pods.push_back(Pod(absl::StrCat("g-", p), 1, 1000, 8000));
  for (int p = 0; p < 10; ++p) trace.pods.push_back(Pod(absl::StrCat("c-", p), 0, 0, 28000));
  return trace;
}

// Seeded ties are the first of equal nodes in the seed's node order: the same replay as listing
// the nodes in that order and taking the first in the list.
TEST(TieOrderTest, SeededIsTheListOrderOfTheSeedsPermutation) {
  bool some_differ = false;
  for (const Trace& trace : {SyntheticTrace(), LopsidedTrace()}) {
    for (const std::string& policy : {"fgd", "gpufed", "best-fit"}) {
      for (uint64_t seed : {1, 2, 3}) {
        ReplayOptions seeded = Options(policy, seed, 1.3);
        absl::StatusOr<ReplayResult> a = Replay(trace, seeded);
        Trace permuted = trace;
        permuted.nodes.clear();
        for (uint32_t i : SeededNodeOrder(trace.nodes.size(), seed)) {
          permuted.nodes.push_back(trace.nodes[i]);
        }
        ReplayOptions list = seeded;
        list.tie_order = TieOrder::kList;
        absl::StatusOr<ReplayResult> b = Replay(permuted, list);
        absl::StatusOr<ReplayResult> c = Replay(trace, list);
        ASSERT_OK(a);
        ASSERT_OK(b);
        ASSERT_OK(c);
        EXPECT_EQ(a->tie_order, TieOrder::kSeeded);
        EXPECT_EQ(b->tie_order, TieOrder::kList);
        nlohmann::json ja = ToJson(*a), jb = ToJson(*b), jc = ToJson(*c);
        for (nlohmann::json* j : {&ja, &jb, &jc}) {
          j->erase("wall_seconds");
          j->erase("cpu_seconds");
          j->erase("tie_order");
        }
        EXPECT_EQ(ja.dump(), jb.dump()) << policy << " seed " << seed;
        some_differ = some_differ || ja.dump() != jc.dump();
      }
    }
  }
  EXPECT_TRUE(some_differ) << "the tie order never mattered";
}

OpenbPod Share(uint32_t milli, int i) { return Pod(absl::StrCat("s", milli, "-", i), 1, milli); }

TEST(HeadroomTest, SliversLeftByLargeSharesLessWhatCouldFillThem) {
  // Ten GPUs. Slivers: three of 190 (810-milli shares), two of 300 (700). Fillers: 100, 150,
  // 250. At t = 190: 570 - 250 = 320; at t = 300: 1170 - 500 = 670, the most.
  std::vector<OpenbPod> pods = {Share(810, 0),     Share(810, 1),   Share(810, 2), Share(700, 0),
                                Share(700, 1),     Share(100, 0),   Share(150, 0), Share(250, 0),
                                Share(500, 0),  // not large: two of them share a GPU
                                Pod("w", 2, 1000), Pod("cpu", 0, 0)};
  std::vector<uint32_t> all(pods.size());
  std::iota(all.begin(), all.end(), 0);
  Headroom h = SliverBound(pods, all, 10000);
  EXPECT_EQ(h.large_shares, 5);
  EXPECT_EQ(h.prefix_pods, pods.size());
  EXPECT_EQ(h.stranded_milli, 670);
  EXPECT_EQ(h.threshold, 300);
  EXPECT_DOUBLE_EQ(h.allocation_bound, 1 - 670.0 / 10000);

  // Fillers enough for every sliver: no bound below 1.
  for (int i = 0; i < 12; ++i) pods.push_back(Share(100, i + 1));
  all.resize(pods.size());
  std::iota(all.begin(), all.end(), 0);
  h = SliverBound(pods, all, 10000);
  EXPECT_EQ(h.stranded_milli, 0);
  EXPECT_DOUBLE_EQ(h.allocation_bound, 1);
}

TEST(HeadroomTest, TheRunsOwnBoundLeavesOutTheLargeSharesItFailed) {
  // Five GPUs; two 810 shares and one 700. Without the failed 700 share only 2 x 190 count.
  std::vector<OpenbPod> pods = {Share(810, 0), Share(700, 0), Share(810, 1)};
  const std::vector<bool> failed = {false, true, false};
  EXPECT_EQ(SliverBound(pods, {0, 1, 2}, 5000).stranded_milli, 680);
  EXPECT_EQ(SliverBound(pods, {0, 1, 2}, 5000, &failed).stranded_milli, 380);
}

TEST(HeadroomTest, OnlyLargeSharesArrivingBeforeCapacityIsRequestedCount) {
  // Two GPUs: the 2-GPU pod fills the requests up to capacity, so the 810 share after it is
  // outside the prefix (a policy may rightly fail it), while its filler still counts.
  std::vector<OpenbPod> pods = {Share(810, 0), Pod("w", 1, 1000), Share(810, 1), Share(100, 0)};
  Headroom h = SliverBound(pods, {0, 1, 2, 3}, 2000);
  EXPECT_EQ(h.prefix_pods, 2);
  EXPECT_EQ(h.large_shares, 1);
  EXPECT_EQ(h.stranded_milli, 90);  // 190 - 100
}

// The bound holds for every policy on runs that place the large shares it assumes placed.
TEST(HeadroomTest, NoPolicyPassesTheBoundWhenItsPremiseHolds) {
  Trace trace = SyntheticTrace();
  for (int i = 0; i < 60; ++i) trace.pods.push_back(Share(810, i));
  for (const std::string& policy : PolicyNames()) {
    for (uint64_t seed : {1, 2, 3}) {
      absl::StatusOr<ReplayResult> r = Replay(trace, Options(policy, seed, 1.3));
      ASSERT_OK(r);
      EXPECT_LT(r->allocation_bound, 1) << "the 810 shares strand something";
      if (r->bound_premise_failures == 0) {
        EXPECT_LE(r->final_allocation_ratio, r->allocation_bound + 1e-12) << policy;
        EXPECT_LE(r->paper_allocation_ratio, r->allocation_bound + 1e-12) << policy;
        EXPECT_DOUBLE_EQ(r->run_allocation_bound, r->allocation_bound) << policy;
      }
      // The run's own bound always holds, and is never below the policy-independent one.
      EXPECT_LE(r->final_allocation_ratio, r->run_allocation_bound + 1e-12) << policy;
      EXPECT_GE(r->run_allocation_bound, r->allocation_bound) << policy;
    }
  }
}

TEST(ReplayTest, ReportsProgressUpToTheTotal) {
  const Trace trace = SyntheticTrace();
  std::vector<ReplayProgress> seen;
  absl::StatusOr<ReplayResult> r = Replay(trace, Options("best-fit", 1, 1.3),
                                          [&](const ReplayProgress& p) { seen.push_back(p); });
  ASSERT_OK(r);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().done, r->pods);
  EXPECT_EQ(seen.back().total, r->pods);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end(),
                             [](const auto& x, const auto& y) { return x.done < y.done; }));
}

TEST(ReportTest, SummaryIsTheMeanPerPolicy) {
  ReplayResult a;
  a.policy = "fgd";
  a.seed = 1;
  a.final_allocation_ratio = 0.9;
  a.wall_seconds = 1;
  ReplayResult b = a;
  b.seed = 2;
  b.final_allocation_ratio = 0.8;
  b.wall_seconds = 3;
  ReplayResult c = a;
  c.policy = "random";
  std::vector<PolicySummary> s = Summarise({a, b, c});
  ASSERT_EQ(s.size(), 2);
  EXPECT_EQ(s[0].policy, "fgd");
  EXPECT_EQ(s[0].seeds, (std::vector<uint64_t>{1, 2}));
  EXPECT_DOUBLE_EQ(s[0].mean_final_allocation_ratio, 0.85);
  EXPECT_DOUBLE_EQ(s[0].mean_wall_seconds, 2);
  EXPECT_DOUBLE_EQ(s[0].max_wall_seconds, 3);
  EXPECT_EQ(s[1].policy, "random");
  EXPECT_DOUBLE_EQ(s[1].stderr_paper_allocation_ratio, 0);  // one run
}

TEST(ReportTest, SummaryCarriesTheStandardErrorAndTheBound) {
  ReplayResult a;
  a.policy = "gpufed";
  a.paper_allocation_ratio = 0.9;
  a.allocation_bound = 0.96;
  ReplayResult b = a;
  b.paper_allocation_ratio = 0.8;
  b.allocation_bound = 0.94;
  b.bound_premise_failures = 2;
  std::vector<PolicySummary> s = Summarise({a, b});
  ASSERT_EQ(s.size(), 1);
  EXPECT_DOUBLE_EQ(s[0].mean_paper_allocation_ratio, 0.85);
  // Sample standard deviation 0.0707..., over sqrt(2).
  EXPECT_NEAR(s[0].stderr_paper_allocation_ratio, 0.05, 1e-12);
  EXPECT_DOUBLE_EQ(s[0].mean_allocation_bound, 0.95);
  EXPECT_EQ(s[0].bound_premise_failures, 2);
}

}  // namespace
}  // namespace gpufed::sim
