#include "agent/topology.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "federation/gpu_catalog.h"
#include "federation/mig.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed::agent {
namespace {

// Names, identifiers and their limits are federation/validation.h's, the rules the server applies
// to the Register this file becomes; only the typo guard below is the file's own.

// An upper bound that catches typos (count: 80000) long before they become a multi-gigabyte
// inventory; real clusters sit far below it.
constexpr uint64_t kMaxNodesPerGroup = 10000;

// "must be 1..63 characters of [a-z0-9-]", with the start rule of a name or a label.
std::string NameRule(bool letter_first) {
  return absl::StrFormat("must be 1..%d characters of [a-z0-9-]%s", kMaxNameLength,
                         letter_first ? ", starting with a letter" : "");
}

std::string TokenRule(size_t max_bytes) {
  return absl::StrFormat("must be at most %d printable characters without spaces", max_bytes);
}

std::string Join(absl::string_view path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

std::string Index(absl::string_view path, size_t i) { return absl::StrCat(path, "[", i, "]"); }

std::string PadNumber(uint64_t n, uint64_t count) {
  const int width = std::max<int>(2, static_cast<int>(absl::StrCat(count).size()));
  return absl::StrFormat("%0*d", width, n);
}

// The keys of one YAML map, checked against what the map may hold.
struct Fields {
  YAML::Node node;
  std::string path;
  absl::flat_hash_map<std::string, YAML::Node> values;
  std::vector<std::pair<std::string, YAML::Node>> ordered;  // file order, for maps of labels

  const YAML::Node* Find(absl::string_view key) const {
    auto it = values.find(key);
    return it == values.end() ? nullptr : &it->second;
  }
};

class Parser {
 public:
  Parser(absl::string_view source, TopologyOptions options)
      : source_(source), options_(std::move(options)) {}

  absl::StatusOr<ClusterTopology> Parse(absl::string_view yaml) {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(yaml));
    } catch (const YAML::ParserException& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(source_, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ": invalid YAML: ", e.what()));
    }
    if (!root.IsDefined() || root.IsNull()) {
      return absl::InvalidArgumentError(absl::StrCat(source_, ":1: the file is empty"));
    }
    ASSIGN_OR_RETURN(Fields top, GetFields(root, "", {"cluster", "node_groups", "nodes"}, root));

    ClusterTopology out;
    const YAML::Node* cluster = top.Find("cluster");
    if (cluster == nullptr) return Error(root, "cluster", "required");
    RETURN_IF_ERROR(ParseCluster(*cluster, root, &out));

