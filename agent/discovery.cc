#include "agent/discovery.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <pugixml.hpp>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "agent/gpu_health.h"
#include "federation/gpu_catalog.h"
#include "federation/mig.h"
#include "federation/status_macros.h"
#include "federation/types.h"
#include "federation/validation.h"

namespace gpufed::agent {
namespace {

constexpr absl::string_view kXmlSource = "nvidia-smi -q -x";
constexpr absl::string_view kTopoSource = "nvidia-smi topo -m";

// Bounds on what the commands may print: -q -x is tens of KiB per GPU (most of it the list of
// supported clocks), topo -m a few KiB.
constexpr size_t kMaxXmlBytes = size_t{64} << 20;
constexpr size_t kMaxTopoBytes = size_t{1} << 20;

absl::Status XmlError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(kXmlSource, ": ", what));
}
absl::Status TopoError(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(kTopoSource, ": ", what));
}

// nvidia-smi's product names (as current drivers print them) and the catalogue model of each.
// Older drivers printed some without the "NVIDIA " prefix; the Tesla-branded ones keep "Tesla ".
struct Product {
  absl::string_view name;
  absl::string_view model;
};
constexpr Product kProducts[] = {
    {"NVIDIA H100 80GB HBM3", "H100-80GB"},
    {"NVIDIA H100 PCIe", "H100-80GB"},
    {"NVIDIA H100 NVL", "H100-94GB"},
    {"NVIDIA H200", "H200"},
    {"NVIDIA H200 NVL", "H200"},
    {"NVIDIA B200", "B200"},
    {"NVIDIA GB200", "GB200"},
    {"NVIDIA A100-SXM4-80GB", "A100-80GB"},
    {"NVIDIA A100 80GB PCIe", "A100-80GB"},
    {"NVIDIA A100-SXM4-40GB", "A100-40GB"},
    {"NVIDIA A100-PCIE-40GB", "A100-40GB"},
    {"NVIDIA A30", "A30"},
    {"NVIDIA L4", "L4"},
    {"NVIDIA L40S", "L40S"},
    {"NVIDIA A10", "A10"},
    {"Tesla T4", "T4"},
    {"Tesla V100-SXM2-16GB", "V100-16GB"},
    {"Tesla V100-PCIE-16GB", "V100-16GB"},
    {"Tesla V100-SXM2-32GB", "V100-32GB"},
    {"Tesla V100-PCIE-32GB", "V100-32GB"},
    {"Tesla V100S-PCIE-32GB", "V100-32GB"},
    {"Tesla P100-PCIE-16GB", "P100"},
    {"Tesla P100-SXM2-16GB", "P100"},
};

absl::string_view WithoutBrand(absl::string_view name) {
  absl::ConsumePrefix(&name, "NVIDIA ");
  absl::ConsumePrefix(&name, "Tesla ");
  return name;
}

std::string KnownProducts() {
  return absl::StrJoin(kProducts, ", ", [](std::string* out, const Product& p) {
    absl::StrAppend(out, "\"", p.name, "\"");
  });
}

// ---- XML helpers ---------------------------------------------------------------------------

std::string Text(const pugi::xml_node& node) {
  return std::string(absl::StripAsciiWhitespace(node.child_value()));
}

std::string ChildText(const pugi::xml_node& node, const char* path) {
  pugi::xml_node at = node;
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    at = at.child(std::string(part).c_str());
    if (!at) return "";
  }
  return Text(at);
}

// "81559 MiB" -> 81559; "N/A", "" and anything else without a leading number -> nullopt.
std::optional<uint64_t> LeadingNumber(absl::string_view value) {
  value = absl::StripAsciiWhitespace(value);
  const size_t end = value.find_first_not_of("0123456789");
  uint64_t n = 0;
  if (!absl::SimpleAtoi(value.substr(0, end), &n)) return std::nullopt;
  return n;
}

int IntOr(absl::string_view value, int fallback) {
  std::optional<uint64_t> n = LeadingNumber(value);
  return n.has_value() && *n < 1u << 30 ? static_cast<int>(*n) : fallback;
}

