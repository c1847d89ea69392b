#ifndef GPUFED_AGENT_FLAGS_H_
#define GPUFED_AGENT_FLAGS_H_

#include <optional>
#include <string>

#include "absl/time/time.h"

namespace gpufed::agent {

// gpufed-agent's settings (docs/interfaces.md), after flags, environment and config file.
struct AgentFlags {
  std::string config_file;
  std::string server = "127.0.0.1:50051";
  // The token itself: from --token / GPUFED_AGENT_TOKEN, or read from --token-file.
  std::string token;
  std::string token_file;
  // TLS to the server (docs/operations.md#tls): verified against the CA certificates in
  // ca_file (PEM, read into ca_pem), or the system's roots without one. insecure_plaintext: no
  // TLS, for a development server; never together with ca_file.
  std::string ca_file;
  std::string ca_pem;
  bool insecure_plaintext = false;
  // Mutual TLS (docs/operations.md#cluster-certificates): the cluster's certificate and its key
  // (PEM; from gpufedctl clusters enroll), read into cert_pem and key_pem. With them the token
  // is optional: the certificate says which cluster this agent speaks for. The key file, like
  // the token file, is refused when other users may read it. Not with insecure_plaintext.
  std::string cert_file;
  std::string key_file;
  std::string cert_pem;
  std::string key_pem;
  std::string topology;
  // Real-GPU discovery (agent/discovery.h): this node's GPUs come from nvidia-smi, not from the
  // topology file (which still names the cluster). Empty: no discovery.
  std::string discover;
  std::string nvidia_smi = "nvidia-smi";  // command name or path
  std::string backend = "sim";
  std::string log_level = "info";
  // process backend: logs go to <work_dir>/logs. Empty: $TMPDIR (or /tmp)/gpufed-agent-<cluster>.
  std::string work_dir;
  // process backend: seconds between SIGTERM and SIGKILL.
  double kill_grace_seconds = 10;
  // GPU health probe (agent/gpu_health.h): run with /bin/sh -c every interval; empty: none.
  std::string health_command;
  double health_interval_seconds = 30;
  double health_timeout_seconds = 10;
  // Simulated spot reclaims (docs/agent.md#spot-reclaims-simulated): every `spot_reclaim_every`
  // (zero: never) the spot nodes leave the inventory for `spot_reclaim_for`.
  absl::Duration spot_reclaim_every = absl::ZeroDuration();
  absl::Duration spot_reclaim_for = absl::ZeroDuration();
  // GPU telemetry (docs/chargeback.md#telemetry): how often what running workloads hold is
  // sampled; zero: no telemetry. Readings come from dcgm_exporter_url when set; otherwise the sim
  // backend simulates them and the process backend sends none.
  absl::Duration telemetry_interval = absl::Seconds(10);
  // Real GPUs' telemetry from dcgm-exporter (agent/dcgm_telemetry.h), e.g.
  // http://127.0.0.1:9400/metrics, checked by ParseDcgmExporterUrl; with any backend. Empty:
  // the sim backend simulates readings and the process backend sends none.
  std::string dcgm_exporter_url;
};

// What ParseAgentFlags decided: run with `flags`, or exit with `exit_code` after printing
// `out` to stdout (help, version) and `err` to stderr (one line).
struct FlagsOutcome {
  std::optional<AgentFlags> flags;
  int exit_code = 0;
  std::string out;
  std::string err;
};

// Parses the command line with CLI11. Precedence: flag, then its environment variable, then the
// YAML file named by --config / GPUFED_AGENT_CONFIG (keys mirror the flags: `server`,
// `token-file` or `token_file`, ...; relative paths in it are relative to the file), then the
// defaults. Unknown flags or keys, bad values (a --dcgm-exporter-url that is not
// http(s)://HOST...), a missing topology, or neither a token nor a certificate: exit code 2 and one
// line naming the problem. Reads the token, certificate and key files. Not thread-safe (reads the
// environment).
FlagsOutcome ParseAgentFlags(int argc, const char* const* argv);

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_FLAGS_H_
