#include "server/config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <system_error>
#include <tuple>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auth/secret_file.h"
#include "federation/cost_allocation.h"
#include "federation/metering.h"
#include "federation/policy.h"
#include "yaml-cpp/yaml.h"

namespace gpufed::server {
namespace {

template <typename T>
absl::Status ReadKey(const YAML::Node& root, const std::string& file, const char* key, T* out) {
  const YAML::Node node = root[key];
  if (!node) return absl::OkStatus();
  try {
    *out = node.as<T>();
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ":", node.Mark().line + 1, ": ", key, ": ", e.msg));
  }
  return absl::OkStatus();
}

absl::Status LoadFile(const std::string& file, ServerConfig* config) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(file);
  } catch (const YAML::BadFile&) {
    return absl::InvalidArgumentError(absl::StrCat(file, ": cannot read file"));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(file, ":", e.mark.line + 1, ": ", e.msg));
  }
  if (root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) return absl::InvalidArgumentError(absl::StrCat(file, ": expected a mapping"));
  static const char* kKeys[] = {"grpc_listen",
                                "http_listen",
                                "data_dir",
                                "database_url",
                                "database_url_file",
                                "admin_token_file",
                                "audit_key_file",
                                "ready_file",
                                "log_level",
                                "tls_cert_file",
                                "tls_key_file",
                                "tls_reload_interval_seconds",
                                "insecure_plaintext",
                                "cluster_ca_cert_file",
                                "cluster_ca_key_file",
                                "cluster_cert_lifetime_days",
                                "require_agent_certificates",
                                "jwt_jwks_file",
                                "jwt_issuer",
                                "jwt_audience",
                                "jwt_subject_claim",
                                "jwt_role_claim",
                                "jwt_tenant_claim",
                                "jwt_project_claim",
                                "heartbeat_timeout_seconds",
                                "heartbeat_interval_ms",
                                "agent_lease_ms",
                                "agent_register_timeout_ms",
                                "executor_threads",
                                "placement_policy",
                                "placement_seed",
                                "mig_partitioning",
                                "agent_executor_threads",
                                "archive_after_hours",
                                "mig_basis",
                                "meter_interval_seconds",
                                "telemetry_retention_hours",
                                "idle_cost_policy",
                                "reclaim_min_runtime_seconds",
                                "reborrow_backoff_seconds",
                                "starvation_bound_seconds",
                                "fair_share_half_life_hours",
                                "write_rate_per_second",
                                "write_burst",
                                "max_watch_streams",
                                "max_call_seconds"};
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ":", kv.first.Mark().line + 1, ": unknown key \"", key, "\""));
    }
  }
  for (absl::Status s :
       {ReadKey(root, file, "grpc_listen", &config->grpc_listen),
        ReadKey(root, file, "http_listen", &config->http_listen),
        ReadKey(root, file, "data_dir", &config->data_dir),
        ReadKey(root, file, "database_url", &config->database_url),
        ReadKey(root, file, "database_url_file", &config->database_url_file),
        ReadKey(root, file, "admin_token_file", &config->admin_token_file),
        ReadKey(root, file, "audit_key_file", &config->audit_key_file),
        ReadKey(root, file, "ready_file", &config->ready_file),
        ReadKey(root, file, "log_level", &config->log_level),
        ReadKey(root, file, "tls_cert_file", &config->tls_cert_file),
        ReadKey(root, file, "tls_key_file", &config->tls_key_file),
        ReadKey(root, file, "tls_reload_interval_seconds", &config->tls_reload_interval_seconds),
        ReadKey(root, file, "insecure_plaintext", &config->insecure_plaintext),
        ReadKey(root, file, "cluster_ca_cert_file", &config->cluster_ca_cert_file),
        ReadKey(root, file, "cluster_ca_key_file", &config->cluster_ca_key_file),
        ReadKey(root, file, "cluster_cert_lifetime_days", &config->cluster_cert_lifetime_days),
        ReadKey(root, file, "require_agent_certificates", &config->require_agent_certificates),
        ReadKey(root, file, "jwt_jwks_file", &config->jwt_jwks_file),
        ReadKey(root, file, "jwt_issuer", &config->jwt_issuer),
        ReadKey(root, file, "jwt_audience", &config->jwt_audience),
        ReadKey(root, file, "jwt_subject_claim", &config->jwt_subject_claim),
        ReadKey(root, file, "jwt_role_claim", &config->jwt_role_claim),
        ReadKey(root, file, "jwt_tenant_claim", &config->jwt_tenant_claim),
        ReadKey(root, file, "jwt_project_claim", &config->jwt_project_claim),
        ReadKey(root, file, "heartbeat_timeout_seconds", &config->heartbeat_timeout_seconds),
        ReadKey(root, file, "heartbeat_interval_ms", &config->heartbeat_interval_ms),
        ReadKey(root, file, "agent_lease_ms", &config->agent_lease_ms),
        ReadKey(root, file, "agent_register_timeout_ms", &config->agent_register_timeout_ms),
        ReadKey(root, file, "executor_threads", &config->executor_threads),
        ReadKey(root, file, "agent_executor_threads", &config->agent_executor_threads),
        ReadKey(root, file, "placement_policy", &config->placement_policy),
        ReadKey(root, file, "placement_seed", &config->placement_seed),
        ReadKey(root, file, "mig_partitioning", &config->mig_partitioning),
        ReadKey(root, file, "archive_after_hours", &config->archive_after_hours),
        ReadKey(root, file, "mig_basis", &config->mig_basis),
        ReadKey(root, file, "meter_interval_seconds", &config->meter_interval_seconds),
        ReadKey(root, file, "telemetry_retention_hours", &config->telemetry_retention_hours),
        ReadKey(root, file, "idle_cost_policy", &config->idle_cost_policy),
        ReadKey(root, file, "reclaim_min_runtime_seconds", &config->reclaim_min_runtime_seconds),
        ReadKey(root, file, "reborrow_backoff_seconds", &config->reborrow_backoff_seconds),
        ReadKey(root, file, "starvation_bound_seconds", &config->starvation_bound_seconds),
        ReadKey(root, file, "fair_share_half_life_hours", &config->fair_share_half_life_hours),
        ReadKey(root, file, "write_rate_per_second", &config->write_rate_per_second),
        ReadKey(root, file, "write_burst", &config->write_burst),
        ReadKey(root, file, "max_watch_streams", &config->max_watch_streams),
        ReadKey(root, file, "max_call_seconds", &config->max_call_seconds)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServerConfig> LoadServerConfig(int argc, char** argv) {
  ServerConfig config;
  // First pass: only find the config file, so flags can override what it says.
  std::string config_file;
  {
    CLI::App pre;
    pre.allow_extras();
    pre.set_help_flag();
    pre.add_option("--config", config_file)->envname("GPUFED_SERVER_CONFIG");
    try {
      pre.parse(argc, argv);
    } catch (const CLI::ParseError&) {
      // Reported by the full parse below.
    }
  }
  if (!config_file.empty()) {
    if (absl::Status s = LoadFile(config_file, &config); !s.ok()) return s;
  }

  CLI::App app("gpufed-server: the gpufed control plane", "gpufed-server");
  app.add_option("--config", config_file, "YAML configuration file")
      ->envname("GPUFED_SERVER_CONFIG");
  app.add_option("--grpc-listen", config.grpc_listen, "gRPC address (port 0 picks one)")
      ->envname("GPUFED_GRPC_LISTEN")
      ->capture_default_str();
  app.add_option("--http-listen", config.http_listen, "HTTP address for health and metrics")
      ->envname("GPUFED_HTTP_LISTEN")
      ->capture_default_str();
  app.add_option("--data-dir", config.data_dir, "data folder (embedded PostgreSQL lives here)")
      ->envname("GPUFED_DATA_DIR")
      ->capture_default_str();
  app.add_option("--database-url", config.database_url,
                 "libpq connection string; empty runs an embedded PostgreSQL")
      ->envname("GPUFED_DATABASE_URL");
  app.add_option("--database-url-file", config.database_url_file,
                 "file holding the libpq connection string (mode 0600), instead of --database-url")
      ->envname("GPUFED_DATABASE_URL_FILE");
  app.add_option("--audit-key-file", config.audit_key_file,
                 "key of the audit trail's hash chain (mode 0600, at least 32 bytes; default "
                 "DATA_DIR/audit.key, made on first start)")
      ->envname("GPUFED_AUDIT_KEY_FILE");
  app.add_option("--admin-token-file", config.admin_token_file,
                 "where the bootstrap admin token is written (default DATA_DIR/admin.token)")
      ->envname("GPUFED_ADMIN_TOKEN_FILE");
  app.add_option("--ready-file", config.ready_file, "written with the bound ports once serving");
  app.add_option("--log-level", config.log_level, "trace, debug, info, warn, error")
      ->envname("GPUFED_LOG_LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))
      ->capture_default_str();
  app.add_option("--tls-cert-file", config.tls_cert_file,
                 "TLS certificate (PEM, intermediates after it) for gRPC and HTTP; re-read when "
                 "it changes")
      ->envname("GPUFED_TLS_CERT_FILE");
  app.add_option("--tls-key-file", config.tls_key_file, "the certificate's private key (PEM)")
      ->envname("GPUFED_TLS_KEY_FILE");
  app.add_option("--tls-reload-interval", config.tls_reload_interval_seconds,
                 "seconds between gRPC's looks at the certificate files (HTTPS looks at every "
                 "new connection)")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app.add_flag("--insecure-plaintext", config.insecure_plaintext,
               "DEVELOPMENT ONLY: serve gRPC and HTTP without TLS (tokens travel in the clear)");
  app.add_option("--cluster-ca-cert-file", config.cluster_ca_cert_file,
                 "cluster CA certificate (PEM): agents' client certificates are verified "
                 "against it (mutual TLS)")
      ->envname("GPUFED_CLUSTER_CA_CERT_FILE");
  app.add_flag("--require-agent-certificates", config.require_agent_certificates,
               "agents must present a cluster certificate; agent tokens open no agent stream");
  app.add_option("--cluster-ca-key-file", config.cluster_ca_key_file,
                 "the cluster CA's private key (PEM, mode 0600): issues cluster certificates")
      ->envname("GPUFED_CLUSTER_CA_KEY_FILE");
  app.add_option("--jwt-jwks-file", config.jwt_jwks_file,
                 "JWKS (JSON) of an identity provider: JWTs signed by its keys (RS256, ES256) "
                 "are accepted as bearer tokens; re-read when it changes")
      ->envname("GPUFED_JWT_JWKS_FILE");
  app.add_option("--jwt-issuer", config.jwt_issuer, "the iss every JWT must carry")
      ->envname("GPUFED_JWT_ISSUER");
  app.add_option("--jwt-audience", config.jwt_audience, "the aud every JWT must carry")
      ->envname("GPUFED_JWT_AUDIENCE");
  app.add_option("--jwt-subject-claim", config.jwt_subject_claim,
                 "the JWT claim that names the subject (as role bindings name it)")
      ->capture_default_str();
  app.add_option("--jwt-role-claim", config.jwt_role_claim,
                 "a JWT claim naming a role, capped by the subject's role binding; empty: roles "
                 "come from role bindings only");
  app.add_option("--jwt-tenant-claim", config.jwt_tenant_claim,
                 "a JWT claim naming the tenant the token acts in");
  app.add_option("--jwt-project-claim", config.jwt_project_claim,
                 "a JWT claim naming the project (of that tenant) the token acts in");
  app.add_option("--cluster-cert-lifetime-days", config.cluster_cert_lifetime_days,
                 "days an issued cluster certificate lives")
      ->check(CLI::Range(1, 366))
      ->capture_default_str();
  app.add_option("--heartbeat-timeout", config.heartbeat_timeout_seconds,
                 "seconds without heartbeat before a cluster is unreachable")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  app.add_option("--heartbeat-interval-ms", config.heartbeat_interval_ms,
                 "how often agents heartbeat")
      ->check(CLI::Range(50, 600000))
      ->capture_default_str();
  app.add_option("--archive-after-hours", config.archive_after_hours,
                 "finished workloads older than this leave the hot table (0: never)")
      ->check(CLI::Range(0, 24 * 3650))
      ->capture_default_str();
  app.add_option("--mig-basis", config.mig_basis,
                 "what a MIG instance is charged of its GPU: compute, memory or larger")
      ->check(CLI::IsMember({"compute", "memory", "larger"}))
      ->capture_default_str();
  app.add_option("--meter-interval-seconds", config.meter_interval_seconds,
                 "how often running workloads are metered (0: only when they end)")
      ->check(CLI::Range(0, 3600))
      ->capture_default_str();
  app.add_option("--telemetry-retention-hours", config.telemetry_retention_hours,
                 "how long agents' per-minute GPU telemetry is kept (2..8760; reports keep its "
                 "sums)")
      ->check(CLI::Range(2, 24 * 365))
      ->capture_default_str();
  app.add_option("--idle-cost-policy", config.idle_cost_policy,
                 "cost allocation's idle capacity: separate (its own line) or spread (over the "
                 "tenants that used each resource type)")
      ->check(CLI::IsMember({"separate", "spread"}))
      ->capture_default_str();
  app.add_option("--agent-lease-ms", config.agent_lease_ms,
                 "an agent that cannot renew its lease this long stops its restartable work; "
                 "0: 40% of the heartbeat timeout")
      ->check(CLI::Range(0, 3600000))
      ->capture_default_str();
  app.add_option("--agent-register-timeout-ms", config.agent_register_timeout_ms,
                 "an agent stream that has not registered this long after opening is closed")
      ->check(CLI::Range(100, 600000))
      ->capture_default_str();
  app.add_option("--executor-threads", config.executor_threads,
                 "threads for database work behind the user-facing gRPC handlers")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  app.add_option("--agent-executor-threads", config.agent_executor_threads,
                 "threads for agent streams (apart from user traffic)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--placement-policy", config.placement_policy,
                 "placement policy: random, first-fit, best-fit, dot-product, gpu-packing, fgd, "
                 "gpufed")
      ->envname("GPUFED_PLACEMENT_POLICY")
      ->check(CLI::IsMember(gpufed::PolicyNames()))
      ->capture_default_str();
  app.add_option("--placement-seed", config.placement_seed, "seed for random tie-breaks")
      ->capture_default_str();
  app.add_option("--mig-partitioning", config.mig_partitioning,
                 "may the scheduler change the MIG layout of idle GPUs")
      ->capture_default_str();
  app.add_option("--reclaim-min-runtime", config.reclaim_min_runtime_seconds,
                 "seconds borrowed work runs before a reclaim may stop it")
      ->check(CLI::Range(0, 7 * 24 * 3600))
      ->capture_default_str();
  app.add_option("--reborrow-backoff", config.reborrow_backoff_seconds,
                 "seconds a tenant may not borrow a resource again after it was reclaimed")
      ->check(CLI::Range(0, 24 * 3600))
      ->capture_default_str();
  app.add_option("--starvation-bound", config.starvation_bound_seconds,
                 "seconds a whole-GPU workload is overtaken before GPUs are held for it (0: never)")
      ->check(CLI::Range(0, 7 * 24 * 3600))
      ->capture_default_str();
  app.add_option("--fair-share-half-life-hours", config.fair_share_half_life_hours,
                 "hours after which usage counts half as much in fair share")
      ->check(CLI::Range(1, 24 * 365))
      ->capture_default_str();
  app.add_option("--write-rate", config.write_rate_per_second,
                 "writes per second one caller (API token) may make on average (0: no limit)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--write-burst", config.write_burst,
                 "writes one caller may make at once, beyond its rate")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  app.add_option("--max-watch-streams", config.max_watch_streams,
                 "Watch streams one caller may hold open at once")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--max-call-seconds", config.max_call_seconds,
                 "the longest a call is served; a later client deadline (or none) is cut to it")
      ->check(CLI::Range(1, 3600))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return absl::CancelledError("help");
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  if (!gpufed::MakePolicy(config.placement_policy).ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("placement_policy: unknown policy \"", config.placement_policy,
                     "\" (known: ", absl::StrJoin(gpufed::PolicyNames(), ", "), ")"));
  }
  if (config.agent_lease_ms == 0) config.agent_lease_ms = config.heartbeat_timeout_seconds * 400;
  if (config.agent_lease_ms >= config.heartbeat_timeout_seconds * 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("agent_lease_ms: must be shorter than the heartbeat timeout (",
                     config.agent_lease_ms, " ms >= ", config.heartbeat_timeout_seconds,
                     " s): a partitioned agent must stop its work "
                     "before the server moves it"));
  }
  if (config.agent_lease_ms < 2 * config.heartbeat_interval_ms) {
    return absl::InvalidArgumentError(absl::StrCat(
        "agent_lease_ms: must be at least two heartbeat intervals (", config.agent_lease_ms,
        " ms < 2 x ", config.heartbeat_interval_ms, " ms): one late heartbeat would stop work"));
  }
  if (!gpufed::ParseMigBasis(config.mig_basis)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mig_basis: must be compute, memory or larger, got \"", config.mig_basis, "\""));
  }
  if (config.meter_interval_seconds < 0 || config.meter_interval_seconds > 3600) {
    return absl::InvalidArgumentError(
        absl::StrCat("meter_interval_seconds: must be 0 (only when runs end) to 3600, got ",
                     config.meter_interval_seconds));
  }
  if (!gpufed::ParseIdlePolicy(config.idle_cost_policy)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "idle_cost_policy: must be separate or spread, got \"", config.idle_cost_policy, "\""));
  }
  if (config.telemetry_retention_hours < 2 || config.telemetry_retention_hours > 24 * 365) {
    return absl::InvalidArgumentError(absl::StrCat(
        "telemetry_retention_hours: must be 2 to 8760, got ", config.telemetry_retention_hours));
  }
  // The flag's range check does not see a value from the file.
  if (config.archive_after_hours < 0 || config.archive_after_hours > 24 * 3650) {
    return absl::InvalidArgumentError(absl::StrCat(
        "archive_after_hours: must be 0 (never) to 87600, got ", config.archive_after_hours));
  }
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"reclaim_min_runtime_seconds",
                                    config.reclaim_min_runtime_seconds},
        std::pair<const char*, int>{"reborrow_backoff_seconds", config.reborrow_backoff_seconds},
        std::pair<const char*, int>{"starvation_bound_seconds", config.starvation_bound_seconds}}) {
    if (value < 0 || value > 7 * 24 * 3600) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": must be 0 to 604800 seconds, got ", value));
    }
  }
  if (config.fair_share_half_life_hours < 1 || config.fair_share_half_life_hours > 24 * 365) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fair_share_half_life_hours: must be 1 to 8760, got ", config.fair_share_half_life_hours));
  }
  // The flags' range checks do not see values from the file.
  if (!(config.write_rate_per_second >= 0 && config.write_rate_per_second <= 1e6)) {
    return absl::InvalidArgumentError(
        absl::StrCat("write_rate_per_second: must be 0 (no limit) to 1000000, got ",
                     config.write_rate_per_second));
  }
  for (const auto& [name, value, low, high] :
       {std::tuple<const char*, int, int, int>{"write_burst", config.write_burst, 1, 1000000},
        std::tuple<const char*, int, int, int>{"max_watch_streams", config.max_watch_streams, 1,
                                               100000},
        std::tuple<const char*, int, int, int>{"max_call_seconds", config.max_call_seconds, 1,
                                               3600}}) {
    if (value < low || value > high) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": must be ", low, " to ", high, ", got ", value));
    }
  }
  if (config.tls_reload_interval_seconds < 1 || config.tls_reload_interval_seconds > 86400) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_reload_interval_seconds: must be 1 to 86400, got ",
                     config.tls_reload_interval_seconds));
  }
  if (config.cluster_cert_lifetime_days < 1 || config.cluster_cert_lifetime_days > 366) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster_cert_lifetime_days: must be 1 to 366, got ", config.cluster_cert_lifetime_days));
  }
  if (absl::Status s = CheckTlsSettings(config); !s.ok()) return s;
  if (absl::Status s = CheckJwtSettings(config); !s.ok()) return s;
  if (!config.database_url_file.empty()) {
    if (!config.database_url.empty()) {
      return absl::InvalidArgumentError(
          "database_url_file: database_url is set too; give the connection string once");
    }
    if (absl::Status s = CheckSecretFile("database_url_file", config.database_url_file); !s.ok()) {
      return absl::InvalidArgumentError(s.message());
    }
    std::ifstream in(config.database_url_file);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      return absl::InvalidArgumentError(
          absl::StrCat("database_url_file: cannot read ", config.database_url_file));
    }
    config.database_url = std::string(absl::StripAsciiWhitespace(text.str()));
    if (config.database_url.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("database_url_file: ", config.database_url_file, " is empty"));
    }
  }
  if (config.admin_token_file.empty()) config.admin_token_file = config.data_dir + "/admin.token";
  return config;
}

