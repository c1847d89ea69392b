// The openb reader on hand-written CSVs (good and bad rows) and on the bundled trace files, and
// the conversion of rows into the federation's types.

#include "sim/openb.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "federation/policy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/trace_pool.h"
#include "tests/support/status_matchers.h"

namespace gpufed::sim {
namespace {

using ::gpufed::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kTraceDir[] = GPUFED_SOURCE_DIR "/data/traces/alibaba-gpu-v2023/csv/";

constexpr char kPodHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

TEST(OpenbNodesTest, ParsesRowsIncludingNodesWithoutGpus) {
  absl::StatusOr<std::vector<OpenbNode>> nodes = ParseOpenbNodes(
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "n-0,64000,262144,2,P100\n"
      "n-1,32000,131072,0,\n"
      "n-2,96000,786432,8,V100M32\r\n"
      "n-3,32000,262144,0,nan\n",
      "nodes.csv");
  ASSERT_OK(nodes);
  ASSERT_EQ(nodes->size(), 4);
  EXPECT_EQ((*nodes)[0].sn, "n-0");
  EXPECT_EQ((*nodes)[0].cpu_milli, 64000);
  EXPECT_EQ((*nodes)[0].memory_mib, 262144);
  EXPECT_EQ((*nodes)[0].gpus, 2);
  EXPECT_EQ((*nodes)[0].model, "P100");
  EXPECT_EQ((*nodes)[0].line, 2);
  EXPECT_EQ((*nodes)[1].gpus, 0);
  EXPECT_EQ((*nodes)[1].model, "");
  EXPECT_EQ((*nodes)[2].model, "V100M32");
  EXPECT_EQ((*nodes)[3].model, "");
  EXPECT_EQ((*nodes)[3].line, 5);
}

TEST(OpenbNodesTest, FindsColumnsByNameAndIgnoresUnknownOnes) {
  absl::StatusOr<std::vector<OpenbNode>> nodes = ParseOpenbNodes(
      "model,gpu,rack,memory_mib,cpu_milli,sn\n"
      "T4,1,r1,1024,2000,\"node, quoted\"\n",
      "nodes.csv");
  ASSERT_OK(nodes);
  ASSERT_EQ(nodes->size(), 1);
  EXPECT_EQ((*nodes)[0].sn, "node, quoted");
  EXPECT_EQ((*nodes)[0].cpu_milli, 2000);
  EXPECT_EQ((*nodes)[0].memory_mib, 1024);
  EXPECT_EQ((*nodes)[0].gpus, 1);
  EXPECT_EQ((*nodes)[0].model, "T4");
}

struct BadInput {
  const char* text;
  const char* message;  // expected substring
};

class BadNodesTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadNodesTest, NamesFileLineAndColumn) {
  absl::StatusOr<std::vector<OpenbNode>> nodes = ParseOpenbNodes(GetParam().text, "nodes.csv");
  EXPECT_THAT(nodes, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Rows, BadNodesTest,
    ::testing::Values(
        BadInput{"", "nodes.csv: empty file"},
        BadInput{"sn,cpu_milli,memory_mib,gpu\nn,1,1,0\n",
                 "nodes.csv:1: header lacks column 'model'"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,0,\nn-1,abc,1,0,\n",
                 "nodes.csv:3: column 2 (cpu_milli): 'abc' is not a non-negative integer"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\nn-0,1,-5,0,\n",
                 "nodes.csv:2: column 3 (memory_mib): '-5' is not a non-negative integer"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,2.5,T4\n",
                 "nodes.csv:2: column 4 (gpu): '2.5'"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,0,\nn-1,1,1,0\n",
                 "nodes.csv:3: expected 5 cells like the header, got 4"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,4,nan\n",
                 "nodes.csv:2: column 5 (model): a node with GPUs needs a GPU model"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,0,\nn-0,1,1,0,\n",
                 "nodes.csv:3: column 1 (sn): node 'n-0' appears twice"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\n,1,1,0,\n",
                 "nodes.csv:2: column 1 (sn): empty node name"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,0,\nn-\"1,1,1,0,\n",
                 "nodes.csv:3: malformed CSV"},
        BadInput{"sn,cpu_milli,memory_mib,gpu,model\nn-0,1,1,0,\n\"n-1,1,1,0,\n",
                 "unterminated quoted field"}));

TEST(OpenbPodsTest, ParsesFullRows) {
  absl::StatusOr<std::vector<OpenbPod>> pods = ParseOpenbPods(
      std::string(kPodHeader) +
          "p-0,12000,16384,1,1000,,LS,Running,0,12537496,0\n"
          "p-1,6000,12288,1,460,nan,BE,Pending,427061,12902960,\n"
          "p-2,88000,327680,8,1000,V100M16|V100M32|V100M32,Burstable,Succeeded,10,20,12\n"
          "p-3,4000,8192,0,0,,BE,Failed,5,5,5\n",
      "pods.csv");
  ASSERT_OK(pods);
  ASSERT_EQ(pods->size(), 4);
  const OpenbPod& whole = (*pods)[0];
  EXPECT_EQ(whole.name, "p-0");
  EXPECT_EQ(whole.num_gpu, 1);
  EXPECT_EQ(whole.gpu_milli, 1000);
  EXPECT_FALSE(whole.SharesGpu());
  EXPECT_EQ(whole.GpuMilli(), 1000);
  EXPECT_THAT(whole.gpu_spec, IsEmpty());
  EXPECT_EQ(whole.qos, "LS");
  EXPECT_EQ(whole.creation_time, 0);
  EXPECT_EQ(whole.deletion_time, 12537496);
  EXPECT_EQ(whole.scheduled_time, 0);

  const OpenbPod& share = (*pods)[1];
  EXPECT_TRUE(share.SharesGpu());
  EXPECT_EQ(share.GpuMilli(), 460);
  EXPECT_THAT(share.gpu_spec, IsEmpty());
  EXPECT_EQ(share.pod_phase, "Pending");
  EXPECT_FALSE(share.scheduled_time.has_value());

  const OpenbPod& multi = (*pods)[2];
  EXPECT_EQ(multi.GpuMilli(), 8000);
  EXPECT_THAT(multi.gpu_spec, ElementsAre("V100M16", "V100M32", "V100M32"));
  EXPECT_EQ(multi.line, 4);

  const OpenbPod& cpu = (*pods)[3];
  EXPECT_EQ(cpu.num_gpu, 0);
  EXPECT_EQ(cpu.GpuMilli(), 0);
}

TEST(OpenbPodsTest, MultigpuListsHaveOnlyFiveColumns) {
  absl::StatusOr<std::vector<OpenbPod>> pods = ParseOpenbPods(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
      "p-0,12000,16384,2,1000\n",
      "multigpu.csv");
  ASSERT_OK(pods);
  ASSERT_EQ(pods->size(), 1);
  EXPECT_EQ((*pods)[0].GpuMilli(), 2000);
  EXPECT_FALSE((*pods)[0].creation_time.has_value());
  EXPECT_FALSE((*pods)[0].deletion_time.has_value());
}

class BadPodsTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadPodsTest, NamesFileLineAndColumn) {
  absl::StatusOr<std::vector<OpenbPod>> pods =
      ParseOpenbPods(std::string(kPodHeader) + GetParam().text, "pods.csv");
  EXPECT_THAT(pods, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(GetParam().message)));
}

