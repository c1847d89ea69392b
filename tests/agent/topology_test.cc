#include "agent/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tests/support/status_matchers.h"

namespace gpufed::agent {
namespace {

using ::gpufed::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Demo(const std::string& relative) {
  return absl::StrCat(GPUFED_SOURCE_DIR, "/", relative);
}

// Every GPU of `node` lies in one NVLink domain named <node>-nvl.
void ExpectOneDomainPerNode(const v1::Inventory& inv) {
  std::set<std::string> domains;
  for (const v1::Node& node : inv.nodes()) {
    for (const v1::Gpu& gpu : node.gpus()) {
      EXPECT_EQ(gpu.nvlink_domain(), node.name() + "-nvl");
      domains.insert(gpu.nvlink_domain());
    }
  }
  EXPECT_EQ(domains.size(), static_cast<size_t>(inv.nodes_size()));
}

TEST(TopologyTest, OnpremDgxDemo) {
  absl::StatusOr<ClusterTopology> t =
      LoadClusterTopology(Demo("deploy/topologies/onprem-dgx.yaml"));
  ASSERT_OK(t);
  EXPECT_EQ(t->cluster, "onprem-dgx");
  EXPECT_EQ(t->info.provider(), "onprem");
  EXPECT_EQ(t->info.region(), "us-east");
  EXPECT_EQ(t->info.jurisdiction(), "us");
  ASSERT_EQ(t->inventory.nodes_size(), 4);
  EXPECT_EQ(CountGpus(t->inventory), 32);
  const char* names[] = {"dgx-01", "dgx-02", "dgx-03", "dgx-04"};
  for (int n = 0; n < 4; ++n) {
    const v1::Node& node = t->inventory.nodes(n);
    EXPECT_EQ(node.name(), names[n]);
    EXPECT_EQ(node.rack(), "r1");
    EXPECT_EQ(node.block(), "b1");
    EXPECT_TRUE(node.schedulable());
    ASSERT_EQ(node.gpus_size(), 8);
    for (int i = 0; i < 8; ++i) {
      const v1::Gpu& gpu = node.gpus(i);
      EXPECT_EQ(gpu.index(), static_cast<uint32_t>(i));
      EXPECT_EQ(gpu.model(), "H100-80GB");
      EXPECT_EQ(gpu.memory_mib(), 81559u);  // the catalogue's figure
      EXPECT_EQ(gpu.numa_node(), i < 4 ? 0 : 1);
      EXPECT_TRUE(gpu.mig_capable());
      EXPECT_TRUE(gpu.healthy());
      EXPECT_EQ(gpu.uuid(), absl::StrCat("GPU-onprem-dgx-", names[n], "-", i));
      // dgx-04 is the MIG node: GPUs 0-3 in MIG mode, 4-7 whole.
      EXPECT_EQ(gpu.mig_enabled(), n == 3 && i < 4) << names[n] << " GPU " << i;
    }
  }
  ExpectOneDomainPerNode(t->inventory);
  const v1::Node& mig = t->inventory.nodes(3);
  const int layout_sizes[] = {2, 4, 7, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(mig.gpus(i).mig_layout_size(), layout_sizes[i]) << i;
  EXPECT_EQ(mig.gpus(0).mig_layout(1).profile(), "3g.40gb");
  EXPECT_EQ(mig.gpus(0).mig_layout(1).start(), 4u);
}

TEST(TopologyTest, Gb200Nvl72Demo) {
  absl::StatusOr<ClusterTopology> t =
      LoadClusterTopology(Demo("deploy/topologies/gb200-nvl72.yaml"));
  ASSERT_OK(t);
  EXPECT_EQ(t->cluster, "gb200-nvl72");
  ASSERT_EQ(t->inventory.nodes_size(), 18);
  EXPECT_EQ(CountGpus(t->inventory), 72);
  std::set<std::string> domains;
  for (const v1::Node& node : t->inventory.nodes()) {
    EXPECT_EQ(node.rack(), "nvl72-r1");
    EXPECT_EQ(node.block(), "b1");
    ASSERT_EQ(node.gpus_size(), 4);
    for (const v1::Gpu& gpu : node.gpus()) {
      EXPECT_EQ(gpu.model(), "GB200");
      EXPECT_EQ(gpu.memory_mib(), 189471u);
      EXPECT_FALSE(gpu.mig_capable());  // no MIG geometry for GB200 yet
      domains.insert(gpu.nvlink_domain());
    }
  }
  // One NVLink domain across all 18 nodes.
  EXPECT_EQ(domains, std::set<std::string>{"nvl72-r1"});
  EXPECT_EQ(t->inventory.nodes(17).name(), "gb200-18");
}

TEST(TopologyTest, MigModeAndLayoutsPerGpuAndPerGroup) {
  const char* yaml = R"(
cluster: {name: mig, provider: onprem, region: r}
node_groups:
  - name_prefix: a30-
    count: 2
    gpus:
      count: 2
      model: A30
      mig_enabled: true
      mig_layout: [{profile: 2g.12gb, start: 0}, {profile: 1g.6gb, start: 2}]
nodes:
  - name: h100
    gpus:
      - {model: H100-80GB, mig_enabled: true, mig_layout: [{profile: 7g.80gb, start: 0}]}
      - {model: H100-80GB, mig_enabled: false}
      - {model: H100-80GB, mig_enabled: true}
)";
  absl::StatusOr<ClusterTopology> t = ParseClusterTopology(yaml, "mig.yaml");
  ASSERT_OK(t);
  ASSERT_EQ(t->inventory.nodes_size(), 3);
  for (int n = 0; n < 2; ++n) {
    for (const v1::Gpu& gpu : t->inventory.nodes(n).gpus()) {
      EXPECT_TRUE(gpu.mig_enabled());
      ASSERT_EQ(gpu.mig_layout_size(), 2);
      EXPECT_EQ(gpu.mig_layout(1).profile(), "1g.6gb");
      EXPECT_EQ(gpu.mig_layout(1).start(), 2u);
    }
  }
  const v1::Node& h100 = t->inventory.nodes(2);
  EXPECT_TRUE(h100.gpus(0).mig_enabled());
  ASSERT_EQ(h100.gpus(0).mig_layout_size(), 1);
  EXPECT_EQ(h100.gpus(0).mig_layout(0).profile(), "7g.80gb");
  EXPECT_FALSE(h100.gpus(1).mig_enabled());
  EXPECT_TRUE(h100.gpus(2).mig_enabled());
  EXPECT_EQ(h100.gpus(2).mig_layout_size(), 0);
}

TEST(TopologyTest, CloudA100Demo) {
  absl::StatusOr<ClusterTopology> t =
      LoadClusterTopology(Demo("deploy/topologies/cloud-a100.yaml"));
  ASSERT_OK(t);
  EXPECT_EQ(t->cluster, "cloud-eu-a100");
  EXPECT_EQ(t->info.provider(), "aws");
  EXPECT_EQ(t->info.region(), "eu-west-1");
  EXPECT_EQ(t->info.jurisdiction(), "eu");
  ASSERT_EQ(t->info.compliance_labels_size(), 1);
  EXPECT_EQ(t->info.compliance_labels(0), "gdpr");
  EXPECT_EQ(t->inventory.nodes_size(), 8);
  EXPECT_EQ(CountGpus(t->inventory), 64);
  for (const v1::Node& node : t->inventory.nodes()) {
    for (const v1::Gpu& gpu : node.gpus()) EXPECT_EQ(gpu.model(), "A100-80GB");
  }
  ExpectOneDomainPerNode(t->inventory);
}

TEST(TopologyTest, EdgeL4Demo) {
  absl::StatusOr<ClusterTopology> t = LoadClusterTopology(Demo("deploy/topologies/edge-l4.yaml"));
  ASSERT_OK(t);
  EXPECT_EQ(t->cluster, "edge-l4");
  EXPECT_EQ(t->info.provider(), "edge");
  EXPECT_EQ(t->info.region(), "us-west");
  EXPECT_EQ(t->info.jurisdiction(), "us");
  EXPECT_EQ(t->inventory.nodes_size(), 2);
  EXPECT_EQ(CountGpus(t->inventory), 8);
  for (const v1::Node& node : t->inventory.nodes()) {
    for (const v1::Gpu& gpu : node.gpus()) {
      EXPECT_EQ(gpu.model(), "L4");
      EXPECT_EQ(gpu.nvlink_domain(), "");
      EXPECT_FALSE(gpu.mig_capable());
    }
  }
}

TEST(TopologyTest, BenchDemo) {
  absl::StatusOr<ClusterTopology> t = LoadClusterTopology(Demo("bench/topologies/bench-16x8.yaml"));
  ASSERT_OK(t);
  EXPECT_EQ(t->inventory.nodes_size(), 16);
  EXPECT_EQ(CountGpus(t->inventory), 128);
  ExpectOneDomainPerNode(t->inventory);
}

TEST(TopologyTest, ExplicitNodesAndGeneratedDetails) {
  const char* yaml = R"(
cluster:
  name: mixed
  provider: gcp
  region: europe-west4
nodes:
  - name: special-01
    rack: r2
    schedulable: false
    labels: {pool: special}
    gpus:
      - {index: 0, uuid: GPU-abc, model: L4, memory_mib: 23000, nvlink_domain: "", numa_node: 0}
      - {index: 3, model: L4, pcie_switch: sw1, healthy: false}
node_groups:
  - name_prefix: pcie-
    count: 100
    rack: "rack-{n}"
    gpus: {count: 4, model: A100-40GB, nvlink: pairs, numa_nodes: 2, pcie_switches: 2}
)";
  absl::StatusOr<ClusterTopology> t = ParseClusterTopology(yaml, "mixed.yaml");
  ASSERT_OK(t);
  ASSERT_EQ(t->inventory.nodes_size(), 101);
  // node_groups come first, then explicit nodes.
  const v1::Node& first = t->inventory.nodes(0);
  EXPECT_EQ(first.name(), "pcie-001");  // padded to the width of the count
  EXPECT_EQ(first.rack(), "rack-001");
  EXPECT_EQ(t->inventory.nodes(99).name(), "pcie-100");
  ASSERT_EQ(first.gpus_size(), 4);
  EXPECT_EQ(first.gpus(0).nvlink_domain(), "pcie-001-nvl0");
  EXPECT_EQ(first.gpus(1).nvlink_domain(), "pcie-001-nvl0");
  EXPECT_EQ(first.gpus(2).nvlink_domain(), "pcie-001-nvl1");
  EXPECT_EQ(first.gpus(3).numa_node(), 1);
  EXPECT_EQ(first.gpus(0).pcie_switch(), "pcie0");
  EXPECT_EQ(first.gpus(3).pcie_switch(), "pcie1");
  EXPECT_EQ(first.gpus(0).memory_mib(), 40536u);
  EXPECT_TRUE(first.gpus(0).mig_capable());  // A100 default from the catalogue

