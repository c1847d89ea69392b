#include "agent/flags.h"

#include <sys/stat.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/dcgm_telemetry.h"
#include "agent/spot_reclaim.h"
#include "auth/secret_file.h"
#include "federation/validation.h"

#ifndef GPUFED_VERSION
#define GPUFED_VERSION "dev"
#endif

namespace gpufed::agent {
namespace {

// Config keys whose values are paths, resolved against the config file's folder.
constexpr std::string_view kPathKeys[] = {"topology", "token-file", "work-dir",
                                          "ca-file",  "cert-file",  "key-file"};
// Flags that make no sense inside the config file.
constexpr std::string_view kNotConfigurable[] = {"config", "help", "version"};

bool Contains(const auto& list, std::string_view s) {
  for (std::string_view x : list) {
    if (x == s) return true;
  }
  return false;
}

std::vector<std::string> ConfigKeys(CLI::App& app) {
  std::vector<std::string> keys;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& name : opt->get_lnames()) {
      if (!Contains(kNotConfigurable, name)) keys.push_back(name);
    }
  }
  return keys;
}

// Applies the YAML config file to every option neither a flag nor its environment variable set.
// `token_set`: the token already came from a flag or the environment, so the file's `token` and
// `token-file` are ignored (the two are one setting).
absl::Status ApplyConfig(CLI::App& app, const std::string& path, bool token_set) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return absl::InvalidArgumentError(absl::StrCat("--config: cannot read ", path));
  } catch (const YAML::ParserException& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", e.mark.line + 1, ": invalid YAML: ", e.msg));
  }
  if (!root.IsDefined() || root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":1: must be a map of flag names (without --) to values"));
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (auto it = root.begin(); it != root.end(); ++it) {
    const int line = it->first.Mark().line + 1;
    const std::string key = absl::StrReplaceAll(it->first.Scalar(), {{"_", "-"}});
    CLI::Option* opt =
        Contains(kNotConfigurable, key) ? nullptr : app.get_option_no_throw("--" + key);
    if (opt == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line, ": unknown key \"", it->first.Scalar(),
                       "\" (known: ", absl::StrJoin(ConfigKeys(app), ", "), ")"));
    }
    if (!it->second.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line, ": ", key, ": must be a single value"));
    }
    if (opt->count() > 0) continue;  // a flag or its environment variable wins
    if (token_set && (key == "token" || key == "token-file")) continue;
    std::string value = it->second.Scalar();
    if (Contains(kPathKeys, key) && !value.empty() && std::filesystem::path(value).is_relative()) {
      value = (dir / value).lexically_normal().string();
    }
    try {
      opt->add_result(value);
      opt->run_callback();
    } catch (const CLI::ParseError& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line, ": ", key, ": ", e.what()));
    }
  }
  return absl::OkStatus();
}

// A duration option ("90s", "10m", "1h30m"; absl::ParseDuration's forms): finite and >= 0.
CLI::Option* AddDurationOption(CLI::App& app, const std::string& name, absl::Duration* out,
                               const std::string& help) {
  return app
      .add_option_function<std::string>(
          name,
          [name, out](const std::string& text) {
            absl::Duration d;
            if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration() ||
                d == absl::InfiniteDuration()) {
              throw CLI::ValidationError(
                  name,
                  absl::StrCat("\"", text,
                               "\" is not a duration (a number with a unit: 90s, 10m, 1h30m)"));
            }
            *out = d;
          },
          help)
      ->type_name("DURATION");
}

absl::Status ReadToken(const std::string& path, std::string* token) {
  if (absl::Status mode = auth::CheckSecretFileMode("--token-file", path); !mode.ok()) return mode;
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--token-file: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  *token = std::string(absl::StripAsciiWhitespace(text.str()));
  if (token->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--token-file: ", path, " is empty"));
  }
  return absl::OkStatus();
}

absl::Status ReadCaFile(const std::string& path, std::string* pem) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--ca-file: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  *pem = text.str();
  // gRPC would take anything and fail only at connect time, with a vaguer message.
  if (pem->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ca-file: ", path, " holds no PEM certificate"));
  }
  return absl::OkStatus();
}

