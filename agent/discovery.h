#ifndef GPUFED_AGENT_DISCOVERY_H_
#define GPUFED_AGENT_DISCOVERY_H_

// Real-GPU discovery (docs/agent.md, "Discovery"): one node's inventory from the GPUs' own tools
// instead of the topology file.
//
// - `nvidia-smi -q -x` (XML, root <nvidia_smi_log>) gives the driver and CUDA versions and, per
//   <gpu>: product name, UUID, memory, MIG mode and MIG devices, PCI bus id and health signs.
// - `nvidia-smi topo -m` (the GPU × GPU matrix) gives NVLink domains (GPUs joined by NV# links),
//   PCIe switches (GPUs behind a common switch: PIX or PXB, to each other or to a common NIC)
//   and each GPU's NUMA node ("NUMA Affinity").
//
// Every parse error is INVALID_ARGUMENT naming the command and what is wrong, e.g.
// `nvidia-smi -q -x: GPU 00000000:3B:00.0: unknown GPU product "NVIDIA H900" (known: ...)`.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "agent/topology.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::agent {

// ---- nvidia-smi -q -x ------------------------------------------------------------------------

// One <mig_device> (a compute instance) of a MIG-enabled GPU.
struct SmiMigDevice {
  int gpu_instance_id = -1;
  int compute_instance_id = -1;
  uint64_t memory_mib = 0;  // the GPU instance's memory (fb_memory_usage/total); 0: not shown
  // device_attributes/shared: the compute instance's SMs and its GPU instance's engines;
  // -1 when not shown.
  int multiprocessors = -1;
  int copy_engines = -1;
  int ofa_engines = -1;
};

// One <gpu>, in the order nvidia-smi lists them (its index order, PCI bus order).
struct SmiGpu {
  std::string pci_bus_id;  // the id attribute, "00000000:3B:00.0"
  std::string product_name;
  std::string uuid;
  std::optional<int> minor_number;
  std::string mig_mode;     // mig_mode/current_mig: "Enabled", "Disabled" or "N/A"
  uint64_t memory_mib = 0;  // fb_memory_usage/total; 0 when N/A
  std::vector<SmiMigDevice> mig_devices;
  // Why the XML shows the GPU failed (reset required, uncorrectable ECC errors, row remapping
  // pending or failed); empty: fine.
  std::string problem;
};

struct SmiLog {
  std::string driver_version;  // "550.54.15"
  std::string cuda_version;    // "12.4"; empty when N/A
  std::vector<SmiGpu> gpus;
};

// Parses `nvidia-smi -q -x` with pugixml (no DTD, no entities). INVALID_ARGUMENT for XML that
// does not parse (with its line), another root element, no driver_version, or a GPU without
// a uuid or product name.
absl::StatusOr<SmiLog> ParseNvidiaSmiXml(absl::string_view xml);

// ---- nvidia-smi topo -m ----------------------------------------------------------------------

// The GPU part of the matrix; NIC (and other device) rows are dropped, their columns kept only
// as far as the PCIe grouping needs them.
struct TopoMatrix {
  int gpu_count = 0;
  // links[i][j]: "X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS" (SOC, the old name of SYS, is
  // read as SYS).
  std::vector<std::vector<std::string>> links;
  // nic_links[i][k]: GPU i to the k-th non-GPU column (NIC0, mlx5_0, ...).
  std::vector<std::vector<std::string>> nic_links;
  // "NUMA Affinity" per GPU; nullopt for N/A or when the column is absent.
  std::vector<std::optional<int>> numa;
};

// Parses the matrix: the header names the columns (GPU0..GPUn-1, then NICs, then CPU Affinity,
// NUMA Affinity, GPU NUMA ID); a row per GPU and per NIC; the legend after it is skipped. Cells
// are tab-separated as nvidia-smi prints them (runs of two or more spaces, as in copies, work
// too). INVALID_ARGUMENT for no header, GPU columns out of order, a GPU with no row or a short
// row, and unknown link types.
absl::StatusOr<TopoMatrix> ParseNvidiaSmiTopo(absl::string_view text);