  const v1::Node& special = t->inventory.nodes(100);
  EXPECT_EQ(special.name(), "special-01");
  EXPECT_EQ(special.rack(), "r2");
  EXPECT_FALSE(special.schedulable());
  EXPECT_EQ(special.labels().at("pool"), "special");
  ASSERT_EQ(special.gpus_size(), 2);
  EXPECT_EQ(special.gpus(0).uuid(), "GPU-abc");
  EXPECT_EQ(special.gpus(0).memory_mib(), 23000u);
  EXPECT_EQ(special.gpus(1).index(), 3u);
  EXPECT_EQ(special.gpus(1).uuid(), "GPU-mixed-special-01-3");
  EXPECT_EQ(special.gpus(1).memory_mib(), 23034u);
  EXPECT_EQ(special.gpus(1).pcie_switch(), "sw1");
  EXPECT_FALSE(special.gpus(1).healthy());
}

TEST(TopologyTest, MissingFileIsNotFound) {
  absl::StatusOr<ClusterTopology> t = LoadClusterTopology("/nonexistent/topology.yaml");
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("/nonexistent/topology.yaml"));
}

// The brief's example: the message names file, line, field and the known models.
TEST(TopologyTest, UnknownModelNamesFileLineAndField) {
  const char* yaml =
      "cluster:\n"              // 1
      "  name: onprem\n"        // 2
      "  provider: onprem\n"    // 3
      "  region: us-east\n"     // 4
      "node_groups:\n"          // 5
      "  - name_prefix: n-\n"   // 6
      "    count: 2\n"          // 7
      "    rack: r1\n"          // 8
      "    cpu_millis: 1000\n"  // 9
      "    gpus:\n"             // 10
      "      count: 8\n"        // 11
      "      model: H900\n";    // 12
  absl::StatusOr<ClusterTopology> t = ParseClusterTopology(yaml, "onprem.yaml");
  ASSERT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()),
              StartsWith("onprem.yaml:12: node_groups[0].gpus.model: unknown GPU model \"H900\" "
                         "(known: A100-40GB, A100-80GB, H100-80GB"));
}

