#ifndef GPUFED_CLI_CLUSTERS_YAML_H_
#define GPUFED_CLI_CLUSTERS_YAML_H_

// The clusters file of `gpufedctl apply -f` (docs/cli.md, "apply"): what a platform admin
// declares about clusters — attributes, price book, round-trip times — read into
// ClusterDeclarations.
//
//   clusters:
//     - name: onprem-dgx
//       provider: onprem
//       region: eu-central
//       zone: fra-dc1
//       jurisdiction: de
//       compliance_labels: [gdpr, sovereign]   # [] declares "none"; left out: the agent's
//       default_capacity: committed            # on-demand | spot | committed
//       prices:
//         - model: H100-80GB
//           mig_profile: 3g.40gb               # optional: the price of one MIG instance
//           capacity: committed
//           per_hour: "0.00"                   # decimal, at most 6 decimals; exact
//           effective_from: 2026-01-01T00:00:00Z
//       latency:                               # round-trip time from client regions
//         eu-west: 12ms
//
// As in the workload format (workload_yaml.h), this layer checks only what cannot be
// represented: types, unknown or duplicate keys, unparsable prices, times and durations, enum
// names, missing required fields (a cluster's name; a price line's model, capacity, per_hour and
// effective_from) and a cluster named twice. What the names may be, which models and profiles
// exist and the ranges are the server's to judge; its INVALID_ARGUMENT names the field
// ("declarations[1].prices[0].gpu_model"), which PointAtFile maps back to a line of the file.
//
// Errors are INVALID_ARGUMENT "<file>:<line>: <field>: <problem>", e.g.
//   clusters.yaml:14: clusters[1].prices[0].capacity: expected one of on-demand, spot,
//   committed, got "reserved"
//
// Thread safety: stateless functions.

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gpufed/v1/cluster_service.pb.h"

namespace gpufed::cli {

struct ClustersFile {
  // In file order.
  std::vector<v1::ClusterDeclaration> declarations;
  // Where each part came from, by the server's name for it: "declarations[1]",
  // "declarations[1].prices[0]", "declarations[1].prices[0].capacity_type",
  // "declarations[1].client_rtts[eu-west]" -> "clusters.yaml:14".
  std::map<std::string, std::string> origins;
};

// Parses `text`; `file_name` is used only in messages. INVALID_ARGUMENT when the text is not
// valid YAML, declares no cluster, or has an error (the first is reported).
absl::StatusOr<ClustersFile> ParseClustersYaml(absl::string_view text, absl::string_view file_name);

// Reads and parses the file at `path` (named as given in messages). Errors as ReadTextFile
// (read_file.h) or ParseClustersYaml.
absl::StatusOr<ClustersFile> LoadClustersFile(const std::string& path);

// A server error about the request made from `file`, prefixed with the line of the part it
// names ("clusters.yaml:14: declarations[1].prices[0].capacity_type: ..."); unchanged when it
// names none.
absl::Status PointAtFile(const ClustersFile& file, const absl::Status& status);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_CLUSTERS_YAML_H_
