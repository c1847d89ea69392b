#include "cli/workload_yaml.h"

#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/duration.h"
#include "cli/enum_names.h"
#include "cli/money.h"
#include "cli/read_file.h"
#include "cli/yaml_util.h"
#include "federation/status_macros.h"

namespace gpufed::cli {
namespace {

const std::vector<absl::string_view>& SpecFields() {
  static const auto* fields = new std::vector<absl::string_view>{"name",
                                                                 "tenant",
                                                                 "project",
                                                                 "class",
                                                                 "priority",
                                                                 "replicas",
                                                                 "gpus_per_replica",
                                                                 "mig_profile",
                                                                 "gpu_milli",
                                                                 "cpu_millis",
                                                                 "memory_mib",
                                                                 "gpu_models",
                                                                 "min_gpu_memory_mib",
                                                                 "topology",
                                                                 "duration",
                                                                 "checkpoint_every",
                                                                 "idempotency_key",
                                                                 "retry",
                                                                 "placement",
                                                                 "run"};
  return *fields;
}

const std::vector<absl::string_view>& RunFields() {
  static const auto* fields =
      new std::vector<absl::string_view>{"image", "command", "env", "sim_outcome", "sim_exit_code"};
  return *fields;
}

// Reads an enum by its short name (enum_names.h).
template <typename Enum>
absl::StatusOr<Enum> YamlEnum(const YamlField& f, std::optional<Enum> (*parse)(absl::string_view),
                              const std::vector<std::string>& names) {
  ASSIGN_OR_RETURN(const std::string text, YamlString(f));
  const std::optional<Enum> value = parse(text);
  if (!value.has_value()) {
    return YamlError(f, absl::StrCat("expected one of ", absl::StrJoin(names, ", "), ", got ",
                                     DescribeYamlValue(f.node)));
  }
  return *value;
}

absl::StatusOr<google::protobuf::Duration> YamlDuration(const YamlField& f) {
  ASSIGN_OR_RETURN(const std::string text, YamlString(f));
  absl::StatusOr<absl::Duration> d = ParseDuration(text);
  if (!d.ok()) return YamlError(f, d.status().message());
  absl::StatusOr<google::protobuf::Duration> proto = DurationToProto(*d);
  if (!proto.ok()) return YamlError(f, proto.status().message());
  return *std::move(proto);
}

absl::Status ParseEnv(const YamlField& f, v1::RunSpec& run) {
  return ForEachYamlField(f, /*known=*/{}, [&](absl::string_view key, const YamlField& value) {
    // Environment values are strings to the process; an unquoted 3 means "3".
    ASSIGN_OR_RETURN(std::string text, YamlString(value));
    (*run.mutable_env())[std::string(key)] = std::move(text);
    return absl::OkStatus();
  });
}

absl::Status ParseRun(const YamlField& f, v1::RunSpec& run) {
  return ForEachYamlField(f, RunFields(), [&](absl::string_view key, const YamlField& value) {
    if (key == "image") {
      ASSIGN_OR_RETURN(*run.mutable_image(), YamlString(value));
    } else if (key == "command") {
      ASSIGN_OR_RETURN(const std::vector<std::string> command, YamlStringList(value));
      run.mutable_command()->Assign(command.begin(), command.end());
    } else if (key == "env") {
      RETURN_IF_ERROR(ParseEnv(value, run));
    } else if (key == "sim_outcome") {
      ASSIGN_OR_RETURN(const v1::SimOutcome outcome,
                       YamlEnum<v1::SimOutcome>(value, ParseSimOutcome, SimOutcomeNames()));
      run.set_sim_outcome(outcome);
    } else if (key == "sim_exit_code") {
      ASSIGN_OR_RETURN(const int32_t code, YamlInt32(value));
      run.set_sim_exit_code(code);
    }
    return absl::OkStatus();
  });
}

// retry: {max_attempts: 3, on: [cluster_lost, preemption, node_failure]}
absl::Status ParseRetry(const YamlField& f, v1::RetryPolicy& retry) {
  static const auto* fields = new std::vector<absl::string_view>{"max_attempts", "on"};
  return ForEachYamlField(f, *fields, [&](absl::string_view key, const YamlField& value) {
    if (key == "max_attempts") {
      ASSIGN_OR_RETURN(const uint32_t n, YamlUint32(value));
      retry.set_max_attempts(n);
    } else if (key == "on") {
      ASSIGN_OR_RETURN(const std::vector<std::string> names, YamlStringList(value));
      for (const std::string& name : names) {
        const std::optional<v1::RetryOn> on = ParseRetryOn(name);
        if (!on.has_value()) {
          return YamlError(value,
                           absl::StrCat("expected one of ", absl::StrJoin(RetryOnNames(), ", "),
                                        ", got \"", name, "\""));
        }
        retry.add_on(*on);
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace

// placement: {jurisdictions: [eu], objective: cost, max_price_per_gpu_hour: "4.00", ...}
absl::Status ParsePlacement(const YamlField& f, v1::PlacementConstraints& placement) {
  static const auto* fields = new std::vector<absl::string_view>{
      "jurisdictions",   "compliance_labels",      "providers",       "regions",   "clusters",
      "denied_clusters", "max_price_per_gpu_hour", "spot_tolerated",  "objective", "client_region",
      "max_rtt",         "min_driver_version",     "min_cuda_version"};
  const auto list = [](const YamlField& value,
                       google::protobuf::RepeatedPtrField<std::string>* out) -> absl::Status {
    ASSIGN_OR_RETURN(const std::vector<std::string> names, YamlStringList(value));
    out->Assign(names.begin(), names.end());
    return absl::OkStatus();
  };
  return ForEachYamlField(f, *fields, [&](absl::string_view key, const YamlField& value) {
    if (key == "jurisdictions") {
      RETURN_IF_ERROR(list(value, placement.mutable_jurisdictions()));
    } else if (key == "compliance_labels") {
      RETURN_IF_ERROR(list(value, placement.mutable_compliance_labels()));
    } else if (key == "providers") {
      RETURN_IF_ERROR(list(value, placement.mutable_providers()));
    } else if (key == "regions") {
      RETURN_IF_ERROR(list(value, placement.mutable_regions()));
    } else if (key == "clusters") {
      RETURN_IF_ERROR(list(value, placement.mutable_clusters()));
    } else if (key == "denied_clusters") {
      RETURN_IF_ERROR(list(value, placement.mutable_denied_clusters()));
    } else if (key == "max_price_per_gpu_hour") {
      // "4.00" or 4.00: the decimal text, read exactly (money.h).
      ASSIGN_OR_RETURN(const std::string text, YamlString(value));
      absl::StatusOr<int64_t> micros = ParseMicros(text);
      if (!micros.ok()) return YamlError(value, micros.status().message());
      placement.set_max_price_per_gpu_hour_micros(*micros);
    } else if (key == "spot_tolerated") {
      ASSIGN_OR_RETURN(const bool tolerated, YamlBool(value));
      placement.set_spot_tolerated(tolerated);
    } else if (key == "objective") {
      ASSIGN_OR_RETURN(const v1::Objective o,
                       YamlEnum<v1::Objective>(value, ParseObjective, ObjectiveNames()));
      placement.set_objective(o);
    } else if (key == "client_region") {
      ASSIGN_OR_RETURN(*placement.mutable_client_region(), YamlString(value));
    } else if (key == "min_driver_version") {
      ASSIGN_OR_RETURN(*placement.mutable_min_driver_version(), YamlString(value));
    } else if (key == "min_cuda_version") {
      ASSIGN_OR_RETURN(*placement.mutable_min_cuda_version(), YamlString(value));
    } else if (key == "max_rtt") {
      ASSIGN_OR_RETURN(*placement.mutable_max_rtt(), YamlDuration(value));
      if (placement.max_rtt().nanos() % 1000 != 0) {
        return YamlError(value, "must be a whole number of microseconds");
      }
    }
    return absl::OkStatus();
  });
}

namespace {

absl::StatusOr<v1::WorkloadSpec> ParseSpec(const YamlField& doc) {
  v1::WorkloadSpec spec;
  // What the replica takes of the GPUs is one proto oneof: whole GPUs, a MIG profile or a
  // share. Each is remembered with where it was written, to point at a clash.
  std::optional<YamlField> gpus_field;
  uint32_t gpus = 1;
  std::optional<YamlField> mig_field;
  std::optional<YamlField> milli_field;
  RETURN_IF_ERROR(
      ForEachYamlField(doc, SpecFields(), [&](absl::string_view key, const YamlField& value) {
        if (key == "name") {
          ASSIGN_OR_RETURN(*spec.mutable_name(), YamlString(value));
        } else if (key == "tenant") {
          ASSIGN_OR_RETURN(*spec.mutable_tenant(), YamlString(value));
        } else if (key == "project") {
          ASSIGN_OR_RETURN(*spec.mutable_project(), YamlString(value));
        } else if (key == "class") {
          ASSIGN_OR_RETURN(
              const v1::WorkloadClass c,
              YamlEnum<v1::WorkloadClass>(value, ParseWorkloadClass, WorkloadClassNames()));
          spec.set_workload_class(c);
        } else if (key == "priority") {
          ASSIGN_OR_RETURN(const int32_t priority, YamlInt32(value));
          spec.set_priority(priority);
        } else if (key == "replicas") {
          ASSIGN_OR_RETURN(const uint32_t replicas, YamlUint32(value));
          spec.set_replicas(replicas);
        } else if (key == "gpus_per_replica") {
          ASSIGN_OR_RETURN(gpus, YamlUint32(value));
          gpus_field = value;
        } else if (key == "mig_profile") {
          ASSIGN_OR_RETURN(const std::string profile, YamlString(value));
          spec.mutable_per_replica()->set_mig_profile(profile);
          mig_field = value;
        } else if (key == "gpu_milli") {
          ASSIGN_OR_RETURN(const uint32_t milli, YamlUint32(value));
          spec.mutable_per_replica()->set_gpu_milli(milli);
          milli_field = value;
        } else if (key == "cpu_millis") {
          ASSIGN_OR_RETURN(const uint64_t cpu, YamlUint64(value));
          spec.mutable_per_replica()->set_cpu_millis(cpu);
        } else if (key == "memory_mib") {
          ASSIGN_OR_RETURN(const uint64_t mib, YamlUint64(value));
          spec.mutable_per_replica()->set_memory_mib(mib);
        } else if (key == "gpu_models") {
          ASSIGN_OR_RETURN(const std::vector<std::string> models, YamlStringList(value));
          spec.mutable_gpu_models()->Assign(models.begin(), models.end());
        } else if (key == "min_gpu_memory_mib") {
          ASSIGN_OR_RETURN(const uint64_t mib, YamlUint64(value));
          spec.set_min_gpu_memory_mib(mib);
        } else if (key == "topology") {
          ASSIGN_OR_RETURN(
              const v1::TopologyRequirement t,
              YamlEnum<v1::TopologyRequirement>(value, ParseTopology, TopologyNames()));
          spec.set_topology(t);
        } else if (key == "duration") {
          ASSIGN_OR_RETURN(*spec.mutable_estimated_duration(), YamlDuration(value));
        } else if (key == "checkpoint_every") {
          ASSIGN_OR_RETURN(*spec.mutable_checkpoint_interval(), YamlDuration(value));
        } else if (key == "idempotency_key") {
          ASSIGN_OR_RETURN(*spec.mutable_idempotency_key(), YamlString(value));
        } else if (key == "retry") {
          RETURN_IF_ERROR(ParseRetry(value, *spec.mutable_retry()));
        } else if (key == "placement") {
          RETURN_IF_ERROR(ParsePlacement(value, *spec.mutable_placement()));
        } else if (key == "run") {
          RETURN_IF_ERROR(ParseRun(value, *spec.mutable_run()));
        }
        return absl::OkStatus();
      }));
  if (mig_field.has_value() && milli_field.has_value()) {
    const YamlField& later =
        YamlLine(mig_field->node) > YamlLine(milli_field->node) ? *mig_field : *milli_field;
    return YamlError(later, "give either mig_profile or gpu_milli, not both");
  }
  const std::optional<YamlField>& share = mig_field.has_value() ? mig_field : milli_field;
  if (share.has_value()) {
    // A MIG instance or a share is part of one GPU; gpus_per_replica: 1 says the same thing.
    if (gpus_field.has_value() && gpus != 1) {
      return YamlError(*gpus_field, absl::StrCat("must be 1 (or left out) with ", share->field,
                                                 ": a replica takes part of one GPU"));
    }
  } else {
    spec.mutable_per_replica()->set_gpus(gpus);
  }
  return spec;
}

}  // namespace

absl::StatusOr<std::vector<WorkloadDocument>> ParseWorkloadYaml(absl::string_view text,
                                                                absl::string_view file_name) {
  ASSIGN_OR_RETURN(const std::vector<YAML::Node> nodes, LoadYamlDocuments(text, file_name));
  std::vector<WorkloadDocument> docs;
  for (const YAML::Node& node : nodes) {
    if (node.IsNull()) continue;  // "---" with nothing after it, or a comment-only document.
    const YamlField doc{file_name, "", node};
    ASSIGN_OR_RETURN(v1::WorkloadSpec spec, ParseSpec(doc));
    docs.push_back(WorkloadDocument{std::move(spec), absl::StrCat(file_name, ":", YamlLine(node))});
  }
  if (docs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file_name, ": no workload in the file"));
  }
  return docs;
}

absl::StatusOr<std::vector<WorkloadDocument>> LoadWorkloadFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  return ParseWorkloadYaml(text, path);
}

}  // namespace gpufed::cli
