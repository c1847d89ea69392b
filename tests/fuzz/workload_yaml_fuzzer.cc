// gpufedctl's workload YAML (cli/workload_yaml.h). Every document read becomes a Submit, so each
// accepted spec then goes through what the server does with it (rpc_checks.h).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "cli/workload_yaml.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<gpufed::cli::WorkloadDocument>> docs =
      gpufed::cli::ParseWorkloadYaml(text, "fuzz.yaml");
  if (!gpufed::fuzz::OkOrInvalid(docs.status(), "ParseWorkloadYaml")) return 0;
  gpufed::fuzz::Check(!docs->empty(), "ParseWorkloadYaml accepted a file without a workload");
  for (const gpufed::cli::WorkloadDocument& doc : *docs) gpufed::fuzz::CheckSpec(doc.spec);
  return 0;
}