INSTANTIATE_TEST_SUITE_P(
    Rows, BadPodsTest,
    ::testing::Values(
        BadInput{"p-0,1,1,1,1001,,LS,Running,0,1,0\n",
                 "pods.csv:2: column 5 (gpu_milli): 1001 is more than one GPU"},
        BadInput{"p-0,1,1,1,0,,LS,Running,0,1,0\n",
                 "pods.csv:2: column 5 (gpu_milli): 0 for a pod with GPUs"},
        BadInput{"p-0,1,1,x,1000,,LS,Running,0,1,0\n",
                 "pods.csv:2: column 4 (num_gpu): 'x' is not a non-negative integer"},
        BadInput{"p-0,1,1,1,1000,,LS,Running,0,1,0\np-1,1,1,1,1000,,LS,Running,9,1,9\n",
                 "pods.csv:3: column 10 (deletion_time): 1 is before creation_time 9"},
        BadInput{"p-0,1,1,1,1000,,LS,Running,-3,1,0\n",
                 "pods.csv:2: column 9 (creation_time): '-3' is not a time in seconds"},
        BadInput{"p-0,1,1,1,1000,T4||P100,LS,Running,0,1,0\n",
                 "pods.csv:2: column 6 (gpu_spec): 'T4||P100' has an empty model name"},
        BadInput{"p-0,1,1,1,1000,,LS,Running,0,1\n",
                 "pods.csv:2: expected 11 cells like the header, got 10"}));

