// Each placement policy on tiny pools where its choice follows from its definition (the FGD
// authors' simulator for random, best-fit, dot-product, gpu-packing and fgd), the fragmentation
// measure on hand-computed nodes, MakePolicy's errors, and MixOf.

#include "federation/policy.h"

#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "federation/placement.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/placement_fixtures.h"

namespace gpufed {
namespace {

using testing::ClusterOf;
using testing::Gpus;
using testing::Node;
using testing::Options;
using testing::PlaceWith;
using testing::ShareOn;
using testing::ShareSpec;
using testing::Spec;
using testing::WholeOn;

Demand Whole(uint32_t gpus, uint64_t cpu = 0) {
  Demand d;
  d.kind = Demand::Kind::kWhole;
  d.gpus = gpus;
  d.milli = kMilliPerGpu;
  d.cpu_millis = cpu;
  return d;
}

Demand Share(uint32_t milli, uint64_t cpu = 0) {
  Demand d;
  d.kind = Demand::Kind::kShare;
  d.gpus = 1;
  d.milli = milli;
  d.cpu_millis = cpu;
  return d;
}

Demand CpuOnly(uint64_t cpu) {
  Demand d;
  d.kind = Demand::Kind::kNone;
  d.gpus = 0;
  d.milli = 0;
  d.cpu_millis = cpu;
  return d;
}

NodeView View(std::vector<uint32_t> milli_free, uint64_t cpu_free = kUnlimited,
              uint64_t cpu_total = 0) {
  NodeView v;
  v.cpu_free = cpu_free;
  v.cpu_total = cpu_total;
  v.milli_free.assign(milli_free.begin(), milli_free.end());
  v.gpu_total = static_cast<uint32_t>(milli_free.size());
  return v;
}

std::unique_ptr<PlacementPolicy> Policy(const std::string& name) {
  auto p = MakePolicy(name);
  EXPECT_OK(p);
  return *std::move(p);
}

// The node (and GPU indices) where one replica of `spec` goes.
std::pair<std::string, std::vector<uint32_t>> Where(const Pool& pool, const WorkloadSpec& spec,
                                                    const std::string& policy, uint64_t seed = 1,
                                                    bool random_ties = false,
                                                    const WorkloadMix* mix = nullptr) {
  auto engine = PlacementEngine::Create(Options(policy, seed, random_ties));
  EXPECT_OK(engine);
  if (mix != nullptr) (*engine)->SetMix(*mix);
  PlacementDecision d = (*engine)->Place(pool, spec);
  EXPECT_TRUE(d.assignment.has_value()) << d.reason;
  if (!d.assignment) return {};
  return {d.assignment->replicas[0].node, d.assignment->replicas[0].gpu_indices};
}

TEST(MakePolicyTest, KnownNamesAndUnknownName) {
  for (const std::string& name : PolicyNames()) {
    auto p = MakePolicy(name);
    ASSERT_OK(p) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  EXPECT_EQ(PolicyNames().size(), 7u);
  auto bad = MakePolicy("tetris");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(bad.status().message());
  EXPECT_NE(message.find("policy"), std::string::npos) << message;
  EXPECT_NE(message.find("\"tetris\""), std::string::npos) << message;
  for (const std::string& name : PolicyNames()) {
    EXPECT_NE(message.find(name), std::string::npos) << message;
  }
  PlacementOptions o;
  o.policy = "";
  EXPECT_EQ(PlacementEngine::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// Three 4-GPU nodes: n0 empty, n1 with one GPU free, n2 with two free.
Pool ThreeNodes() {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("n0", Gpus("n0", 4, "L4")), Node("n1", Gpus("n1", 4, "L4")),
                      Node("n2", Gpus("n2", 4, "L4"))}));
  EXPECT_OK(pool.Allocate(1, WholeOn("c", "n1", {0, 1, 2})));
  EXPECT_OK(pool.Allocate(2, WholeOn("c", "n2", {1, 3})));
  return pool;
}

TEST(FirstFitTest, PicksTheFirstNodeThatFits) {
  Pool pool = ThreeNodes();
  EXPECT_EQ(Where(pool, Spec(1, 1), "first-fit").first, "n0");
  EXPECT_EQ(Where(pool, Spec(1, 1), "first-fit", 99, true).first, "n0") << "no ties to break";
  ASSERT_OK(pool.Allocate(3, WholeOn("c", "n0", {0, 1, 2})));
  EXPECT_EQ(Where(pool, Spec(1, 2), "first-fit").first, "n2");  // n0 and n1 have one left
  // A share goes to the first GPU that holds it.
  ASSERT_OK(pool.Allocate(4, ShareOn("c", "n0", 3, 700)));
  auto [node, gpus] = Where(pool, ShareSpec(300), "first-fit");
  EXPECT_EQ(node, "n0");
  EXPECT_EQ(gpus, (std::vector<uint32_t>{3}));
}

TEST(BestFitTest, PicksTheFullestNode) {
  Pool pool = ThreeNodes();
  EXPECT_EQ(Where(pool, Spec(1, 1), "best-fit", 5, true).first, "n1");
  EXPECT_EQ(Where(pool, Spec(1, 2), "best-fit", 5, true).first, "n2");
  // Scores: (1 - 0.5 * cpu_left/128000 - 0.5 * gpu_left/8000) * 100, truncated.
  auto p = Policy("best-fit");
  NodeView one = View({1000});
  one.whole_pick = {0};
  EXPECT_EQ(p->Choose(one, Whole(1), 0).score, 100);
  NodeView two = View({1000, 1000});
  two.whole_pick = {0};
  EXPECT_EQ(p->Choose(two, Whole(1), 0).score, 93);  // 1 - 0.5 * 1000/8000 = 0.9375
}

// Dot product and best fit disagree when CPU matters: a 64-core replica with one GPU.
//   a: 128 cores, 1 of 8 GPUs free   b: 64 cores, 8 GPUs free
TEST(DotProductTest, FollowsItsFormula) {
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("a", Gpus("a", 8, "L4"), "", "", 128000, 0),
                                     Node("b", Gpus("b", 8, "L4"), "", "", 64000, 0)}));
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "a", {0, 1, 2, 3, 4, 5, 6})));
  WorkloadSpec spec = Spec(1, 1);
  spec.cpu_millis = 64000;
  EXPECT_EQ(Where(pool, spec, "dot-product").first, "b");
  EXPECT_EQ(Where(pool, spec, "best-fit").first, "a");

  // a: dot = 1 * 0.5 + 0.125 * 0.125 = 0.515625 -> trunc(100 * (1 - 0.2578125)) = 74
  // b: dot = 0.5 * 0.5 + 1 * 0.125 = 0.375      -> trunc(100 * (1 - 0.1875)) = 81
  auto dp = Policy("dot-product");
  NodeView va = View({0, 0, 0, 0, 0, 0, 0, 1000}, 128000, 128000);
  va.whole_pick = {7};
  NodeView vb = View({1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, 64000, 64000);
  vb.whole_pick = {0};
  EXPECT_EQ(dp->Choose(va, Whole(1, 64000), 0).score, 74);
  EXPECT_EQ(dp->Choose(vb, Whole(1, 64000), 1).score, 81);
  // Best fit: a: 1 - 0.5 * 0.5 - 0 = 75; b: 1 - 0 - 0.5 * 0.875 = 56.25 -> 56.
  auto bf = Policy("best-fit");
  EXPECT_EQ(bf->Choose(va, Whole(1, 64000), 0).score, 75);
  EXPECT_EQ(bf->Choose(vb, Whole(1, 64000), 1).score, 56);
}