int LineOf(absl::string_view text, ptrdiff_t offset) {
  offset = std::clamp<ptrdiff_t>(offset, 0, static_cast<ptrdiff_t>(text.size()));
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + offset, '\n'));
}

// What the XML says is wrong with a GPU, as gpu_health.h judges nvidia-smi's CSV: a reset it
// asks for, uncorrectable ECC errors since the driver loaded, rows pending remapping or a
// remapping that failed. Both ECC schemas: <dram_uncorrectable>, <sram_uncorrectable_*>
// (R525 and later) and <double_bit><total> (before).
std::string GpuProblem(const pugi::xml_node& gpu) {
  std::vector<std::string> problems;
  if (ChildText(gpu, "gpu_reset_status/reset_required") == "Yes") {
    problems.emplace_back("reset required");
  }
  if (ChildText(gpu, "gpu_reset_status/drain_and_reset_recommended") == "Yes") {
    problems.emplace_back("drain and reset recommended");
  }
  uint64_t uncorrectable = 0;
  for (const pugi::xml_node& counter : gpu.child("ecc_errors").child("volatile").children()) {
    const absl::string_view name = counter.name();
    if (absl::StrContains(name, "uncorrectable")) {
      uncorrectable += LeadingNumber(Text(counter)).value_or(0);
    } else if (name == "double_bit") {
      uncorrectable += LeadingNumber(ChildText(counter, "total")).value_or(0);
    }
  }
  if (uncorrectable > 0) {
    problems.push_back(absl::StrCat(uncorrectable, " uncorrectable ECC error(s)"));
  }
  if (ChildText(gpu, "remapped_rows/remapped_row_pending") == "Yes") {
    problems.emplace_back("rows pending remapping");
  }
  if (ChildText(gpu, "remapped_rows/remapped_row_failure") == "Yes") {
    problems.emplace_back("row remapping failed");
  }
  return absl::StrJoin(problems, ", ");
}

// ---- topo -m helpers -----------------------------------------------------------------------

// The cells of one line: tab-separated as nvidia-smi prints them (empty cells, from its
// alignment tabs, dropped), or separated by two or more spaces in copies that expanded the tabs.
std::vector<std::string> Cells(absl::string_view line) {
  std::vector<std::string> cells;
  if (absl::StrContains(line, '\t')) {
    for (absl::string_view c : absl::StrSplit(line, '\t')) {
      c = absl::StripAsciiWhitespace(c);
      if (!c.empty()) cells.emplace_back(c);
    }
    return cells;
  }
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t end = i;
    while (end < line.size() &&
           !(line[end] == ' ' && end + 1 < line.size() && line[end + 1] == ' ')) {
      ++end;
    }
    absl::string_view c = absl::StripAsciiWhitespace(line.substr(i, end - i));
    if (!c.empty()) cells.emplace_back(c);
    i = end;
  }
  return cells;
}

// Without terminal escape sequences: nvidia-smi underlines the header ("\x1b[4m...\x1b[0m") when
// it writes to a terminal, and such copies are common.
std::string WithoutAnsi(absl::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b' && i + 1 < line.size() && line[i + 1] == '[') {
      i += 2;
      while (i < line.size() && (absl::ascii_isdigit(line[i]) || line[i] == ';')) ++i;
      continue;  // i is at the final letter
    }
    out.push_back(line[i]);
  }
  return out;
}

// "GPU12" -> 12; anything else -> nullopt.
std::optional<int> GpuColumn(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "GPU")) return std::nullopt;
  int n = 0;
  if (name.empty() || !std::all_of(name.begin(), name.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(name, &n)) {
    return std::nullopt;
  }
  return n;
}

bool IsNvLink(absl::string_view link) {
  return absl::StartsWith(link, "NV") && link.size() > 2 &&
         std::all_of(link.begin() + 2, link.end(), absl::ascii_isdigit);
}

// A link type from the legend, normalised (SOC, the old name of SYS, becomes SYS); nullopt for
// anything else.
std::optional<std::string> LinkType(absl::string_view cell) {
  if (cell == "SOC") return "SYS";
  for (absl::string_view known : {"X", "PIX", "PXB", "PHB", "NODE", "SYS"}) {
    if (cell == known) return std::string(cell);
  }
  if (IsNvLink(cell)) return std::string(cell);
  return std::nullopt;
}

