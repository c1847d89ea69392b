#ifndef GPUFED_CLI_SCENARIO_YAML_H_
#define GPUFED_CLI_SCENARIO_YAML_H_

// The scenario file of `gpufedctl sim run` (docs/scenarios.md) -> sim::Scenario. Errors are
// INVALID_ARGUMENT "<file>:<line>: <field>: <what>", as for workload files (yaml_util.h).
// Bounded: at most 10 MiB of text (read_file.h), 1,000 clusters, tenants and streams each.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sim/scenario.h"

namespace gpufed::cli {

absl::StatusOr<sim::Scenario> ParseScenario(absl::string_view file, const std::string& text);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_SCENARIO_YAML_H_
