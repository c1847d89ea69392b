#include "server/server.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/agent_service.h"
#include "api/audit_service.h"
#include "api/authn.h"
#include "api/cluster_service.h"
#include "api/executor.h"
#include "api/limits.h"
#include "api/metrics.h"
#include "api/parse_errors.h"
#include "api/queued_audit_log.h"
#include "api/quota_service.h"
#include "api/rate_limit.h"
#include "api/report_http.h"
#include "api/report_service.h"
#include "api/revocations.h"
#include "api/rpc_metrics.h"
#include "api/tenant_service.h"
#include "api/watch_hub.h"
#include "api/workload_service.h"
#include "auth/audit_chain.h"
#include "auth/cluster_ca.h"
#include "auth/jwt.h"
#include "auth/token.h"
#include "federation/agent_registry.h"
#include "federation/clock.h"
#include "federation/control_loop.h"
#include "federation/control_plane.h"
#include "federation/scheduler.h"
#include "federation/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/tls.h"
#include "spdlog/spdlog.h"
#include "storage/embedded_postgres.h"
#include "storage/leader_lock.h"
#include "storage/migrator.h"
#include "storage/pg_audit_log.h"
#include "storage/pg_pool.h"
#include "storage/pg_store.h"

namespace gpufed::server {
namespace {

// Splits "host:port"; INVALID_ARGUMENT naming `field` otherwise.
absl::Status SplitHostPort(absl::string_view field, const std::string& address, std::string* host,
                           int* port) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(absl::string_view(address).substr(colon + 1), port) || *port < 0 ||
      *port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected HOST:PORT, got \"", address, "\""));
  }
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  return absl::OkStatus();
}

absl::Status WriteSecretFile(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", path));
  ::fchmod(fd, 0600);
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ok = ::fsync(fd) == 0 && ok;
  ::close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// The JWT settings of `config` as auth::JwtVerifier takes them.
auth::JwtOptions JwtOptionsOf(const ServerConfig& config) {
  auth::JwtOptions options;
  options.jwks_file = config.jwt_jwks_file;
  options.issuer = config.jwt_issuer;
  options.audience = config.jwt_audience;
  options.subject_claim = config.jwt_subject_claim;
  options.role_claim = config.jwt_role_claim;
  options.tenant_claim = config.jwt_tenant_claim;
  options.project_claim = config.jwt_project_claim;
  return options;
}

// The whole of the file named by `setting`; INVALID_ARGUMENT naming it when it cannot be read.
absl::StatusOr<std::string> ReadSettingFile(absl::string_view setting, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) return absl::InvalidArgumentError(absl::StrCat(setting, ": cannot read ", path));
  return text.str();
}

// The audit chain's key (ServerConfig::audit_key_file): read from the file configured, or from
// data_dir/audit.key, made on the first start when nothing is configured.
absl::StatusOr<std::string> LoadAuditKey(const ServerConfig& config) {
  std::string path = config.audit_key_file;
  if (path.empty()) {
    path = (std::filesystem::path(config.data_dir) / "audit.key").string();
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      // 256 random bits, as text so that operators can copy it to the other replicas.
      RETURN_IF_ERROR(WriteSecretFile(path, auth::GenerateToken() + "\n"));
      spdlog::info("audit key made in {} (keep a copy: verifying the audit trail needs it)", path);
    }
  }
  RETURN_IF_ERROR(CheckSecretFile("audit_key_file", path));
  ASSIGN_OR_RETURN(std::string text, ReadSettingFile("audit_key_file", path));
  std::string key(absl::StripTrailingAsciiWhitespace(text));
  if (key.size() < auth::kMinAuditKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("audit_key_file: ", path, " holds ", key.size(),
                                                   " bytes; at least ", auth::kMinAuditKeyBytes,
                                                   " are needed"));
  }
  return key;
}

}  // namespace

// The cluster CA as the control plane's certificate issuer.
class Server::CaIssuer final : public ClusterCertificateIssuer {
 public:
  CaIssuer(std::unique_ptr<auth::ClusterCa> ca, std::chrono::seconds lifetime)
      : ca_(std::move(ca)), lifetime_(lifetime) {}

