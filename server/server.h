#ifndef GPUFED_SERVER_SERVER_H_
#define GPUFED_SERVER_SERVER_H_

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/config.h"

namespace grpc {
class Server;
}
namespace httplib {
class Server;
}
namespace prometheus {
class Registry;
}

namespace gpufed {
class AgentRegistry;
class ControlLoop;
class ControlPlane;
class Scheduler;
class SystemClock;
namespace storage {
class EmbeddedPostgres;
class LeaderLock;
class PgAuditLog;
class PgStore;
}  // namespace storage
namespace api {
class AgentServiceImpl;
struct ApiContext;
class AuditServiceImpl;
class ReportServiceImpl;
class Authenticator;
class ClusterServiceImpl;
class Executor;
struct Metrics;
class PrometheusControlMetrics;
class QueuedAuditLog;
class TenantServiceImpl;
class QuotaServiceImpl;
class RateLimiter;
class Revocations;
class WatchHub;
class WorkloadServiceImpl;
}  // namespace api
}  // namespace gpufed

namespace gpufed::server {

class HttpCertificate;

// The whole control plane in one process: (embedded) PostgreSQL, migrations, the store, the
// gRPC services, the scheduler loop (active only while it holds the scheduler lock) and the HTTP
// side (/healthz, /readyz, /metrics), both over TLS (server/tls.h) unless configured plaintext
// for development. The composition root: the only place that wires parts.
class Server {
 public:
  // Starts everything; returns once serving. Bad configuration or an unreachable / too-new
  // database fails here with one clear status.
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerConfig& config);
  ~Server();  // Shutdown()

  // Stops accepting calls, stops the loops, stops an embedded PostgreSQL. Idempotent.
  void Shutdown();

  [[nodiscard]] int grpc_port() const { return grpc_port_; }
  [[nodiscard]] int http_port() const { return http_port_; }
  // False once the server cannot go on by itself: its embedded PostgreSQL died and could not be
  // restarted. /healthz then answers 503, and the server has raised SIGTERM in its own process
  // so that gpufed-server's main shuts down and exits non-zero (systemd restarts it).
  [[nodiscard]] bool live() const { return live_.load(); }

 private:
  explicit Server(ServerConfig config);
  absl::Status Start();
  absl::Status BootstrapAdminToken();
  absl::Status StartHttp();
  bool Ready(std::string* why);
  // The embedded PostgreSQL's supervisor: checks every second that the postmaster lives, and
  // restarts it when it died, with backoff; gives up (live() false) when it will not start.
  void SuperviseDatabase();
  // Looks at jwt_jwks_file every tls_reload_interval_seconds and, when it changed (modification
  // time or size: the identity provider rotated its keys), gives the authenticator a verifier of
  // the new keys. A file that no longer loads keeps the keys there were (logged as a warning).
  void WatchJwks();
  class CaIssuer;

  const ServerConfig config_;
  std::unique_ptr<SystemClock> clock_;  // before everything that reads it
  // The cluster CA (cluster_ca_cert_file); null without one. Before the control plane.
  std::unique_ptr<CaIssuer> cluster_issuer_;
  std::unique_ptr<storage::EmbeddedPostgres> embedded_;
  std::string dsn_;
  std::unique_ptr<storage::PgStore> store_;
  std::unique_ptr<storage::PgAuditLog> audit_;
  // What the control plane records itself (refused calls), written off the callers' threads.
  std::unique_ptr<api::QueuedAuditLog> queued_audit_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<api::Metrics> metrics_;
  std::unique_ptr<api::PrometheusControlMetrics> control_metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<api::Authenticator> authn_;
  std::unique_ptr<api::Executor> executor_;
  std::unique_ptr<api::Executor> agent_executor_;
  std::unique_ptr<api::WatchHub> watch_;
  std::unique_ptr<api::RateLimiter> writes_;
  std::unique_ptr<api::Revocations> revocations_;  // after authn_ and watch_: it holds both
  std::unique_ptr<AgentRegistry> agents_;
  std::unique_ptr<ControlPlane> plane_;
  std::unique_ptr<storage::LeaderLock> leader_lock_;
  std::unique_ptr<ControlLoop> loop_;
  std::unique_ptr<api::WorkloadServiceImpl> workload_service_;
  std::unique_ptr<api::ClusterServiceImpl> cluster_service_;
  std::unique_ptr<api::TenantServiceImpl> tenant_service_;
  std::unique_ptr<api::QuotaServiceImpl> quota_service_;
  std::unique_ptr<api::AgentServiceImpl> agent_service_;
  std::unique_ptr<api::AuditServiceImpl> audit_service_;
  std::unique_ptr<api::ReportServiceImpl> report_service_;
  std::unique_ptr<grpc::Server> grpc_;
  // Null when serving plaintext; outlives http_, whose SSL_CTX calls it.
  std::unique_ptr<HttpCertificate> http_certificate_;
  std::unique_ptr<httplib::Server> http_;
  // What the gRPC services share, for the HTTP report download.
  std::unique_ptr<api::ApiContext> api_context_;
  std::thread http_thread_;
  std::thread loop_thread_;
  std::thread supervisor_thread_;
  absl::Mutex supervisor_mu_;
  absl::CondVar supervisor_wake_;
  bool supervisor_stop_ ABSL_GUARDED_BY(supervisor_mu_) = false;
  std::thread jwks_thread_;  // with jwt_jwks_file only
  absl::Mutex jwks_mu_;
  absl::CondVar jwks_wake_;
  bool jwks_stop_ ABSL_GUARDED_BY(jwks_mu_) = false;
  std::atomic<bool> live_{true};
  int grpc_port_ = 0;
  int http_port_ = 0;
  std::atomic<bool> shut_down_{false};
};

}  // namespace gpufed::server

#endif  // GPUFED_SERVER_SERVER_H_
