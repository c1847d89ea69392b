// Real-GPU discovery (agent/discovery.h) against recorded-format output of `nvidia-smi -q -x` and
// `nvidia-smi topo -m` (tests/agent/testdata/discovery, README there): an 8 x H100 SXM DGX, a
// DGX A100 with MIG on four GPUs, an 8 x L4 PCIe box, malformed output, the merge into the
// topology file's cluster, and the commands run through a stand-in nvidia-smi.

#include "agent/discovery.h"

#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): POSIX mkdtemp
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/mig.h"
#include "federation/types.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpufed::agent {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAre;

std::string SamplePath(const std::string& name) {
  return absl::StrCat(GPUFED_SOURCE_DIR, "/tests/agent/testdata/discovery/", name);
}

std::string Sample(const std::string& name) {
  std::ifstream in(SamplePath(name));
  EXPECT_TRUE(in.good()) << SamplePath(name);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// `xml` with the first `from` inside the <gpu> element of PCI bus `bus` replaced by `to`.
std::string InGpu(std::string xml, const std::string& bus, const std::string& from,
                  const std::string& to) {
  const size_t gpu = xml.find(absl::StrCat("<gpu id=\"00000000:", bus, ":00.0\">"));
  EXPECT_NE(gpu, std::string::npos) << bus;
  const size_t end = xml.find("</gpu>", gpu);
  const size_t at = xml.find(from, gpu);
  EXPECT_LT(at, end) << from;
  if (at < end) xml.replace(at, from.size(), to);
  return xml;
}

absl::StatusOr<DiscoveredNode> Discover(const std::string& xml_file, const std::string& topo_file,
                                        const std::string& node = "gpu-01") {
  return DiscoverNodeFromOutput(node, Sample(xml_file), Sample(topo_file));
}

std::vector<std::string> Layout(const v1::Gpu& gpu) {
  std::vector<std::string> out;
  for (const v1::MigInstance& m : gpu.mig_layout()) {
    out.push_back(absl::StrCat(m.profile(), "@", m.start()));
  }
  return out;
}

template <typename Field>
std::vector<Field> PerGpu(const v1::Node& node, Field (*get)(const v1::Gpu&)) {
  std::vector<Field> out;
  for (const v1::Gpu& g : node.gpus()) out.push_back(get(g));
  return out;
}

std::string Domain(const v1::Gpu& g) { return g.nvlink_domain(); }
std::string Switch(const v1::Gpu& g) { return g.pcie_switch(); }
int32_t Numa(const v1::Gpu& g) { return g.numa_node(); }

TEST(DiscoveryTest, DgxH100AllNvLinkedMigOff) {
  absl::StatusOr<DiscoveredNode> d = Discover("dgx-h100-q.xml", "dgx-h100-topo.txt", "dgx-01");
  ASSERT_TRUE(d.ok()) << d.status();
  const v1::Node& node = d->node;
  EXPECT_EQ(node.name(), "dgx-01");
  EXPECT_TRUE(node.schedulable());
  EXPECT_THAT(node.labels(),
              UnorderedElementsAre(Pair(std::string(kDriverVersionLabel), "550.54.15"),
                                   Pair(std::string(kCudaVersionLabel), "12.4")));
  ASSERT_THAT(node.gpus(), SizeIs(8));
  for (int i = 0; i < 8; ++i) {
    const v1::Gpu& g = node.gpus(i);
    EXPECT_EQ(g.index(), static_cast<uint32_t>(i));
    EXPECT_EQ(g.model(), "H100-80GB");
    EXPECT_EQ(g.memory_mib(), 81559u);
    EXPECT_TRUE(g.mig_capable());
    EXPECT_FALSE(g.mig_enabled());
    EXPECT_THAT(g.mig_layout(), IsEmpty());
    EXPECT_TRUE(g.healthy());
  }
  EXPECT_EQ(node.gpus(0).uuid(), "GPU-9b3e4f1a-2c6d-4e8b-a7f0-1d2c3b4a5e61");
  EXPECT_EQ(node.gpus(7).uuid(), "GPU-e6f8a0b2-c4d6-4e8f-a0b2-c4d6e8f0a298");
  // NV18 everywhere: one domain. Each GPU sits under its own PCIe switch with its NIC (PIX to
  // one NIC only), so no two GPUs share one.
  EXPECT_THAT(PerGpu(node, Domain), ::testing::Each(std::string("dgx-01-nvl")));
  EXPECT_THAT(PerGpu(node, Switch), ::testing::Each(std::string("")));
  EXPECT_THAT(PerGpu(node, Numa), ElementsAre(0, 0, 0, 0, 1, 1, 1, 1));
  EXPECT_THAT(d->notes, IsEmpty());
}

TEST(DiscoveryTest, DgxA100WithMigInstances) {
  absl::StatusOr<DiscoveredNode> d =
      Discover("dgx-a100-mig-q.xml", "dgx-a100-mig-topo.txt", "a100-01");
  ASSERT_TRUE(d.ok()) << d.status();
  const v1::Node& node = d->node;
  EXPECT_THAT(node.labels(),
              UnorderedElementsAre(Pair(std::string(kDriverVersionLabel), "535.183.01"),
                                   Pair(std::string(kCudaVersionLabel), "12.2")));
  ASSERT_THAT(node.gpus(), SizeIs(8));
  for (const v1::Gpu& g : node.gpus()) {
    EXPECT_EQ(g.model(), "A100-80GB");
    EXPECT_EQ(g.memory_mib(), 81920u);  // what the GPU reports, not the catalogue's figure
    EXPECT_TRUE(g.mig_capable());
    EXPECT_EQ(g.mig_enabled(), g.index() < 4) << g.index();
    std::vector<MigInstance> layout;
    for (const v1::MigInstance& m : g.mig_layout()) {
      layout.push_back(MigInstance{m.profile(), static_cast<int>(m.start())});
    }
    EXPECT_TRUE(ValidateMigLayout(*FindMigGeometry("A100-80GB"), layout).ok()) << g.index();
  }
  // GPU 0: a 3g.40gb split into two compute instances counts once, with a 2g.20gb and a 1g.10gb.
  EXPECT_THAT(Layout(node.gpus(0)), ElementsAre("3g.40gb@0", "2g.20gb@4", "1g.10gb@6"));
  // GPU 1: 4g.40gb and 3g.40gb have the same memory; their copy engines tell them apart.
  EXPECT_THAT(Layout(node.gpus(1)), ElementsAre("4g.40gb@0", "3g.40gb@4"));
  EXPECT_THAT(Layout(node.gpus(2)), ElementsAre("7g.80gb@0"));
  EXPECT_THAT(Layout(node.gpus(3)), IsEmpty());  // MIG on, no instances yet
  EXPECT_THAT(PerGpu(node, Domain), ::testing::Each(std::string("a100-01-nvl")));
  // GPUs in pairs behind a PCIe switch with two NICs (PXB to the same NICs).
  EXPECT_THAT(PerGpu(node, Switch),
              ElementsAre("pcie0", "pcie0", "pcie1", "pcie1", "pcie2", "pcie2", "pcie3", "pcie3"));
  EXPECT_THAT(PerGpu(node, Numa), ElementsAre(3, 3, 1, 1, 7, 7, 5, 5));
  // The inferred starts are said so, once per GPU with instances.
  EXPECT_THAT(d->notes,
              ElementsAre(HasSubstr("GPU 00000000:07:00.0: MIG instances 3g.40gb@0"),
                          HasSubstr("GPU 00000000:0F:00.0"), HasSubstr("starts inferred")));
}

TEST(DiscoveryTest, L4PcieBoxWithoutNvLink) {
  absl::StatusOr<DiscoveredNode> d = Discover("l4-pcie-q.xml", "l4-pcie-topo.txt", "edge-01");
  ASSERT_TRUE(d.ok()) << d.status();
  const v1::Node& node = d->node;
  EXPECT_THAT(node.labels(),
              UnorderedElementsAre(Pair(std::string(kDriverVersionLabel), "555.42.06"),
                                   Pair(std::string(kCudaVersionLabel), "12.5")));
  ASSERT_THAT(node.gpus(), SizeIs(8));
  for (const v1::Gpu& g : node.gpus()) {
    EXPECT_EQ(g.model(), "L4");
    EXPECT_EQ(g.memory_mib(), 23034u);
    EXPECT_FALSE(g.mig_capable());
    EXPECT_FALSE(g.mig_enabled());
    EXPECT_TRUE(g.healthy());
  }
  EXPECT_THAT(PerGpu(node, Domain), ::testing::Each(std::string("")));
  // PIX pairs; NODE within a socket and SYS across are not a shared switch.
  EXPECT_THAT(PerGpu(node, Switch),
              ElementsAre("pcie0", "pcie0", "pcie1", "pcie1", "pcie2", "pcie2", "pcie3", "pcie3"));
  EXPECT_THAT(PerGpu(node, Numa), ElementsAre(0, 0, 0, 0, 1, 1, 1, 1));
}

TEST(DiscoveryTest, IndexIsNvidiaSmiOrderNotMinorNumber) {
  std::string xml = Sample("dgx-h100-q.xml");
  xml = InGpu(xml, "18", "<minor_number>0</minor_number>", "<minor_number>3</minor_number>");
  xml = InGpu(xml, "5D", "<minor_number>3</minor_number>", "<minor_number>0</minor_number>");
  absl::StatusOr<DiscoveredNode> d =
      DiscoverNodeFromOutput("dgx-01", xml, Sample("dgx-h100-topo.txt"));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->node.gpus(0).index(), 0u);
  EXPECT_EQ(d->node.gpus(0).uuid(), "GPU-9b3e4f1a-2c6d-4e8b-a7f0-1d2c3b4a5e61");
  absl::StatusOr<SmiLog> smi = ParseNvidiaSmiXml(xml);
  ASSERT_TRUE(smi.ok());
  EXPECT_EQ(smi->gpus[0].minor_number, 3);
  EXPECT_EQ(smi->gpus[0].pci_bus_id, "00000000:18:00.0");
}

