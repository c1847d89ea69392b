// gpufedctl apply's clusters file (cli/clusters_yaml.h). What it reads becomes an ApplyClusters
// request, which then goes through what the server does with it (rpc_checks.h); a refusal is
// pointed back at the file as `gpufedctl apply` does.

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "cli/clusters_yaml.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpufed::cli::ClustersFile> file =
      gpufed::cli::ParseClustersYaml(text, "fuzz.yaml");
  if (!gpufed::fuzz::OkOrInvalid(file.status(), "ParseClustersYaml")) return 0;
  gpufed::fuzz::Check(!file->declarations.empty(), "ParseClustersYaml accepted no cluster");
  gpufed::v1::ApplyClustersRequest request;
  for (const gpufed::v1::ClusterDeclaration& d : file->declarations) {
    *request.add_declarations() = d;
  }
  const absl::Status refused = gpufed::fuzz::CheckApplyClusters(request);
  if (!refused.ok()) {
    gpufed::fuzz::OkOrInvalid(gpufed::cli::PointAtFile(*file, refused), "PointAtFile");
  }
  return 0;
}