struct BadCase {
  const char* name;
  const char* yaml;
  const char* expected;  // a substring of the message
};

constexpr char kHead[] = "cluster: {name: c1, provider: onprem, region: r}\n";

class MalformedTopologyTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(MalformedTopologyTest, IsInvalidArgumentNamingTheField) {
  const BadCase& c = GetParam();
  absl::StatusOr<ClusterTopology> t = ParseClusterTopology(c.yaml, "bad.yaml");
  EXPECT_THAT(t, StatusIs(absl::StatusCode::kInvalidArgument,
                          AllOf(StartsWith("bad.yaml:"), HasSubstr(c.expected))))
      << c.name;
}

std::string Group(const std::string& gpus, const std::string& extra = "") {
  return absl::StrCat(kHead, "node_groups:\n  - name_prefix: n-\n    count: 2\n", extra,
                      "    gpus: ", gpus, "\n");
}

const std::string kGood = Group("{count: 8, model: H100-80GB}");
const std::string kSyntax = "cluster: {name: c1\nnodes: [";
const std::string kNoName = "cluster: {provider: onprem, region: r}\nnode_groups: []\n";
const std::string kBadName =
    "cluster: {name: Bad_Name, provider: onprem, region: r}\nnode_groups: []\n";
const std::string kNoCluster = "node_groups: []\n";
const std::string kNoNodes = absl::StrCat(kHead, "node_groups: []\n");
const std::string kZeroCount =
    absl::StrCat(kHead,
                 "node_groups:\n  - name_prefix: n-\n    count: 0\n    gpus: {count: 8, "
                 "model: L4}\n");