TEST(GpuPackingTest, ShareGoesToThePartlyUsedGpu) {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("fresh", Gpus("fresh", 2, "L4")), Node("used", Gpus("used", 2, "L4"))}));
  ASSERT_OK(pool.Allocate(1, ShareOn("c", "used", 1, 500)));
  auto [node, gpus] = Where(pool, ShareSpec(300), "gpu-packing", 3, true);
  EXPECT_EQ(node, "used");
  EXPECT_EQ(gpus, (std::vector<uint32_t>{1}));
  // 600 does not fit the partly used GPU: a fresh GPU of the used node beats an untouched node.
  std::tie(node, gpus) = Where(pool, ShareSpec(600), "gpu-packing", 3, true);
  EXPECT_EQ(node, "used");
  EXPECT_EQ(gpus, (std::vector<uint32_t>{0}));

  auto p = Policy("gpu-packing");
  // Partly used GPU with 500 left: 100 - 50/10 = 95. Fresh GPU on a used node: 50 - 1 = 49.
  // Untouched 2-GPU node: max(33 - 2, 2) = 31; untouched 8-GPU node: max(33 - 8, 8) = 25.
  EXPECT_EQ(p->Choose(View({1000, 500}), Share(300), 0).score, 95);
  EXPECT_EQ(p->Choose(View({1000, 500}), Share(600), 0).score, 49);
  EXPECT_EQ(p->Choose(View({1000, 1000}), Share(300), 0).score, 31);
  EXPECT_EQ(p->Choose(View(std::vector<uint32_t>(8, 1000)), Share(300), 0).score, 25);
  // The share goes to the GPU with the least left that holds it.
  EXPECT_EQ(p->Choose(View({1000, 400, 350, 900}), Share(300), 0).gpus.front(), 2);
}