    if (const YAML::Node* groups = top.Find("node_groups")) {
      RETURN_IF_ERROR(ForEach(
          *groups, "node_groups",
          [&](const YAML::Node& g, const std::string& p) { return ParseNodeGroup(g, p, &out); }));
    }
    if (const YAML::Node* nodes = top.Find("nodes")) {
      RETURN_IF_ERROR(ForEach(*nodes, "nodes", [&](const YAML::Node& n, const std::string& p) {
        return ParseNode(n, p, &out);
      }));
    }
    if (out.inventory.nodes().empty() && options_.discovered_node.empty()) {
      return Error(root, "node_groups", "the cluster has no nodes (give node_groups or nodes)");
    }
    // Explicit NVLink domains may span nodes (an NVL72 rack), but must not merge with a domain
    // generated for another node, which would tell the scheduler two islands are one.
    for (const auto& [domain, where] : explicit_domains_) {
      if (generated_domains_.contains(domain)) {
        return Error(
            where.first, where.second,
            absl::StrFormat("NVLink domain \"%s\" is also generated for a node group", domain));
      }
    }
    return out;
  }

 private:
  [[nodiscard]] int LineOf(const YAML::Node& at, const YAML::Node& fallback) const {
    if (at.IsDefined() && at.Mark().line >= 0) return at.Mark().line + 1;
    if (fallback.IsDefined() && fallback.Mark().line >= 0) return fallback.Mark().line + 1;
    return 1;
  }

  absl::Status Error(const YAML::Node& at, absl::string_view field, absl::string_view problem,
                     const YAML::Node& fallback = YAML::Node()) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ":", LineOf(at, fallback), ": ", field, ": ", problem));
  }

  // `node` must be a map (or empty) whose keys are all in `allowed`.
  absl::StatusOr<Fields> GetFields(const YAML::Node& node, absl::string_view path,
                                   std::initializer_list<absl::string_view> allowed,
                                   const YAML::Node& parent) {
    Fields f{node, std::string(path), {}, {}};
    if (node.IsNull()) return f;
    if (!node.IsMap()) {
      return Error(node, path.empty() ? "(top level)" : path, "must be a map", parent);
    }
    for (auto it = node.begin(); it != node.end(); ++it) {
      if (!it->first.IsScalar()) return Error(it->first, path, "keys must be plain strings");
      std::string key = it->first.Scalar();
      bool known = false;
      for (absl::string_view a : allowed) known = known || a == key;
      if (!known) {
        return Error(it->first, Join(path, key),
                     absl::StrCat("unknown key (allowed: ", absl::StrJoin(allowed, ", "), ")"));
      }
      if (!f.values.emplace(key, it->second).second) {
        return Error(it->first, Join(path, key), "duplicate key");
      }
      f.ordered.emplace_back(key, it->second);
    }
    return f;
  }

  template <typename Fn>
  absl::Status ForEach(const YAML::Node& seq, absl::string_view path, Fn fn) {
    if (seq.IsNull()) return absl::OkStatus();
    if (!seq.IsSequence()) return Error(seq, path, "must be a list");
    for (size_t i = 0; i < seq.size(); ++i) {
      RETURN_IF_ERROR(fn(seq[i], Index(path, i)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::optional<std::string>> String(const Fields& f, absl::string_view key) {
    const YAML::Node* n = f.Find(key);
    if (n == nullptr || n->IsNull()) return std::nullopt;
    if (!n->IsScalar()) return Error(*n, Join(f.path, key), "must be a string");
    return n->Scalar();
  }

  absl::StatusOr<std::string> RequiredString(const Fields& f, absl::string_view key) {
    ASSIGN_OR_RETURN(std::optional<std::string> v, String(f, key));
    if (!v.has_value() || v->empty()) return Error(f.node, Join(f.path, key), "required");
    return *std::move(v);
  }

  absl::StatusOr<std::optional<uint64_t>> Uint(const Fields& f, absl::string_view key) {
    const YAML::Node* n = f.Find(key);
    if (n == nullptr || n->IsNull()) return std::nullopt;
    uint64_t v = 0;
    if (!n->IsScalar() || !absl::SimpleAtoi(n->Scalar(), &v) || n->Scalar().front() == '-' ||
        n->Scalar().front() == '+') {
      return Error(*n, Join(f.path, key),
                   absl::StrFormat("must be a non-negative integer (got \"%s\")",
                                   n->IsScalar() ? n->Scalar() : "a non-scalar"));
    }
    return v;
  }

  // A count: present, in 1..max.
  absl::StatusOr<uint64_t> Count(const Fields& f, absl::string_view key, uint64_t max) {
    ASSIGN_OR_RETURN(std::optional<uint64_t> v, Uint(f, key));
    if (!v.has_value()) return Error(f.node, Join(f.path, key), "required");
    if (*v == 0 || *v > max) {
      return Error(*f.Find(key), Join(f.path, key),
                   absl::StrFormat("must be between 1 and %d (got %d)", max, *v));
    }
    return *v;
  }

  absl::StatusOr<std::optional<bool>> Bool(const Fields& f, absl::string_view key) {
    const YAML::Node* n = f.Find(key);
    if (n == nullptr || n->IsNull()) return std::nullopt;
    bool v = false;
    if (!n->IsScalar() || !YAML::convert<bool>::decode(*n, v)) {
      return Error(*n, Join(f.path, key), "must be true or false");
    }
    return v;
  }

  absl::Status StringList(const Fields& f, absl::string_view key,
                          google::protobuf::RepeatedPtrField<std::string>* out) {
    const YAML::Node* n = f.Find(key);
    if (n == nullptr || n->IsNull()) return absl::OkStatus();
    const std::string path = Join(f.path, key);
    if (!n->IsSequence()) return Error(*n, path, "must be a list of names");
    absl::flat_hash_set<std::string> seen;
    for (size_t i = 0; i < n->size(); ++i) {
      const YAML::Node item = (*n)[i];
      if (!item.IsScalar() || !IsLabel(item.Scalar())) {
        return Error(item, Index(path, i), NameRule(false), *n);
      }
      if (!seen.insert(item.Scalar()).second) {
        return Error(item, Index(path, i), absl::StrCat("duplicate \"", item.Scalar(), "\""), *n);
      }
      out->Add(std::string(item.Scalar()));
    }
    return absl::OkStatus();
  }

  absl::Status Labels(const Fields& f, google::protobuf::Map<std::string, std::string>* out) {
    const YAML::Node* n = f.Find("labels");
    if (n == nullptr || n->IsNull()) return absl::OkStatus();
    const std::string path = Join(f.path, "labels");
    if (!n->IsMap()) return Error(*n, path, "must be a map of strings");
    if (n->size() > kMaxLabels) {
      return Error(*n, path, absl::StrFormat("at most %d labels", kMaxLabels));
    }
    for (auto it = n->begin(); it != n->end(); ++it) {
      if (!it->first.IsScalar() || !IsToken(it->first.Scalar(), kMaxNodeLabelBytes)) {
        return Error(it->first, path, "keys must be printable strings without spaces");
      }
      const std::string key = it->first.Scalar();
      if (!it->second.IsScalar() || !IsText(it->second.Scalar(), kMaxNodeLabelBytes)) {
        return Error(
            it->second, Join(path, key),
            absl::StrFormat("must be a one-line string of at most %d bytes", kMaxNodeLabelBytes));
      }
      if (!out->insert({key, it->second.Scalar()}).second) {
        return Error(it->first, Join(path, key), "duplicate key");
      }
    }
    return absl::OkStatus();
  }

  // A name-like field: a resource name (`letter_first`, the cluster's name) or a label.
  absl::StatusOr<std::optional<std::string>> Name(const Fields& f, absl::string_view key,
                                                  bool required, bool letter_first = false) {
    ASSIGN_OR_RETURN(std::optional<std::string> v, String(f, key));
    if (!v.has_value() || v->empty()) {
      if (required) return Error(f.node, Join(f.path, key), "required");
      return std::nullopt;
    }
    if (letter_first ? !IsName(*v) : !IsLabel(*v)) {
      return Error(*f.Find(key), Join(f.path, key),
                   absl::StrFormat("\"%s\" %s", absl::CHexEscape(*v), NameRule(letter_first)));
    }
    return v;
  }

  absl::Status ParseCluster(const YAML::Node& node, const YAML::Node& parent,
                            ClusterTopology* out) {
    ASSIGN_OR_RETURN(Fields f, GetFields(node, "cluster",
                                         {"name", "provider", "region", "zone", "jurisdiction",
                                          "compliance_labels"},
                                         parent));
    if (node.IsNull()) return Error(node, "cluster.name", "required", parent);
    ASSIGN_OR_RETURN(std::optional<std::string> name, Name(f, "name", true, true));
    ASSIGN_OR_RETURN(std::optional<std::string> provider, Name(f, "provider", true));
    ASSIGN_OR_RETURN(std::optional<std::string> region, Name(f, "region", true));
    ASSIGN_OR_RETURN(std::optional<std::string> zone, Name(f, "zone", false));
    ASSIGN_OR_RETURN(std::optional<std::string> jurisdiction, Name(f, "jurisdiction", false));
    out->cluster = *name;
    out->info.set_provider(*provider);
    out->info.set_region(*region);
    out->info.set_zone(zone.value_or(""));
    out->info.set_jurisdiction(jurisdiction.value_or(""));
    return StringList(f, "compliance_labels", out->info.mutable_compliance_labels());
  }

  // The common node fields (rack, block, cpu_millis, memory_mib, labels, schedulable).
  absl::Status NodeFields(const Fields& f, v1::Node* node) {
    ASSIGN_OR_RETURN(std::optional<std::string> rack, String(f, "rack"));
    ASSIGN_OR_RETURN(std::optional<std::string> block, String(f, "block"));
    for (const auto& [key, value] : {std::pair{"rack", &rack}, std::pair{"block", &block}}) {
      if (value->has_value() && !value->value().empty() &&
          !IsToken(value->value(), kMaxFabricIdBytes)) {
        return Error(*f.Find(key), Join(f.path, key), TokenRule(kMaxFabricIdBytes));
      }
    }
    node->set_rack(rack.value_or(""));
    node->set_block(block.value_or(""));
    ASSIGN_OR_RETURN(std::optional<uint64_t> cpu, Uint(f, "cpu_millis"));
    ASSIGN_OR_RETURN(std::optional<uint64_t> memory, Uint(f, "memory_mib"));
    node->set_cpu_millis(cpu.value_or(0));
    node->set_memory_mib(memory.value_or(0));
    ASSIGN_OR_RETURN(std::optional<bool> schedulable, Bool(f, "schedulable"));
    node->set_schedulable(schedulable.value_or(true));
    return Labels(f, node->mutable_labels());
  }

  absl::StatusOr<GpuModel> Model(const Fields& f) {
    ASSIGN_OR_RETURN(std::string model, RequiredString(f, "model"));
    std::optional<GpuModel> found = FindGpuModel(model);
    if (!found.has_value()) {
      return Error(
          *f.Find("model"), Join(f.path, "model"),
          absl::StrFormat("unknown GPU model \"%s\" (known: %s)", model, KnownGpuModelNames()));
    }
    return *found;
  }

  absl::StatusOr<bool> MigCapable(const Fields& f, const GpuModel& model) {
    ASSIGN_OR_RETURN(std::optional<bool> mig, Bool(f, "mig_capable"));
    if (mig.value_or(false) && !model.mig_capable) {
      return Error(*f.Find("mig_capable"), Join(f.path, "mig_capable"),
                   absl::StrFormat("%s does not support MIG", model.name));
    }
    return mig.value_or(model.mig_capable);
  }

  // `mig_enabled` and `mig_layout` (a list of {profile, start}) of one GPU, or of every GPU of a
  // node group. MIG on needs a MIG-capable GPU whose model has known geometry (federation/mig.h),
  // and the layout must be valid for it; a layout without MIG on is refused.
  absl::Status MigMode(const Fields& f, const GpuModel& model, bool mig_capable, v1::Gpu* gpu) {
    ASSIGN_OR_RETURN(std::optional<bool> enabled, Bool(f, "mig_enabled"));
    const YAML::Node* layout = f.Find("mig_layout");
    const std::string lpath = Join(f.path, "mig_layout");
    const bool has_layout = layout != nullptr && !layout->IsNull();
    if (!enabled.value_or(false)) {
      if (has_layout) return Error(*layout, lpath, "a MIG layout needs mig_enabled: true");
      return absl::OkStatus();
    }
    const YAML::Node& at = *f.Find("mig_enabled");
    const std::string epath = Join(f.path, "mig_enabled");
    if (!mig_capable) {
      return Error(at, epath,
                   absl::StrFormat("%s%s does not support MIG", model.name,
                                   model.mig_capable ? " (mig_capable: false)" : ""));
    }
    const MigGeometry* geometry = FindMigGeometry(model.name);
    if (geometry == nullptr) {
      return Error(at, epath,
                   absl::StrFormat("gpufed has no MIG geometry for %s (MIG models: %s)", model.name,
                                   absl::StrJoin(MigModels(), ", ")));
    }
    gpu->set_mig_enabled(true);
    if (!has_layout) return absl::OkStatus();
    if (!layout->IsSequence()) {
      return Error(*layout, lpath, "must be a list of {profile, start}");
    }
    std::vector<MigInstance> instances;
    for (size_t i = 0; i < layout->size(); ++i) {
      const YAML::Node item = (*layout)[i];
      ASSIGN_OR_RETURN(Fields mf, GetFields(item, Index(lpath, i), {"profile", "start"}, *layout));
      if (item.IsNull()) return Error(item, Index(lpath, i), "must be {profile, start}", *layout);
      ASSIGN_OR_RETURN(std::string profile, RequiredString(mf, "profile"));
      ASSIGN_OR_RETURN(std::optional<uint64_t> start, Uint(mf, "start"));
      if (!start.has_value()) return Error(item, Join(mf.path, "start"), "required", *layout);
      if (*start >= static_cast<uint64_t>(geometry->memory_slots)) {
        return Error(*mf.Find("start"), Join(mf.path, "start"),
                     absl::StrFormat("must be below %d on %s", geometry->memory_slots, model.name));
      }
      instances.push_back(MigInstance{profile, static_cast<int>(*start)});
      if (absl::Status valid = ValidateMigLayout(*geometry, instances); !valid.ok()) {
        return Error(item, Index(lpath, i), valid.message(), *layout);
      }
      v1::MigInstance* m = gpu->add_mig_layout();
      m->set_profile(profile);
      m->set_start(static_cast<uint32_t>(*start));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> GpuMemory(const Fields& f, const GpuModel& model) {
    ASSIGN_OR_RETURN(std::optional<uint64_t> memory, Uint(f, "memory_mib"));
    if (memory.has_value() && *memory == 0) {
      return Error(*f.Find("memory_mib"), Join(f.path, "memory_mib"), "must be > 0");
    }
    return memory.value_or(model.memory_mib);
  }

  // Checked before the node's GPUs, whose generated UUIDs would otherwise clash first and hide
  // the real mistake.
  absl::Status ClaimNodeName(const std::string& name, const YAML::Node& at,
                             const std::string& field) {
    if (!node_names_.insert(name).second) {
      return Error(at, field, absl::StrFormat("duplicate node name \"%s\"", name));
    }
    return absl::OkStatus();
  }

  absl::Status AddUuid(const std::string& uuid, const YAML::Node& at, const std::string& field) {
    if (!IsToken(uuid, kMaxGpuUuidBytes)) {
      return Error(at, field,
                   absl::StrFormat("GPU uuid \"%s\" %s", absl::CHexEscape(uuid.substr(0, 40)),
                                   TokenRule(kMaxGpuUuidBytes)));
    }
    if (!uuids_.insert(uuid).second) {
      return Error(at, field, absl::StrFormat("duplicate GPU uuid \"%s\"", uuid));
    }
    return absl::OkStatus();
  }

  absl::Status ParseNodeGroup(const YAML::Node& g, const std::string& path, ClusterTopology* out) {
    ASSIGN_OR_RETURN(Fields f, GetFields(g, path,
                                         {"name_prefix", "count", "rack", "block", "cpu_millis",
                                          "memory_mib", "labels", "schedulable", "gpus"},
                                         g));
    ASSIGN_OR_RETURN(std::string prefix, RequiredString(f, "name_prefix"));
    ASSIGN_OR_RETURN(uint64_t count, Count(f, "count", kMaxNodesPerGroup));
    const std::string last_name = prefix + PadNumber(count, count);
    if (!IsLabel(prefix + PadNumber(1, count)) || !IsLabel(last_name)) {
      return Error(*f.Find("name_prefix"), Join(path, "name_prefix"),
                   absl::StrFormat("node names such as \"%s\" %s", absl::CHexEscape(last_name),
                                   NameRule(false)));
    }
    v1::Node base;
    RETURN_IF_ERROR(NodeFields(f, &base));

    const YAML::Node* gpus_node = f.Find("gpus");
    if (gpus_node == nullptr) return Error(g, Join(path, "gpus"), "required");
    const std::string gpath = Join(path, "gpus");
    ASSIGN_OR_RETURN(Fields gf, GetFields(*gpus_node, gpath,
                                          {"count", "model", "memory_mib", "nvlink", "numa_nodes",
                                           "nvlink_domain", "mig_capable", "mig_enabled",
                                           "mig_layout", "pcie_switches"},
                                          g));
    ASSIGN_OR_RETURN(uint64_t gpu_count, Count(gf, "count", kMaxGpusPerNode));
    ASSIGN_OR_RETURN(GpuModel model, Model(gf));
    ASSIGN_OR_RETURN(uint64_t memory, GpuMemory(gf, model));
    ASSIGN_OR_RETURN(bool mig, MigCapable(gf, model));
    // Every GPU of the group starts with the same MIG mode and layout.
    v1::Gpu mig_template;
    RETURN_IF_ERROR(MigMode(gf, model, mig, &mig_template));
    ASSIGN_OR_RETURN(std::optional<std::string> nvlink, String(gf, "nvlink"));
    const std::string nvl = nvlink.value_or("none");
    if (nvl != "node" && nvl != "pairs" && nvl != "none") {
      return Error(*gf.Find("nvlink"), Join(gpath, "nvlink"),
                   absl::StrFormat("must be node, pairs or none (got \"%s\")", nvl));
    }
    if (nvl == "pairs" && gpu_count % 2 != 0) {
      return Error(*gf.Find("nvlink"), Join(gpath, "nvlink"),
                   absl::StrFormat("pairs needs an even gpus.count (got %d)", gpu_count));
    }
    // One named domain for every GPU of every node of the group: an NVLink fabric that spans
    // nodes, such as a GB200 NVL72 rack.
    ASSIGN_OR_RETURN(std::optional<std::string> shared_domain, String(gf, "nvlink_domain"));
    if (shared_domain.has_value() && !shared_domain->empty()) {
      const YAML::Node& at = *gf.Find("nvlink_domain");
      if (nvl != "none") {
        return Error(
            at, Join(gpath, "nvlink_domain"),
            absl::StrFormat("give either nvlink (\"%s\") or nvlink_domain, not both", nvl));
      }
      if (!IsToken(*shared_domain, kMaxFabricIdBytes)) {
        return Error(at, Join(gpath, "nvlink_domain"), TokenRule(kMaxFabricIdBytes));
      }
      explicit_domains_.try_emplace(*shared_domain, at, Join(gpath, "nvlink_domain"));
    }
    ASSIGN_OR_RETURN(std::optional<uint64_t> numa_opt, Uint(gf, "numa_nodes"));
    const uint64_t numa_nodes = numa_opt.value_or(1);
    if (numa_nodes == 0 || numa_nodes > std::min<uint64_t>(gpu_count, kMaxNumaNodes)) {
      return Error(*gf.Find("numa_nodes"), Join(gpath, "numa_nodes"),
                   absl::StrFormat("must be between 1 and gpus.count (%d)", gpu_count));
    }
    // PCIe switches, like NUMA nodes, split the GPUs evenly; 0 (the default) leaves them unset.
    ASSIGN_OR_RETURN(std::optional<uint64_t> switches_opt, Uint(gf, "pcie_switches"));
    const uint64_t switches = switches_opt.value_or(0);
    if (switches > gpu_count) {
      return Error(*gf.Find("pcie_switches"), Join(gpath, "pcie_switches"),
                   absl::StrFormat("must be between 0 and gpus.count (%d)", gpu_count));
    }

    for (uint64_t n = 1; n <= count; ++n) {
      const std::string number = PadNumber(n, count);
      v1::Node node = base;
      node.set_name(prefix + number);
      RETURN_IF_ERROR(
          ClaimNodeName(node.name(), *f.Find("name_prefix"), Join(path, "name_prefix")));
      if (node.name() == options_.discovered_node) {
        return Error(*f.Find("name_prefix"), Join(path, "name_prefix"),
                     absl::StrFormat("generates node \"%s\", which is discovered (--discover): "
                                     "list it under nodes without gpus, or not at all",
                                     node.name()));
      }
      node.set_rack(absl::StrReplaceAll(base.rack(), {{"{n}", number}}));
      node.set_block(absl::StrReplaceAll(base.block(), {{"{n}", number}}));
      for (uint64_t i = 0; i < gpu_count; ++i) {
        v1::Gpu* gpu = node.add_gpus();
        gpu->set_uuid(absl::StrCat("GPU-", out->cluster, "-", node.name(), "-", i));
        gpu->set_index(static_cast<uint32_t>(i));
        gpu->set_model(std::string(model.name));
        gpu->set_memory_mib(memory);
        if (shared_domain.has_value() && !shared_domain->empty()) {
          gpu->set_nvlink_domain(*shared_domain);
        } else if (nvl == "node") {
          gpu->set_nvlink_domain(absl::StrCat(node.name(), "-nvl"));
        } else if (nvl == "pairs") {
          gpu->set_nvlink_domain(absl::StrCat(node.name(), "-nvl", i / 2));
        }
        if (nvl != "none") generated_domains_.insert(gpu->nvlink_domain());
        gpu->set_numa_node(static_cast<int32_t>(i * numa_nodes / gpu_count));
        if (switches > 0) gpu->set_pcie_switch(absl::StrCat("pcie", i * switches / gpu_count));
        gpu->set_mig_capable(mig);
        gpu->set_mig_enabled(mig_template.mig_enabled());
        *gpu->mutable_mig_layout() = mig_template.mig_layout();
        gpu->set_healthy(true);
        RETURN_IF_ERROR(AddUuid(gpu->uuid(), *f.Find("name_prefix"), Join(path, "name_prefix")));
      }
      *out->inventory.add_nodes() = std::move(node);
    }
    return absl::OkStatus();
  }

  absl::Status ParseNode(const YAML::Node& n, const std::string& path, ClusterTopology* out) {
    ASSIGN_OR_RETURN(Fields f, GetFields(n, path,
                                         {"name", "rack", "block", "cpu_millis", "memory_mib",
                                          "labels", "schedulable", "gpus"},
                                         n));
    ASSIGN_OR_RETURN(std::optional<std::string> name, Name(f, "name", true));
    RETURN_IF_ERROR(ClaimNodeName(*name, *f.Find("name"), Join(path, "name")));
    v1::Node node;
    node.set_name(*name);
    RETURN_IF_ERROR(NodeFields(f, &node));

    const YAML::Node* gpus = f.Find("gpus");
    const std::string gpath = Join(path, "gpus");
    if (*name == options_.discovered_node) {
      // Its GPUs come from nvidia-smi (agent/discovery.h), which fills them in.
      if (gpus != nullptr) {
        return Error(*gpus, gpath,
                     absl::StrFormat("node \"%s\" is discovered (--discover): its GPUs come "
                                     "from nvidia-smi; leave out gpus",
                                     *name),
                     n);
      }
      *out->inventory.add_nodes() = std::move(node);
      return absl::OkStatus();
    }
    if (gpus == nullptr || gpus->IsNull() || (gpus->IsSequence() && gpus->size() == 0)) {
      return Error(gpus != nullptr ? *gpus : n, gpath, "a node needs at least one GPU", n);
    }
    if (!gpus->IsSequence()) return Error(*gpus, gpath, "must be a list");
    if (gpus->size() > kMaxGpusPerNode) {
      return Error(*gpus, gpath, absl::StrFormat("at most %d GPUs per node", kMaxGpusPerNode));
    }
    absl::flat_hash_set<uint32_t> indices;
    for (size_t i = 0; i < gpus->size(); ++i) {
      const YAML::Node item = (*gpus)[i];
      const std::string p = Index(gpath, i);
      ASSIGN_OR_RETURN(Fields gf, GetFields(item, p,
                                            {"index", "uuid", "model", "memory_mib",
                                             "nvlink_domain", "numa_node", "pcie_switch",
                                             "mig_capable", "mig_enabled", "mig_layout", "healthy"},
                                            *gpus));
      v1::Gpu* gpu = node.add_gpus();
      ASSIGN_OR_RETURN(std::optional<uint64_t> index, Uint(gf, "index"));
      if (index.value_or(i) >= kMaxGpusPerNode) {
        return Error(*gf.Find("index"), Join(p, "index"),
                     absl::StrFormat("must be below %d", kMaxGpusPerNode));
      }
      gpu->set_index(static_cast<uint32_t>(index.value_or(i)));
      if (!indices.insert(gpu->index()).second) {
        return Error(
            item, Join(p, "index"),
            absl::StrFormat("duplicate GPU index %d on node \"%s\"", gpu->index(), node.name()),
            *gpus);
      }
      ASSIGN_OR_RETURN(GpuModel model, Model(gf));
      gpu->set_model(std::string(model.name));
      ASSIGN_OR_RETURN(uint64_t memory, GpuMemory(gf, model));
      gpu->set_memory_mib(memory);
      ASSIGN_OR_RETURN(bool mig, MigCapable(gf, model));
      gpu->set_mig_capable(mig);
      RETURN_IF_ERROR(MigMode(gf, model, mig, gpu));
      ASSIGN_OR_RETURN(std::optional<bool> healthy, Bool(gf, "healthy"));
      gpu->set_healthy(healthy.value_or(true));

      ASSIGN_OR_RETURN(std::optional<std::string> uuid, String(gf, "uuid"));
      gpu->set_uuid(uuid.has_value() && !uuid->empty()
                        ? *uuid
                        : absl::StrCat("GPU-", out->cluster, "-", node.name(), "-", gpu->index()));
      if (!IsToken(gpu->uuid(), kMaxGpuUuidBytes)) {
        return Error(item, Join(p, "uuid"), TokenRule(kMaxGpuUuidBytes), *gpus);
      }
      RETURN_IF_ERROR(AddUuid(gpu->uuid(), item, Join(p, "uuid")));

      ASSIGN_OR_RETURN(std::optional<std::string> domain, String(gf, "nvlink_domain"));
      ASSIGN_OR_RETURN(std::optional<std::string> pcie, String(gf, "pcie_switch"));
      for (const auto& [key, value] :
           {std::pair<absl::string_view, const std::optional<std::string>*>{"nvlink_domain",
                                                                            &domain},
            {"pcie_switch", &pcie}}) {
        if (value->has_value() && !value->value().empty() &&
            !IsToken(value->value(), kMaxFabricIdBytes)) {
          return Error(*gf.Find(key), Join(p, key), TokenRule(kMaxFabricIdBytes));
        }
      }
      gpu->set_nvlink_domain(domain.value_or(""));
      gpu->set_pcie_switch(pcie.value_or(""));
      if (!gpu->nvlink_domain().empty()) {
        explicit_domains_.try_emplace(gpu->nvlink_domain(), item, Join(p, "nvlink_domain"));
      }
      ASSIGN_OR_RETURN(std::optional<uint64_t> numa, Uint(gf, "numa_node"));
      if (numa.value_or(0) >= kMaxNumaNodes) {
        return Error(*gf.Find("numa_node"), Join(p, "numa_node"),
                     absl::StrFormat("must be below %d", kMaxNumaNodes));
      }
      gpu->set_numa_node(static_cast<int32_t>(numa.value_or(0)));
    }
    *out->inventory.add_nodes() = std::move(node);
    return absl::OkStatus();
  }

  std::string source_;
  TopologyOptions options_;
  absl::flat_hash_set<std::string> node_names_;
  absl::flat_hash_set<std::string> uuids_;
  absl::flat_hash_set<std::string> generated_domains_;
  // Domain -> where it first appears, for the error message.
  absl::flat_hash_map<std::string, std::pair<YAML::Node, std::string>> explicit_domains_;
};

}  // namespace

absl::StatusOr<ClusterTopology> ParseClusterTopology(std::string_view yaml,
                                                     std::string_view source_view) {
  return ParseClusterTopology(yaml, source_view, TopologyOptions{});
}

absl::StatusOr<ClusterTopology> ParseClusterTopology(std::string_view yaml,
                                                     std::string_view source_view,
                                                     const TopologyOptions& options) {
  const std::string source(source_view);
  Parser parser(source, options);
  try {
    return parser.Parse(std::string(yaml));
  } catch (const YAML::Exception& e) {
    // yaml-cpp throws on malformed trees the checks above did not anticipate; the caller still
    // gets one line naming the file.
    return absl::InvalidArgumentError(
        absl::StrCat(source, ":", e.mark.line + 1, ": invalid topology: ", e.msg));
  }
}

absl::StatusOr<ClusterTopology> LoadClusterTopology(const std::string& path) {
  return LoadClusterTopology(path, TopologyOptions{});
}

absl::StatusOr<ClusterTopology> LoadClusterTopology(const std::string& path,
                                                    const TopologyOptions& options) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read topology file ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::NotFoundError(absl::StrCat("cannot read topology file ", path));
  return ParseClusterTopology(text.str(), path, options);
}

int CountGpus(const v1::Inventory& inventory) {
  int n = 0;
  for (const v1::Node& node : inventory.nodes()) n += node.gpus_size();
  return n;
}

}  // namespace gpufed::agent
