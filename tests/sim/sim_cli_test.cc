// `gpufedctl sim replay` end to end: the real binary as a child process on the bundled openb
// trace, as a user's shell runs it. Checks what the output holds, never how good or fast.

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/sim_command.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed::cli {
namespace {

using ::gpufed::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kTraceDir[] = GPUFED_SOURCE_DIR "/data/traces/alibaba-gpu-v2023/csv/";

using gpufed::testing::RunProgram;
using gpufed::testing::RunResult;
using Outcome = RunResult;

Outcome RunGpufedctl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {GPUFEDCTL_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunProgram(argv, ::testing::TempDir());
}

std::vector<std::string> ReplayArgs(const std::string& pods) {
  return {"sim",     "replay",
          "--nodes", std::string(kTraceDir) + "openb_node_list_gpu_node.csv",
          "--pods",  std::string(kTraceDir) + pods};
}

void ExpectRatio(const nlohmann::json& value, const std::string& what) {
  ASSERT_TRUE(value.is_number()) << what;
  EXPECT_GE(value.get<double>(), 0) << what;
  EXPECT_LE(value.get<double>(), 1) << what;
}

TEST(SimCliTest, ReplaysTheDefaultTraceAsOneJsonObject) {
  std::vector<std::string> args = ReplayArgs("openb_pod_list_default.csv");
  for (const char* a : {"--policy", "fgd", "--inflation", "1.3", "--seed", "3", "-o", "json"}) {
    args.emplace_back(a);
  }
  Outcome r = RunGpufedctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, IsEmpty()) << "no progress bar when stdout is not a terminal";
  ASSERT_EQ(r.out.back(), '\n');
  ASSERT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line";
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("policy"), "fgd");
  EXPECT_EQ(j.at("seed"), 3);
  EXPECT_DOUBLE_EQ(j.at("inflation").get<double>(), 1.3);
  EXPECT_EQ(j.at("mode"), "snapshot");
  EXPECT_EQ(j.at("tie_order"), "seeded");
  EXPECT_EQ(j.at("gpus_total"), 6212);
  ExpectRatio(j.at("allocation_bound"), "allocation_bound");
  if (j.at("bound_premise_failures").get<uint64_t>() == 0) {
    EXPECT_LE(j.at("paper_allocation_ratio").get<double>(), j.at("allocation_bound"));
  }
  ExpectRatio(j.at("final_allocation_ratio"), "final_allocation_ratio");
  ExpectRatio(j.at("paper_allocation_ratio"), "paper_allocation_ratio");
  EXPECT_GE(j.at("unallocated_gpus").get<double>(), 0);
  EXPECT_LE(j.at("unallocated_gpus").get<double>(), 6212);
  EXPECT_GT(j.at("placed").get<uint64_t>(), 0);
  EXPECT_EQ(j.at("placed").get<uint64_t>() + j.at("failed").get<uint64_t>(),
            j.at("pods").get<uint64_t>());
  EXPECT_GT(j.at("pods").get<uint64_t>(), 8152) << "originals plus clones";
  EXPECT_GE(j.at("wall_seconds").get<double>(), 0);
  const nlohmann::json& curve = j.at("curve");
  ASSERT_TRUE(curve.is_array());
  ASSERT_GE(curve.size(), 100);
  double last_arrived = 0;
  for (const nlohmann::json& p : curve) {
    ExpectRatio(p.at("allocation_ratio"), "curve allocation_ratio");
    const double arrived = p.at("arrived_ratio").get<double>();
    EXPECT_GT(arrived, last_arrived);
    EXPECT_LE(p.at("allocation_ratio").get<double>(), arrived + 1e-12);
    last_arrived = arrived;
  }
  EXPECT_NEAR(last_arrived, 1.3, 0.01);
}