// ---- The node --------------------------------------------------------------------------------

// The catalogue model (federation/gpu_catalog.h) of an nvidia-smi product name ("NVIDIA H100
// 80GB HBM3" -> "H100-80GB"); nullopt for products gpufed does not know. Older drivers' names
// without the "NVIDIA " prefix ("A100-SXM4-40GB") are accepted.
std::optional<std::string> CatalogModelOfProduct(absl::string_view product_name);

struct DiscoveredNode {
  v1::Node node;
  // Things worth a log line: GPUs the XML shows failed, MIG starts the XML does not give.
  std::vector<std::string> notes;
};

// One node from the two outputs. GPU i of the XML is GPUi of the matrix (both list GPUs in
// nvidia-smi's index order); the counts must agree.
//
// - index: the nvidia-smi index (position in the XML): the CUDA ordinal under
//   CUDA_DEVICE_ORDER=PCI_BUS_ID, GPUi of the matrix and `nvidia-smi -i`. (minor_number, the
//   N of /dev/nvidiaN, usually agrees but need not.)
// - model: CatalogModelOfProduct; unknown products are errors naming them.
// - memory_mib: fb_memory_usage/total (the catalogue's figure when N/A).
// - mig_capable: the catalogue says so and current_mig is not N/A. mig_enabled: current_mig is
//   Enabled; the model then needs MIG geometry (federation/mig.h).
// - mig_layout: one instance per GPU instance with a compute instance (the XML lists compute
//   instances; a GPU instance without one does not appear). Its profile from its memory (in
//   memory slots of the GPU's) and its copy engines (compute slices) and OFA (+me); its start,
//   which the XML does not give, is inferred: the lowest valid packing, larger instances first
//   (a note says so).
// - nvlink_domain: `<node>-nvl` when the NV# links form one group of GPUs, `<node>-nvl<k>` for
//   the k-th of several (by lowest index); empty for a GPU without NVLink peers.
// - pcie_switch: `pcie<k>` for the k-th group of GPUs behind a common PCIe switch; empty for a GPU
//   that shares its switch with no other GPU.
// - numa_node: "NUMA Affinity" (0 for N/A). healthy: the XML shows no problem.
// - labels kDriverVersionLabel and kCudaVersionLabel (federation/types.h). cpu_millis and
//   memory_mib of the node are not discovered (0: unknown; the topology file may give them).
absl::StatusOr<DiscoveredNode> BuildDiscoveredNode(const std::string& node_name, const SmiLog& smi,
                                                   const TopoMatrix& topo);

// Parses both outputs and builds the node.
absl::StatusOr<DiscoveredNode> DiscoverNodeFromOutput(const std::string& node_name,
                                                      absl::string_view smi_xml,
                                                      absl::string_view topo_text);

struct DiscoveryOptions {
  std::string node;                       // the node's name, [a-z0-9-]{1,63}
  std::string nvidia_smi = "nvidia-smi";  // command name or path
  std::chrono::milliseconds timeout{60000};
};

// Runs `<nvidia_smi> -q -x` and `<nvidia_smi> topo -m` (RunProbeCommand, agent/gpu_health.h)
// and builds the node. A command that fails to run or prints nothing is UNAVAILABLE.
absl::StatusOr<DiscoveredNode> DiscoverNode(const DiscoveryOptions& options);

// Puts `discovered` into `topology`: in place of the file's node of that name (which has no GPUs:
// TopologyOptions::discovered_node), keeping the file's rack, block, cpu_millis, memory_mib,
// schedulable and labels (the discovered labels win), or appended. INVALID_ARGUMENT when a
// discovered GPU UUID or NVLink domain is also the file's, or the file's node has GPUs.
absl::Status MergeDiscoveredNode(DiscoveredNode discovered, ClusterTopology* topology);

// The topology file (TopologyOptions with options.node) with the node discovered and merged.
absl::StatusOr<ClusterTopology> LoadTopologyWithDiscovery(const std::string& topology_path,
                                                          const DiscoveryOptions& options,
                                                          std::vector<std::string>* notes);

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_DISCOVERY_H_
