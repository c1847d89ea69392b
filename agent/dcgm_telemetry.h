#ifndef GPUFED_AGENT_DCGM_TELEMETRY_H_
#define GPUFED_AGENT_DCGM_TELEMETRY_H_

// GPU telemetry of real GPUs from NVIDIA's dcgm-exporter (docs/agent.md, "DCGM telemetry"): the
// agent scrapes the exporter's Prometheus text page (http://127.0.0.1:9400/metrics) at each
// sample and hands each running workload the readings of what it holds: its whole GPU, its
// share of one (every sharer gets the GPU's readings) or its MIG instance. Values pass through as
// DCGM reports them, traps included (SM_ACTIVE above 1 on a MIG instance, GR_ENGINE_ACTIVE of a
// MIG instance as a part of the whole GPU, GPU_UTIL 0 or absent on MIG, no DCGM_FI_PROF_* fields
// before Volta): the server knows them (federation/telemetry.h).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/telemetry.h"
#include "federation/telemetry.h"

namespace gpufed::agent {

// The readings of one GPU or MIG instance, gathered from every line that names it.
struct DcgmReading {
  std::string uuid;        // label UUID (or uuid): the GPU's, also on its MIG instances' lines
  std::string gpu;         // label gpu: the GPU's index on its node
  std::string model_name;  // label modelName, e.g. "NVIDIA H100 80GB HBM3"
  std::string hostname;    // label Hostname (hostname in dcgm-exporter 4)
  // Labels GPU_I_PROFILE and GPU_I_ID: set on a MIG instance's lines, absent or empty for a
  // whole GPU. The instance id is the driver's, not where the instance sits on the GPU.
  std::string mig_profile;
  std::optional<uint32_t> gpu_instance_id;
  // The known fields; NaN, infinite and out-of-range values leave a field unset.
  GpuMetrics metrics;
};

// What ParseDcgmExporter skipped, for logs.
struct DcgmParseStats {
  // Lines that are no metric line at all, or lines of known metrics that could not be read.
  int malformed_lines = 0;
  int first_malformed = 0;    // the first one's line number (1-based); 0: none
  std::string first_problem;  // and what is wrong with it
  // Values that leave their field unset: NaN, infinite, or outside what the server accepts
  // (federation/telemetry.h, e.g. DCGM's "blank" sentinel 9223372036854775792).
  int unusable_values = 0;
};

// Parses the Prometheus text format as dcgm-exporter writes it: `NAME{label="value",...} VALUE
// [TIMESTAMP]` lines, `#` comments and blank lines. Only DCGM_FI_PROF_GR_ENGINE_ACTIVE,
// _SM_ACTIVE, _SM_OCCUPANCY, _PIPE_TENSOR_ACTIVE, _DRAM_ACTIVE and DCGM_FI_DEV_GPU_UTIL, _FB_USED,
// _POWER_USAGE, _GPU_TEMP are read; lines of other metrics are ignored, whatever follows their
// name. A line of a known metric that cannot be read (bad label syntax or escape, no UUID label, a
// value that is not a number, a GPU_I_ID that is not one) is skipped and counted in `stats`, and
// so is a line that is no metric line at all.
// Readings come in the order their GPU or instance first appears; a field repeated for the same
// GPU or instance (dcgm-exporter writes one line per Kubernetes pod on a shared GPU) keeps its
// first usable value.
// INVALID_ARGUMENT when no line at all reads as a metric line but some do not (an HTML error page,
// JSON): that is not an exporter's page. Pure; thread-safe.
absl::StatusOr<std::vector<DcgmReading>> ParseDcgmExporter(absl::string_view text,
                                                           DcgmParseStats* stats = nullptr);

// Where each MIG instance dcgm-exporter names sits: (GPU uuid, GPU instance id) -> the instance's
// placement start (Occupant::mig_start). dcgm-exporter says which profile an instance has, not
// where it is, so this is the only way to tell two instances of one profile on one GPU apart.
using MigInstanceStarts = std::map<std::pair<std::string, uint32_t>, uint32_t>;

// One GpuMetrics per occupant, in order:
// - a whole GPU or a share (mig_profile empty): the reading of its uuid without a GPU instance;
// - a MIG instance: the reading of its uuid and profile whose `starts` entry is the occupant's
//   mig_start; without one, the only instance of that profile on that GPU that no `starts` entry
//   places, provided no other occupant holds that profile there at a start no entry names (else
//   either could be the one listed).
// Anything else -- no reading, or instances it cannot tell apart -- gets an empty GpuMetrics:
// never another workload's readings. Pure; thread-safe.
std::vector<GpuMetrics> MatchOccupants(const std::vector<DcgmReading>& readings,
                                       const std::vector<Occupant>& occupants,
                                       const MigInstanceStarts& starts = {});

// A dcgm-exporter address, checked: `http://` or `https://`, a host (a name, an IPv4 address or
// an IPv6 one in brackets), an optional port (default 80 or 443), an optional path (default
// /metrics) with its query.
struct DcgmExporterUrl {
  bool https = false;
  std::string host;  // without brackets: "127.0.0.1", "::1"
  int port = 0;
  std::string path;  // "/metrics"
};

// INVALID_ARGUMENT naming the problem ("--dcgm-exporter-url: ...") for anything else: another
// scheme, no host, a port outside 1..65535, a user name or password, a fragment, spaces.
absl::StatusOr<DcgmExporterUrl> ParseDcgmExporterUrl(absl::string_view url);

struct DcgmExporterOptions {
  std::string url;  // see ParseDcgmExporterUrl
  // How long to wait to connect, and for each read; the whole page must have arrived by
  // `deadline` after the scrape started, or it is dropped.
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration read_timeout = absl::Seconds(2);
  absl::Duration deadline = absl::Seconds(3);
  // A bigger page is refused (it is asked for uncompressed): a node's exporter writes tens of KiB.
  size_t max_body_bytes = size_t{16} << 20;
  MigInstanceStarts mig_starts;
};

// A TelemetrySource that scrapes dcgm-exporter at every Sample. It keeps nothing between samples
// but its options (and when it last warned): a failed scrape -- refused, timed out, an HTTP error,
// a page too big, not the exporter's format -- gives every occupant an empty GpuMetrics (the
// server then counts those minutes as measured by nothing) and a warning, at most one a minute.
// https URLs are verified against the system's CA certificates.
// Thread-safe. Sample blocks for about connect_timeout + deadline at most (only a server that
// trickles its response headers, each read under read_timeout, can stretch that).
class DcgmExporterTelemetry final : public TelemetrySource {
 public:
  // INVALID_ARGUMENT: a bad url (ParseDcgmExporterUrl), non-positive timeouts or size limit.
  static absl::StatusOr<std::unique_ptr<DcgmExporterTelemetry>> Create(DcgmExporterOptions options);

