#ifndef GPUFED_AGENT_GPU_HEALTH_H_
#define GPUFED_AGENT_GPU_HEALTH_H_

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::agent {

// GPU health from the GPUs' own tools (docs/agent.md, "GPU health"). The agent runs a probe
// command every interval and reads two things from its output:
//
// - nvidia-smi's CSV with a header line, e.g.
//   `nvidia-smi --query-gpu=uuid,pci.bus_id,ecc.errors.uncorrected.volatile.total,
//   remapped_rows.pending --format=csv,nounits`. `uuid` is required; every other column is
//   optional. A GPU is failed when a value reads as an error (`[GPU requires reset]`,
//   `[Unknown Error]`, `ERR!`), when it has uncorrected ECC errors, or rows or pages pending
//   remapping or retirement; and a GPU of a node the probe did report on that is missing from the
//   list has fallen off the bus (nvidia-smi no longer lists it).
// - kernel log lines of the NVIDIA driver, `NVRM: Xid (PCI:0000:3b:00): 79, ...` (e.g. from
//   `journalctl -k --since -2min -o cat` in the same command), matched to a GPU by the
//   `pci.bus_id` column: an XID that NVIDIA's catalog answers with a GPU reset, a reboot or a
//   drain (XidCallsForDrain) fails that GPU.

// One row of the probe's CSV.
struct ProbedGpu {
  std::string uuid;
  std::string pci_bus;  // normalised (NormalizePciBus); empty when the column is absent
  std::string problem;  // why the row shows the GPU failed; empty: fine
};

// One driver XID line.
struct XidEvent {
  std::string pci_bus;  // normalised
  int xid = 0;
};

struct GpuProbe {
  std::vector<ProbedGpu> gpus;
  std::vector<XidEvent> xids;
};

// "00000000:3B:00.0" (nvidia-smi) and "0000:3b:00" (the driver's XID lines) both become
// "0000:3b:00": domain as four hex digits, bus and device, lower case, no function.
std::string NormalizePciBus(absl::string_view bus);

// Parses a probe's output. INVALID_ARGUMENT when there is no CSV header with a `uuid` column or
// a row does not have the header's number of columns; lines that are neither CSV rows nor XID
// lines (blank, nvidia-smi's own warnings) are skipped.
absl::StatusOr<GpuProbe> ParseGpuProbe(absl::string_view output);

// True for the XIDs NVIDIA's catalog answers with a GPU reset, a node reboot or a drain
// (46, 48, 62, 64, 74, 79, 95, 109, 110, 119, 120, 136, 140, 143, 144–151, 155, 156, 158);
// false for application errors (13, 31, 43, 45, 68), contained errors (94) and the informational
// ones (63, 92, 154).
bool XidCallsForDrain(int xid);

// What `probe` says about the GPUs of `inventory`, by uuid: the reason each failed one failed.
// Only GPUs of nodes the probe reported on are judged (a node none of whose GPUs is listed was
// not reached by this probe, which is not evidence against it).
absl::flat_hash_map<std::string, std::string> FailedGpus(const GpuProbe& probe,
                                                         const v1::Inventory& inventory);

// Runs `command` with /bin/sh -c in a process group of its own; its stdout, at most `max_bytes`.
// DEADLINE_EXCEEDED (the group is killed) after `timeout`; RESOURCE_EXHAUSTED past max_bytes.
// The command's exit status does not matter: nvidia-smi exits non-zero when a GPU is lost and
// still lists the others.
absl::StatusOr<std::string> RunProbeCommand(const std::string& command,
                                            std::chrono::milliseconds timeout,
                                            size_t max_bytes = 1 << 20);

// Probes every `interval` and reports the inventory with the failed GPUs `healthy: false`
// whenever a probe fails a GPU that was not failed yet. A verdict stays until Reset (the
// topology file re-read on SIGHUP, or an agent restart): a GPU that needed a reset is not put back
// because the next probe no longer shows the XID. A probe that fails (times out, output not
// understood) changes nothing and is logged. Thread-safe.
class GpuHealthMonitor {
 public:
  struct Options {
    std::string command;
    std::chrono::milliseconds interval{30000};
    std::chrono::milliseconds timeout{10000};
  };
  using Report = std::function<void(v1::Inventory)>;

  GpuHealthMonitor(Options options, v1::Inventory inventory, Report report);
  ~GpuHealthMonitor();  // Stop()
  GpuHealthMonitor(const GpuHealthMonitor&) = delete;
  GpuHealthMonitor& operator=(const GpuHealthMonitor&) = delete;

  void Start();  // probes now, then every interval, on a thread of its own
  void Stop();

  // The inventory as the topology file now says, with no verdicts: reported at once.
  void Reset(v1::Inventory inventory);

  // One probe now, on the caller's thread: the GPUs it newly failed (uuid → why), reported.
  absl::StatusOr<absl::flat_hash_map<std::string, std::string>> ProbeOnce();

 private:
  void Loop();

  const Options options_;
  const Report report_;
  // Held while a verdict is reported, so that a probe's report and a Reset's cannot cross
  // (an older inventory reported after a newer one). Lock order: report_mu_ before mu_.
  absl::Mutex report_mu_;
  absl::Mutex mu_;
  v1::Inventory inventory_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> failed_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_GPU_HEALTH_H_
