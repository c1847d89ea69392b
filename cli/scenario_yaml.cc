#include "cli/scenario_yaml.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "cli/duration.h"
#include "cli/money.h"
#include "cli/workload_yaml.h"
#include "cli/yaml_util.h"
#include "federation/quota.h"
#include "federation/status_macros.h"
#include "federation/validation.h"
#include "yaml-cpp/yaml.h"

namespace gpufed::cli {
namespace {

constexpr size_t kMaxEntries = 1000;

absl::StatusOr<std::chrono::seconds> YamlSeconds(const YamlField& f) {
  ASSIGN_OR_RETURN(const std::string text, YamlString(f));
  absl::StatusOr<absl::Duration> d = ParseDuration(text);
  if (!d.ok()) return YamlError(f, d.status().message());
  if (*d < absl::ZeroDuration() || *d > absl::Hours(24 * 366)) {
    return YamlError(f, "must be between 0s and 366 days");
  }
  return std::chrono::seconds(absl::ToInt64Seconds(*d));
}

absl::StatusOr<double> YamlNumber(const YamlField& f) {
  ASSIGN_OR_RETURN(const std::string text, YamlString(f));
  double v = 0;
  if (!absl::SimpleAtod(text, &v) || v < 0 || v > 1e9) {
    return YamlError(
        f, absl::StrCat("expected a number from 0 to 1e9, got ", DescribeYamlValue(f.node)));
  }
  return v;
}

absl::StatusOr<int64_t> YamlWeight(const YamlField& f) {
  ASSIGN_OR_RETURN(const uint64_t w, YamlUint64(f));
  if (w < 1 || w > 1'000'000) return YamlError(f, "must be 1 to 1000000");
  return static_cast<int64_t>(w);
}

absl::Status ForEachListEntry(const YamlField& f,
                              const std::function<absl::Status(const YamlField&)>& visit) {
  if (!f.node.IsSequence()) {
    return YamlError(f, absl::StrCat("expected a list, got ", DescribeYamlValue(f.node)));
  }
  if (f.node.size() > kMaxEntries) return YamlError(f, "more than 1000 entries");
  for (size_t i = 0; i < f.node.size(); ++i) {
    RETURN_IF_ERROR(visit(YamlField{f.file, absl::StrCat(f.field, "[", i, "]"), f.node[i]}));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Quota>> ParseQuotas(const YamlField& f, const std::string& tenant,
                                               const std::string& project) {
  std::vector<Quota> out;
  RETURN_IF_ERROR(ForEachListEntry(f, [&](const YamlField& entry) {
    Quota q;
    q.key.tenant = tenant;
    q.key.project = project;
    RETURN_IF_ERROR(ForEachYamlField(
        entry, {"resource", "guaranteed", "limit"},
        [&](absl::string_view key, const YamlField& value) -> absl::Status {
          ASSIGN_OR_RETURN(const std::string text, YamlString(value));
          if (key == "resource") {
            q.key.resource = text;
          } else if (key == "guaranteed") {
            RETURN_IF_ERROR(ParseQuotaAmount(value.field, text, &q.guaranteed_milli));
          } else {
            int64_t limit = 0;
            RETURN_IF_ERROR(ParseQuotaAmount(value.field, text, &limit));
            q.limit_milli = limit;
          }
          return absl::OkStatus();
        }));
    if (absl::Status s = ValidateQuota(q); !s.ok()) return YamlError(entry, s.message());
    out.push_back(std::move(q));
    return absl::OkStatus();
  }));
  return out;
}

absl::Status ParseTenant(const YamlField& f, sim::Scenario& scenario) {
  sim::ScenarioTenant t;
  // Quotas are read once the tenant's name is known (it may come after them in the file).
  YamlField quotas_field;
  std::vector<YamlField> project_quotas;  // parallel to t.projects
  RETURN_IF_ERROR(ForEachYamlField(
      f, {"name", "weight", "quotas", "projects"},
      [&](absl::string_view key, const YamlField& value) -> absl::Status {
        if (key == "name") {
          ASSIGN_OR_RETURN(t.name, YamlString(value));
        } else if (key == "weight") {
          ASSIGN_OR_RETURN(t.weight, YamlWeight(value));
        } else if (key == "quotas") {
          quotas_field = value;  // read once the name is known
        } else {
          return ForEachListEntry(value, [&](const YamlField& entry) -> absl::Status {
            sim::ScenarioProject p;
            YamlField quotas_of_project;
            RETURN_IF_ERROR(
                ForEachYamlField(entry, {"name", "weight", "quotas"},
                                 [&](absl::string_view k, const YamlField& v) -> absl::Status {
                                   if (k == "name") {
                                     ASSIGN_OR_RETURN(p.name, YamlString(v));
                                   } else if (k == "weight") {
                                     ASSIGN_OR_RETURN(p.weight, YamlWeight(v));
                                   } else {
                                     quotas_of_project = v;
                                   }
                                   return absl::OkStatus();
                                 }));
            if (p.name.empty()) return YamlError(entry, "name: required");
            t.projects.push_back(std::move(p));
            project_quotas.push_back(quotas_of_project);
            return absl::OkStatus();
          });
        }
        return absl::OkStatus();
      }));
  if (t.name.empty()) return YamlError(f, "name: required");
  if (!quotas_field.node.IsNull()) {
    ASSIGN_OR_RETURN(t.quotas, ParseQuotas(quotas_field, t.name, ""));
  }
  for (size_t i = 0; i < t.projects.size(); ++i) {
    if (project_quotas[i].node.IsNull()) continue;
    ASSIGN_OR_RETURN(t.projects[i].quotas,
                     ParseQuotas(project_quotas[i], t.name, t.projects[i].name));
  }
  if (t.projects.empty()) t.projects.push_back(sim::ScenarioProject{"default", 1, {}});
  scenario.tenants.push_back(std::move(t));
  return absl::OkStatus();
}

// A cluster: its size and model; what its agent reports (provider, region, jurisdiction,
// compliance_labels); and what an admin declares (capacity, spot_nodes, prices per capacity type
// as decimal text, rtt per client region as durations).
absl::Status ParseCluster(const YamlField& entry, sim::Scenario& scenario) {
  sim::ScenarioCluster c;
  RETURN_IF_ERROR(ForEachYamlField(
      entry,
      {"name", "nodes", "gpus_per_node", "model", "provider", "region", "jurisdiction",
       "compliance_labels", "capacity", "spot_nodes", "prices", "rtt"},
      [&](absl::string_view k, const YamlField& v) -> absl::Status {
        if (k == "name") {
          ASSIGN_OR_RETURN(c.name, YamlString(v));
        } else if (k == "nodes") {
          ASSIGN_OR_RETURN(const uint32_t n, YamlUint32(v));
          if (n < 1 || n > 10000) return YamlError(v, "must be 1 to 10000");
          c.nodes = static_cast<int>(n);
        } else if (k == "gpus_per_node") {
          ASSIGN_OR_RETURN(const uint32_t n, YamlUint32(v));
          if (n < 1 || n > 64) return YamlError(v, "must be 1 to 64");
          c.gpus_per_node = static_cast<int>(n);
        } else if (k == "model") {
          ASSIGN_OR_RETURN(c.model, YamlString(v));
        } else if (k == "provider") {
          ASSIGN_OR_RETURN(c.provider, YamlString(v));
        } else if (k == "region") {
          ASSIGN_OR_RETURN(c.region, YamlString(v));
        } else if (k == "jurisdiction") {
          ASSIGN_OR_RETURN(c.jurisdiction, YamlString(v));
        } else if (k == "compliance_labels") {
          ASSIGN_OR_RETURN(c.compliance_labels, YamlStringList(v));
        } else if (k == "capacity") {
          ASSIGN_OR_RETURN(const std::string text, YamlString(v));
          std::optional<CapacityType> t = ParseCapacityType(text);
          if (!t) return YamlError(v, "expected on-demand, spot or committed");
          c.capacity = *t;
        } else if (k == "spot_nodes") {
          ASSIGN_OR_RETURN(const uint32_t n, YamlUint32(v));
          c.spot_nodes = static_cast<int>(n);
        } else if (k == "prices") {
          return ForEachYamlField(v, {"on-demand", "spot", "committed"},
                                  [&](absl::string_view type, const YamlField& p) -> absl::Status {
                                    ASSIGN_OR_RETURN(const std::string text, YamlString(p));
                                    absl::StatusOr<int64_t> micros = ParseMicros(text);
                                    if (!micros.ok())
                                      return YamlError(p, micros.status().message());
                                    c.price_micros[*ParseCapacityType(type)] = *micros;
                                    return absl::OkStatus();
                                  });
        } else {
          return ForEachYamlField(
              v, {}, [&](absl::string_view region, const YamlField& d) -> absl::Status {
                ASSIGN_OR_RETURN(const std::string text, YamlString(d));
                absl::StatusOr<absl::Duration> rtt = ParseDuration(text);
                if (!rtt.ok()) return YamlError(d, rtt.status().message());
                if (*rtt < absl::ZeroDuration() || *rtt > absl::Seconds(10)) {
                  return YamlError(d, "must be 0s to 10s");
                }
                c.rtt_micros[std::string(region)] = absl::ToInt64Microseconds(*rtt);
                return absl::OkStatus();
              });
        }
        return absl::OkStatus();
      }));
  if (c.name.empty()) return YamlError(entry, "name: required");
  if (c.spot_nodes > c.nodes) return YamlError(entry, "spot_nodes: more than nodes");
  scenario.clusters.push_back(std::move(c));
  return absl::OkStatus();
}

absl::Status ParseStream(const YamlField& f, sim::Scenario& scenario) {
  sim::ScenarioStream s;
  RETURN_IF_ERROR(ForEachYamlField(
      f,
      {"tenant", "project", "count", "per_hour", "start", "end", "gpus", "replicas", "duration",
       "fixed_duration", "priority", "checkpoint_every", "placement"},
      [&](absl::string_view key, const YamlField& value) -> absl::Status {
        if (key == "tenant") {
          ASSIGN_OR_RETURN(s.tenant, YamlString(value));
        } else if (key == "project") {
          ASSIGN_OR_RETURN(s.project, YamlString(value));
        } else if (key == "count") {
          ASSIGN_OR_RETURN(const uint32_t n, YamlUint32(value));
          if (n > 1'000'000) return YamlError(value, "at most 1000000");
          s.count = n;
        } else if (key == "per_hour") {
          ASSIGN_OR_RETURN(s.per_hour, YamlNumber(value));
        } else if (key == "start") {
          ASSIGN_OR_RETURN(s.start, YamlSeconds(value));
        } else if (key == "end") {
          ASSIGN_OR_RETURN(s.end, YamlSeconds(value));
        } else if (key == "gpus") {
          ASSIGN_OR_RETURN(const std::vector<std::string> sizes, YamlStringList(value));
          s.gpus.clear();
          for (const std::string& size : sizes) {
            uint32_t g = 0;
            if (!absl::SimpleAtoi(size, &g) || g < 1 || g > 64) {
              return YamlError(value, absl::StrCat("\"", size, "\" is not 1 to 64 GPUs"));
            }
            s.gpus.push_back(g);
          }
          if (s.gpus.empty()) return YamlError(value, "at least one size");
        } else if (key == "replicas") {
          ASSIGN_OR_RETURN(s.replicas, YamlUint32(value));
          if (s.replicas < 1 || s.replicas > 64) return YamlError(value, "must be 1 to 64");
        } else if (key == "duration") {
          ASSIGN_OR_RETURN(s.duration, YamlSeconds(value));
          if (s.duration.count() < 1) return YamlError(value, "at least 1s");
        } else if (key == "fixed_duration") {
          ASSIGN_OR_RETURN(const std::string text, YamlString(value));
          if (text != "true" && text != "false") return YamlError(value, "expected true or false");
          s.fixed_duration = text == "true";
        } else if (key == "checkpoint_every") {
          ASSIGN_OR_RETURN(s.checkpoint_every, YamlSeconds(value));
        } else if (key == "placement") {
          v1::PlacementConstraints proto;
          RETURN_IF_ERROR(ParsePlacement(value, proto));
          absl::StatusOr<PlacementConstraints> rules = api::PlacementFromProto("placement", proto);
          if (!rules.ok()) return YamlError(value, rules.status().message());
          if (absl::Status valid = ValidatePlacement(*rules); !valid.ok()) {
            return YamlError(value, valid.message());
          }
          s.placement = *std::move(rules);
        } else {
          ASSIGN_OR_RETURN(s.priority, YamlInt32(value));
        }
        return absl::OkStatus();
      }));
  if (s.tenant.empty()) return YamlError(f, "tenant: required");
  if ((s.count > 0) == (s.per_hour > 0)) return YamlError(f, "one of count and per_hour");
  scenario.streams.push_back(std::move(s));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<sim::Scenario> ParseScenario(absl::string_view file, const std::string& text) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    const std::string where =
        e.mark.is_null() ? std::string(file) : absl::StrCat(file, ":", e.mark.line + 1);
    return absl::InvalidArgumentError(absl::StrCat(where, ": invalid YAML: ", e.msg));
  }
  sim::Scenario scenario;
  const YamlField doc{file, "", root};
  RETURN_IF_ERROR(ForEachYamlField(
      doc,
      {"name", "seed", "cycle", "duration", "warmup", "half_life", "stop_grace",
       "reclaim_min_runtime", "reborrow_backoff", "starvation_bound", "clusters", "tenants",
       "streams", "compare_objectives"},
      [&](absl::string_view key, const YamlField& value) -> absl::Status {
        if (key == "name") {
          ASSIGN_OR_RETURN(scenario.name, YamlString(value));
        } else if (key == "seed") {
          ASSIGN_OR_RETURN(scenario.seed, YamlUint64(value));
        } else if (key == "cycle") {
          ASSIGN_OR_RETURN(scenario.cycle, YamlSeconds(value));
          if (scenario.cycle.count() < 1) return YamlError(value, "at least 1s");
        } else if (key == "duration") {
          ASSIGN_OR_RETURN(scenario.duration, YamlSeconds(value));
        } else if (key == "warmup") {
          ASSIGN_OR_RETURN(scenario.warmup, YamlSeconds(value));
        } else if (key == "half_life") {
          ASSIGN_OR_RETURN(scenario.half_life, YamlSeconds(value));
          if (scenario.half_life.count() < 1) return YamlError(value, "at least 1s");
        } else if (key == "stop_grace") {
          ASSIGN_OR_RETURN(scenario.stop_grace, YamlSeconds(value));
        } else if (key == "reclaim_min_runtime") {
          ASSIGN_OR_RETURN(scenario.reclaim_min_runtime, YamlSeconds(value));
        } else if (key == "reborrow_backoff") {
          ASSIGN_OR_RETURN(scenario.reborrow_backoff, YamlSeconds(value));
        } else if (key == "starvation_bound") {
          ASSIGN_OR_RETURN(scenario.starvation_bound, YamlSeconds(value));
        } else if (key == "clusters") {
          return ForEachListEntry(value,
                                  [&](const YamlField& e) { return ParseCluster(e, scenario); });
        } else if (key == "compare_objectives") {
          ASSIGN_OR_RETURN(scenario.compare_objectives, YamlBool(value));
        } else if (key == "tenants") {
          return ForEachListEntry(value,
                                  [&](const YamlField& e) { return ParseTenant(e, scenario); });
        } else {
          return ForEachListEntry(value,
                                  [&](const YamlField& e) { return ParseStream(e, scenario); });
        }
        return absl::OkStatus();
      }));
  if (scenario.clusters.empty()) return YamlError(doc, "clusters: at least one");
  for (sim::ScenarioStream& s : scenario.streams) {
    if (s.project.empty()) s.project = "default";
  }
  return scenario;
}

}  // namespace gpufed::cli
