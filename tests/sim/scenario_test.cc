// Quota scenarios (sim/scenario.h): the live scheduling code over simulated time. Small pools and
// short runs with answers known in advance: weights share a saturated pool, an owner gets its
// guarantee back, bad scenarios are refused; and the YAML format (cli/scenario_yaml.h).

#include "sim/scenario.h"

#include <map>
#include <string>

#include "cli/read_file.h"
#include "cli/scenario_yaml.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/quota_fixtures.h"
#include "tests/support/status_matchers.h"

namespace gpufed::sim {
namespace {

using ::gpufed::testing::MakeQuota;
using ::gpufed::testing::StatusIs;
using ::testing::HasSubstr;

Scenario TwoTenants(int64_t weight_a, int64_t weight_b) {
  Scenario s;
  s.name = "two";
  s.cycle = std::chrono::seconds(30);
  s.duration = std::chrono::hours(8);
  s.warmup = std::chrono::hours(2);
  s.half_life = std::chrono::hours(1);
  s.clusters = {{"c1", 4, 8, "H100-80GB"}};
  s.tenants = {{"a", weight_a, {}, {{"default", 1, {}}}},
               {"b", weight_b, {}, {{"default", 1, {}}}}};
  for (const char* t : {"a", "b"}) {
    ScenarioStream stream;
    stream.tenant = t;
    stream.project = "default";
    stream.per_hour = 200;  // far more than 32 GPUs can run
    stream.duration = std::chrono::minutes(20);
    s.streams.push_back(stream);
  }
  return s;
}

TEST(ScenarioTest, ASaturatedPoolIsSharedByWeight) {
  ASSERT_OK_AND_ASSIGN(ScenarioReport r, RunScenario(TwoTenants(1, 3)));
  ASSERT_EQ(r.tenants.size(), 2u);
  EXPECT_EQ(r.tenants[0].name, "a");
  EXPECT_DOUBLE_EQ(r.tenants[0].fair_share, 0.25);
  EXPECT_DOUBLE_EQ(r.tenants[1].fair_share, 0.75);
  EXPECT_NEAR(r.tenants[0].mean_share, 0.25, 0.02);
  EXPECT_NEAR(r.tenants[1].mean_share, 0.75, 0.02);
  EXPECT_GT(r.mean_utilisation, 0.9);
  EXPECT_EQ(r.reclaims, 0);
  // The same seed, the same run.
  ASSERT_OK_AND_ASSIGN(ScenarioReport again, RunScenario(TwoTenants(1, 3)));
  EXPECT_EQ(again.tenants[0].gpu_hours, r.tenants[0].gpu_hours);
}

TEST(ScenarioTest, AnOwnerReturningToBorrowedCapacityIsPlacedWithinTwoCycles) {
  Scenario s = TwoTenants(1, 1);
  s.stop_grace = std::chrono::seconds(30);
  s.tenants[0].quotas = {MakeQuota("a", "", "H100-80GB", 16000)};
  s.streams[0].per_hour = 0;
  s.streams[0].count = 4;
  s.streams[0].gpus = {8};
  s.streams[0].start = std::chrono::hours(3);
  s.streams[0].end = std::chrono::hours(4);
  s.streams[1].gpus = {4};
  ASSERT_OK_AND_ASSIGN(ScenarioReport r, RunScenario(s));
  EXPECT_GT(r.reclaims, 0);
  EXPECT_GT(r.preemptions, 0);
  EXPECT_GT(r.gpu_seconds_lost, 0);
  EXPECT_LE(r.max_eviction_ratio, 1.25);
  EXPECT_GT(r.max_owner_wait_cycles, 0);
  EXPECT_LE(r.max_owner_wait_cycles, 2);
}

// Victims that checkpoint lose only the work since their last checkpoint, and are taken first: an
// owner returning to a pool a borrower filled (half of whose work checkpoints) costs less work
// than the same run taking victims newest first. (examples/scenarios/reclaim.yaml, shortened.)
TEST(ScenarioTest, CheckpointableVictimsLoseLessThanNewestFirst) {
  Scenario s;
  s.name = "reclaim";
  s.cycle = std::chrono::seconds(30);
  s.duration = std::chrono::hours(12);
  s.stop_grace = std::chrono::seconds(30);
  s.clusters = {{"c1", 8, 8, "H100-80GB"}};
  s.tenants = {{"owner", 1, {MakeQuota("owner", "", "H100-80GB", 32000)}, {{"default", 1, {}}}},
               {"borrower", 1, {}, {{"default", 1, {}}}}};
  ScenarioStream borrow;
  borrow.tenant = "borrower";
  borrow.project = "default";
  borrow.per_hour = 30;
  borrow.gpus = {4};
  borrow.duration = std::chrono::hours(3);
  ScenarioStream saves = borrow;
  saves.checkpoint_every = std::chrono::minutes(20);
  ScenarioStream own;
  own.tenant = "owner";
  own.project = "default";
  own.count = 8;
  own.start = std::chrono::hours(4);
  own.end = std::chrono::hours(5);
  own.gpus = {4, 8};
  own.duration = std::chrono::hours(2);
  own.fixed_duration = true;
  s.streams = {borrow, saves, own};
  ASSERT_OK_AND_ASSIGN(ScenarioReport r, RunScenario(s));
  EXPECT_GT(r.reclaims, 0);
  EXPECT_GT(r.gpu_seconds_lost_newest_first, 0);
  EXPECT_LT(r.gpu_seconds_lost, r.gpu_seconds_lost_newest_first);
}

// Gangs of a whole node beside a stream of single-GPU jobs: without a starvation bound each GPU
// that frees goes to a small job and most gangs are never placed; with one, nodes are held for
// them. (examples/scenarios/starvation.yaml.)
TEST(ScenarioTest, GangsAmongSmallJobsArePlacedOnlyWithAStarvationBound) {
  Scenario s = TwoTenants(1, 1);
  s.duration = std::chrono::hours(24);
  s.warmup = std::chrono::hours(1);
  s.streams[0].per_hour = 1;
  s.streams[0].gpus = {8};
  s.streams[0].duration = std::chrono::hours(1);
  s.streams[1].per_hour = 60;
  s.streams[1].gpus = {1};
  s.streams[1].duration = std::chrono::hours(1);
  s.starvation_bound = std::chrono::seconds(0);
  ASSERT_OK_AND_ASSIGN(const ScenarioReport without, RunScenario(s));
  s.starvation_bound = std::chrono::minutes(30);
  ASSERT_OK_AND_ASSIGN(const ScenarioReport with, RunScenario(s));
  ASSERT_EQ(without.tenants[0].name, "a");
  EXPECT_GT(without.tenants[0].never_placed, 2 * with.tenants[0].never_placed)
      << without.tenants[0].never_placed << " vs " << with.tenants[0].never_placed;
  EXPECT_GT(with.tenants[0].mean_share, 2 * without.tenants[0].mean_share)
      << with.tenants[0].mean_share << " vs " << without.tenants[0].mean_share;
}

TEST(ScenarioTest, AStreamOfAnUnknownTenantOrNoPoolIsRefused) {
  Scenario s = TwoTenants(1, 1);
  s.streams[0].tenant = "nobody";
  EXPECT_THAT(RunScenario(s), StatusIs(absl::StatusCode::kInvalidArgument));
  s = TwoTenants(1, 1);
  s.clusters.clear();
  EXPECT_THAT(RunScenario(s), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ScenarioYamlTest, ReadsEveryPart) {
  ASSERT_OK_AND_ASSIGN(Scenario s, cli::ParseScenario("s.yaml", R"yaml(
name: t
seed: 7
cycle: 15s
duration: 2h
warmup: 10m
half_life: 30m
stop_grace: 5s
starvation_bound: 20m
clusters:
  - {name: c1, nodes: 2, gpus_per_node: 4, model: A100-80GB}
tenants:
  - name: acme
    weight: 2
    quotas: [{resource: gpu, guaranteed: 4, limit: 8}]
    projects:
      - {name: web, weight: 3, quotas: [{resource: A100-80GB, guaranteed: 1.5}]}
  - {name: beta}
streams:
  - {tenant: acme, project: web, count: 10, start: 1h, gpus: [1, 2], replicas: 2, duration: 5m, fixed_duration: true, priority: 4, checkpoint_every: 10m}
  - {tenant: beta, per_hour: 12.5}
)yaml"));
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.cycle, std::chrono::seconds(15));
  EXPECT_EQ(s.half_life, std::chrono::minutes(30));
  EXPECT_EQ(s.starvation_bound, std::chrono::minutes(20));
  ASSERT_EQ(s.clusters.size(), 1u);
  EXPECT_EQ(s.clusters[0].model, "A100-80GB");
  ASSERT_EQ(s.tenants.size(), 2u);
  EXPECT_EQ(s.tenants[0].weight, 2);
  EXPECT_EQ(s.tenants[0].quotas, (std::vector<Quota>{MakeQuota("acme", "", "gpu", 4000, 8000)}));
  ASSERT_EQ(s.tenants[0].projects.size(), 1u);
  EXPECT_EQ(s.tenants[0].projects[0].weight, 3);
  EXPECT_EQ(s.tenants[0].projects[0].quotas,
            (std::vector<Quota>{MakeQuota("acme", "web", "A100-80GB", 1500)}));
  ASSERT_EQ(s.tenants[1].projects.size(), 1u) << "a tenant without projects gets one";
  EXPECT_EQ(s.tenants[1].projects[0].name, "default");
  ASSERT_EQ(s.streams.size(), 2u);
  EXPECT_EQ(s.streams[0].gpus, (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(s.streams[0].replicas, 2u);
  EXPECT_TRUE(s.streams[0].fixed_duration);
  EXPECT_EQ(s.streams[0].priority, 4);
  EXPECT_EQ(s.streams[0].checkpoint_every, std::chrono::minutes(10));
  EXPECT_EQ(s.streams[1].checkpoint_every, std::chrono::seconds(0));
  EXPECT_EQ(s.streams[1].project, "default");
  EXPECT_DOUBLE_EQ(s.streams[1].per_hour, 12.5);
}

TEST(ScenarioYamlTest, ABadFileNamesTheLineAndField) {
  const std::string head = "clusters: [{name: c1}]\ntenants: [{name: a}]\n";
  for (const auto& [text, field] : std::vector<std::pair<std::string, std::string>>{
           {"clusters: [{name: c1, nodes: 0}]\n", "clusters[0].nodes"},
           {head + "streams: [{tenant: a}]\n", "one of count and per_hour"},
           {head + "streams: [{tenant: a, count: 1, gpus: [0]}]\n", "streams[0].gpus"},
           {"tenants: [{name: a, quotas: [{resource: fish, guaranteed: 1}]}]\n", "resource"},
           {"tenants: [{name: a, weight: 0}]\n", "tenants[0].weight"},
           {"cycle: soon\n", "cycle"},
           {"colour: blue\n", "colour"},
           {"clusters: [{name: c1, prices: {on-demand: \"3,20\"}}]\n",
            "clusters[0].prices.on-demand"},
           {"clusters: [{name: c1, capacity: cheap}]\n", "clusters[0].capacity"},
           {"clusters: [{name: c1, rtt: {eu: soon}}]\n", "clusters[0].rtt.eu"},
           {"clusters: [{name: c1, nodes: 1, spot_nodes: 2}]\n", "spot_nodes"},
           {head + "streams: [{tenant: a, count: 1, placement: {objective: fast}}]\n",
            "streams[0].placement.objective"},
           {head + "streams: [{tenant: a, count: 1, placement: {objective: latency}}]\n",
            "client_region"},
           {"tenants: [\n", "invalid YAML"}}) {
    EXPECT_THAT(cli::ParseScenario("s.yaml", text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(field)))
        << text;
  }
}

// examples/scenarios/routing-5-clusters.yaml: every objective keeps every hard rule, `cost` costs
// less than placing blind to price, and `latency` runs closer to the users than `cost`. The
// figures themselves are in docs/scenarios.md.
TEST(ScenarioTest, RoutingObjectivesKeepTheRulesAndServeTheirEnds) {
  ASSERT_OK_AND_ASSIGN(
      const std::string text,
      cli::ReadTextFile(GPUFED_SOURCE_DIR "/examples/scenarios/routing-5-clusters.yaml"));
  ASSERT_OK_AND_ASSIGN(Scenario s, cli::ParseScenario("routing-5-clusters.yaml", text));
  ASSERT_OK_AND_ASSIGN(ScenarioReport r, RunScenario(s));
  ASSERT_EQ(r.objectives.size(), 4u);
  std::map<std::string, RoutingReport> by;
  for (const RoutingReport& o : r.objectives) {
    EXPECT_EQ(o.residency_violations, 0) << o.objective;
    EXPECT_GT(o.placements, 300) << o.objective;
    EXPECT_EQ(o.unpriced_gpu_hours, 0) << o.objective;
    by[o.objective] = o;
  }
  EXPECT_EQ(r.routing.residency_violations, 0);
  EXPECT_EQ(r.cost_blind_total_cost, by["pack"].total_cost);
  EXPECT_LT(by["cost"].total_cost, 0.8 * by["pack"].total_cost);
  EXPECT_LT(by["balanced"].total_cost, by["pack"].total_cost);
  EXPECT_LT(by["latency"].p50_client_rtt_ms, by["cost"].p50_client_rtt_ms);
  const nlohmann::json doc = ToJson(r);
  EXPECT_EQ(doc["residency_violations"], 0);
  EXPECT_TRUE(doc["objectives"]["cost"].contains("p50_client_rtt_ms"));
  EXPECT_TRUE(doc.contains("cost_blind_total_cost"));
}

}  // namespace
}  // namespace gpufed::sim
