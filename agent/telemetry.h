#ifndef GPUFED_AGENT_TELEMETRY_H_
#define GPUFED_AGENT_TELEMETRY_H_

// GPU telemetry on the agent's side (docs/chargeback.md#telemetry): a source samples the DCGM
// fields of what each running workload holds; MinuteAggregator folds the samples into the
// per-minute means the agent sends (TelemetryReport).

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "federation/telemetry.h"
#include "gpufed/v1/agent_service.pb.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::agent {

// What one running workload holds on one GPU.
struct Occupant {
  std::string workload_id;
  uint32_t attempt = 0;
  v1::WorkloadClass workload_class = v1::WORKLOAD_CLASS_UNSPECIFIED;
  std::string gpu_uuid;
  std::string gpu_model;  // catalogue name, from the inventory
  uint64_t gpu_memory_mib = 0;
  std::string mig_profile;  // set: the MIG instance of this profile at mig_start
  uint32_t mig_start = 0;
  uint32_t gpu_milli = 0;  // set: a share of the GPU
};

// Where samples come from: on real GPUs, NVIDIA's dcgm-exporter (agent/dcgm_telemetry.h); on
// simulated clusters, SimTelemetry. Called from the agent's telemetry thread without its lock;
// one call at a time.
class TelemetrySource {
 public:
  virtual ~TelemetrySource() = default;
  // One sample per occupant, in order, taken at `at`. Occupants sharing a GPU each get the GPU's
  // readings (DCGM does not split a GPU's activity among processes).
  virtual std::vector<GpuMetrics> Sample(const std::vector<Occupant>& occupants, absl::Time at) = 0;
};

// Plausible DCGM readings for simulated clusters, by workload class (training keeps SMs and tensor
// cores busy, interactive sessions mostly idle), with a few percent of noise that is a function of
// the workload and the time, so runs are reproducible. Behaves as the hardware does where it
// misleads: a MIG instance reports SM activity a little above 1 when busy and engine activity as
// a part of the whole GPU (at most k/7), and no coarse utilisation; GPUs older than Volta (K80,
// M60, P4, P40, P100) report no profiling fields, only NVML's coarse utilisation.
class SimTelemetry final : public TelemetrySource {
 public:
  std::vector<GpuMetrics> Sample(const std::vector<Occupant>& occupants, absl::Time at) override;
};

// True for models DCGM cannot profile (no DCGM_FI_PROF_* fields).
bool LacksProfiling(absl::string_view model);

// Folds samples into minutes: per (GPU, MIG instance, workload, attempt, UTC minute), the mean of
// each field and how much of the minute the samples cover. Not thread-safe (the agent's lock).
class MinuteAggregator {
 public:
  // `interval`: how often samples are taken (each stands for that long); at most `max_minutes`
  // ended minutes wait to be taken, the oldest dropped beyond.
  MinuteAggregator(absl::Duration interval, size_t max_minutes);

  void Add(const Occupant& occupant, const GpuMetrics& metrics, absl::Time at);
  // The minutes that ended by `now`, oldest first, at most `max` of them.
  std::vector<v1::GpuMinute> TakeEnded(absl::Time now, size_t max);
  [[nodiscard]] uint64_t dropped() const { return dropped_; }
  [[nodiscard]] size_t waiting() const { return ended_.size(); }

 private:
  // Sums of each field's readings and how many there were.
  struct Sums {
    std::string gpu_uuid, mig_profile, workload_id;
    uint32_t mig_start = 0, attempt = 0;
    int64_t minute_seconds = 0;
    int samples = 0;
    double sum[9] = {};
    int count[9] = {};
  };
  using Key = std::tuple<int64_t, std::string, std::string, uint32_t, std::string, uint32_t>;
  void Close(absl::Time now);

  const absl::Duration interval_;
  const size_t max_minutes_;
  std::map<Key, Sums> open_;
  std::vector<v1::GpuMinute> ended_;
  uint64_t dropped_ = 0;
};

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_TELEMETRY_H_