bool SharesSwitch(absl::string_view link) { return link == "PIX" || link == "PXB"; }

// Union-find over GPU indices.
class Groups {
 public:
  explicit Groups(int n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int Find(int i) { return parent_[i] == i ? i : parent_[i] = Find(parent_[i]); }
  void Join(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }
  // For each element, the number of its group among the groups of two or more (numbered by
  // lowest member), or -1 when it is alone; and how many such groups there are.
  std::pair<std::vector<int>, int> Numbered() {
    const int n = static_cast<int>(parent_.size());
    std::vector<int> size(n, 0);
    for (int i = 0; i < n; ++i) ++size[Find(i)];
    std::vector<int> number(n, -1);
    std::vector<int> out(n, -1);
    int groups = 0;
    for (int i = 0; i < n; ++i) {
      const int root = Find(i);
      if (size[root] < 2) continue;
      if (number[root] < 0) number[root] = groups++;
      out[i] = number[root];
    }
    return {out, groups};
  }

 private:
  std::vector<int> parent_;
};

// ---- MIG -----------------------------------------------------------------------------------

// A GPU instance as the XML shows it: the compute instances of one gpu_instance_id.
struct XmlGpuInstance {
  int id = -1;
  uint64_t memory_mib = 0;
  int copy_engines = -1;
  int ofa_engines = -1;
  int multiprocessors = 0;  // of its compute instances together
};

// The profile of one GPU instance: its memory in memory slots of the GPU, then its copy
// engines (one per compute slice on A100, H100, H200 and A30 instances below the full GPU) and
// OFA (the +me variants have one) where profiles share a size.
absl::StatusOr<const MigProfile*> InferProfile(const MigGeometry& geometry, uint64_t gpu_memory,
                                               const XmlGpuInstance& gi, absl::string_view where) {
  if (gi.memory_mib == 0 || gpu_memory == 0) {
    return XmlError(absl::StrFormat("%s: MIG GPU instance %d shows no memory size", where, gi.id));
  }
  const int slots =
      static_cast<int>(std::lround(static_cast<double>(gi.memory_mib) * geometry.memory_slots /
                                   static_cast<double>(gpu_memory)));
  std::vector<const MigProfile*> candidates;
  for (const MigProfile& p : geometry.profiles) {
    if (p.memory_slices == slots) candidates.push_back(&p);
  }
  if (candidates.empty()) {
    return XmlError(absl::StrFormat(
        "%s: MIG GPU instance %d has %d MiB of %d, %d memory slots: no %s profile has that size",
        where, gi.id, gi.memory_mib, gpu_memory, slots, geometry.model));
  }
  auto keep = [&candidates](const std::function<bool(const MigProfile*)>& pred) {
    std::vector<const MigProfile*> kept;
    for (const MigProfile* p : candidates) {
      if (pred(p)) kept.push_back(p);
    }
    if (!kept.empty()) candidates = std::move(kept);
  };
  if (candidates.size() > 1 && gi.copy_engines >= 0) {
    keep([&](const MigProfile* p) { return p->compute_slices == gi.copy_engines; });
  }
  if (candidates.size() > 1 && gi.ofa_engines >= 0) {
    keep([&](const MigProfile* p) { return p->media_extensions == (gi.ofa_engines > 0); });
  }
  if (candidates.size() != 1) {
    std::vector<absl::string_view> names;
    names.reserve(candidates.size());
    for (const MigProfile* p : candidates) names.push_back(p->name);
    return XmlError(absl::StrFormat(
        "%s: cannot tell the MIG profile of GPU instance %d (%d memory slots, %s): could be %s",
        where, gi.id, slots,
        gi.copy_engines >= 0 ? absl::StrCat(gi.copy_engines, " copy engines")
                             : std::string("copy engines not shown"),
        absl::StrJoin(names, " or ")));
  }
  return candidates.front();
}

// The lowest valid placement of `profiles`, larger and more constrained instances first; each
// start is one of the profile's. nullopt when no valid layout holds them all.
std::optional<std::vector<MigInstance>> PackMigLayout(const MigGeometry& geometry,
                                                      std::vector<const MigProfile*> profiles) {
  std::stable_sort(profiles.begin(), profiles.end(), [](const MigProfile* a, const MigProfile* b) {
    if (a->memory_slices != b->memory_slices) return a->memory_slices > b->memory_slices;
    return a->starts.size() < b->starts.size();
  });
  std::vector<MigInstance> placed;
  std::function<bool(size_t)> place = [&](size_t k) {
    if (k == profiles.size()) return true;
    for (int start : profiles[k]->starts) {
      placed.push_back(MigInstance{std::string(profiles[k]->name), start});
      if (ValidateMigLayout(geometry, placed).ok() && place(k + 1)) return true;
      placed.pop_back();
    }
    return false;
  };
  if (!place(0)) return std::nullopt;
  std::sort(placed.begin(), placed.end(),
            [](const MigInstance& a, const MigInstance& b) { return a.start < b.start; });
  return placed;
}

std::string ShellQuote(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

absl::StatusOr<std::string> RunTool(const std::string& command, absl::string_view label,
                                    std::chrono::milliseconds timeout, size_t max_bytes) {
  absl::StatusOr<std::string> out = RunProbeCommand(command, timeout, max_bytes);
  if (!out.ok()) {
    return absl::Status(out.status().code(), absl::StrCat(label, ": ", out.status().message()));
  }
  if (absl::StripAsciiWhitespace(*out).empty()) {
    return absl::UnavailableError(absl::StrCat(
        label, ": printed nothing (`", command,
        "`: is nvidia-smi installed there and the NVIDIA driver loaded? see --nvidia-smi)"));
  }
  return out;
}

}  // namespace

// ---- nvidia-smi -q -x ------------------------------------------------------------------------

absl::StatusOr<SmiLog> ParseNvidiaSmiXml(absl::string_view xml) {
  pugi::xml_document doc;
  // parse_default: no DOCTYPE node, no entity expansion beyond the five predefined ones.
  const pugi::xml_parse_result parsed =
      doc.load_buffer(xml.data(), xml.size(), pugi::parse_default, pugi::encoding_utf8);
  if (!parsed) {
    return XmlError(absl::StrFormat("invalid XML at line %d: %s", LineOf(xml, parsed.offset),
                                    parsed.description()));
  }
  const pugi::xml_node root = doc.document_element();
  if (absl::string_view(root.name()) != "nvidia_smi_log") {
    return XmlError(absl::StrFormat("the root element is <%s>, not <nvidia_smi_log>", root.name()));
  }
  SmiLog log;
  log.driver_version = ChildText(root, "driver_version");
  if (log.driver_version.empty() || log.driver_version == "N/A") {
    return XmlError("no <driver_version>");
  }
  log.cuda_version = ChildText(root, "cuda_version");
  if (log.cuda_version == "N/A") log.cuda_version.clear();
  int position = 0;
  for (const pugi::xml_node& g : root.children("gpu")) {
    SmiGpu gpu;
    gpu.pci_bus_id = g.attribute("id").value();
    if (gpu.pci_bus_id.empty()) gpu.pci_bus_id = ChildText(g, "pci/pci_bus_id");
    const std::string where = gpu.pci_bus_id.empty() ? absl::StrCat("GPU #", position)
                                                     : absl::StrCat("GPU ", gpu.pci_bus_id);
    gpu.product_name = ChildText(g, "product_name");
    if (gpu.product_name.empty()) return XmlError(absl::StrCat(where, ": no <product_name>"));
    gpu.uuid = ChildText(g, "uuid");
    if (gpu.uuid.empty() || gpu.uuid == "N/A") {
      return XmlError(absl::StrCat(where, ": no <uuid>"));
    }
    if (std::optional<uint64_t> minor = LeadingNumber(ChildText(g, "minor_number"))) {
      gpu.minor_number = static_cast<int>(std::min<uint64_t>(*minor, 1u << 30));
    }
    gpu.mig_mode = ChildText(g, "mig_mode/current_mig");
    if (gpu.mig_mode.empty()) gpu.mig_mode = "N/A";
    gpu.memory_mib = LeadingNumber(ChildText(g, "fb_memory_usage/total")).value_or(0);
    for (const pugi::xml_node& m : g.child("mig_devices").children("mig_device")) {
      SmiMigDevice dev;
      dev.gpu_instance_id = IntOr(ChildText(m, "gpu_instance_id"), -1);
      dev.compute_instance_id = IntOr(ChildText(m, "compute_instance_id"), -1);
      if (dev.gpu_instance_id < 0) {
        return XmlError(absl::StrCat(where, ": a <mig_device> without <gpu_instance_id>"));
      }
      dev.memory_mib = LeadingNumber(ChildText(m, "fb_memory_usage/total")).value_or(0);
      const pugi::xml_node shared = m.child("device_attributes").child("shared");
      dev.multiprocessors = IntOr(ChildText(shared, "multiprocessor_count"), -1);
      dev.copy_engines = IntOr(ChildText(shared, "copy_engine_count"), -1);
      dev.ofa_engines = IntOr(ChildText(shared, "ofa_count"), -1);
      gpu.mig_devices.push_back(dev);
    }
    gpu.problem = GpuProblem(g);
    log.gpus.push_back(std::move(gpu));
    ++position;
  }
  return log;
}

// ---- nvidia-smi topo -m ----------------------------------------------------------------------

absl::StatusOr<TopoMatrix> ParseNvidiaSmiTopo(absl::string_view text) {
  std::vector<std::string> matrix_columns;  // GPUs, then NICs
  std::vector<std::string> info_columns;    // CPU Affinity, NUMA Affinity, GPU NUMA ID
  int gpus = 0;
  bool header = false;
  absl::flat_hash_map<std::string, std::vector<std::string>> rows;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    const std::string clean = WithoutAnsi(raw);
    const absl::string_view line = absl::StripTrailingAsciiWhitespace(clean);
    const absl::string_view trimmed = absl::StripLeadingAsciiWhitespace(line);
    if (trimmed.empty()) continue;
    if (header && absl::StartsWith(trimmed, "Legend")) break;
    std::vector<std::string> cells = Cells(line);
    if (cells.empty()) continue;
    if (!header) {
      // Anything before the header (a prompt, a warning) is not ours.
      if (cells.front() != "GPU0") continue;
      header = true;
      for (const std::string& c : cells) {
        const bool info = absl::StrContains(c, ' ') || !info_columns.empty();
        if (info) {
          info_columns.push_back(c);
          continue;
        }
        if (std::optional<int> g = GpuColumn(c)) {
          if (*g != gpus || gpus != static_cast<int>(matrix_columns.size())) {
            return TopoError(absl::StrFormat(
                "header: column %s where GPU%d was expected (GPU columns come first, in order)", c,
                gpus));
          }
          ++gpus;
        }
        matrix_columns.push_back(c);
      }
      continue;
    }
    const std::string label = cells.front();
    if (std::find(matrix_columns.begin(), matrix_columns.end(), label) == matrix_columns.end()) {
      continue;  // not a row of the matrix
    }
    if (!rows.emplace(label, std::vector<std::string>(cells.begin() + 1, cells.end())).second) {
      return TopoError(absl::StrCat("two rows for ", label));
    }
  }
  if (!header) {
    return TopoError("no header line naming GPU0 (is this `nvidia-smi topo -m` output?)");
  }
  TopoMatrix m;
  m.gpu_count = gpus;
  const auto numa_at = std::find(info_columns.begin(), info_columns.end(), "NUMA Affinity");
  const int numa_column =
      numa_at == info_columns.end() ? -1 : static_cast<int>(numa_at - info_columns.begin());
  for (int i = 0; i < gpus; ++i) {
    const std::string name = absl::StrCat("GPU", i);
    auto row = rows.find(name);
    if (row == rows.end()) {
      return TopoError(absl::StrFormat("no row for %s (the header lists %d GPUs)", name, gpus));
    }
    const std::vector<std::string>& cells = row->second;
    if (cells.size() < matrix_columns.size()) {
      return TopoError(absl::StrFormat("row %s has %d cells, the header %d columns", name,
                                       cells.size(), matrix_columns.size()));
    }
    std::vector<std::string> links;
    std::vector<std::string> nics;
    for (size_t c = 0; c < matrix_columns.size(); ++c) {
      std::optional<std::string> link = LinkType(cells[c]);
      const bool self = static_cast<int>(c) == i;
      if (!link.has_value() || (*link == "X") != self) {
        return TopoError(absl::StrFormat(
            "row %s, column %s: %s \"%s\" (X on the diagonal; NV#, PIX, PXB, PHB, NODE, SYS "
            "elsewhere)",
            name, matrix_columns[c], link.has_value() ? "unexpected" : "unknown link", cells[c]));
      }
      (static_cast<int>(c) < gpus ? links : nics).push_back(*std::move(link));
    }
    m.links.push_back(std::move(links));
    m.nic_links.push_back(std::move(nics));
    std::optional<int> numa;
    const size_t numa_cell = matrix_columns.size() + static_cast<size_t>(numa_column);
    if (numa_column >= 0 && numa_cell < cells.size() && cells[numa_cell] != "N/A") {
      // One node ("1"); a range or list ("0-1", "0,2") names its first.
      const std::optional<uint64_t> n = LeadingNumber(cells[numa_cell]);
      if (!n.has_value() || *n >= kMaxNumaNodes) {
        return TopoError(absl::StrFormat("row %s: NUMA Affinity \"%s\" is not a NUMA node below %d",
                                         name, cells[numa_cell], kMaxNumaNodes));
      }
      numa = static_cast<int>(*n);
    }
    m.numa.push_back(numa);
  }
  return m;
}

