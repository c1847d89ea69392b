#include "storage/json_codec.h"

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "federation/status_macros.h"
#include "nlohmann/json.hpp"

namespace gpufed::storage {
namespace {

using nlohmann::json;

std::string_view SimOutcomeName(SimOutcome outcome) {
  return outcome == SimOutcome::kFail ? "fail" : "succeed";
}

// Runs `fn` and turns nlohmann's exceptions (wrong type, bad text) into INVALID_ARGUMENT.
template <typename T, typename Fn>
absl::StatusOr<T> Decode(absl::string_view what, std::string_view text, Fn fn) {
  try {
    json doc = json::parse(text);
    return fn(doc);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", e.what()));
  }
}

json MigLayoutDoc(const std::vector<MigInstance>& layout) {
  json out = json::array();
  for (const MigInstance& m : layout) out.push_back({{"profile", m.profile}, {"start", m.start}});
  return out;
}

// A list of {profile, start}; `what` names the key in messages.
absl::StatusOr<std::vector<MigInstance>> MigLayoutFromDoc(const json& doc, absl::string_view what) {
  if (!doc.is_array()) return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON array"));
  std::vector<MigInstance> out;
  for (const json& m : doc) {
    if (!m.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": entries must be objects"));
    }
    out.push_back(MigInstance{m.value("profile", ""), m.value("start", 0)});
  }
  return out;
}

// An integer member of `obj` (absent or null: 0). INVALID_ARGUMENT, naming `what`.`key`, for
// anything but an integer that fits in an int64 (a float would silently lose its fraction).
absl::StatusOr<int64_t> Int64Member(const json& obj, const char* key, absl::string_view what) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return 0;
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(what, ".", key, ": too large"));
    }
    return static_cast<int64_t>(u);
  }
  if (it->is_number_integer()) return it->get<int64_t>();
  return absl::InvalidArgumentError(absl::StrCat(what, ".", key, ": not an integer"));
}

