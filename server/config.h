#ifndef GPUFED_SERVER_CONFIG_H_
#define GPUFED_SERVER_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpufed::server {

// Everything gpufed-server reads at start (docs/interfaces.md). Built-in defaults, then the YAML
// file, then environment variables, then flags.
struct ServerConfig {
  std::string grpc_listen = "127.0.0.1:50051";
  std::string http_listen = "127.0.0.1:8080";
  std::string data_dir = "./gpufed-data";
  std::string database_url;  // empty: embedded PostgreSQL under data_dir/postgres
  // A file holding database_url (its password with it), read at start; not with database_url.
  // Like every file holding a secret, refused when other users may read or write it.
  std::string database_url_file;
  std::string admin_token_file;  // empty: data_dir/admin.token
  // The key of the audit trail's hash chain (docs/security.md#audit): at least 32 bytes, refused
  // when other users may read it (CheckSecretFile). Empty: data_dir/audit.key, made (0600, 256
  // random bits) on the first start. Every server of one database must be given the same key.
  std::string audit_key_file;
  std::string ready_file;
  std::string log_level = "info";
  // TLS on both listeners (docs/operations.md#tls): the certificate (PEM, intermediates after
  // it) and its key, re-read when the files change: by gRPC every tls_reload_interval_seconds,
  // by HTTPS at the next connection. Without them the server refuses to start, unless
  // insecure_plaintext: both listeners in the clear, bearer tokens readable on the wire
  // (development only; logged as a warning at start).
  std::string tls_cert_file;
  std::string tls_key_file;
  int tls_reload_interval_seconds = 10;
  bool insecure_plaintext = false;
  // Mutual TLS for agents (docs/operations.md#cluster-certificates): the cluster CA's
  // certificate and key (PEM). With them the gRPC listener asks every client for a certificate
  // and refuses the handshake of one this CA did not sign or that is outside its validity;
  // clients without a certificate (people and programs with bearer tokens) still get through.
  // With insecure_plaintext the CA still issues certificates (gpufedctl clusters enroll) but no
  // client certificate can be asked for: agents use tokens (development only). The key, like
  // every secret file, is refused when other users may read it.
  std::string cluster_ca_cert_file;
  std::string cluster_ca_key_file;
  // How long a certificate the cluster CA issues lives, in days (never past the CA's own).
  int cluster_cert_lifetime_days = 90;
  // Agents must present a cluster certificate: an agent token no longer opens the agent stream
  // (needs the cluster CA). Off by default, so clusters can move from tokens to certificates
  // one at a time; turn it on once every agent has its certificate.
  bool require_agent_certificates = false;
  // JWTs from an identity provider (docs/security.md#jwts-from-an-identity-provider): with
  // jwt_jwks_file (the provider's public keys, a JWKS), bearer values shaped like JWTs are
  // verified against it (RS256, ES256) and must carry iss jwt_issuer and aud jwt_audience (both
  // required with it). The subject is the jwt_subject_claim claim; the role comes from the
  // subject's role bindings, and from the jwt_role_claim claim capped by them when that is set;
  // jwt_tenant_claim and jwt_project_claim name the claims that say the scope. Re-read when the
  // file changes, like the TLS certificate. Empty jwt_jwks_file: JWTs are refused like any
  // unknown token.
  std::string jwt_jwks_file;
  std::string jwt_issuer;
  std::string jwt_audience;
  std::string jwt_subject_claim = "sub";
  std::string jwt_role_claim;
  std::string jwt_tenant_claim;
  std::string jwt_project_claim;
  // Failover (docs/operations.md#failover): an agent heartbeats every heartbeat_interval_ms;
  // each answered heartbeat extends its lease to agent_lease_ms from when it was sent, and when
  // the lease runs out it stops its restartable work by itself; a cluster silent for
  // heartbeat_timeout_seconds is declared lost and that work is placed elsewhere. The margin
  // between lease and timeout must cover the agent's stop (its kill grace). agent_lease_ms 0:
  // 40 % of the timeout.
  int heartbeat_timeout_seconds = 20;
  int heartbeat_interval_ms = 2000;
  int agent_lease_ms = 0;
  // An agent stream must register within this long of opening, or it is closed
  // (DEADLINE_EXCEEDED): a connection that never speaks holds nothing for long.
  int agent_register_timeout_ms = 10000;
  // Threads for blocking work behind user calls (reads; a submission leaves its thread at once
  // and completes when its group commits), and, apart from them, for agent streams.
  int executor_threads = 16;
  int agent_executor_threads = 4;
  // Placement (docs/placement.md): the policy by name, the seed for its random tie-breaks, and
  // whether the scheduler may change the MIG layout of idle GPUs (partitioning authority).
  std::string placement_policy = "gpufed";
  int64_t placement_seed = 1;
  bool mig_partitioning = true;
  // Workloads that ended this many hours ago move from the hot table to the archive (docs/
  // storage.md#archive); Get still finds them, List no longer does. 0: never.
  int archive_after_hours = 24 * 7;
  // Metering (docs/chargeback.md): how a MIG instance's share of its GPU is counted ("compute",
  // "memory" or "larger"), and how often runs still going are metered (0: only when they end).
  std::string mig_basis = "compute";
  int meter_interval_seconds = 60;
  // Telemetry (docs/chargeback.md#telemetry): agents' per-minute readings are kept this long
  // (reports keep what they measured). More than the hour a late minute is still accepted.
  int telemetry_retention_hours = 48;
  // Cost allocation (docs/chargeback.md#cost-allocation): idle capacity as its own line
  // ("separate") or shared over the tenants that used each resource type ("spread"), when a
  // request does not say.
  std::string idle_cost_policy = "separate";
  // Reclaim (docs/quotas.md#reclaim): borrowed work younger than reclaim_min_runtime_seconds is
  // not stopped for an owner; a tenant whose borrowed work was reclaimed may not borrow that
  // resource again for reborrow_backoff_seconds.
  int reclaim_min_runtime_seconds = 0;
  int reborrow_backoff_seconds = 30;
  // Fair share (docs/quotas.md#fair-share): usage counts half as much this many hours later.
  int fair_share_half_life_hours = 24 * 7;
  // No starvation (docs/quotas.md#no-starvation): a whole-GPU workload overtaken by work behind
  // it for this many seconds gets GPUs held for it as they free. 0: never.
  int starvation_bound_seconds = 30 * 60;
  // Limits that keep one caller from hurting others (docs/interfaces.md#limits, docs/
  // operations.md#limits). Writes (submit, cancel, create, delete, revoke, quota and cluster
  // writes; not agent reports) per caller (API token): write_rate_per_second on average, up to
  // write_burst at once; past that RESOURCE_EXHAUSTED. 0: no limit (benchmarks).
  double write_rate_per_second = 1000;
  int write_burst = 2000;
  // Watch streams one caller may hold open at once; the next is RESOURCE_EXHAUSTED.
  int max_watch_streams = 64;
  // The longest a unary call is served: a client's deadline beyond it (or none) is cut to it.
  int max_call_seconds = 60;
};

