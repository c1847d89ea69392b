// The agent's topology file (agent/topology.h). What the parser accepts the agent sends as its
// Register, so it must pass the server's checks too (the parser promises the same rules).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "agent/topology.h"
#include "gpufed/v1/agent_service.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_checks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gpufed::fuzz::Check;
  const std::string_view yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<gpufed::agent::ClusterTopology> topology =
      gpufed::agent::ParseClusterTopology(yaml, "fuzz.yaml");
  if (gpufed::fuzz::OkOrInvalid(topology.status(), "ParseClusterTopology")) {
    gpufed::v1::Register r;
    r.set_cluster(topology->cluster);
    *r.mutable_info() = topology->info;
    *r.mutable_inventory() = topology->inventory;
    const absl::Status accepted = gpufed::fuzz::CheckRegister(r);
    Check(accepted.ok(),
          absl::StrCat("the server refuses a topology the agent accepted: ", accepted.ToString()));
    Check(gpufed::agent::CountGpus(topology->inventory) >= 0, "CountGpus < 0");
  }
  // With a node the agent discovers: the file may leave that node's GPUs out.
  gpufed::agent::TopologyOptions options;
  options.discovered_node = "node-01";
  gpufed::fuzz::OkOrInvalid(
      gpufed::agent::ParseClusterTopology(yaml, "fuzz.yaml", options).status(),
      "ParseClusterTopology(discovered_node)");
  return 0;
}