absl::Status CheckSecretFile(absl::string_view setting, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(setting, ": cannot read ", path, ": ",
                                                   std::generic_category().message(errno)));
  }
  return auth::CheckSecretFileMode(setting, path);
}

absl::Status CheckTlsSettings(const ServerConfig& config) {
  const bool cert = !config.tls_cert_file.empty();
  const bool key = !config.tls_key_file.empty();
  const bool ca_cert = !config.cluster_ca_cert_file.empty();
  const bool ca_key = !config.cluster_ca_key_file.empty();
  if (ca_cert && !ca_key) {
    return absl::InvalidArgumentError("cluster_ca_key_file: required with cluster_ca_cert_file");
  }
  if (ca_key && !ca_cert) {
    return absl::InvalidArgumentError("cluster_ca_cert_file: required with cluster_ca_key_file");
  }
  if (config.require_agent_certificates && !ca_cert) {
    return absl::InvalidArgumentError(
        "require_agent_certificates: needs the cluster CA (cluster_ca_cert_file, "
        "cluster_ca_key_file)");
  }
  if (config.insecure_plaintext) {
    if (cert || key) {
      return absl::InvalidArgumentError(
          "insecure_plaintext: a TLS certificate is configured too; give one or the other");
    }
    return absl::OkStatus();
  }
  if (!cert && !key) {
    return absl::InvalidArgumentError(
        "no TLS certificate: set tls_cert_file and tls_key_file (--tls-cert-file, "
        "--tls-key-file), or for development only insecure_plaintext (--insecure-plaintext)");
  }
  if (!cert) return absl::InvalidArgumentError("tls_cert_file: required with tls_key_file");
  if (!key) return absl::InvalidArgumentError("tls_key_file: required with tls_cert_file");
  return absl::OkStatus();
}