TEST(DiscoveryTest, GpusTheXmlShowsFailedAreUnhealthy) {
  std::string xml = Sample("l4-pcie-q.xml");
  xml = InGpu(xml, "41", "<remapped_row_pending>No</remapped_row_pending>",
              "<remapped_row_pending>Yes</remapped_row_pending>");
  xml = InGpu(xml, "82", "<dram_uncorrectable>0</dram_uncorrectable>",
              "<dram_uncorrectable>2</dram_uncorrectable>");
  xml = InGpu(xml, "C2", "<reset_required>No</reset_required>",
              "<reset_required>Yes</reset_required>");
  absl::StatusOr<DiscoveredNode> d =
      DiscoverNodeFromOutput("edge-01", xml, Sample("l4-pcie-topo.txt"));
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<bool> healthy;
  for (const v1::Gpu& g : d->node.gpus()) healthy.push_back(g.healthy());
  EXPECT_THAT(healthy, ElementsAre(true, true, false, true, true, false, true, false));
  EXPECT_THAT(d->notes,
              ElementsAre(HasSubstr("00000000:41:00.0 (GPU-7f9b1d3f-5a7c-9e1b-3d5f-7a9c1e3b5d22) "
                                    "reported unhealthy: rows pending remapping"),
                          HasSubstr("2 uncorrectable ECC error(s)"), HasSubstr("reset required")));
  // Aggregate (lifetime) counts do not fail a GPU; the volatile ones do.
  xml = InGpu(Sample("l4-pcie-q.xml"), "01",
              "<dram_uncorrectable>0</dram_uncorrectable>\n\t\t\t\t<sram_threshold_exceeded>",
              "<dram_uncorrectable>3</dram_uncorrectable>\n\t\t\t\t<sram_threshold_exceeded>");
  d = DiscoverNodeFromOutput("edge-01", xml, Sample("l4-pcie-topo.txt"));
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->node.gpus(0).healthy());
}