// ---- The node --------------------------------------------------------------------------------

std::optional<std::string> CatalogModelOfProduct(absl::string_view product_name) {
  const absl::string_view name = absl::StripAsciiWhitespace(product_name);
  for (const Product& p : kProducts) {
    if (WithoutBrand(p.name) == WithoutBrand(name)) return std::string(p.model);
  }
  return std::nullopt;
}

absl::StatusOr<DiscoveredNode> BuildDiscoveredNode(const std::string& node_name, const SmiLog& smi,
                                                   const TopoMatrix& topo) {
  if (!IsLabel(node_name)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("discovered node name \"%s\" must be 1..%d characters of [a-z0-9-]",
                        node_name, kMaxNameLength));
  }
  const int count = static_cast<int>(smi.gpus.size());
  if (count == 0) return XmlError("lists no GPUs");
  if (count > static_cast<int>(kMaxGpusPerNode)) {
    return XmlError(
        absl::StrFormat("lists %d GPUs; a node has at most %d", count, kMaxGpusPerNode));
  }
  if (topo.gpu_count != count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s lists %d GPUs, %s %d", kXmlSource, count, kTopoSource, topo.gpu_count));
  }
  DiscoveredNode out;
  v1::Node& node = out.node;
  node.set_name(node_name);
  node.set_schedulable(true);
  for (const auto& [label, value] : {std::pair{kDriverVersionLabel, &smi.driver_version},
                                     std::pair{kCudaVersionLabel, &smi.cuda_version}}) {
    if (value->empty()) continue;
    if (!IsText(*value, kMaxNodeLabelBytes)) {
      return XmlError(absl::StrFormat("%s \"%s\" is not a one-line text", label, *value));
    }
    (*node.mutable_labels())[std::string(label)] = *value;
  }

  // NVLink: GPUs joined by NV# links, directly or through others. PCIe: GPUs behind a common
  // switch (PIX or PXB to each other, or both to one NIC).
  Groups nvlink(count);
  Groups pcie(count);
  for (int i = 0; i < count; ++i) {
    for (int j = 0; j < count; ++j) {
      if (i == j) continue;
      if (IsNvLink(topo.links[i][j])) nvlink.Join(i, j);
      if (SharesSwitch(topo.links[i][j])) pcie.Join(i, j);
    }
    for (int j = i + 1; j < count; ++j) {
      for (size_t k = 0; k < topo.nic_links[i].size() && k < topo.nic_links[j].size(); ++k) {
        if (SharesSwitch(topo.nic_links[i][k]) && SharesSwitch(topo.nic_links[j][k])) {
          pcie.Join(i, j);
        }
      }
    }
  }
  const auto [nvlink_group, nvlink_groups] = nvlink.Numbered();
  const auto [pcie_group, pcie_groups] = pcie.Numbered();

  absl::flat_hash_set<std::string> uuids;
  for (int i = 0; i < count; ++i) {
    const SmiGpu& s = smi.gpus[i];
    const std::string where =
        absl::StrCat("GPU ", s.pci_bus_id.empty() ? absl::StrCat("#", i) : s.pci_bus_id);
    std::optional<std::string> model_name = CatalogModelOfProduct(s.product_name);
    if (!model_name.has_value()) {
      return XmlError(absl::StrFormat("%s: unknown GPU product \"%s\" (known: %s)", where,
                                      s.product_name, KnownProducts()));
    }
    const std::optional<GpuModel> model = FindGpuModel(*model_name);
    if (!model.has_value()) {
      return absl::InternalError(absl::StrCat("product table names unknown model ", *model_name));
    }
    if (!IsToken(s.uuid, kMaxGpuUuidBytes)) {
      return XmlError(
          absl::StrFormat("%s: uuid \"%s\" must be at most %d printable characters "
                          "without spaces",
                          where, s.uuid.substr(0, 40), kMaxGpuUuidBytes));
    }
    if (!uuids.insert(s.uuid).second) {
      return XmlError(absl::StrFormat("%s: uuid %s listed twice", where, s.uuid));
    }
    v1::Gpu* gpu = node.add_gpus();
    gpu->set_uuid(s.uuid);
    gpu->set_index(static_cast<uint32_t>(i));
    gpu->set_model(*model_name);
    gpu->set_memory_mib(s.memory_mib > 0 ? s.memory_mib : model->memory_mib);
    gpu->set_healthy(s.problem.empty());
    if (!s.problem.empty()) {
      out.notes.push_back(
          absl::StrFormat("%s (%s) reported unhealthy: %s", where, s.uuid, s.problem));
    }
    if (nvlink_group[i] >= 0) {
      gpu->set_nvlink_domain(nvlink_groups == 1 ? absl::StrCat(node_name, "-nvl")
                                                : absl::StrCat(node_name, "-nvl", nvlink_group[i]));
    }
    if (pcie_group[i] >= 0) gpu->set_pcie_switch(absl::StrCat("pcie", pcie_group[i]));
    gpu->set_numa_node(topo.numa[i].value_or(0));

    gpu->set_mig_capable(model->mig_capable && s.mig_mode != "N/A");
    if (s.mig_mode != "Enabled") {
      if (!s.mig_devices.empty()) {
        return XmlError(
            absl::StrFormat("%s: MIG devices listed while MIG mode is %s", where, s.mig_mode));
      }
      continue;
    }
    const MigGeometry* geometry = model->mig_capable ? FindMigGeometry(model->name) : nullptr;
    if (geometry == nullptr) {
      return XmlError(
          absl::StrFormat("%s: MIG is enabled, but gpufed has no MIG geometry for %s "
                          "(MIG models: %s)",
                          where, model->name, absl::StrJoin(MigModels(), ", ")));
    }
    gpu->set_mig_enabled(true);
    // One GPU instance per gpu_instance_id, in the order the XML lists them.
    std::vector<XmlGpuInstance> instances;
    for (const SmiMigDevice& d : s.mig_devices) {
      auto it = std::find_if(instances.begin(), instances.end(),
                             [&](const XmlGpuInstance& gi) { return gi.id == d.gpu_instance_id; });
      if (it == instances.end()) {
        instances.push_back(XmlGpuInstance{d.gpu_instance_id});
        it = instances.end() - 1;
      }
      it->memory_mib = std::max(it->memory_mib, d.memory_mib);
      it->copy_engines = std::max(it->copy_engines, d.copy_engines);
      it->ofa_engines = std::max(it->ofa_engines, d.ofa_engines);
      it->multiprocessors += std::max(d.multiprocessors, 0);
    }
    if (instances.empty()) continue;
    std::vector<const MigProfile*> profiles;
    for (const XmlGpuInstance& gi : instances) {
      ASSIGN_OR_RETURN(const MigProfile* p, InferProfile(*geometry, gpu->memory_mib(), gi, where));
      profiles.push_back(p);
    }
    std::optional<std::vector<MigInstance>> layout = PackMigLayout(*geometry, profiles);
    if (!layout.has_value()) {
      std::vector<absl::string_view> names;
      names.reserve(profiles.size());
      for (const MigProfile* p : profiles) names.push_back(p->name);
      return XmlError(absl::StrFormat("%s: MIG instances %s fit no valid %s layout", where,
                                      absl::StrJoin(names, ", "), model->name));
    }
    std::vector<std::string> shown;
    for (const MigInstance& m : *layout) {
      v1::MigInstance* out_m = gpu->add_mig_layout();
      out_m->set_profile(m.profile);
      out_m->set_start(static_cast<uint32_t>(m.start));
      shown.push_back(absl::StrCat(m.profile, "@", m.start));
    }
    out.notes.push_back(absl::StrFormat(
        "%s: MIG instances %s (starts inferred: nvidia-smi -q -x does not show placements)", where,
        absl::StrJoin(shown, ", ")));
  }
  return out;
}