absl::Status CheckJwtSettings(const ServerConfig& config) {
  if (config.jwt_jwks_file.empty()) {
    for (const auto& [name, value] : {std::pair{"jwt_issuer", &config.jwt_issuer},
                                      {"jwt_audience", &config.jwt_audience},
                                      {"jwt_role_claim", &config.jwt_role_claim},
                                      {"jwt_tenant_claim", &config.jwt_tenant_claim},
                                      {"jwt_project_claim", &config.jwt_project_claim}}) {
      if (!value->empty()) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": needs jwt_jwks_file"));
      }
    }
    return absl::OkStatus();
  }
  if (config.jwt_issuer.empty()) {
    return absl::InvalidArgumentError("jwt_issuer: required with jwt_jwks_file");
  }
  if (config.jwt_audience.empty()) {
    return absl::InvalidArgumentError("jwt_audience: required with jwt_jwks_file");
  }
  if (config.jwt_subject_claim.empty()) {
    return absl::InvalidArgumentError("jwt_subject_claim: must not be empty");
  }
  if (!config.jwt_project_claim.empty() && config.jwt_tenant_claim.empty()) {
    return absl::InvalidArgumentError(
        "jwt_project_claim: needs jwt_tenant_claim (a project belongs to a tenant)");
  }
  return absl::OkStatus();
}

}  // namespace gpufed::server