const std::string kNegativeCount =
    absl::StrCat(kHead,
                 "node_groups:\n  - name_prefix: n-\n    count: -3\n    gpus: {count: 8, "
                 "model: L4}\n");
const std::string kZeroGpus = Group("{count: 0, model: L4}");
const std::string kNoGpus =
    absl::StrCat(kHead, "node_groups:\n  - name_prefix: n-\n    count: 2\n");
const std::string kBadNvlink = Group("{count: 8, model: H100-80GB, nvlink: full}");
const std::string kOddPairs = Group("{count: 3, model: L4, nvlink: pairs}");
const std::string kMigOnL4 = Group("{count: 2, model: L4, mig_capable: true}");
const std::string kUnknownKey = absl::StrCat(
    kHead, "node_groups:\n  - name_prefix: n-\n    count: 2\n    gpu: {count: 8, model: L4}\n");
const std::string kUnknownTopKey = absl::StrCat(kHead, "nodegroups: []\n");
const std::string kDupNode =
    absl::StrCat(kGood, "nodes:\n  - name: n-01\n    gpus:\n      - {model: L4}\n");
const std::string kDupUuid =
    absl::StrCat(kHead,
                 "nodes:\n  - name: a\n    gpus:\n      - {uuid: GPU-x, model: L4}\n  - name: b\n"
                 "    gpus:\n      - {uuid: GPU-x, model: L4}\n");
