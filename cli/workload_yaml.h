#ifndef GPUFED_CLI_WORKLOAD_YAML_H_
#define GPUFED_CLI_WORKLOAD_YAML_H_

// The workload YAML format of docs/interfaces.md ("Workload YAML") read into WorkloadSpecs.
//
// A file holds one or more YAML documents separated by `---`, one workload each; empty
// documents are skipped. What this layer checks is only what cannot be represented in a
// WorkloadSpec: wrong types, negative numbers for unsigned fields, numbers out of range,
// unparsable durations and prices, unknown enum names, and unknown or duplicate keys (so a typo
// never silently vanishes). Everything semantic (name rules, GPU model names, counts, priority
// range) is the server's to judge; it answers INVALID_ARGUMENT naming the field.
//
// Defaults applied here: `gpus_per_replica` absent means 1 (the API requires a per-replica
// request). `mig_profile` or `gpu_milli` replace it (at most one of them; gpus_per_replica may
// then only be 1), and `cpu_millis` / `memory_mib` go with any of them. A key with no value
// (`tenant:`) reads as absent. Tenant, project and idempotency key stay empty when absent; the
// submit command fills them (commands.h).
//
// Errors are INVALID_ARGUMENT "<file>:<line>: <field>: <problem>", e.g.
//   train.yaml:7: replicas: expected a non-negative integer, got "two"
//
// Thread safety: stateless functions.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/yaml_util.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::cli {

// One workload read from a file.
struct WorkloadDocument {
  v1::WorkloadSpec spec;
  // "<file>:<line>" of the document's first key, to point at it in later errors.
  std::string origin;
};

// Parses `text`; `file_name` is used only in messages. INVALID_ARGUMENT when the text is not
// valid YAML, holds no workload, or any document has an error (the first is reported).
absl::StatusOr<std::vector<WorkloadDocument>> ParseWorkloadYaml(absl::string_view text,
                                                                absl::string_view file_name);

// Reads and parses the file at `path` (named as given in messages). Errors as ReadTextFile
// (read_file.h) or ParseWorkloadYaml.
absl::StatusOr<std::vector<WorkloadDocument>> LoadWorkloadFile(const std::string& path);

// A `placement:` block (jurisdictions, compliance_labels, providers, regions, clusters,
// denied_clusters, max_price_per_gpu_hour, spot_tolerated, objective, client_region, max_rtt)
// into `placement`; INVALID_ARGUMENT naming the file, line and key. Scenario streams use it too.
absl::Status ParsePlacement(const YamlField& f, v1::PlacementConstraints& placement);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_WORKLOAD_YAML_H_