TEST(GpuPackingTest, WholeGpusPreferUsedNodesThenTheSmallestUntouchedNode) {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("big", Gpus("big", 8, "L4")), Node("small", Gpus("small", 2, "L4")),
                      Node("used", Gpus("used", 2, "L4"))}));
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "used", {0})));
  EXPECT_EQ(Where(pool, Spec(1, 1), "gpu-packing", 4, true).first, "used");
  ASSERT_OK(pool.Allocate(2, WholeOn("c", "used", {1})));
  EXPECT_EQ(Where(pool, Spec(1, 1), "gpu-packing", 4, true).first, "small");
}

// The FGD example: every typical workload takes a whole GPU, a 500-milli share arrives.
//   one:   1 GPU, free           three: 3 GPUs, GPU 0 has 600 left
// Breaking one's GPU adds 500 milli of fragmentation; filling three's GPU 0 removes 500.
WorkloadMix WholeGpuMix() {
  MixEntry e;
  e.demand = Whole(1);
  e.weight = 1;
  return {e};
}

Pool OneAndThree() {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("one", Gpus("one", 1, "L4")), Node("three", Gpus("three", 3, "L4"))}));
  EXPECT_OK(pool.Allocate(1, ShareOn("c", "three", 0, 400)));
  return pool;
}

TEST(FgdTest, DoesNotBreakAWholeGpuWhenTheMixIsWholeGpus) {
  Pool pool = OneAndThree();
  const WorkloadMix mix = WholeGpuMix();
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    auto [node, gpus] = Where(pool, ShareSpec(500), "fgd", seed, true, &mix);
    EXPECT_EQ(node, "three");
    EXPECT_EQ(gpus, (std::vector<uint32_t>{0}));
  }
  // Best fit takes the node with the least left, breaking its whole GPU.
  EXPECT_EQ(Where(pool, ShareSpec(500), "best-fit").first, "one");

  // Scores: floor(100 * sigmoid(-delta / 1000)).
  auto p = Policy("fgd");
  p->SetMix(mix);
  NodeChoice three = p->Choose(View({600, 1000, 1000}), Share(500), 0);
  EXPECT_EQ(three.score, 62);  // delta -500: sigmoid(0.5) = 0.6225
  EXPECT_EQ(three.gpus.front(), 0);
  NodeChoice one = p->Choose(View({1000}), Share(500), 1);
  EXPECT_EQ(one.score, 37);  // delta +500: sigmoid(-0.5) = 0.3775
  // Equal GPUs: the lowest index.
  EXPECT_EQ(p->Choose(View({1000, 1000}), Share(300), 0).gpus.front(), 0);
}