TEST(SimCliTest, SeveralSeedsPrintRunsAndTheirMean) {
  std::vector<std::string> args = ReplayArgs("openb_pod_list_gpushare40.csv");
  for (const char* a : {"--policy", "first-fit", "--seeds", "1-2", "-o", "json"}) {
    args.emplace_back(a);
  }
  Outcome r = RunGpufedctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("runs").size(), 2);
  EXPECT_EQ(j.at("runs")[0].at("seed"), 1);
  EXPECT_EQ(j.at("runs")[1].at("seed"), 2);
  ASSERT_EQ(j.at("summary").size(), 1);
  const nlohmann::json& s = j.at("summary")[0];
  EXPECT_EQ(s.at("policy"), "first-fit");
  EXPECT_EQ(s.at("seeds"), nlohmann::json::array({1, 2}));
  EXPECT_DOUBLE_EQ(s.at("mean_final_allocation_ratio").get<double>(),
                   (j.at("runs")[0].at("final_allocation_ratio").get<double>() +
                    j.at("runs")[1].at("final_allocation_ratio").get<double>()) /
                       2);
  EXPECT_GE(s.at("stderr_paper_allocation_ratio").get<double>(), 0);
  ExpectRatio(s.at("mean_allocation_bound"), "mean_allocation_bound");
}

TEST(SimCliTest, TieOrderIsChosenByName) {
  std::vector<std::string> args = ReplayArgs("openb_pod_list_multigpu20.csv");
  for (const char* a : {"--policy", "fgd", "--tie-order", "list", "-o", "json"}) {
    args.emplace_back(a);
  }
  Outcome r = RunGpufedctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).at("tie_order"), "list");

  args = ReplayArgs("openb_pod_list_multigpu20.csv");
  args.insert(args.end(), {"--tie-order", "first"});
  EXPECT_EQ(RunGpufedctl(args).exit_code, 2);  // CLI11: not one of the names
}

TEST(SimCliTest, PrintsATableByDefault) {
  std::vector<std::string> args = ReplayArgs("openb_pod_list_multigpu20.csv");
  for (const char* a : {"--policy", "best-fit", "--inflation", "1.1"}) args.emplace_back(a);
  Outcome r = RunGpufedctl(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("POLICY"));
  EXPECT_THAT(r.out, HasSubstr("ALLOCATED"));
  EXPECT_THAT(r.out, HasSubstr("best-fit"));
}

TEST(SimCliTest, TimeModeNeedsTimes) {
  std::vector<std::string> args = ReplayArgs("openb_pod_list_multigpu20.csv");
  args.insert(args.end(), {"--mode", "time"});
  Outcome r = RunGpufedctl(args);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("error: INVALID_ARGUMENT: pod openb-pod-0000 (line 2) has no "
                               "creation_time"));
}