const std::string kDupIndex = absl::StrCat(
    kHead,
    "nodes:\n  - name: a\n    gpus:\n      - {index: 1, model: L4}\n      - {index: 1, "
    "model: L4}\n");
const std::string kNodeWithoutGpus = absl::StrCat(kHead, "nodes:\n  - name: a\n    gpus: []\n");
const std::string kBadNodeName =
    absl::StrCat(kHead, "nodes:\n  - name: UPPER\n    gpus:\n      - {model: L4}\n");
const std::string kLongPrefix =
    absl::StrCat(kHead, "node_groups:\n  - name_prefix: ", std::string(62, 'x'),
                 "\n    count: 2\n    gpus: {count: 1, model: L4}\n");
const std::string kGroupDomainClash =
    Group("{count: 8, model: H100-80GB, nvlink: node}") +
    "nodes:\n  - name: z\n    gpus:\n      - {model: H100-80GB, nvlink_domain: n-01-nvl}\n";
const std::string kBadMemory = Group("{count: 8, model: L4, memory_mib: 0}");
const std::string kBadNuma = Group("{count: 8, model: L4, numa_nodes: 9}");
const std::string kListNotMap = absl::StrCat(kHead, "node_groups: {a: b}\n");
const std::string kBadBool = Group("{count: 8, model: A100-80GB, mig_capable: maybe}");
const std::string kMigEnabledOnL4 = Group("{count: 2, model: L4, mig_enabled: true}");
const std::string kMigEnabledNotCapable =
    Group("{count: 2, model: H100-80GB, mig_capable: false, mig_enabled: true}");
const std::string kMigNoGeometry = Group("{count: 2, model: B200, mig_enabled: true}");
const std::string kLayoutWithoutMig =
    Group("{count: 2, model: H100-80GB, mig_layout: [{profile: 1g.10gb, start: 0}]}");
const std::string kMigBadStart =
    absl::StrCat(kHead,
                 "nodes:\n  - name: a\n    gpus:\n      - {model: H100-80GB, mig_enabled: true,\n"
                 "         mig_layout: [{profile: 3g.40gb, start: 2}]}\n");
const std::string kMigOverlap = absl::StrCat(
    kHead,
    "nodes:\n  - name: a\n    gpus:\n      - {model: A100-80GB, mig_enabled: true,\n"
    "         mig_layout: [{profile: 4g.40gb, start: 0}, {profile: 2g.20gb, start: 2}]}\n");
const std::string kMigForeignProfile = Group(
    "{count: 1, model: A100-40GB, mig_enabled: true, mig_layout: [{profile: 3g.40gb, "
    "start: 0}]}");
const std::string kMigSlotTooHigh =
    Group("{count: 1, model: A30, mig_enabled: true, mig_layout: [{profile: 1g.6gb, start: 4}]}");
const std::string kMigNoStart =
    Group("{count: 1, model: A30, mig_enabled: true, mig_layout: [{profile: 1g.6gb}]}");
const std::string kMigUnknownKey =
    Group("{count: 1, model: A30, mig_enabled: true, mig_layout: [{profile: 1g.6gb, slot: 0}]}");
const std::string kMigLayoutNotList =
    Group("{count: 1, model: A30, mig_enabled: true, mig_layout: 1g.6gb}");