TEST(DiscoveryTest, ProductNames) {
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA H100 80GB HBM3"), "H100-80GB");
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA H100 NVL"), "H100-94GB");
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA A100-SXM4-80GB"), "A100-80GB");
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA A100 80GB PCIe"), "A100-80GB");
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA A100-SXM4-40GB"), "A100-40GB");
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA A100-PCIE-40GB"), "A100-40GB");
  EXPECT_EQ(CatalogModelOfProduct("A100-SXM4-40GB"), "A100-40GB");  // R470 printed no brand
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA L4"), "L4");
  EXPECT_EQ(CatalogModelOfProduct(" NVIDIA L40S "), "L40S");
  EXPECT_EQ(CatalogModelOfProduct("Tesla T4"), "T4");
  EXPECT_EQ(CatalogModelOfProduct("Tesla V100-SXM2-32GB"), "V100-32GB");
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA GeForce RTX 4090"), std::nullopt);
  EXPECT_EQ(CatalogModelOfProduct("NVIDIA L"), std::nullopt);
}

// Copies of the matrix often have the tabs expanded to spaces; this one is verbatim from the
// reference (nvidia-gpus.md §2.4, 4 x RTX 6000 Ada over two sockets).
TEST(DiscoveryTest, TopoWithSpacesInsteadOfTabs) {
  const std::string topo =
      "$ sonata@coyote2:~$ nvidia-smi topo -m\n"
      "        GPU0    GPU1    GPU2    GPU3    NIC0    NIC1    NIC2    NIC3    CPU Affinity    "
      "NUMA Affinity   GPU NUMA ID\n"
      "GPU0     X      NODE    SYS     SYS     NODE    NODE    SYS     SYS     0-31    0        "
      "       N/A\n"
      "GPU1    NODE     X      SYS     SYS     NODE    NODE    SYS     SYS     0-31    0        "
      "       N/A\n"
      "GPU2    SYS     SYS      X      NODE    SYS     SYS     NODE    NODE    32-63   1        "
      "       N/A\n"
      "GPU3    SYS     SYS     NODE     X      SYS     SYS     NODE    NODE    32-63   1        "
      "       N/A\n"
      "NIC0    NODE    NODE    SYS     SYS      X      PIX     SYS     SYS\n"
      "NIC1    NODE    NODE    SYS     SYS     PIX      X      SYS     SYS\n"
      "NIC2    SYS     SYS     NODE    NODE    SYS     SYS      X      PIX\n"
      "NIC3    SYS     SYS     NODE    NODE    SYS     SYS     PIX      X\n"
      "\n"
      "Legend:\n"
      "\n"
      "  X    = Self\n";
  absl::StatusOr<TopoMatrix> m = ParseNvidiaSmiTopo(topo);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->gpu_count, 4);
  EXPECT_THAT(m->numa, ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(m->links[2], ElementsAre("SYS", "SYS", "X", "NODE"));
  EXPECT_THAT(m->nic_links[3], ElementsAre("SYS", "SYS", "NODE", "NODE"));
}