// The client certificate and its key, for mutual TLS.
absl::Status ReadClientPair(AgentFlags& f) {
  if (f.cert_file.empty() != f.key_file.empty()) {
    return absl::InvalidArgumentError(f.cert_file.empty()
                                          ? "--cert-file: required with --key-file"
                                          : "--key-file: required with --cert-file");
  }
  if (f.cert_file.empty()) return absl::OkStatus();
  if (f.insecure_plaintext) {
    return absl::InvalidArgumentError(
        "--insecure-plaintext and --cert-file are both given; a certificate needs TLS");
  }
  if (absl::Status mode = auth::CheckSecretFileMode("--key-file", f.key_file); !mode.ok())
    return mode;
  for (const auto& [setting, path, pem, marker] :
       {std::tuple<const char*, const std::string*, std::string*, const char*>{
            "--cert-file", &f.cert_file, &f.cert_pem, "-----BEGIN CERTIFICATE-----"},
        std::tuple<const char*, const std::string*, std::string*, const char*>{
            "--key-file", &f.key_file, &f.key_pem, "PRIVATE KEY-----"}}) {
    std::ifstream in(*path);
    if (!in) return absl::InvalidArgumentError(absl::StrCat(setting, ": cannot read ", *path));
    std::stringstream text;
    text << in.rdbuf();
    *pem = text.str();
    if (pem->find(marker) == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(setting, ": ", *path, " holds no PEM ",
                                                     pem == &f.cert_pem ? "certificate" : "key"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

FlagsOutcome ParseAgentFlags(int argc, const char* const* argv) {
  AgentFlags f;
  CLI::App app{"Runs one cluster's work for the gpufed control plane.", "gpufed-agent"};
  app.set_version_flag("--version", GPUFED_VERSION);
  app.add_option("--config", f.config_file, "YAML file whose keys mirror these flags")
      ->envname("GPUFED_AGENT_CONFIG");
  app.add_option("--server", f.server, "server gRPC address (host:port)")
      ->envname("GPUFED_SERVER")
      ->capture_default_str();
  // The two token settings are one: their environment variables are read below, so that a flag
  // of either kind beats the environment of either kind.
  CLI::Option* token_opt =
      app.add_option("--token", f.token, "the cluster's agent token (Env:GPUFED_AGENT_TOKEN)");
  CLI::Option* token_file_opt = app.add_option(
      "--token-file", f.token_file, "file holding the agent token (Env:GPUFED_AGENT_TOKEN_FILE)");
  app.add_option("--ca-file", f.ca_file,
                 "CA certificate(s) (PEM) the server's TLS certificate must chain to (default: "
                 "the system's roots)")
      ->envname("GPUFED_CA_FILE");
  app.add_option("--cert-file", f.cert_file,
                 "the cluster's client certificate (PEM, from gpufedctl clusters enroll) for "
                 "mutual TLS; the token is then optional")
      ->envname("GPUFED_AGENT_CERT_FILE");
  app.add_option("--key-file", f.key_file, "the certificate's private key (PEM, mode 0600)")
      ->envname("GPUFED_AGENT_KEY_FILE");
  app.add_flag("--insecure-plaintext", f.insecure_plaintext,
               "no TLS, for a development server run with --insecure-plaintext (the agent token "
               "travels in the clear)");
  app.add_option("--topology", f.topology, "the cluster's topology YAML (required)")
      ->envname("GPUFED_TOPOLOGY");
  app.add_option("--discover", f.discover,
                 "this node's name: its GPUs come from nvidia-smi -q -x and topo -m, not the "
                 "topology file (docs/agent.md)")
      ->envname("GPUFED_DISCOVER");
  app.add_option("--nvidia-smi", f.nvidia_smi, "the nvidia-smi --discover runs (name or path)")
      ->envname("GPUFED_NVIDIA_SMI")
      ->capture_default_str();
  app.add_option("--backend", f.backend, "how assignments run")
      ->envname("GPUFED_BACKEND")
      ->check(CLI::IsMember({"sim", "process"}))
      ->capture_default_str();
  app.add_option("--log-level", f.log_level, "trace, debug, info, warn, error")
      ->envname("GPUFED_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--work-dir", f.work_dir,
                 "process backend: workload logs go to DIR/logs (default "
                 "$TMPDIR/gpufed-agent-<cluster>)")
      ->envname("GPUFED_WORK_DIR");
  app.add_option("--kill-grace", f.kill_grace_seconds,
                 "process backend: seconds from SIGTERM to SIGKILL on cancel")
      ->envname("GPUFED_KILL_GRACE")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--health-command", f.health_command,
                 "GPU health probe, run with /bin/sh -c: nvidia-smi CSV and driver Xid lines "
                 "(docs/agent.md)")
      ->envname("GPUFED_HEALTH_COMMAND");
  app.add_option("--health-interval", f.health_interval_seconds,
                 "seconds between GPU health probes")
      ->envname("GPUFED_HEALTH_INTERVAL")
      ->check(CLI::Range(1.0, 86400.0))
      ->capture_default_str();
  app.add_option("--health-timeout", f.health_timeout_seconds,
                 "seconds a GPU health probe may take before it is killed")
      ->envname("GPUFED_HEALTH_TIMEOUT")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  AddDurationOption(app, "--spot-reclaim-every", &f.spot_reclaim_every,
                    "simulate the provider taking back the spot nodes (label "
                    "gpufed.io/capacity-type: spot) this often, e.g. 30m; 0: never")
      ->envname("GPUFED_SPOT_RECLAIM_EVERY");
  AddDurationOption(app, "--spot-reclaim-for", &f.spot_reclaim_for,
                    "how long the spot nodes stay away at each reclaim (shorter than "
                    "--spot-reclaim-every)")
      ->envname("GPUFED_SPOT_RECLAIM_FOR");
  AddDurationOption(app, "--telemetry-interval", &f.telemetry_interval,
                    "sample GPU telemetry of running workloads this often (at most 60s), e.g. "
                    "10s; 0: no telemetry")
      ->envname("GPUFED_TELEMETRY_INTERVAL");
  app.add_option("--dcgm-exporter-url", f.dcgm_exporter_url,
                 "read real GPUs' telemetry from this dcgm-exporter page, e.g. "
                 "http://127.0.0.1:9400/metrics (any backend; default: simulated with the sim "
                 "backend, none with process)")
      ->envname("GPUFED_DCGM_EXPORTER_URL");

  FlagsOutcome outcome;
  auto fail = [&outcome](absl::string_view message) {
    outcome.exit_code = 2;
    outcome.err = absl::StrCat("gpufed-agent: ", message);
    return outcome;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {  // --help, --version
      std::ostringstream out;
      std::ostringstream err;
      app.exit(e, out, err);
      outcome.out = out.str();
      return outcome;
    }
    return fail(absl::StrCat(e.what(), " (see --help)"));
  }
  if (token_opt->count() > 0 && token_file_opt->count() > 0) {
    return fail("--token and --token-file are both given; give one");
  }
  if (token_opt->count() == 0 && token_file_opt->count() == 0) {
    // Nothing in gpufed-agent calls setenv, so reading the environment cannot race.
    const char* env_token = std::getenv("GPUFED_AGENT_TOKEN");      // NOLINT(concurrency-mt-unsafe)
    const char* env_file = std::getenv("GPUFED_AGENT_TOKEN_FILE");  // NOLINT(concurrency-mt-unsafe)
    const bool has_token = env_token != nullptr && *env_token != '\0';
    const bool has_file = env_file != nullptr && *env_file != '\0';
    if (has_token && has_file) {
      return fail("GPUFED_AGENT_TOKEN and GPUFED_AGENT_TOKEN_FILE are both set; set one");
    }
    if (has_token) f.token = env_token;
    if (has_file) f.token_file = env_file;
  }
  if (!f.config_file.empty()) {
    absl::Status applied =
        ApplyConfig(app, f.config_file, !f.token.empty() || !f.token_file.empty());
    if (!applied.ok()) return fail(applied.message());
  }
  if (f.topology.empty()) {
    return fail("--topology is required (flag, GPUFED_TOPOLOGY or config key topology)");
  }
  if (!f.discover.empty() && !IsLabel(f.discover)) {
    return fail(absl::StrCat("--discover: node name \"", f.discover, "\" must be 1..",
                             kMaxNameLength, " characters of [a-z0-9-]"));
  }
  if (f.nvidia_smi.empty()) return fail("--nvidia-smi: must not be empty");
  if (!f.token.empty() && !f.token_file.empty()) {
    return fail(absl::StrCat(f.config_file, ": token and token_file are both set; give one"));
  }
  if (!f.token_file.empty()) {
    absl::Status read = ReadToken(f.token_file, &f.token);
    if (!read.ok()) return fail(read.message());
  }
  if (absl::Status read = ReadClientPair(f); !read.ok()) return fail(read.message());
  if (f.token.empty() && f.cert_file.empty()) {
    return fail(
        "an agent token or certificate is required (--token, --token-file, GPUFED_AGENT_TOKEN, "
        "or --cert-file with --key-file)");
  }
  if (f.server.empty()) return fail("--server: must not be empty");
  if (f.insecure_plaintext && !f.ca_file.empty()) {
    return fail("--insecure-plaintext and --ca-file are both given; TLS or plaintext, give one");
  }
  if (!f.ca_file.empty()) {
    absl::Status read = ReadCaFile(f.ca_file, &f.ca_pem);
    if (!read.ok()) return fail(read.message());
  }
  if (absl::Status s = ValidateSpotReclaimSchedule({f.spot_reclaim_every, f.spot_reclaim_for});
      !s.ok()) {
    return fail(s.message());
  }
  if (f.telemetry_interval < absl::ZeroDuration() || f.telemetry_interval > absl::Seconds(60)) {
    return fail("--telemetry-interval: must be 0..60s");
  }
  if (!f.dcgm_exporter_url.empty()) {
    if (absl::Status s = ParseDcgmExporterUrl(f.dcgm_exporter_url).status(); !s.ok()) {
      return fail(s.message());
    }
  }
  outcome.flags = std::move(f);
  return outcome;
}

}  // namespace gpufed::agent