TEST(FgdTest, EqualScoresAreBrokenAtRandom) {
  // Whole GPUs on empty nodes never fragment a whole-GPU mix: every node scores 50.
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("two", Gpus("two", 2, "L4")), Node("eight", Gpus("eight", 8, "L4"))}));
  const WorkloadMix mix = WholeGpuMix();
  std::map<std::string, int> fgd;
  std::map<std::string, int> gpufed;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    ++fgd[Where(pool, Spec(1, 1), "fgd", seed, true, &mix).first];
    ++gpufed[Where(pool, Spec(1, 1), "gpufed", seed, true, &mix).first];
  }
  EXPECT_GT(fgd["two"], 0);
  EXPECT_GT(fgd["eight"], 0);
  // gpufed breaks the tie by the tightest fit: always the 2-GPU node.
  EXPECT_EQ(gpufed["two"], 40);
}

TEST(GpufedTest, FollowsTheFragmentationGradient) {
  Pool pool = OneAndThree();
  const WorkloadMix mix = WholeGpuMix();
  auto [node, gpus] = Where(pool, ShareSpec(500), "gpufed", 1, true, &mix);
  EXPECT_EQ(node, "three");
  EXPECT_EQ(gpus, (std::vector<uint32_t>{0}));
}

TEST(RandomTest, SpreadsOverFeasibleNodesOnly) {
  Pool pool;
  pool.UpsertCluster(
      ClusterOf("c", {Node("n0", Gpus("n0", 2, "L4")), Node("n1", Gpus("n1", 2, "L4")),
                      Node("n2", Gpus("n2", 2, "L4")), Node("n3", Gpus("n3", 2, "L4"))}));
  ASSERT_OK(pool.Allocate(1, WholeOn("c", "n1", {0, 1})));
  ASSERT_OK(pool.Allocate(2, WholeOn("c", "n3", {0})));
  std::map<std::string, int> count;
  for (uint64_t seed = 1; seed <= 300; ++seed)
    ++count[Where(pool, Spec(1, 1), "random", seed, true).first];
  EXPECT_EQ(count.count("n1"), 0u) << "n1 is full";
  EXPECT_GE(count["n0"], 60);  // 100 expected
  EXPECT_GE(count["n2"], 60);
  EXPECT_GE(count["n3"], 60);
  // A 2-GPU replica fits only n0 and n2.
  count.clear();
  for (uint64_t seed = 1; seed <= 100; ++seed)
    ++count[Where(pool, Spec(1, 2), "random", seed, true).first];
  EXPECT_EQ(count.size(), 2u);
  EXPECT_GT(count["n0"], 0);
  EXPECT_GT(count["n2"], 0);
}

TEST(RandomTest, ShareGoesToARandomGpuThatHoldsIt) {
  Pool pool;
  pool.UpsertCluster(ClusterOf("c", {Node("n", Gpus("n", 4, "L4"))}));
  ASSERT_OK(pool.Allocate(1, ShareOn("c", "n", 2, 900)));
  std::map<uint32_t, int> count;
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    ++count[Where(pool, ShareSpec(500), "random", seed, true).second.at(0)];
  }
  EXPECT_EQ(count.count(2), 0u);
  EXPECT_GT(count[0], 20);
  EXPECT_GT(count[1], 20);
  EXPECT_GT(count[3], 20);
}