  absl::StatusOr<IssuedClusterCertificate> Issue(const std::string& cluster,
                                                 const std::string& csr_pem,
                                                 Timestamp now) override {
    ASSIGN_OR_RETURN(auth::IssuedCertificate issued, ca_->Issue(cluster, csr_pem, now, lifetime_));
    IssuedClusterCertificate out;
    out.cert_pem = std::move(issued.cert_pem);
    out.key_pem = std::move(issued.key_pem);
    out.ca_cert_pem = ca_->cert_pem();
    out.certificate.serial = issued.info.serial;
    out.certificate.cluster = issued.info.cluster;
    out.certificate.not_before = issued.info.not_before;
    out.certificate.not_after = issued.info.not_after;
    return out;
  }

 private:
  const std::unique_ptr<auth::ClusterCa> ca_;
  const std::chrono::seconds lifetime_;
};

Server::Server(ServerConfig config) : config_(std::move(config)) {}

Server::~Server() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerConfig& config) {
  std::unique_ptr<Server> server(new Server(config));
  absl::Status status = server->Start();
  if (!status.ok()) {
    server->Shutdown();
    return status;
  }
  return server;
}

absl::Status Server::Start() {
  std::string grpc_host, http_host;
  int grpc_port = 0;
  int http_port = 0;
  RETURN_IF_ERROR(SplitHostPort("grpc_listen", config_.grpc_listen, &grpc_host, &grpc_port));
  RETURN_IF_ERROR(SplitHostPort("http_listen", config_.http_listen, &http_host, &http_port));
  if (grpc_port != 0 && grpc_port == http_port) {
    return absl::InvalidArgumentError(absl::StrCat(
        "http_listen: port ", http_port, " is grpc_listen's too; give each its own port"));
  }

  // Before anything starts: a certificate that does not load stops the server with one line.
  RETURN_IF_ERROR(CheckTlsSettings(config_));
  // So does a JWKS that does not.
  RETURN_IF_ERROR(CheckJwtSettings(config_));
  std::shared_ptr<const auth::JwtVerifier> jwt_verifier;
  if (!config_.jwt_jwks_file.empty()) {
    ASSIGN_OR_RETURN(jwt_verifier, auth::JwtVerifier::FromJwksFile(JwtOptionsOf(config_)));
    spdlog::info("JWTs of issuer {} for audience {} accepted: {} key(s) from {}",
                 config_.jwt_issuer, config_.jwt_audience, jwt_verifier->key_count(),
                 config_.jwt_jwks_file);
  }
  if (!config_.cluster_ca_cert_file.empty()) {
    // The key is checked before it is read, as the TLS key is.
    RETURN_IF_ERROR(CheckSecretFile("cluster_ca_key_file", config_.cluster_ca_key_file));
    ASSIGN_OR_RETURN(const std::string ca_cert,
                     ReadSettingFile("cluster_ca_cert_file", config_.cluster_ca_cert_file));
    ASSIGN_OR_RETURN(const std::string ca_key,
                     ReadSettingFile("cluster_ca_key_file", config_.cluster_ca_key_file));
    ASSIGN_OR_RETURN(std::unique_ptr<auth::ClusterCa> ca, auth::ClusterCa::Create(ca_cert, ca_key));
    cluster_issuer_ = std::make_unique<CaIssuer>(
        std::move(ca), std::chrono::hours(24) * config_.cluster_cert_lifetime_days);
    if (config_.insecure_plaintext) {
      spdlog::warn(
          "cluster_ca_cert_file with insecure_plaintext: certificates are issued but no client "
          "certificate can be presented; agents authenticate with tokens");
    }
  }
  std::shared_ptr<grpc::ServerCredentials> grpc_credentials;
  if (config_.insecure_plaintext) {
    spdlog::warn(
        "insecure_plaintext: gRPC and HTTP serve PLAINTEXT; bearer tokens travel in the clear. "
        "For development only: give tls_cert_file and tls_key_file in production");
    grpc_credentials = grpc::InsecureServerCredentials();
  } else {
    // The key is checked here, before it is read, so that no path reads a key open to others.
    RETURN_IF_ERROR(CheckSecretFile("tls_key_file", config_.tls_key_file));
    TlsFiles files{config_.tls_cert_file, config_.tls_key_file};
    ASSIGN_OR_RETURN(http_certificate_, HttpCertificate::Create(files));
    // HTTPS serves people and Prometheus only; agents speak gRPC.
    files.client_ca_file = config_.cluster_ca_cert_file;
    grpc_credentials = GrpcServerCredentials(files, config_.tls_reload_interval_seconds);
  }

  std::error_code ec;
  std::filesystem::create_directories(config_.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("data_dir: cannot create ", config_.data_dir, ": ", ec.message()));
  }

  clock_ = std::make_unique<SystemClock>();
  if (config_.database_url.empty()) {
    storage::EmbeddedPostgres::Options pg_options;
    pg_options.clock = clock_.get();
    ASSIGN_OR_RETURN(embedded_,
                     storage::EmbeddedPostgres::Create(
                         (std::filesystem::absolute(config_.data_dir) / "postgres").string(),
                         std::move(pg_options)));
    dsn_ = embedded_->dsn();
    spdlog::info("embedded PostgreSQL {} in {}", embedded_->reused() ? "reused" : "started",
                 embedded_->data_dir());
  } else {
    dsn_ = config_.database_url;
    // libpq's own parse errors quote the part they stumble on, which may be the password.
    RETURN_IF_ERROR(storage::CheckConnectionString(dsn_));
  }
  // Whatever libpq says about the database goes into the start-up error without the password.
  const auto redacted = [this](const absl::Status& s) {
    return absl::Status(s.code(), storage::RedactPassword(std::string(s.message()), dsn_));
  };
  if (absl::Status s = storage::MigrateDatabase(dsn_); !s.ok()) return redacted(s);
  storage::PgStoreOptions store_options;
  store_options.clock = clock_.get();
  store_options.metering.mig_basis = *ParseMigBasis(config_.mig_basis);  // checked by the config
  absl::StatusOr<std::unique_ptr<storage::PgStore>> store =
      storage::PgStore::Create(dsn_, store_options);
  if (!store.ok()) return redacted(store.status());
  store_ = *std::move(store);
  storage::PgAuditLogOptions audit_options;
  ASSIGN_OR_RETURN(audit_options.key, LoadAuditKey(config_));
  audit_options.clock = clock_.get();
  absl::StatusOr<std::unique_ptr<storage::PgAuditLog>> audit =
      storage::PgAuditLog::Create(dsn_, std::move(audit_options));
  if (!audit.ok()) return redacted(audit.status());
  audit_ = *std::move(audit);

  registry_ = std::make_shared<prometheus::Registry>();
  metrics_ = std::make_unique<api::Metrics>(*registry_);
  control_metrics_ = std::make_unique<api::PrometheusControlMetrics>(*metrics_);
  SchedulerOptions scheduler_options;
  scheduler_options.placement.policy = config_.placement_policy;
  scheduler_options.placement.seed = static_cast<uint64_t>(config_.placement_seed);
  scheduler_options.placement.partitioning = config_.mig_partitioning;
  scheduler_options.reclaim_min_runtime = std::chrono::seconds(config_.reclaim_min_runtime_seconds);
  scheduler_options.reborrow_backoff = std::chrono::seconds(config_.reborrow_backoff_seconds);
  scheduler_options.starvation_bound = std::chrono::seconds(config_.starvation_bound_seconds);
  scheduler_options.fair_share_half_life = std::chrono::hours(config_.fair_share_half_life_hours);
  scheduler_ = std::make_unique<Scheduler>(store_.get(), store_.get(), scheduler_options,
                                           store_.get(), clock_.get());
  authn_ = std::make_unique<api::Authenticator>(store_.get(), clock_.get(), store_.get());
  if (config_.require_agent_certificates) authn_->RequireAgentCertificates();
  if (jwt_verifier != nullptr) {
    authn_->SetJwtVerifier(std::move(jwt_verifier));
    jwks_thread_ = std::thread([this] { WatchJwks(); });
  }
  executor_ = std::make_unique<api::Executor>("api", config_.executor_threads, 20000);
  agent_executor_ =
      std::make_unique<api::Executor>("agents", config_.agent_executor_threads, 20000);
  watch_ = std::make_unique<api::WatchHub>(static_cast<size_t>(config_.max_watch_streams));
  writes_ = std::make_unique<api::RateLimiter>(
      api::RateLimiter::Options{config_.write_rate_per_second,
                                static_cast<double>(config_.write_burst)},
      clock_.get());
  revocations_ = std::make_unique<api::Revocations>(authn_.get(), watch_.get());
  agents_ = std::make_unique<AgentRegistry>(clock_.get());
  ControlPlanePorts ports;
  ports.workloads = store_.get();
  ports.clusters = store_.get();
  ports.tenants = store_.get();
  ports.quotas = store_.get();
  ports.events = watch_.get();
  ports.agents = agents_.get();
  ports.scheduler = scheduler_.get();
  ports.clock = clock_.get();
  ports.metrics = control_metrics_.get();
  ports.credentials = revocations_.get();
  ports.certificates = store_.get();
  ports.issuer = cluster_issuer_.get();
  api::QueuedAuditLog::Options queued_audit_options;
  queued_audit_options.dropped_counter = &metrics_->audit_rows_dropped;
  queued_audit_ = std::make_unique<api::QueuedAuditLog>(audit_.get(), queued_audit_options);
  ports.audit = queued_audit_.get();
  ports.metering = store_.get();
  ControlPlaneOptions plane_options;
  plane_options.idle_policy = *ParseIdlePolicy(config_.idle_cost_policy);  // checked by the config
  plane_ = std::make_unique<ControlPlane>(ports, plane_options);
  RETURN_IF_ERROR(plane_->Start());
  leader_lock_ = std::make_unique<storage::LeaderLock>(dsn_, storage::LeaderLock::kSchedulerKey);
  ControlLoopOptions loop_options;
  loop_options.heartbeat_timeout = std::chrono::seconds(config_.heartbeat_timeout_seconds);
  loop_options.archive_after = std::chrono::hours(config_.archive_after_hours);
  loop_options.meter_interval = std::chrono::seconds(config_.meter_interval_seconds);
  loop_options.telemetry_retention = std::chrono::hours(config_.telemetry_retention_hours);
  loop_ = std::make_unique<ControlLoop>(plane_.get(), scheduler_.get(), agents_.get(),
                                        leader_lock_.get(), clock_.get(), control_metrics_.get(),
                                        loop_options);
  plane_->SetWake([loop = loop_.get()] { loop->Wake(); });
  RETURN_IF_ERROR(BootstrapAdminToken());

  api::ApiContext ctx;
  ctx.plane = plane_.get();
  ctx.authn = authn_.get();
  ctx.executor = executor_.get();
  ctx.agent_executor = agent_executor_.get();
  ctx.watch = watch_.get();
  ctx.metrics = metrics_.get();
  ctx.clock = clock_.get();
  ctx.writes = writes_.get();
  ctx.max_call_duration = absl::Seconds(config_.max_call_seconds);
  ctx.heartbeat_interval = std::chrono::milliseconds(config_.heartbeat_interval_ms);
  ctx.agent_lease = std::chrono::milliseconds(config_.agent_lease_ms);
  ctx.agent_register_timeout = std::chrono::milliseconds(config_.agent_register_timeout_ms);
  api_context_ = std::make_unique<api::ApiContext>(ctx);  // the HTTP report download
  workload_service_ = std::make_unique<api::WorkloadServiceImpl>(ctx);
  cluster_service_ = std::make_unique<api::ClusterServiceImpl>(ctx);
  tenant_service_ = std::make_unique<api::TenantServiceImpl>(ctx);
  quota_service_ = std::make_unique<api::QuotaServiceImpl>(ctx);
  agent_service_ = std::make_unique<api::AgentServiceImpl>(ctx);
  audit_service_ = std::make_unique<api::AuditServiceImpl>(ctx);
  report_service_ = std::make_unique<api::ReportServiceImpl>(ctx);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.grpc_listen, grpc_credentials, &grpc_port_);
  // gRPC sets SO_REUSEPORT by default, which lets a second process (another gpufed-server, or
  // our own HTTP side) bind the same port and take half its connections. The port is ours alone.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(workload_service_.get());
  builder.RegisterService(cluster_service_.get());
  builder.RegisterService(tenant_service_.get());
  builder.RegisterService(quota_service_.get());
  builder.RegisterService(agent_service_.get());
  builder.RegisterService(audit_service_.get());
  builder.RegisterService(report_service_.get());
  // The largest legitimate message is an agent's inventory (~200 bytes a GPU). gRPC has one
  // receive limit for every method, so a user call's smaller one (api/limits.h) is checked by its
  // handler, which names the field that is too large. Nothing larger is sent either: it is what
  // gpufedctl and gpufed-agent accept.
  builder.SetMaxReceiveMessageSize(static_cast<int>(api::kMaxMessageBytes));
  builder.SetMaxSendMessageSize(static_cast<int>(api::kMaxMessageBytes));
  // An unparsable request (invalid UTF-8 in a string) is INVALID_ARGUMENT naming the field.
  api::InstallParseErrorCapture();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<api::ParseErrorInterceptorFactory>());
  // After the parse-error rewrite, so that the code counted is the one the client gets.
  interceptors.push_back(std::make_unique<api::RpcMetricsInterceptorFactory>(*metrics_));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // Agents keep a stream open for days, often through NAT: let them ping.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 5000);
  grpc_ = builder.BuildAndStart();
  if (!grpc_ || grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("grpc_listen: cannot listen on ", config_.grpc_listen, " (in use?)"));
  }
  RETURN_IF_ERROR(StartHttp());
  loop_thread_ = std::thread([this] { loop_->Run(); });
  if (embedded_) supervisor_thread_ = std::thread([this] { SuperviseDatabase(); });
  grpc_->GetHealthCheckService()->SetServingStatus(true);

  if (!config_.ready_file.empty()) {
    nlohmann::json ready = {{"grpc_port", grpc_port_},
                            {"http_port", http_port_},
                            {"pid", static_cast<int>(::getpid())}};
    std::string tmp = config_.ready_file + ".tmp";
    std::ofstream(tmp) << ready.dump() << "\n";
    std::filesystem::rename(tmp, config_.ready_file, ec);
  }
  spdlog::info("gpufed-server serving: gRPC {}:{}, {} {}:{}{}", grpc_host, grpc_port_,
               http_certificate_ ? "HTTPS" : "HTTP", http_host, http_port_,
               http_certificate_ ? absl::StrCat(" (TLS certificate ", config_.tls_cert_file, ")")
                                 : " (PLAINTEXT)");
  return absl::OkStatus();
}