TEST(DiscoveryTest, TopoEdgeCases) {
  // One GPU, an older driver without the NUMA columns, SOC for SYS.
  absl::StatusOr<TopoMatrix> m =
      ParseNvidiaSmiTopo("\tGPU0\tmlx5_0\tCPU Affinity\nGPU0\t X \tSOC\t0-11\nmlx5_0\tSOC\t X \n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->gpu_count, 1);
  EXPECT_THAT(m->nic_links[0], ElementsAre("SYS"));
  EXPECT_THAT(m->numa, ElementsAre(std::nullopt));
  // NVLink in pairs: two domains.
  const std::string pairs =
      "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \tNV4\tPHB\tPHB\t0-31\tN/A\t\tN/A\n"
      "GPU1\tNV4\t X \tPHB\tPHB\t0-31\tN/A\t\tN/A\n"
      "GPU2\tPHB\tPHB\t X \tNV4\t0-31\tN/A\t\tN/A\n"
      "GPU3\tPHB\tPHB\tNV4\t X \t0-31\tN/A\t\tN/A\n";
  absl::StatusOr<TopoMatrix> topo = ParseNvidiaSmiTopo(pairs);
  ASSERT_TRUE(topo.ok()) << topo.status();
  absl::StatusOr<SmiLog> smi = ParseNvidiaSmiXml(Sample("l4-pcie-q.xml"));
  ASSERT_TRUE(smi.ok());
  smi->gpus.resize(4);
  absl::StatusOr<DiscoveredNode> d = BuildDiscoveredNode("ws-01", *smi, *topo);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_THAT(PerGpu(d->node, Domain),
              ElementsAre("ws-01-nvl0", "ws-01-nvl0", "ws-01-nvl1", "ws-01-nvl1"));
  EXPECT_THAT(PerGpu(d->node, Switch), ::testing::Each(std::string("")));  // PHB: host bridge
  EXPECT_THAT(PerGpu(d->node, Numa), ::testing::Each(0));                  // N/A
}

void ExpectInvalid(const absl::Status& status, const std::string& needle) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(needle));
}