int64_t ToMicros(Timestamp t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

Timestamp FromMicros(int64_t us) {
  return Timestamp(std::chrono::duration_cast<Timestamp::duration>(std::chrono::microseconds(us)));
}

// spec.placement: only the constraints that are set, so that a constraint added later leaves
// the text of every spec that does not use it as it was.
json PlacementDoc(const PlacementConstraints& p) {
  json doc = json::object();
  const auto list = [&doc](const char* key, const std::vector<std::string>& values) {
    if (!values.empty()) doc[key] = values;
  };
  list("jurisdictions", p.jurisdictions);
  list("compliance_labels", p.compliance_labels);
  list("providers", p.providers);
  list("regions", p.regions);
  list("clusters", p.clusters);
  list("denied_clusters", p.denied_clusters);
  if (p.max_price_per_gpu_hour_micros != 0) {
    doc["max_price_per_gpu_hour_micros"] = p.max_price_per_gpu_hour_micros;
  }
  if (p.spot_tolerated) doc["spot_tolerated"] = true;
  if (p.objective != Objective::kPack) doc["objective"] = std::string(ObjectiveName(p.objective));
  if (!p.client_region.empty()) doc["client_region"] = p.client_region;
  if (p.max_rtt_micros != 0) doc["max_rtt_micros"] = p.max_rtt_micros;
  if (!p.min_driver_version.empty()) doc["min_driver_version"] = p.min_driver_version;
  if (!p.min_cuda_version.empty()) doc["min_cuda_version"] = p.min_cuda_version;
  return doc;
}

absl::StatusOr<PlacementConstraints> PlacementFromDoc(const json& doc) {
  constexpr absl::string_view kWhat = "workload spec: placement";
  if (!doc.is_object()) return absl::InvalidArgumentError(absl::StrCat(kWhat, ": not an object"));
  PlacementConstraints p;
  p.jurisdictions = doc.value("jurisdictions", std::vector<std::string>{});
  p.compliance_labels = doc.value("compliance_labels", std::vector<std::string>{});
  p.providers = doc.value("providers", std::vector<std::string>{});
  p.regions = doc.value("regions", std::vector<std::string>{});
  p.clusters = doc.value("clusters", std::vector<std::string>{});
  p.denied_clusters = doc.value("denied_clusters", std::vector<std::string>{});
  ASSIGN_OR_RETURN(p.max_price_per_gpu_hour_micros,
                   Int64Member(doc, "max_price_per_gpu_hour_micros", kWhat));
  p.spot_tolerated = doc.value("spot_tolerated", false);
  const std::string objective = doc.value("objective", "pack");
  std::optional<Objective> o = ParseObjective(objective);
  if (!o) return absl::InvalidArgumentError(absl::StrCat(kWhat, ".objective: ", objective));
  p.objective = *o;
  p.client_region = doc.value("client_region", "");
  ASSIGN_OR_RETURN(p.max_rtt_micros, Int64Member(doc, "max_rtt_micros", kWhat));
  p.min_driver_version = doc.value("min_driver_version", "");
  p.min_cuda_version = doc.value("min_cuda_version", "");
  return p;
}

// Compact, and never throws: text that is not valid UTF-8 is replaced (U+FFFD) rather than
// aborting the caller; PostgreSQL would refuse it anyway.
std::string Dump(const json& doc) {
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string WorkloadSpecToJson(const WorkloadSpec& spec) {
  json run = {
      {"image", spec.run.image},
      {"command", spec.run.command},
      {"env", spec.run.env},
      {"sim_outcome", SimOutcomeName(spec.run.sim_outcome)},
      {"sim_exit_code", spec.run.sim_exit_code},
  };
  json doc = {
      {"tenant", spec.tenant},
      {"project", spec.project},
      {"name", spec.name},
      {"idempotency_key", spec.idempotency_key},
      {"class", std::string(ClassName(spec.workload_class))},
      {"priority", spec.priority},
      {"replicas", spec.replicas},
      {"gpus_per_replica", spec.gpus_per_replica},
      {"gpu_models", spec.gpu_models},
      {"min_gpu_memory_mib", spec.min_gpu_memory_mib},
      {"topology", std::string(TopologyName(spec.topology))},
      {"estimated_duration_ms", spec.estimated_duration_ms},
      {"run", std::move(run)},
  };
  // Written only when set, so that a spec without them encodes exactly as before these keys
  // existed (idempotent resubmission compares the stored jsonb with the new one).
  if (!spec.mig_profile.empty()) doc["mig_profile"] = spec.mig_profile;
  if (spec.gpu_milli != 0) doc["gpu_milli"] = spec.gpu_milli;
  if (spec.cpu_millis != 0) doc["cpu_millis"] = spec.cpu_millis;
  if (spec.memory_mib != 0) doc["memory_mib"] = spec.memory_mib;
  if (spec.checkpoint_interval_ms != 0) doc["checkpoint_interval_ms"] = spec.checkpoint_interval_ms;
  if (spec.retry != RetryPolicy{}) {
    doc["retry"] = {{"max_attempts", spec.retry.max_attempts},
                    {"on_cluster_lost", spec.retry.on_cluster_lost},
                    {"on_preemption", spec.retry.on_preemption},
                    {"on_node_failure", spec.retry.on_node_failure}};
  }
  if (!spec.placement.empty()) doc["placement"] = PlacementDoc(spec.placement);
  return Dump(doc);
}

absl::StatusOr<WorkloadSpec> WorkloadSpecFromJson(std::string_view text) {
  return Decode<WorkloadSpec>(
      "workload spec", text, [](const json& doc) -> absl::StatusOr<WorkloadSpec> {
        if (!doc.is_object()) return absl::InvalidArgumentError("workload spec: not a JSON object");
        WorkloadSpec spec;
        spec.tenant = doc.value("tenant", "");
        spec.project = doc.value("project", "");
        spec.name = doc.value("name", "");
        spec.idempotency_key = doc.value("idempotency_key", "");
        std::string class_name = doc.value("class", "unspecified");
        if (class_name != "unspecified") {
          std::optional<WorkloadClass> c = ParseClass(class_name);
          if (!c)
            return absl::InvalidArgumentError(absl::StrCat("workload spec: class: ", class_name));
          spec.workload_class = *c;
        }
        spec.priority = doc.value("priority", int32_t{0});
        spec.replicas = doc.value("replicas", uint32_t{1});
        spec.gpus_per_replica = doc.value("gpus_per_replica", uint32_t{1});
        spec.gpu_models = doc.value("gpu_models", std::vector<std::string>{});
        spec.min_gpu_memory_mib = doc.value("min_gpu_memory_mib", uint64_t{0});
        std::string topology = doc.value("topology", "none");
        std::optional<Topology> t = ParseTopology(topology);
        if (!t)
          return absl::InvalidArgumentError(absl::StrCat("workload spec: topology: ", topology));
        spec.topology = *t;
        spec.estimated_duration_ms = doc.value("estimated_duration_ms", int64_t{0});
        spec.checkpoint_interval_ms = doc.value("checkpoint_interval_ms", int64_t{0});
        spec.mig_profile = doc.value("mig_profile", "");
        spec.gpu_milli = doc.value("gpu_milli", uint32_t{0});
        spec.cpu_millis = doc.value("cpu_millis", uint64_t{0});
        spec.memory_mib = doc.value("memory_mib", uint64_t{0});
        if (auto it = doc.find("retry"); it != doc.end() && it->is_object()) {
          spec.retry.max_attempts = it->value("max_attempts", uint32_t{1});
          spec.retry.on_cluster_lost = it->value("on_cluster_lost", false);
          spec.retry.on_preemption = it->value("on_preemption", false);
          spec.retry.on_node_failure = it->value("on_node_failure", false);
        }
        if (auto it = doc.find("placement"); it != doc.end() && !it->is_null()) {
          ASSIGN_OR_RETURN(spec.placement, PlacementFromDoc(*it));
        }
        if (auto it = doc.find("run"); it != doc.end() && it->is_object()) {
          const json& run = *it;
          spec.run.image = run.value("image", "");
          spec.run.command = run.value("command", std::vector<std::string>{});
          spec.run.env = run.value("env", std::map<std::string, std::string>{});
          std::string outcome = run.value("sim_outcome", "succeed");
          if (outcome != "succeed" && outcome != "fail") {
            return absl::InvalidArgumentError(
                absl::StrCat("workload spec: run.sim_outcome: ", outcome));
          }
          spec.run.sim_outcome = outcome == "fail" ? SimOutcome::kFail : SimOutcome::kSucceed;
          spec.run.sim_exit_code = run.value("sim_exit_code", 0);
        }
        return spec;
      });
}

std::string AssignmentToJson(const Assignment& assignment) {
  json replicas = json::array();
  for (const ReplicaAssignment& r : assignment.replicas) {
    json replica = {{"node", r.node}, {"gpu_uuids", r.gpu_uuids}, {"gpu_indices", r.gpu_indices}};
    // As in the spec: only when set, so whole-GPU assignments keep their old shape.
    if (r.gpu_milli != 0) replica["gpu_milli"] = r.gpu_milli;
    if (!r.mig_profile.empty()) {
      replica["mig_profile"] = r.mig_profile;
      replica["mig_start"] = r.mig_start;
    }
    replicas.push_back(std::move(replica));
  }
  json doc = {
      {"cluster", assignment.cluster},
      {"epoch", assignment.epoch},
      {"replicas", std::move(replicas)},
  };
  if (!assignment.repartitions.empty()) {
    json repartitions = json::array();
    for (const Repartition& r : assignment.repartitions) {
      repartitions.push_back({{"node", r.node},
                              {"gpu_uuid", r.gpu_uuid},
                              {"mig_enabled", r.mig_enabled},
                              {"layout", MigLayoutDoc(r.layout)},
                              {"reason", r.reason}});
    }
    doc["repartitions"] = std::move(repartitions);
  }
  return Dump(doc);
}

absl::StatusOr<Assignment> AssignmentFromJson(std::string_view text) {
  return Decode<Assignment>("assignment", text, [](const json& doc) -> absl::StatusOr<Assignment> {
    if (!doc.is_object()) return absl::InvalidArgumentError("assignment: not a JSON object");
    Assignment a;
    a.cluster = doc.value("cluster", "");
    a.epoch = doc.value("epoch", uint64_t{0});
    if (auto it = doc.find("replicas"); it != doc.end()) {
      for (const json& r : *it) {
        ReplicaAssignment replica;
        replica.node = r.value("node", "");
        replica.gpu_uuids = r.value("gpu_uuids", std::vector<std::string>{});
        replica.gpu_indices = r.value("gpu_indices", std::vector<uint32_t>{});
        replica.gpu_milli = r.value("gpu_milli", uint32_t{0});
        replica.mig_profile = r.value("mig_profile", "");
        replica.mig_start = r.value("mig_start", int32_t{-1});
        a.replicas.push_back(std::move(replica));
      }
    }
    if (auto it = doc.find("repartitions"); it != doc.end()) {
      for (const json& r : *it) {
        Repartition rp;
        rp.node = r.value("node", "");
        rp.gpu_uuid = r.value("gpu_uuid", "");
        rp.mig_enabled = r.value("mig_enabled", false);
        if (auto layout = r.find("layout"); layout != r.end()) {
          ASSIGN_OR_RETURN(rp.layout, MigLayoutFromDoc(*layout, "assignment: repartitions.layout"));
        }
        rp.reason = r.value("reason", "");
        a.repartitions.push_back(std::move(rp));
      }
    }
    return a;
  });
}

std::string LabelsToJson(const std::map<std::string, std::string>& labels) {
  return Dump(json(labels));
}

absl::StatusOr<std::map<std::string, std::string>> LabelsFromJson(std::string_view text) {
  using Labels = std::map<std::string, std::string>;
  return Decode<Labels>("labels", text, [](const json& doc) -> absl::StatusOr<Labels> {
    if (!doc.is_object()) return absl::InvalidArgumentError("labels: not a JSON object");
    return doc.get<Labels>();
  });
}

std::string MigLayoutToJson(const std::vector<MigInstance>& layout) {
  return Dump(MigLayoutDoc(layout));
}

absl::StatusOr<std::vector<MigInstance>> MigLayoutFromJson(std::string_view text) {
  using Layout = std::vector<MigInstance>;
  return Decode<Layout>("mig_layout", text, [](const json& doc) -> absl::StatusOr<Layout> {
    return MigLayoutFromDoc(doc, "mig_layout");
  });
}

std::string ClusterDeclarationToJson(const ClusterDeclaration& d) {
  json prices = json::array();
  for (const PriceEntry& e : d.prices) {
    prices.push_back({{"gpu_model", e.gpu_model},
                      {"mig_profile", e.mig_profile},
                      {"capacity", std::string(CapacityTypeName(e.capacity))},
                      {"micros_per_hour", e.micros_per_hour},
                      {"effective_from_us", ToMicros(e.effective_from)}});
  }
  json doc = {
      {"cluster", d.cluster},
      {"provider", d.provider},
      {"region", d.region},
      {"zone", d.zone},
      {"jurisdiction", d.jurisdiction},
      {"default_capacity", std::string(CapacityTypeName(d.default_capacity))},
      {"prices", std::move(prices)},
      {"rtt_micros", json(d.rtt_micros)},
  };
  // Absent: the agent's labels stay in force; [] declares that the cluster has none.
  if (d.compliance_labels) doc["compliance_labels"] = *d.compliance_labels;
  return Dump(doc);
}

absl::StatusOr<ClusterDeclaration> ClusterDeclarationFromJson(std::string_view text) {
  constexpr absl::string_view kWhat = "cluster declaration";
  return Decode<ClusterDeclaration>(
      kWhat, text, [&](const json& doc) -> absl::StatusOr<ClusterDeclaration> {
        if (!doc.is_object()) {
          return absl::InvalidArgumentError(absl::StrCat(kWhat, ": not a JSON object"));
        }
        ClusterDeclaration d;
        d.cluster = doc.value("cluster", "");
        d.provider = doc.value("provider", "");
        d.region = doc.value("region", "");
        d.zone = doc.value("zone", "");
        d.jurisdiction = doc.value("jurisdiction", "");
        if (auto it = doc.find("compliance_labels"); it != doc.end() && !it->is_null()) {
          d.compliance_labels = it->get<std::vector<std::string>>();
        }
        const std::string capacity = doc.value("default_capacity", "on-demand");
        std::optional<CapacityType> c = ParseCapacityType(capacity);
        if (!c) {
          return absl::InvalidArgumentError(absl::StrCat(kWhat, ": default_capacity: ", capacity));
        }
        d.default_capacity = *c;
        if (auto it = doc.find("prices"); it != doc.end() && !it->is_null()) {
          if (!it->is_array()) {
            return absl::InvalidArgumentError(absl::StrCat(kWhat, ": prices: not a JSON array"));
          }
          for (size_t i = 0; i < it->size(); ++i) {
            const json& line = (*it)[i];
            const std::string what = absl::StrCat(kWhat, ": prices[", i, "]");
            if (!line.is_object()) {
              return absl::InvalidArgumentError(absl::StrCat(what, ": not a JSON object"));
            }
            PriceEntry e;
            e.gpu_model = line.value("gpu_model", "");
            e.mig_profile = line.value("mig_profile", "");
            const std::string name = line.value("capacity", "on-demand");
            std::optional<CapacityType> type = ParseCapacityType(name);
            if (!type) return absl::InvalidArgumentError(absl::StrCat(what, ".capacity: ", name));
            e.capacity = *type;
            ASSIGN_OR_RETURN(e.micros_per_hour, Int64Member(line, "micros_per_hour", what));
            ASSIGN_OR_RETURN(const int64_t from_us, Int64Member(line, "effective_from_us", what));
            e.effective_from = FromMicros(from_us);
            d.prices.push_back(std::move(e));
          }
        }
        if (auto it = doc.find("rtt_micros"); it != doc.end() && !it->is_null()) {
          if (!it->is_object()) {
            return absl::InvalidArgumentError(
                absl::StrCat(kWhat, ": rtt_micros: not a JSON object"));
          }
          for (const auto& [region, value] : it->items()) {
            ASSIGN_OR_RETURN(d.rtt_micros[region],
                             Int64Member(*it, region.c_str(), absl::StrCat(kWhat, ": rtt_micros")));
          }
        }
        return d;
      });
}

std::string StringsToJson(const std::vector<std::string>& values) { return Dump(json(values)); }

std::string ReasonFiguresToJson(const std::vector<ReasonFigure>& figures) {
  json out = json::object();
  for (const ReasonFigure& f : figures) {
    if (const int64_t* n = std::get_if<int64_t>(&f.value)) {
      out[f.name] = *n;
    } else {
      out[f.name] = std::get<std::string>(f.value);
    }
  }
  return Dump(out);
}

absl::StatusOr<std::vector<ReasonFigure>> ReasonFiguresFromJson(std::string_view text) {
  using Figures = std::vector<ReasonFigure>;
  return Decode<Figures>(
      "pending_reason_figures", text, [](const json& doc) -> absl::StatusOr<Figures> {
        if (!doc.is_object()) {
          return absl::InvalidArgumentError("pending_reason_figures: not a JSON object");
        }
        PendingReason r;  // Set keeps the figures sorted by name
        for (const auto& [name, value] : doc.items()) {
          if (value.is_number_integer()) {
            r.Set(name, value.get<int64_t>());
          } else if (value.is_string()) {
            r.Set(name, value.get<std::string>());
          } else {
            return absl::InvalidArgumentError(
                absl::StrCat("pending_reason_figures.", name, ": must be an integer or a string"));
          }
        }
        return std::move(r.figures);
      });
}

}  // namespace gpufed::storage