TEST(NodeFragmentationTest, HandComputed) {
  // Free: 1000, 500, 200 (1700 in all); 10 cores free; model 0.
  const NodeView v = View({1000, 500, 200}, 10000, 16000);
  auto one = [&](Demand d, double weight, std::vector<uint16_t> models = {}) {
    MixEntry e;
    e.demand = std::move(d);
    e.weight = weight;
    e.models = std::move(models);
    return NodeFragmentation(v, {e});
  };
  // A 300 share fits GPUs 0 and 1; only GPU 2's 200 is lost.
  EXPECT_DOUBLE_EQ(one(Share(300), 1), 200);
  // A whole GPU: every GPU that is not completely free is lost.
  EXPECT_DOUBLE_EQ(one(Whole(1), 1), 700);
  // Two whole GPUs do not fit at all: everything is lost.
  EXPECT_DOUBLE_EQ(one(Whole(2), 1), 1700);
  // CPU-only workloads count all free GPU as fragmentation (as in the paper).
  EXPECT_DOUBLE_EQ(one(CpuOnly(1000), 1), 1700);
  // Wrong model, or not enough CPU: everything is lost.
  EXPECT_DOUBLE_EQ(one(Share(100), 1, {5}), 1700);
  EXPECT_DOUBLE_EQ(one(Share(100), 1, {0}), 0);
  EXPECT_DOUBLE_EQ(one(Share(100, 20000), 1), 1700);
  EXPECT_DOUBLE_EQ(one(Share(100, 10000), 1), 0);

  // The mix: weights multiply.
  WorkloadMix mix;
  auto add = [&](Demand d, double w, std::vector<uint16_t> models = {}) {
    MixEntry e;
    e.demand = std::move(d);
    e.weight = w;
    e.models = std::move(models);
    mix.push_back(std::move(e));
  };
  add(Share(300), 0.5);       // 0.5 * 200  = 100
  add(Whole(1), 0.2);         // 0.2 * 700  = 140
  add(Whole(2), 0.1);         // 0.1 * 1700 = 170
  add(CpuOnly(500), 0.1);     // 0.1 * 1700 = 170
  add(Share(100), 0.1, {5});  // 0.1 * 1700 = 170
  EXPECT_NEAR(NodeFragmentation(v, mix), 750, 1e-9);

  // A node with nothing free has no fragmentation.
  EXPECT_DOUBLE_EQ(NodeFragmentation(View({0, 0}), mix), 0);
  // A whole free node is fragmented only for what cannot use it.
  EXPECT_NEAR(NodeFragmentation(View({1000, 1000}, 10000), mix), 0.1 * 2000 + 0.1 * 2000, 1e-9);
}

TEST(NodeFragmentationTest, HostAwareCountsOnlyTheGpusTheHostCanFeed) {
  // Free: 1000, 1000, 1000, 500 (3500 in all); 10 cores and 8 GiB free.
  NodeView v = View({1000, 1000, 1000, 500}, 10000, 16000);
  v.memory_free = 8192;
  auto one = [&](Demand d, FragmentationMeasure measure, uint64_t memory = 0) {
    MixEntry e;
    e.demand = std::move(d);
    e.demand.memory_mib = memory;
    e.weight = 1;
    return NodeFragmentation(v, {e}, measure);
  };
  using enum FragmentationMeasure;
  // 300-milli shares of 4 cores: every GPU has room, but the CPU feeds only two replicas; they
  // take the two GPUs with the most left, and the other 1500 are stranded.
  EXPECT_DOUBLE_EQ(one(Share(300, 4000), kFgd), 0);
  EXPECT_DOUBLE_EQ(one(Share(300, 4000), kHostAware), 1500);
  // Whole-GPU workloads are not limited by the replicas the host holds (only by memory).
  EXPECT_DOUBLE_EQ(one(Whole(1, 5000), kFgd), 500);
  EXPECT_DOUBLE_EQ(one(Whole(1, 5000), kHostAware), 500);
  EXPECT_DOUBLE_EQ(one(Whole(1, 5000), kHostAware, 10000), 3500);
  // Memory limits the same way (3 GiB a replica: two fit), and memory too short for one
  // replica strands everything; FGD does not look at memory.
  EXPECT_DOUBLE_EQ(one(Share(300), kHostAware, 3072), 1500);
  EXPECT_DOUBLE_EQ(one(Share(300), kHostAware, 10000), 3500);
  EXPECT_DOUBLE_EQ(one(Share(300), kFgd, 10000), 0);
  // Enough host for every GPU: the same as FGD.
  EXPECT_DOUBLE_EQ(one(Share(300, 2000), kHostAware), 0);
  // A host that reports neither CPU nor memory limits nothing.
  EXPECT_DOUBLE_EQ(
      NodeFragmentation(View({1000, 200}), {MixEntry{Share(300, 4000), {}, 1}}, kHostAware), 200);
}