TEST(DiscoveryTest, MalformedXml) {
  ExpectInvalid(Discover("malformed/truncated-q.xml", "l4-pcie-topo.txt").status(),
                "nvidia-smi -q -x: invalid XML at line 399: Start-end tags mismatch");
  ExpectInvalid(ParseNvidiaSmiXml("").status(), "nvidia-smi -q -x: invalid XML");
  ExpectInvalid(ParseNvidiaSmiXml("<nvidia_smi><gpu/></nvidia_smi>").status(),
                "the root element is <nvidia_smi>, not <nvidia_smi_log>");
  ExpectInvalid(ParseNvidiaSmiXml("<nvidia_smi_log><gpu id=\"x\"/></nvidia_smi_log>").status(),
                "no <driver_version>");
  ExpectInvalid(ParseNvidiaSmiXml("<nvidia_smi_log><driver_version>550.54.15</driver_version>"
                                  "<gpu id=\"00000000:3B:00.0\"><product_name>NVIDIA L4"
                                  "</product_name></gpu></nvidia_smi_log>")
                    .status(),
                "GPU 00000000:3B:00.0: no <uuid>");
  // An entity the XML declares is not expanded (nor is anything fetched).
  absl::StatusOr<SmiLog> smi = ParseNvidiaSmiXml(
      "<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY e SYSTEM \"file:///etc/passwd\">]>"
      "<nvidia_smi_log><driver_version>&e;</driver_version></nvidia_smi_log>");
  ASSERT_TRUE(smi.ok()) << smi.status();
  EXPECT_EQ(smi->driver_version, "&e;");
}

TEST(DiscoveryTest, UnknownProductIsNamed) {
  absl::StatusOr<SmiLog> smi = ParseNvidiaSmiXml(Sample("malformed/unknown-product-q.xml"));
  ASSERT_TRUE(smi.ok()) << smi.status();
  absl::StatusOr<TopoMatrix> topo = ParseNvidiaSmiTopo(
      "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
      "GPU0\t X \t0-31\t0\t\tN/A\n");
  ASSERT_TRUE(topo.ok()) << topo.status();
  ExpectInvalid(BuildDiscoveredNode("gpu-01", *smi, *topo).status(),
                "nvidia-smi -q -x: GPU 00000000:01:00.0: unknown GPU product \"NVIDIA RTX PRO "
                "6000 Blackwell Server Edition\" (known: \"NVIDIA H100 80GB HBM3\"");
}

