// gpufed-agent: connects one cluster to the gpufed server (docs/agent.md).

#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX sigset_t, pthread_sigmask

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/agent.h"
#include "agent/dcgm_telemetry.h"
#include "agent/discovery.h"
#include "agent/flags.h"
#include "agent/gpu_health.h"
#include "agent/process_backend.h"
#include "agent/sim_backend.h"
#include "agent/spot_reclaim.h"
#include "agent/telemetry.h"
#include "agent/topology.h"
#include "federation/clock.h"
#include "federation/types.h"
#include "grpcpp/security/credentials.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

#ifndef GPUFED_VERSION
#define GPUFED_VERSION "dev"
#endif

namespace gpufed::agent {
namespace {

// A second SIGINT this long after the first forces the exit.
constexpr absl::Duration kForceExitAfter = absl::Milliseconds(500);

int ConfigError(absl::string_view message) {
  std::cerr << "gpufed-agent: " << message << "\n";
  return 2;
}

std::string DefaultWorkDir(const std::string& cluster) {
  // Nothing in gpufed-agent calls setenv, so reading the environment cannot race.
  const char* tmp = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe)
  const std::filesystem::path base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  return (base / absl::StrCat("gpufed-agent-", cluster)).string();
}

// The cluster as the topology file says, with the --discover node's GPUs from nvidia-smi.
absl::StatusOr<ClusterTopology> LoadTopology(const AgentFlags& flags) {
  if (flags.discover.empty()) return LoadClusterTopology(flags.topology);
  DiscoveryOptions options;
  options.node = flags.discover;
  options.nvidia_smi = flags.nvidia_smi;
  std::vector<std::string> notes;
  absl::StatusOr<ClusterTopology> topology =
      LoadTopologyWithDiscovery(flags.topology, options, &notes);
  for (const std::string& note : notes) spdlog::warn("discovery: {}", note);
  if (topology.ok()) {
    for (const v1::Node& node : topology->inventory.nodes()) {
      if (node.name() != flags.discover) continue;
      auto label = [&node](absl::string_view key) {
        auto it = node.labels().find(std::string(key));
        return it == node.labels().end() ? std::string("none") : it->second;
      };
      spdlog::info("discovery: node {}: {} GPU(s) {}, driver {}, CUDA {}", node.name(),
                   node.gpus_size(), node.gpus_size() > 0 ? node.gpus(0).model() : "",
                   label(kDriverVersionLabel), label(kCudaVersionLabel));
    }
  }
  return topology;
}

// SIGHUP: the operator (or a health checker) changed the topology file, e.g. took out a node
// that died or marked a GPU `healthy: false`; with --discover, nvidia-smi runs again too. The new
// inventory goes to the server; a file that does not load, a discovery that fails, or a file
// naming another cluster changes nothing.
void Reload(const AgentFlags& flags, const std::string& cluster, Agent& agent,
            GpuHealthMonitor* health) {
  const std::string& path = flags.topology;
  absl::StatusOr<ClusterTopology> topology = LoadTopology(flags);
  if (!topology.ok()) {
    spdlog::error("SIGHUP: {} not reloaded: {}", path, topology.status().ToString());
    return;
  }
  if (topology->cluster != cluster) {
    spdlog::error("SIGHUP: {} names cluster {}, this agent serves {}; not reloaded", path,
                  topology->cluster, cluster);
    return;
  }
  spdlog::info("SIGHUP: {} reloaded{} ({} nodes, {} GPUs); reporting the new inventory", path,
               flags.discover.empty() ? "" : absl::StrCat(" and ", flags.discover, " discovered"),
               topology->inventory.nodes_size(), CountGpus(topology->inventory));
  // The file is the operator's word: GPUs the health probe failed are back until it fails them
  // again.
  if (health != nullptr) {
    health->Reset(std::move(topology->inventory));
  } else {
    agent.ReplaceInventory(std::move(topology->inventory));
  }
}

int Main(int argc, char** argv) {
  FlagsOutcome parsed = ParseAgentFlags(argc, argv);
  if (!parsed.flags.has_value()) {
    std::cout << parsed.out;
    if (!parsed.err.empty()) std::cerr << parsed.err << "\n";
    return parsed.exit_code;
  }
  const AgentFlags& flags = *parsed.flags;

  auto logger = spdlog::stderr_color_mt("gpufed-agent");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(flags.log_level));
  // As in the server (server/main.cc): Debian's Abseil checks lock order on every Mutex
  // acquisition, gRPC's included; the agent's lock order is stated in its code, and tests keep
  // the check.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  absl::StatusOr<ClusterTopology> topology = LoadTopology(flags);
  if (!topology.ok()) return ConfigError(topology.status().message());

