// The simulator's openb trace reader (sim/openb.h): the same text as a node list and as a pod
// list, and what the replay makes of the rows it accepts (sim/trace_pool.h).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "sim/openb.h"
#include "sim/trace_pool.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gpufed::fuzz::Check;
  using gpufed::fuzz::OkOrInvalid;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<gpufed::sim::OpenbNode>> nodes =
      gpufed::sim::ParseOpenbNodes(text, "nodes.csv");
  if (OkOrInvalid(nodes.status(), "ParseOpenbNodes")) {
    const gpufed::Cluster cluster = gpufed::sim::ClusterOf(*nodes);
    Check(cluster.nodes.size() == nodes->size(), "ClusterOf lost a node");
  }
  absl::StatusOr<std::vector<gpufed::sim::OpenbPod>> pods =
      gpufed::sim::ParseOpenbPods(text, "pods.csv");
  if (OkOrInvalid(pods.status(), "ParseOpenbPods")) {
    for (const gpufed::sim::OpenbPod& pod : *pods) {
      Check(pod.gpu_milli <= 1000, "ParseOpenbPods accepted gpu_milli > 1000");
      (void)pod.GpuMilli();
      (void)gpufed::sim::SpecOf(pod);
    }
  }
  return 0;
}