// Parses argv (with --config FILE and env vars). On --help, prints usage and returns
// CANCELLED; on bad flags or a bad file, INVALID_ARGUMENT with one clear line.
absl::StatusOr<ServerConfig> LoadServerConfig(int argc, char** argv);

// TLS or plaintext, said once: both certificate files, or insecure_plaintext, and not both;
// both cluster CA files or neither. INVALID_ARGUMENT naming the setting
// otherwise. (Whether the files load is Server's to check.)
absl::Status CheckTlsSettings(const ServerConfig& config);

// The jwt_* settings hang together: jwt_issuer and jwt_audience with jwt_jwks_file, a non-empty
// jwt_subject_claim, and no other jwt_* setting without jwt_jwks_file (it would do nothing).
// INVALID_ARGUMENT naming the setting otherwise. (Whether the JWKS loads is Server's to check.)
absl::Status CheckJwtSettings(const ServerConfig& config);

// A file holding a secret (the TLS key, database_url_file) must not be open to other users:
// FAILED_PRECONDITION "<setting>: <path> is readable by others (mode 0644): chmod 600 <path>"
// when the group or others may write it, others may read it, or the group may read it and the
// owner is not root (PostgreSQL's rule for its key file, so root:gpufed 0640 passes).
// INVALID_ARGUMENT when it cannot be looked at.
absl::Status CheckSecretFile(absl::string_view setting, const std::string& path);

}  // namespace gpufed::server

#endif  // GPUFED_SERVER_CONFIG_H_