absl::Status Server::BootstrapAdminToken() {
  ASSIGN_OR_RETURN(bool made, plane_->BootstrapAdminToken([this](const std::string& secret) {
    return WriteSecretFile(config_.admin_token_file, secret + "\n");
  }));
  if (made) {
    spdlog::info("no API tokens existed: wrote a platform-admin token to {}",
                 config_.admin_token_file);
  }
  return absl::OkStatus();
}

bool Server::Ready(std::string* why) {
  absl::StatusOr<int64_t> version = storage::AppliedSchemaVersion(dsn_);
  if (!version.ok()) {
    *why = absl::StrCat("database: ", version.status().message());
    return false;
  }
  if (*version != storage::LatestSchemaVersion()) {
    *why = absl::StrCat("schema version ", *version, ", expected ", storage::LatestSchemaVersion());
    return false;
  }
  return true;
}

absl::Status Server::StartHttp() {
  std::string host;
  int port = 0;
  RETURN_IF_ERROR(SplitHostPort("http_listen", config_.http_listen, &host, &port));
  if (http_certificate_) {
    // cpp-httplib's SSLServer with our set-up of its SSL_CTX: the certificate comes from
    // http_certificate_ at each handshake (server/tls.h), so new files need no restart.
    auto https = std::make_unique<httplib::SSLServer>(
        [cert = http_certificate_.get()](SSL_CTX& ctx) { return cert->SetUp(ctx); });
    if (!https->is_valid()) {
      return absl::InternalError("http_listen: cannot set up TLS (OpenSSL SSL_CTX)");
    }
    http_ = std::move(https);
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  // As for gRPC: SO_REUSEADDR (a restart may bind while old connections linger) but not
  // cpp-httplib's default SO_REUSEPORT, which would share the port with whoever else binds it.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  http_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    if (live()) {
      res.set_content("ok\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content("embedded PostgreSQL died and could not be restarted\n", "text/plain");
    }
  });
  http_->Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
    std::string why;
    if (Ready(&why)) {
      res.set_content("ready\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content(why + "\n", "text/plain");
    }
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    // On a database error the gauges keep their last values; /readyz reports the database.
    (void)plane_->RefreshGauges();
    prometheus::TextSerializer serializer;
    res.set_content(serializer.Serialize(registry_->Collect()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Get("/reports/usage.csv", [this](const httplib::Request& req, httplib::Response& res) {
    const api::HttpAnswer answer =
        api::UsageCsvOverHttp(*api_context_, req.get_header_value("Authorization"), req.params);
    res.status = answer.status;
    res.set_content(answer.body, answer.content_type);
  });
  if (port == 0) {
    http_port_ = http_->bind_to_any_port(host);
  } else {
    http_port_ = http_->bind_to_port(host, port) ? port : -1;
  }
  if (http_port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("http_listen: cannot listen on ", config_.http_listen, " (in use?)"));
  }
  http_thread_ = std::thread([this] { http_->listen_after_bind(); });
  return absl::OkStatus();
}

void Server::SuperviseDatabase() {
  // Restart attempts after a death, waiting 1, 2, 4, 8 and 16 s before each: the killed
  // postmaster's backends take a moment to notice and exit (until they do, a new postmaster
  // refuses the data folder), and a database that will not start within ~30 s needs someone.
  constexpr int kAttempts = 5;
  absl::MutexLock lock(&supervisor_mu_);
  auto wait = [this](absl::Duration d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(supervisor_mu_) {
    const MonotonicTime until = MonotonicAfter(*clock_, d);
    while (!supervisor_stop_ && !WaitUntil(supervisor_wake_, &supervisor_mu_, *clock_, until)) {
    }
    return !supervisor_stop_;
  };
  while (wait(absl::Seconds(1))) {
    if (embedded_->Running()) continue;
    spdlog::error("embedded PostgreSQL in {} is not running; restarting it", embedded_->data_dir());
    bool restarted = false;
    absl::Duration backoff = absl::Seconds(1);
    for (int attempt = 1; attempt <= kAttempts && !restarted; ++attempt, backoff *= 2) {
      if (!wait(backoff)) return;
      const absl::Status s = embedded_->Restart();
      restarted = s.ok();
      if (restarted) {
        spdlog::warn("embedded PostgreSQL restarted (attempt {}); calls resume", attempt);
      } else {
        spdlog::error("embedded PostgreSQL restart attempt {} of {} failed: {}", attempt, kAttempts,
                      s.ToString());
      }
    }
    if (!restarted) {
      spdlog::critical("embedded PostgreSQL could not be restarted; gpufed-server stops");
      live_ = false;
      kill(getpid(), SIGTERM);  // main's sigwait: shut down, exit non-zero
      return;
    }
  }
}

void Server::WatchJwks() {
  // What was loaded last: a change of either means the file was replaced or rewritten.
  const auto look = [this] {
    struct stat st {};
    if (::stat(config_.jwt_jwks_file.c_str(), &st) != 0) return std::pair<int64_t, int64_t>{-1, -1};
    return std::pair<int64_t, int64_t>{
        static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, st.st_size};
  };
  auto loaded = look();
  absl::MutexLock lock(&jwks_mu_);
  while (!jwks_stop_) {
    const MonotonicTime until =
        MonotonicAfter(*clock_, absl::Seconds(config_.tls_reload_interval_seconds));
    while (!jwks_stop_ && !WaitUntil(jwks_wake_, &jwks_mu_, *clock_, until)) {
    }
    if (jwks_stop_) return;
    const auto now = look();
    if (now == loaded) continue;
    absl::StatusOr<std::unique_ptr<auth::JwtVerifier>> verifier =
        auth::JwtVerifier::FromJwksFile(JwtOptionsOf(config_));
    if (!verifier.ok()) {
      // Keep serving with the keys there were: a half-written file must not lock everyone out.
      spdlog::warn("jwt_jwks_file changed but does not load; keeping the previous keys: {}",
                   verifier.status().ToString());
      continue;
    }
    loaded = now;
    spdlog::info("jwt_jwks_file re-read: {} key(s)", (*verifier)->key_count());
    authn_->SetJwtVerifier(*std::move(verifier));
  }
}

void Server::Shutdown() {
  if (shut_down_.exchange(true)) return;
  {
    absl::MutexLock lock(&jwks_mu_);
    jwks_stop_ = true;
    jwks_wake_.SignalAll();
  }
  if (jwks_thread_.joinable()) jwks_thread_.join();
  {
    absl::MutexLock lock(&supervisor_mu_);
    supervisor_stop_ = true;
    supervisor_wake_.SignalAll();
  }
  if (supervisor_thread_.joinable()) supervisor_thread_.join();
  if (grpc_) grpc_->GetHealthCheckService()->SetServingStatus(false);
  if (loop_) loop_->Stop();
  if (loop_thread_.joinable()) loop_thread_.join();
  if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  executor_.reset();  // finishes queued handler work
  agent_executor_.reset();
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
  if (grpc_) grpc_->Wait();
  // The store answers the submissions still queued; their callbacks reach the control plane
  // and the loop, which therefore go after it.
  store_.reset();
  loop_.reset();
  leader_lock_.reset();
  // Last of the refused calls' audit rows, before the database stops.
  queued_audit_.reset();
  if (embedded_) {
    if (absl::Status s = embedded_->Stop(); !s.ok()) {
      spdlog::warn("stopping embedded PostgreSQL: {}", s.ToString());
    }
  }
}

}  // namespace gpufed::server