  // SIGINT/SIGTERM are taken by sigwait in one thread; block them before any thread exists so
  // every thread inherits the mask. (The process backend unblocks them for its children.)
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // re-read the topology file (Reload below)
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A write to a socket the server closed must fail, not kill the agent.
  signal(SIGPIPE, SIG_IGN);

  // The one real clock: the agent and its backend read time from it.
  const SystemClock clock;
  BackendFactory factory;
  if (flags.backend == "process") {
    ProcessBackendOptions options;
    options.clock = &clock;
    options.work_dir = flags.work_dir.empty() ? DefaultWorkDir(topology->cluster) : flags.work_dir;
    options.kill_grace = absl::Seconds(flags.kill_grace_seconds);
    factory = [options](EventCallback cb) -> absl::StatusOr<std::unique_ptr<Backend>> {
      absl::StatusOr<std::unique_ptr<ProcessBackend>> b =
          ProcessBackend::Create(options, std::move(cb));
      if (!b.ok()) return b.status();
      return std::unique_ptr<Backend>(std::move(*b));
    };
    spdlog::info("process backend: workload logs in {}/logs", options.work_dir);
  } else {
    factory = [&clock](EventCallback cb) -> absl::StatusOr<std::unique_ptr<Backend>> {
      absl::StatusOr<std::unique_ptr<SimBackend>> b = SimBackend::Create(std::move(cb), &clock);
      if (!b.ok()) return b.status();
      return std::unique_ptr<Backend>(std::move(*b));
    };
  }

  AgentOptions options;
  options.state_dir = flags.work_dir.empty() ? DefaultWorkDir(topology->cluster) : flags.work_dir;
  options.server_address = flags.server;
  options.token = flags.token;
  if (flags.insecure_plaintext) {
    spdlog::warn(
        "--insecure-plaintext: talking to the server without TLS; the agent token travels in the "
        "clear. For development only");
    options.credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions tls;
    tls.pem_root_certs = flags.ca_pem;  // empty: the system's roots
    // Mutual TLS: the certificate names the cluster this agent speaks for.
    tls.pem_cert_chain = flags.cert_pem;
    tls.pem_private_key = flags.key_pem;
    options.credentials = grpc::SslCredentials(tls);
  }
  options.agent_version = GPUFED_VERSION;
  options.clock = &clock;
  options.spot_reclaim = {flags.spot_reclaim_every, flags.spot_reclaim_for};
  if (!flags.dcgm_exporter_url.empty()) {
    DcgmExporterOptions dcgm;
    dcgm.url = flags.dcgm_exporter_url;
    absl::StatusOr<std::unique_ptr<DcgmExporterTelemetry>> source =
        DcgmExporterTelemetry::Create(std::move(dcgm));
    if (!source.ok()) return ConfigError(source.status().message());
    options.telemetry = std::move(*source);
    if (flags.telemetry_interval == absl::ZeroDuration()) {
      spdlog::warn("--dcgm-exporter-url {} is set but --telemetry-interval is 0: no telemetry",
                   flags.dcgm_exporter_url);
    } else {
      spdlog::info("telemetry: dcgm-exporter {} every {}", flags.dcgm_exporter_url,
                   absl::FormatDuration(flags.telemetry_interval));
    }
  } else if (flags.backend != "process") {
    options.telemetry = std::make_shared<SimTelemetry>();
  }
  options.telemetry_interval = flags.telemetry_interval;
  const v1::Inventory inventory = topology->inventory;
  const int gpus = CountGpus(topology->inventory);
  const int nodes = topology->inventory.nodes_size();
  const std::string cluster = topology->cluster;
  absl::StatusOr<std::unique_ptr<Agent>> agent =
      Agent::Create(options, *std::move(topology), factory);
  if (!agent.ok()) return ConfigError(agent.status().message());
  spdlog::info("gpufed-agent {}: cluster {} ({} nodes, {} GPUs), {} backend, server {} ({})",
               GPUFED_VERSION, cluster, nodes, gpus, flags.backend, flags.server,
               flags.insecure_plaintext ? "PLAINTEXT"
               : flags.ca_file.empty()  ? "TLS, system roots"
                                        : absl::StrCat("TLS, CA ", flags.ca_file));