TEST(GpufedTest, KeepsCpuHeavyWorkOffGpusItWouldStrand) {
  // Typical work: half a GPU and 8 cores. A 48-core CPU-only pod on the 8-GPU node leaves CPU
  // for three such replicas there, stranding five GPUs; on the 2-GPU node it strands nothing.
  const WorkloadMix mix = {MixEntry{Share(500, 8000), {}, 1}};
  const NodeView eight = View({1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000}, 72000, 128000);
  const NodeView two = View({1000, 1000}, 72000, 128000);
  auto fgd = Policy("fgd");
  fgd->SetMix(mix);
  EXPECT_EQ(fgd->Choose(eight, CpuOnly(48000), 0).score,
            fgd->Choose(two, CpuOnly(48000), 1).score);  // FGD cannot tell them apart
  auto gpufed = Policy("gpufed");
  gpufed->SetMix(mix);
  EXPECT_GT(gpufed->Choose(two, CpuOnly(48000), 1).score,
            gpufed->Choose(eight, CpuOnly(48000), 0).score + 1);  // whole points apart
}

TEST(MixOfTest, CoverageCutAndRenormalisation) {
  Pool pool;
  auto spec = [](uint32_t gpus, uint32_t milli, uint64_t cpu,
                 std::vector<std::string> models = {}) {
    WorkloadSpec s = Spec(1, gpus);
    s.gpu_milli = milli;
    s.cpu_millis = cpu;
    s.gpu_models = std::move(models);
    return s;
  };
  std::vector<WorkloadSpec> specs;
  specs.reserve(5);
  for (int i = 0; i < 5; ++i) specs.push_back(spec(1, 500, 1000, {"L4", "T4"}));  // A: 5
  WorkloadSpec b = spec(1, 0, 2000);
  b.replicas = 3;  // B: 3 (replicas count)
  specs.push_back(b);
  specs.push_back(spec(2, 0, 0));     // C: 1
  specs.push_back(spec(0, 0, 4000));  // D: 1, CPU only

  // 80 %: A (5 < 8) and B (8): then 8 >= 8 stops.
  WorkloadMix mix = MixOf(pool, specs, 0.8);
  ASSERT_EQ(mix.size(), 2u);
  EXPECT_EQ(mix[0].demand.kind, Demand::Kind::kShare);
  EXPECT_EQ(mix[0].demand.milli, 500u);
  EXPECT_EQ(mix[0].demand.cpu_millis, 1000u);
  EXPECT_DOUBLE_EQ(mix[0].weight, 5.0 / 8);
  ASSERT_EQ(mix[0].models.size(), 2u);
  EXPECT_EQ(pool.ModelName(mix[0].models[0]), "L4");
  EXPECT_EQ(pool.ModelName(mix[0].models[1]), "T4");
  EXPECT_EQ(mix[1].demand.kind, Demand::Kind::kWhole);
  EXPECT_EQ(mix[1].demand.gpus, 1u);
  EXPECT_TRUE(mix[1].models.empty());
  EXPECT_DOUBLE_EQ(mix[1].weight, 3.0 / 8);

  // 85 %: one more joins (8 < 8.5), then 9 >= 8.5 stops. C and D tie on count; as in the
  // paper's simulator the larger key (CPU first) goes first: D.
  mix = MixOf(pool, specs, 0.85);
  ASSERT_EQ(mix.size(), 3u);
  EXPECT_EQ(mix[2].demand.kind, Demand::Kind::kNone);
  EXPECT_EQ(mix[2].demand.gpus, 0u);
  EXPECT_EQ(mix[2].demand.cpu_millis, 4000u);
  EXPECT_DOUBLE_EQ(mix[0].weight, 5.0 / 9);
  EXPECT_DOUBLE_EQ(mix[2].weight, 1.0 / 9);

  // 100 %: everything, weights sum to 1.
  mix = MixOf(pool, specs, 1.0);
  ASSERT_EQ(mix.size(), 4u);
  EXPECT_EQ(mix[3].demand.kind, Demand::Kind::kWhole);
  EXPECT_EQ(mix[3].demand.gpus, 2u);
  double sum = 0;
  for (const MixEntry& e : mix) sum += e.weight;
  EXPECT_DOUBLE_EQ(sum, 1.0);
  EXPECT_DOUBLE_EQ(mix[0].weight, 0.5);

  EXPECT_TRUE(MixOf(pool, {}, 0.95).empty());
}

}  // namespace
}  // namespace gpufed