const std::string kNvlinkAndDomain =
    Group("{count: 4, model: GB200, nvlink: node, nvlink_domain: nvl72}");
const std::string kSharedDomainClash =
    Group("{count: 4, model: GB200, nvlink_domain: m-01-nvl}") +
    "  - name_prefix: m-\n    count: 1\n    gpus: {count: 2, model: L4, nvlink: node}\n";
const std::string kDigitCluster =
    "cluster: {name: 1dc, provider: onprem, region: r}\n"
    "nodes:\n  - name: a\n    gpus:\n      - {model: L4}\n";
// GPU-<cluster>-<node>-0 with a 63-character cluster and node name: 133 bytes, above 128.
const std::string kLongUuid =
    absl::StrCat("cluster: {name: ", std::string(63, 'c'), ", provider: onprem, region: r}\n",
                 "node_groups:\n  - name_prefix: ", std::string(61, 'n'),
                 "\n    count: 1\n    gpus: {count: 1, model: L4}\n");
const std::string kLabelControl = absl::StrCat(
    kHead,
    "nodes:\n  - name: a\n    labels: {pool: \"a\\x01b\"}\n    gpus:\n      - {model: L4}\n");
const std::string kDupCompliance =
    "cluster: {name: c1, provider: onprem, region: r, compliance_labels: [gdpr, gdpr]}\n"
    "nodes:\n  - name: a\n    gpus:\n      - {model: L4}\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, MalformedTopologyTest,
    ::testing::Values(
        BadCase{"syntax", kSyntax.c_str(), "invalid YAML"},
        BadCase{"no_cluster", kNoCluster.c_str(), "cluster: required"},
        BadCase{"no_name", kNoName.c_str(), "cluster.name: required"},
        BadCase{"bad_name", kBadName.c_str(), "cluster.name: \"Bad_Name\" must be 1..63"},
        BadCase{"no_nodes", kNoNodes.c_str(), "the cluster has no nodes"},
        BadCase{"zero_count", kZeroCount.c_str(),
                "bad.yaml:4: node_groups[0].count: must be "
                "between 1 and"},
        BadCase{"negative_count", kNegativeCount.c_str(),
                "node_groups[0].count: must be a non-negative integer (got \"-3\")"},
        BadCase{"zero_gpus", kZeroGpus.c_str(), "node_groups[0].gpus.count: must be between 1"},
        BadCase{"no_gpus", kNoGpus.c_str(), "node_groups[0].gpus: required"},
        BadCase{"bad_nvlink", kBadNvlink.c_str(),
                "node_groups[0].gpus.nvlink: must be node, pairs or none (got \"full\")"},
        BadCase{"odd_pairs", kOddPairs.c_str(), "node_groups[0].gpus.nvlink: pairs needs"},
        BadCase{"mig_on_l4", kMigOnL4.c_str(),
                "node_groups[0].gpus.mig_capable: L4 does not support MIG"},
        BadCase{"unknown_key", kUnknownKey.c_str(), "bad.yaml:5: node_groups[0].gpu: unknown key"},
        BadCase{"unknown_top_key", kUnknownTopKey.c_str(), "nodegroups: unknown key"},
        BadCase{"dup_node", kDupNode.c_str(), "nodes[0].name: duplicate node name \"n-01\""},
        BadCase{"dup_uuid", kDupUuid.c_str(), "nodes[1].gpus[0].uuid: duplicate GPU uuid"},
        BadCase{"dup_index", kDupIndex.c_str(), "nodes[0].gpus[1].index: duplicate GPU index 1"},
        BadCase{"node_without_gpus", kNodeWithoutGpus.c_str(),
                "nodes[0].gpus: a node needs at least one GPU"},
        BadCase{"bad_node_name", kBadNodeName.c_str(), "nodes[0].name: \"UPPER\" must be"},
        BadCase{"long_prefix", kLongPrefix.c_str(), "node_groups[0].name_prefix: node names"},
        BadCase{"group_domain_clash", kGroupDomainClash.c_str(),
                "nodes[0].gpus[0].nvlink_domain: NVLink domain \"n-01-nvl\" is also generated"},
        BadCase{"bad_memory", kBadMemory.c_str(), "node_groups[0].gpus.memory_mib: must be > 0"},
        BadCase{"bad_numa", kBadNuma.c_str(), "node_groups[0].gpus.numa_nodes: must be between"},
        BadCase{"list_not_map", kListNotMap.c_str(), "node_groups: must be a list"},
        BadCase{"bad_bool", kBadBool.c_str(), "mig_capable: must be true or false"},
        BadCase{"mig_enabled_on_l4", kMigEnabledOnL4.c_str(),
                "node_groups[0].gpus.mig_enabled: L4 does not support MIG"},
        BadCase{"mig_enabled_not_capable", kMigEnabledNotCapable.c_str(),
                "node_groups[0].gpus.mig_enabled: H100-80GB (mig_capable: false) does not "
                "support MIG"},
        BadCase{"mig_no_geometry", kMigNoGeometry.c_str(),
                "node_groups[0].gpus.mig_enabled: gpufed has no MIG geometry for B200"},
        BadCase{"layout_without_mig", kLayoutWithoutMig.c_str(),
                "node_groups[0].gpus.mig_layout: a MIG layout needs mig_enabled: true"},
        BadCase{"mig_bad_start", kMigBadStart.c_str(),
                "bad.yaml:6: nodes[0].gpus[0].mig_layout[0]: 3g.40gb at slot 2: allowed starts "
                "are 0, 4"},
        BadCase{"mig_overlap", kMigOverlap.c_str(),
                "nodes[0].gpus[0].mig_layout[1]: 2g.20gb at slot 2: overlaps 4g.40gb at slot 0"},
        BadCase{"mig_foreign_profile", kMigForeignProfile.c_str(),
                "node_groups[0].gpus.mig_layout[0]: \"3g.40gb\" is not a MIG profile of A100-40GB"},
        BadCase{"mig_slot_too_high", kMigSlotTooHigh.c_str(),
                "node_groups[0].gpus.mig_layout[0].start: must be below 4 on A30"},
        BadCase{"mig_no_start", kMigNoStart.c_str(),
                "node_groups[0].gpus.mig_layout[0].start: required"},
        BadCase{"mig_unknown_key", kMigUnknownKey.c_str(),
                "node_groups[0].gpus.mig_layout[0].slot: unknown key"},
        BadCase{"mig_layout_not_list", kMigLayoutNotList.c_str(),
                "node_groups[0].gpus.mig_layout: must be a list of {profile, start}"},
        BadCase{"nvlink_and_domain", kNvlinkAndDomain.c_str(),
                "node_groups[0].gpus.nvlink_domain: give either nvlink (\"node\") or "
                "nvlink_domain, not both"},
        BadCase{"shared_domain_clash", kSharedDomainClash.c_str(),
                "node_groups[0].gpus.nvlink_domain: NVLink domain \"m-01-nvl\" is also "
                "generated"},
        BadCase{"dup_compliance", kDupCompliance.c_str(),
                "cluster.compliance_labels[1]: duplicate \"gdpr\""},
        // The rules of federation/validation.h, which the server applies to Register.
        BadCase{"cluster_starts_with_digit", kDigitCluster.c_str(),
                "cluster.name: \"1dc\" must be 1..63 characters of [a-z0-9-], starting with a "
                "letter"},
        BadCase{"generated_uuid_too_long", kLongUuid.c_str(),
                "node_groups[0].name_prefix: GPU uuid \"GPU-"},
        BadCase{"label_control_character", kLabelControl.c_str(),
                "nodes[0].labels.pool: must be a one-line string"}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gpufed::agent