  if (options.spot_reclaim.enabled()) {
    const std::vector<std::string> spot = SpotNodes(inventory);
    if (spot.empty()) {
      spdlog::warn(
          "spot reclaims every {} for {}: no node of the topology is labelled {}: spot, so they "
          "will find nothing to take",
          absl::FormatDuration(options.spot_reclaim.every),
          absl::FormatDuration(options.spot_reclaim.duration), std::string(kCapacityTypeLabel));
    } else {
      spdlog::info("spot reclaims (simulated) every {} for {}: spot node(s) {}",
                   absl::FormatDuration(options.spot_reclaim.every),
                   absl::FormatDuration(options.spot_reclaim.duration), absl::StrJoin(spot, ", "));
    }
  }

  std::unique_ptr<GpuHealthMonitor> health;
  if (!flags.health_command.empty()) {
    GpuHealthMonitor::Options health_options;
    health_options.command = flags.health_command;
    health_options.interval =
        std::chrono::milliseconds(static_cast<int64_t>(flags.health_interval_seconds * 1000));
    health_options.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(flags.health_timeout_seconds * 1000));
    health = std::make_unique<GpuHealthMonitor>(health_options, inventory,
                                                [agent = agent->get()](v1::Inventory changed) {
                                                  agent->ReplaceInventory(std::move(changed));
                                                });
    health->Start();
    spdlog::info("GPU health probe every {} s: {}", flags.health_interval_seconds,
                 flags.health_command);
  }

  std::atomic<bool> done{false};
  std::thread shutdown;  // written by the signal thread, joined after it
  std::thread signals([&] {
    std::optional<absl::Time> first;
    const timespec tick{0, 200'000'000};
    while (!done.load()) {
      const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
      if (sig < 0) continue;
      if (sig == SIGHUP) {
        Reload(flags, cluster, **agent, health.get());
        continue;
      }
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      if (first.has_value()) {
        // A person pressing Ctrl-C again means "now". Repeated SIGTERMs come from supervisors
        // and scripts (often twice at once) and must not turn a clean stop into a crash: the
        // stop is bounded anyway, and they follow up with SIGKILL if they lose patience.
        if (sig == SIGINT && AbslNow(clock) - *first > kForceExitAfter) {
          spdlog::warn("second SIGINT: exiting now");
          std::_Exit(1);
        }
        spdlog::info("{} again: already shutting down", name);
        continue;
      }
      first = AbslNow(clock);
      spdlog::info("{}: shutting down", name);
      // Shutdown blocks while the backend stops its work, so run it off the signal thread to
      // keep a second Ctrl-C able to force the exit.
      shutdown = std::thread([&agent] { (*agent)->Shutdown(); });
    }
  });

  (*agent)->Run();
  if (health) health->Stop();
  (*agent)->Shutdown();  // no-op after a signal; covers Run returning for any other reason
  done.store(true);
  signals.join();
  if (shutdown.joinable()) shutdown.join();
  agent->reset();
  return 0;
}

}  // namespace
}  // namespace gpufed::agent

int main(int argc, char** argv) { return gpufed::agent::Main(argc, argv); }
