#ifndef GPUFED_SIM_OPENB_H_
#define GPUFED_SIM_OPENB_H_

// Reader for the openb trace format of the Alibaba GPU cluster trace (v2023) that the FGD paper
// (Weng et al., USENIX ATC '23) evaluates on; data/traces/alibaba-gpu-v2023/README.md describes
// it. Two CSV files with a header row, parsed with libcsv; columns are found by name, so their
// order does not matter and unknown columns are ignored:
//
//   nodes: sn,cpu_milli,memory_mib,gpu,model
//   pods:  name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
//          creation_time,deletion_time,scheduled_time]
//
// The multigpu* pod lists carry only the first five pod columns. `nan` or an empty cell means
// "none" in model, gpu_spec and the times.
//
// Errors are INVALID_ARGUMENT and start with "<origin>:<line>: column <n> (<name>): ..." for a
// bad cell, "<origin>:<line>: ..." for a bad row; NOT_FOUND for a missing file.
//
// Thread safety: stateless functions.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpufed::sim {

struct OpenbNode {
  std::string sn;  // node name
  uint64_t cpu_milli = 0;
  uint64_t memory_mib = 0;
  uint32_t gpus = 0;
  std::string model;  // empty for a node without GPUs
  int line = 0;       // where it came from, for messages
};

struct OpenbPod {
  std::string name;
  uint64_t cpu_milli = 0;
  uint64_t memory_mib = 0;
  uint32_t num_gpu = 0;
  // Per GPU, in milli-GPUs (1..1000); a pod with num_gpu == 1 and gpu_milli < 1000 shares a GPU.
  uint32_t gpu_milli = 0;
  // Allowed GPU models as listed (duplicates kept: the authors' simulator groups typical pods by
  // the raw list); empty: any.
  std::vector<std::string> gpu_spec;
  std::string qos;
  std::string pod_phase;
  // Seconds from the trace's start; unset when the column is absent or the cell empty.
  std::optional<int64_t> creation_time;
  std::optional<int64_t> deletion_time;
  std::optional<int64_t> scheduled_time;
  int line = 0;

  // Requested milli-GPUs: num_gpu x gpu_milli for a share, num_gpu x 1000 otherwise.
  [[nodiscard]] uint64_t GpuMilli() const;
  [[nodiscard]] bool SharesGpu() const { return num_gpu == 1 && gpu_milli > 0 && gpu_milli < 1000; }
};

// Parses CSV text; `origin` names it in errors (usually the file path). Rejects a missing
// required column, a row with the wrong number of cells, a cell that is not a non-negative
// integer where one is required, a GPU node without a model, a duplicate node name, gpu_milli
// outside 0..1000 (or 0 for a pod with GPUs), and a deletion before the creation.
absl::StatusOr<std::vector<OpenbNode>> ParseOpenbNodes(absl::string_view text,
                                                       absl::string_view origin);
absl::StatusOr<std::vector<OpenbPod>> ParseOpenbPods(absl::string_view text,
                                                     absl::string_view origin);

// Reads and parses a file.
absl::StatusOr<std::vector<OpenbNode>> ReadOpenbNodes(const std::string& path);
absl::StatusOr<std::vector<OpenbPod>> ReadOpenbPods(const std::string& path);

}  // namespace gpufed::sim

#endif  // GPUFED_SIM_OPENB_H_