TEST(DiscoveryTest, MalformedTopo) {
  ExpectInvalid(Discover("dgx-h100-q.xml", "malformed/topo-missing-row.txt").status(),
                "nvidia-smi topo -m: no row for GPU5 (the header lists 8 GPUs)");
  ExpectInvalid(ParseNvidiaSmiTopo("No devices were found\n").status(),
                "nvidia-smi topo -m: no header line naming GPU0");
  ExpectInvalid(ParseNvidiaSmiTopo("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tNVX\t X \n").status(),
                "row GPU1, column GPU0: unknown link \"NVX\"");
  ExpectInvalid(ParseNvidiaSmiTopo("\tGPU0\tGPU1\nGPU0\tPIX\tNV4\nGPU1\tNV4\t X \n").status(),
                "row GPU0, column GPU0: unexpected \"PIX\"");
  ExpectInvalid(ParseNvidiaSmiTopo("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV4\t X \n").status(),
                "row GPU0 has 1 cells, the header 2 columns");
  ExpectInvalid(ParseNvidiaSmiTopo("\tGPU0\tGPU2\nGPU0\t X \tNV4\nGPU2\tNV4\t X \n").status(),
                "header: column GPU2 where GPU1 was expected");
  ExpectInvalid(
      ParseNvidiaSmiTopo("\tGPU0\tCPU Affinity\tNUMA Affinity\nGPU0\t X \t0-7\t99\n").status(),
      "row GPU0: NUMA Affinity \"99\" is not a NUMA node below 64");
  // The two commands disagree on the GPUs.
  ExpectInvalid(DiscoverNodeFromOutput("gpu-01", Sample("dgx-h100-q.xml"),
                                       "\tGPU0\tCPU Affinity\nGPU0\t X \t0-7\n")
                    .status(),
                "nvidia-smi -q -x lists 8 GPUs, nvidia-smi topo -m 1");
}

TEST(DiscoveryTest, MigThatCannotBeMapped) {
  const std::string a100 = Sample("dgx-a100-mig-q.xml");
  const std::string topo = Sample("dgx-a100-mig-topo.txt");
  // Without copy engines a 4-slot instance could be 3g or 4g.
  std::string xml = InGpu(a100, "0F", "<copy_engine_count>4</copy_engine_count>",
                          "<copy_engine_count>N/A</copy_engine_count>");
  ExpectInvalid(DiscoverNodeFromOutput("a100-01", xml, topo).status(),
                "GPU 00000000:0F:00.0: cannot tell the MIG profile of GPU instance 1 (4 memory "
                "slots, copy engines not shown): could be 3g.40gb or 4g.40gb");
  // Two 4g.40gb fit no A100 (at most one, and only at slot 0).
  xml = InGpu(a100, "0F", "<copy_engine_count>3</copy_engine_count>",
              "<copy_engine_count>4</copy_engine_count>");
  ExpectInvalid(DiscoverNodeFromOutput("a100-01", xml, topo).status(),
                "GPU 00000000:0F:00.0: MIG instances 4g.40gb, 4g.40gb fit no valid A100-80GB "
                "layout");
  // A memory size no profile has (5 of 8 slots).
  xml = InGpu(a100, "47", "<total>80896 MiB</total>", "<total>51200 MiB</total>");
  ExpectInvalid(DiscoverNodeFromOutput("a100-01", xml, topo).status(),
                "MIG GPU instance 0 has 51200 MiB of 81920, 5 memory slots: no A100-80GB profile "
                "has that size");
  // MIG on a product gpufed has no MIG geometry for.
  xml = InGpu(Sample("l4-pcie-q.xml"), "01", "<current_mig>N/A</current_mig>",
              "<current_mig>Enabled</current_mig>");
  ExpectInvalid(DiscoverNodeFromOutput("edge-01", xml, Sample("l4-pcie-topo.txt")).status(),
                "GPU 00000000:01:00.0: MIG is enabled, but gpufed has no MIG geometry for L4");
}