TEST(OpenbFilesTest, MissingFileIsNotFound) {
  absl::StatusOr<std::vector<OpenbNode>> nodes = ReadOpenbNodes("/nonexistent/nodes.csv");
  EXPECT_EQ(nodes.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(nodes.status().message(), HasSubstr("/nonexistent/nodes.csv"));
}

TEST(OpenbFilesTest, ReadsEveryBundledTraceFile) {
  absl::StatusOr<std::vector<OpenbNode>> gpu_nodes =
      ReadOpenbNodes(std::string(kTraceDir) + "openb_node_list_gpu_node.csv");
  ASSERT_OK(gpu_nodes);
  EXPECT_EQ(gpu_nodes->size(), 1213);
  uint32_t gpus = 0;
  for (const OpenbNode& n : *gpu_nodes) gpus += n.gpus;
  EXPECT_EQ(gpus, 6212);  // the paper's cluster

  absl::StatusOr<std::vector<OpenbNode>> all_nodes =
      ReadOpenbNodes(std::string(kTraceDir) + "openb_node_list_all_node.csv");
  ASSERT_OK(all_nodes);
  EXPECT_EQ(all_nodes->size(), 1523);

  for (const char* name :
       {"openb_pod_list_default.csv", "openb_pod_list_cpu050.csv", "openb_pod_list_cpu250.csv",
        "openb_pod_list_gpushare40.csv", "openb_pod_list_gpushare60.csv",
        "openb_pod_list_gpuspec10.csv", "openb_pod_list_multigpu20.csv"}) {
    absl::StatusOr<std::vector<OpenbPod>> pods = ReadOpenbPods(std::string(kTraceDir) + name);
    ASSERT_OK(pods);
    EXPECT_GT(pods->size(), 7000) << name;
  }
  absl::StatusOr<std::vector<OpenbPod>> pods =
      ReadOpenbPods(std::string(kTraceDir) + "openb_pod_list_default.csv");
  ASSERT_OK(pods);
  EXPECT_EQ(pods->size(), 8152);
}

TEST(TracePoolTest, NodesBecomeOneClusterOfHealthyGpus) {
  Cluster cluster = ClusterOf({
      OpenbNode{"n-0", 64000, 262144, 2, "V100M32", 2},
      OpenbNode{"n-1", 32000, 131072, 0, "", 3},
      OpenbNode{"n-2", 96000, 786432, 1, "G2", 4},
  });
  EXPECT_EQ(cluster.info.name, kTraceCluster);
  EXPECT_EQ(cluster.state, ClusterState::kReady);
  ASSERT_EQ(cluster.nodes.size(), 3);
  const NodeInfo& n0 = cluster.nodes[0];
  EXPECT_EQ(n0.name, "n-0");
  EXPECT_EQ(n0.cpu_millis, 64000);
  EXPECT_EQ(n0.memory_mib, 262144);
  ASSERT_EQ(n0.gpus.size(), 2);
  EXPECT_EQ(n0.gpus[1].uuid, "n-0-gpu1");
  EXPECT_EQ(n0.gpus[1].index, 1);
  EXPECT_EQ(n0.gpus[1].model, "V100M32");
  EXPECT_EQ(n0.gpus[1].memory_mib, 32768);  // the catalogue's V100-32GB
  EXPECT_TRUE(n0.gpus[1].healthy);
  EXPECT_FALSE(n0.gpus[1].mig_capable);
  EXPECT_EQ(n0.gpus[1].nvlink_domain, "");
  EXPECT_THAT(cluster.nodes[1].gpus, IsEmpty());
  EXPECT_EQ(cluster.nodes[2].gpus[0].memory_mib, 0);  // undisclosed model
}

TEST(TracePoolTest, PodsBecomeSpecs) {
  OpenbPod cpu;
  cpu.name = "cpu";
  cpu.cpu_milli = 4000;
  cpu.memory_mib = 8192;
  WorkloadSpec s = SpecOf(cpu);
  EXPECT_EQ(s.name, "cpu");
  EXPECT_EQ(s.replicas, 1);
  EXPECT_EQ(s.gpus_per_replica, 0);
  EXPECT_EQ(s.gpu_milli, 0);
  EXPECT_EQ(s.cpu_millis, 4000);
  EXPECT_EQ(s.memory_mib, 8192);
  EXPECT_EQ(Demand::Of(s).kind, Demand::Kind::kNone);

  OpenbPod share;
  share.name = "share";
  share.num_gpu = 1;
  share.gpu_milli = 460;
  share.gpu_spec = {"T4", "P100"};
  s = SpecOf(share);
  EXPECT_EQ(s.gpus_per_replica, 1);
  EXPECT_EQ(s.gpu_milli, 460);
  EXPECT_THAT(s.gpu_models, ElementsAre("T4", "P100"));
  EXPECT_EQ(Demand::Of(s).kind, Demand::Kind::kShare);
  EXPECT_EQ(Demand::Of(s).TotalMilli(), 460);

  OpenbPod whole;
  whole.name = "whole";
  whole.num_gpu = 4;
  whole.gpu_milli = 1000;
  s = SpecOf(whole);
  EXPECT_EQ(s.gpus_per_replica, 4);
  EXPECT_EQ(s.gpu_milli, 0);
  EXPECT_EQ(Demand::Of(s).kind, Demand::Kind::kWhole);
  EXPECT_EQ(Demand::Of(s).TotalMilli(), 4000);
}

}  // namespace
}  // namespace gpufed::sim