absl::StatusOr<DiscoveredNode> DiscoverNodeFromOutput(const std::string& node_name,
                                                      absl::string_view smi_xml,
                                                      absl::string_view topo_text) {
  ASSIGN_OR_RETURN(SmiLog smi, ParseNvidiaSmiXml(smi_xml));
  ASSIGN_OR_RETURN(TopoMatrix topo, ParseNvidiaSmiTopo(topo_text));
  return BuildDiscoveredNode(node_name, smi, topo);
}

absl::StatusOr<DiscoveredNode> DiscoverNode(const DiscoveryOptions& options) {
  const std::string tool = ShellQuote(options.nvidia_smi);
  ASSIGN_OR_RETURN(std::string xml, RunTool(absl::StrCat(tool, " -q -x"), kXmlSource,
                                            options.timeout, kMaxXmlBytes));
  ASSIGN_OR_RETURN(std::string topo, RunTool(absl::StrCat(tool, " topo -m"), kTopoSource,
                                             options.timeout, kMaxTopoBytes));
  return DiscoverNodeFromOutput(options.node, xml, topo);
}

absl::Status MergeDiscoveredNode(DiscoveredNode discovered, ClusterTopology* topology) {
  v1::Node& found = discovered.node;
  v1::Node* existing = nullptr;
  absl::flat_hash_set<std::string> uuids;
  absl::flat_hash_set<std::string> domains;
  for (v1::Node& n : *topology->inventory.mutable_nodes()) {
    if (n.name() == found.name()) {
      existing = &n;
      continue;
    }
    for (const v1::Gpu& g : n.gpus()) {
      uuids.insert(g.uuid());
      if (!g.nvlink_domain().empty()) domains.insert(g.nvlink_domain());
    }
  }
  for (const v1::Gpu& g : found.gpus()) {
    if (uuids.contains(g.uuid())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "discovered GPU %s of node %s is also in the topology file", g.uuid(), found.name()));
    }
    if (!g.nvlink_domain().empty() && domains.contains(g.nvlink_domain())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("NVLink domain %s of discovered node %s is also used in the topology "
                          "file",
                          g.nvlink_domain(), found.name()));
    }
  }
  if (existing == nullptr) {
    *topology->inventory.add_nodes() = std::move(found);
    return absl::OkStatus();
  }
  if (existing->gpus_size() > 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "node %s is discovered, but the topology file gives its GPUs", found.name()));
  }
  for (auto& [key, value] : found.labels()) (*existing->mutable_labels())[key] = value;
  *existing->mutable_gpus() = std::move(*found.mutable_gpus());
  return absl::OkStatus();
}

absl::StatusOr<ClusterTopology> LoadTopologyWithDiscovery(const std::string& topology_path,
                                                          const DiscoveryOptions& options,
                                                          std::vector<std::string>* notes) {
  ASSIGN_OR_RETURN(ClusterTopology topology,
                   LoadClusterTopology(topology_path, TopologyOptions{options.node}));
  ASSIGN_OR_RETURN(DiscoveredNode node, DiscoverNode(options));
  if (notes != nullptr) notes->insert(notes->end(), node.notes.begin(), node.notes.end());
  RETURN_IF_ERROR(MergeDiscoveredNode(std::move(node), &topology));
  return topology;
}

}  // namespace gpufed::agent