  std::vector<GpuMetrics> Sample(const std::vector<Occupant>& occupants, absl::Time at) override;

  // One scrape, parsed. UNAVAILABLE: no connection, a timeout, a non-200 answer;
  // RESOURCE_EXHAUSTED: the page is bigger than max_body_bytes; DEADLINE_EXCEEDED: the page was
  // still arriving at the deadline; INVALID_ARGUMENT: not the exporter's format.
  // `stats` as in ParseDcgmExporter.
  absl::StatusOr<std::vector<DcgmReading>> Scrape(DcgmParseStats* stats = nullptr) const;

  [[nodiscard]] const DcgmExporterOptions& options() const { return options_; }

 private:
  DcgmExporterTelemetry(DcgmExporterOptions options, DcgmExporterUrl url);
  [[nodiscard]] absl::StatusOr<std::string> Fetch() const;
  // Logs a failed scrape or skipped lines as a warning unless one was logged in the minute
  // before `at` (those are counted and the count goes with the next one); a success after
  // failures is logged once.
  void NoteScrape(const absl::Status& status, const DcgmParseStats& stats, absl::Time at);

  const DcgmExporterOptions options_;
  const DcgmExporterUrl url_;
  absl::Mutex mu_;
  std::optional<absl::Time> last_warning_ ABSL_GUARDED_BY(mu_);
  int unwarned_ ABSL_GUARDED_BY(mu_) = 0;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_DCGM_TELEMETRY_H_