// ---- The cluster: the topology file with the node merged in -----------------------------------

constexpr char kCluster[] =
    "cluster: {name: onprem, provider: onprem, region: us-east}\n"
    "nodes:\n"
    "  - name: dgx-01\n"
    "    rack: r7\n"
    "    cpu_millis: 224000\n"
    "    labels: {pool: training, gpufed.io/driver-version: stale}\n"
    "node_groups:\n"
    "  - {name_prefix: sim-, count: 1, gpus: {count: 2, model: L4}}\n";

const v1::Node* FindNode(const v1::Inventory& inventory, const std::string& name) {
  for (const v1::Node& n : inventory.nodes()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

TEST(DiscoveryTest, MergeKeepsTheFilesNodeFields) {
  absl::StatusOr<ClusterTopology> topology =
      ParseClusterTopology(kCluster, "c.yaml", TopologyOptions{"dgx-01"});
  ASSERT_TRUE(topology.ok()) << topology.status();
  ASSERT_EQ(topology->inventory.nodes_size(), 2);
  ASSERT_NE(FindNode(topology->inventory, "dgx-01"), nullptr);
  EXPECT_EQ(FindNode(topology->inventory, "dgx-01")->gpus_size(), 0);  // the merge fills it in
  absl::StatusOr<DiscoveredNode> d = Discover("dgx-h100-q.xml", "dgx-h100-topo.txt", "dgx-01");
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_TRUE(MergeDiscoveredNode(*d, &*topology).ok());
  ASSERT_EQ(topology->inventory.nodes_size(), 2);
  const v1::Node& node = *FindNode(topology->inventory, "dgx-01");
  EXPECT_EQ(node.rack(), "r7");
  EXPECT_EQ(node.cpu_millis(), 224000u);
  EXPECT_TRUE(node.schedulable());
  EXPECT_THAT(node.labels(),
              UnorderedElementsAre(Pair("pool", "training"),
                                   Pair(std::string(kDriverVersionLabel), "550.54.15"),
                                   Pair(std::string(kCudaVersionLabel), "12.4")));
  EXPECT_EQ(node.gpus_size(), 8);
  EXPECT_EQ(FindNode(topology->inventory, "sim-01")->gpus_size(), 2);
  EXPECT_EQ(CountGpus(topology->inventory), 10);

  // Not in the file: appended. The file may then have no nodes at all.
  absl::StatusOr<ClusterTopology> bare = ParseClusterTopology(
      "cluster: {name: edge, provider: edge, region: eu}\n", "e.yaml", TopologyOptions{"edge-01"});
  ASSERT_TRUE(bare.ok()) << bare.status();
  d = Discover("l4-pcie-q.xml", "l4-pcie-topo.txt", "edge-01");
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE(MergeDiscoveredNode(*d, &*bare).ok());
  ASSERT_EQ(bare->inventory.nodes_size(), 1);
  EXPECT_EQ(bare->inventory.nodes(0).name(), "edge-01");
  EXPECT_EQ(bare->inventory.nodes(0).gpus_size(), 8);
  // Without discovery, such a file is still refused.
  ExpectInvalid(
      ParseClusterTopology("cluster: {name: edge, provider: edge, region: eu}\n", "e.yaml")
          .status(),
      "the cluster has no nodes");
}

TEST(DiscoveryTest, FileAndDiscoveryMustNotOverlap) {
  ExpectInvalid(ParseClusterTopology("cluster: {name: c, provider: p, region: r}\n"
                                     "nodes:\n"
                                     "  - name: dgx-01\n"
                                     "    gpus: [{model: L4}]\n",
                                     "c.yaml", TopologyOptions{"dgx-01"})
                    .status(),
                "c.yaml:4: nodes[0].gpus: node \"dgx-01\" is discovered (--discover): its GPUs "
                "come from nvidia-smi; leave out gpus");
  ExpectInvalid(ParseClusterTopology("cluster: {name: c, provider: p, region: r}\n"
                                     "node_groups:\n"
                                     "  - {name_prefix: dgx-, count: 2, gpus: {count: 8, model: "
                                     "H100-80GB}}\n",
                                     "c.yaml", TopologyOptions{"dgx-01"})
                    .status(),
                "node_groups[0].name_prefix: generates node \"dgx-01\", which is discovered");
  // A discovered GPU the file also has.
  absl::StatusOr<ClusterTopology> topology = ParseClusterTopology(
      "cluster: {name: c, provider: p, region: r}\n"
      "nodes:\n"
      "  - name: other\n"
      "    gpus: [{uuid: GPU-c5533cd4-5a60-059e-348d-b6d7466932e4, "
      "model: L4}]\n",
      "c.yaml", TopologyOptions{"edge-01"});
  ASSERT_TRUE(topology.ok()) << topology.status();
  absl::StatusOr<DiscoveredNode> d = Discover("l4-pcie-q.xml", "l4-pcie-topo.txt", "edge-01");
  ASSERT_TRUE(d.ok());
  ExpectInvalid(MergeDiscoveredNode(*d, &*topology),
                "discovered GPU GPU-c5533cd4-5a60-059e-348d-b6d7466932e4 of node edge-01 is also "
                "in the topology file");
  // A node name the server would refuse.
  ExpectInvalid(Discover("l4-pcie-q.xml", "l4-pcie-topo.txt", "Edge_01").status(),
                "discovered node name \"Edge_01\"");
}

// ---- Running the commands ---------------------------------------------------------------------

class DiscoveryCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ =
        (std::filesystem::temp_directory_path() / "gpufed-discovery-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // A stand-in nvidia-smi printing the two samples for `-q -x` and `topo -m`.
  std::string FakeNvidiaSmi(const std::string& xml, const std::string& topo) {
    std::string path = dir_ + "/nvidia smi's";  // a path the shell must not split
    std::ofstream(path) << "#!/bin/sh\n"
                        << "case \"$1 $2\" in\n"
                        << "  \"-q -x\") cat '" << SamplePath(xml) << "' ;;\n"
                        << "  \"topo -m\") cat '" << SamplePath(topo) << "' ;;\n"
                        << "  *) echo \"unexpected: $*\" >&2; exit 2 ;;\n"
                        << "esac\n";
    chmod(path.c_str(), 0755);
    return path;
  }

  std::string dir_;
};

TEST_F(DiscoveryCommandTest, RunsBothCommandsAndMerges) {
  const std::string topology_file = dir_ + "/cluster.yaml";
  std::ofstream(topology_file) << kCluster;
  DiscoveryOptions options;
  options.node = "dgx-01";
  options.nvidia_smi = FakeNvidiaSmi("dgx-a100-mig-q.xml", "dgx-a100-mig-topo.txt");
  std::vector<std::string> notes;
  absl::StatusOr<ClusterTopology> topology =
      LoadTopologyWithDiscovery(topology_file, options, &notes);
  ASSERT_TRUE(topology.ok()) << topology.status();
  EXPECT_EQ(topology->cluster, "onprem");
  const v1::Node* node = FindNode(topology->inventory, "dgx-01");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->gpus_size(), 8);
  EXPECT_EQ(node->gpus(0).model(), "A100-80GB");
  EXPECT_EQ(node->rack(), "r7");
  EXPECT_THAT(notes, SizeIs(3));
}

TEST_F(DiscoveryCommandTest, MissingNvidiaSmiIsUnavailable) {
  DiscoveryOptions options;
  options.node = "dgx-01";
  options.nvidia_smi = dir_ + "/no-such-nvidia-smi";
  absl::StatusOr<DiscoveredNode> d = DiscoverNode(options);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kUnavailable) << d.status();
  EXPECT_THAT(std::string(d.status().message()),
              AllOf(HasSubstr("nvidia-smi -q -x: printed nothing"), HasSubstr("--nvidia-smi")));
}

}  // namespace
}  // namespace gpufed::agent