TEST(SimCliTest, BadFilesAndFlagsAreReported) {
  Outcome missing = RunGpufedctl({"sim", "replay", "--nodes", "/nonexistent.csv", "--pods",
                                  std::string(kTraceDir) + "openb_pod_list_default.csv"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("error: NOT_FOUND: cannot open /nonexistent.csv"));

  const std::string bad = ::testing::TempDir() + "/bad_nodes.csv";
  std::ofstream(bad) << "sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,1024,two,T4\n";
  Outcome bad_row = RunGpufedctl({"sim", "replay", "--nodes", bad, "--pods",
                                  std::string(kTraceDir) + "openb_pod_list_default.csv"});
  EXPECT_EQ(bad_row.exit_code, 1);
  EXPECT_THAT(bad_row.err, HasSubstr(absl::StrCat(bad, ":2: column 4 (gpu): 'two'")));

  std::vector<std::string> args = ReplayArgs("openb_pod_list_default.csv");
  args.insert(args.end(), {"--policy", "nope"});
  EXPECT_EQ(RunGpufedctl(args).exit_code, 2);

  args = ReplayArgs("openb_pod_list_default.csv");
  args.insert(args.end(), {"--seeds", "3-1"});
  Outcome bad_seeds = RunGpufedctl(args);
  EXPECT_EQ(bad_seeds.exit_code, 1);
  EXPECT_THAT(bad_seeds.err, HasSubstr("--seeds: '3-1'"));

  args = ReplayArgs("openb_pod_list_default.csv");
  args.insert(args.end(), {"--mode", "time", "--inflation", "2"});
  Outcome time_inflation = RunGpufedctl(args);
  EXPECT_EQ(time_inflation.exit_code, 1);
  EXPECT_THAT(time_inflation.err, HasSubstr("--inflation applies to --mode snapshot only"));

  args = ReplayArgs("openb_pod_list_default.csv");
  args.insert(args.end(), {"--compress", "10"});
  Outcome snapshot_compress = RunGpufedctl(args);
  EXPECT_EQ(snapshot_compress.exit_code, 1);
  EXPECT_THAT(snapshot_compress.err, HasSubstr("--compress applies to --mode time only"));

  args = ReplayArgs("openb_pod_list_default.csv");
  args.insert(args.end(), {"--mode", "time", "--compress", "0.5"});
  EXPECT_EQ(RunGpufedctl(args).exit_code, 2);  // CLI11: out of range
}

// `gpufedctl sim run` on a bundled scenario: one JSON object on the last line, with the figures
// docs/scenarios.md names.
TEST(SimCliTest, RunsAScenarioAndPrintsItsReportAsJson) {
  const std::string path = ::testing::TempDir() + "/scenario.yaml";
  std::ofstream(path) << R"yaml(
name: small
cycle: 30s
duration: 3h
warmup: 1h
half_life: 1h
clusters: [{name: c1, nodes: 2, gpus_per_node: 8}]
tenants:
  - {name: a, weight: 1, quotas: [{resource: gpu, guaranteed: 8}]}
  - {name: b, weight: 3}
streams:
  - {tenant: a, per_hour: 100, duration: 20m}
  - {tenant: b, per_hour: 100, duration: 20m}
)yaml";
  Outcome r = RunGpufedctl({"sim", "run", path, "-o", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string last = r.out.substr(r.out.rfind('\n', r.out.size() - 2) + 1);
  const nlohmann::json j = nlohmann::json::parse(last);
  EXPECT_EQ(j.at("name"), "small");
  EXPECT_EQ(j.at("cycles"), 360);
  for (const char* key : {"max_deviation", "max_gpu_hours_deviation", "mean_utilisation"}) {
    ExpectRatio(j.at(key), key);
  }
  for (const char* key : {"max_owner_wait_cycles", "preemptions", "gpu_seconds_lost",
                          "max_eviction_ratio", "reclaims"}) {
    EXPECT_TRUE(j.at(key).is_number()) << key;
  }
  ASSERT_EQ(j.at("tenants").size(), 2u);
  EXPECT_EQ(j.at("tenants")[1].at("name"), "b");
  EXPECT_EQ(j.at("tenants")[1].at("weight"), 3);
  EXPECT_DOUBLE_EQ(j.at("tenants")[1].at("fair_share").get<double>(), 0.75);
  ExpectRatio(j.at("tenants")[1].at("mean_share"), "mean_share");

  Outcome bad = RunGpufedctl({"sim", "run", ::testing::TempDir() + "/missing.yaml"});
  EXPECT_EQ(bad.exit_code, 1);
}

TEST(SeedListTest, ParsesSeedsAndRanges) {
  EXPECT_THAT(*ParseSeedList("7"), ElementsAre(7));
  EXPECT_THAT(*ParseSeedList("1-3"), ElementsAre(1, 2, 3));
  EXPECT_THAT(*ParseSeedList("1,4-5, 9"), ElementsAre(1, 4, 5, 9));
  for (const char* bad : {"", "x", "1-", "-1", "3-1", "1-2-3", "1,,2", "0-100000"}) {
    EXPECT_THAT(ParseSeedList(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--seeds")))
        << bad;
  }
}

}  // namespace
}  // namespace gpufed::cli
