#include "server/server.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/agent_service.h"
#include "api/authn.h"
#include "api/cluster_service.h"
#include "api/executor.h"
#include "api/metrics.h"
#include "api/parse_errors.h"
#include "api/tenant_service.h"
#include "api/watch_hub.h"
#include "api/workload_service.h"
#include "auth/token.h"
#include "federation/scheduler.h"
#include "federation/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "spdlog/spdlog.h"
#include "storage/embedded_postgres.h"
#include "storage/leader_lock.h"
#include "storage/migrator.h"
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

}  // namespace

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
  int port = 0;
  RETURN_IF_ERROR(SplitHostPort("grpc_listen", config_.grpc_listen, &grpc_host, &port));
  RETURN_IF_ERROR(SplitHostPort("http_listen", config_.http_listen, &http_host, &port));

  std::error_code ec;
  std::filesystem::create_directories(config_.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("data_dir: cannot create ", config_.data_dir, ": ", ec.message()));
  }

  if (config_.database_url.empty()) {
    ASSIGN_OR_RETURN(embedded_,
                     storage::EmbeddedPostgres::Create(
                         (std::filesystem::absolute(config_.data_dir) / "postgres").string()));
    dsn_ = embedded_->dsn();
    spdlog::info("embedded PostgreSQL {} in {}", embedded_->reused() ? "reused" : "started",
                 embedded_->data_dir());
  } else {
    dsn_ = config_.database_url;
  }
  RETURN_IF_ERROR(storage::MigrateDatabase(dsn_));
  ASSIGN_OR_RETURN(store_, storage::PgStore::Create(dsn_, storage::PgStoreOptions()));
  RETURN_IF_ERROR(BootstrapAdminToken());

  registry_ = std::make_shared<prometheus::Registry>();
  metrics_ = std::make_unique<api::Metrics>(*registry_);
  SchedulerOptions scheduler_options;
  scheduler_options.placement.policy = config_.placement_policy;
  scheduler_options.placement.seed = static_cast<uint64_t>(config_.placement_seed);
  scheduler_options.placement.partitioning = config_.mig_partitioning;
  scheduler_ = std::make_unique<Scheduler>(store_.get(), store_.get(), scheduler_options);
  authn_ = std::make_unique<api::Authenticator>(store_.get());
  executor_ = std::make_unique<api::Executor>("api", config_.executor_threads, 20000);
  watch_ = std::make_unique<api::WatchHub>();
  agents_ = std::make_unique<api::AgentHub>();
  {
    ASSIGN_OR_RETURN(std::vector<Cluster> clusters, store_->ListClusters(false));
    std::vector<std::string> names;
    names.reserve(clusters.size());
    for (const Cluster& c : clusters) names.push_back(c.info.name);
    agents_->Seed(names, std::chrono::steady_clock::now());
  }

  api::ApiContext ctx;
  ctx.workloads = store_.get();
  ctx.clusters = store_.get();
  ctx.tenants = store_.get();
  ctx.authn = authn_.get();
  ctx.executor = executor_.get();
  ctx.watch = watch_.get();
  ctx.scheduler = scheduler_.get();
  ctx.agents = agents_.get();
  ctx.metrics = metrics_.get();
  ctx.wake_scheduler = [this] { WakeScheduler(); };
  workload_service_ = std::make_unique<api::WorkloadServiceImpl>(ctx);
  cluster_service_ = std::make_unique<api::ClusterServiceImpl>(ctx);
  tenant_service_ = std::make_unique<api::TenantServiceImpl>(ctx);
  agent_service_ = std::make_unique<api::AgentServiceImpl>(
      ctx, std::chrono::milliseconds(config_.heartbeat_interval_ms));

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // TLS (and mTLS for agents, DESIGN.md §8) is not wired yet; listen on loopback by default.
  builder.AddListeningPort(config_.grpc_listen, grpc::InsecureServerCredentials(), &grpc_port_);
  builder.RegisterService(workload_service_.get());
  builder.RegisterService(cluster_service_.get());
  builder.RegisterService(tenant_service_.get());
  builder.RegisterService(agent_service_.get());
  builder.SetMaxReceiveMessageSize(64 * 1024 * 1024);  // inventories of large clusters
  // An unparsable request (invalid UTF-8 in a string) is INVALID_ARGUMENT naming the field.
  api::InstallParseErrorCapture();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<api::ParseErrorInterceptorFactory>());
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
  scheduler_thread_ = std::thread([this] { SchedulerLoop(); });
  grpc_->GetHealthCheckService()->SetServingStatus(true);

  if (!config_.ready_file.empty()) {
    nlohmann::json ready = {{"grpc_port", grpc_port_},
                            {"http_port", http_port_},
                            {"pid", static_cast<int>(::getpid())}};
    std::string tmp = config_.ready_file + ".tmp";
    std::ofstream(tmp) << ready.dump() << "\n";
    std::filesystem::rename(tmp, config_.ready_file, ec);
  }
  spdlog::info("gpufed-server serving: gRPC {}:{}, HTTP {}:{}", grpc_host, grpc_port_, http_host,
               http_port_);
  return absl::OkStatus();
}

absl::Status Server::BootstrapAdminToken() {
  ASSIGN_OR_RETURN(int64_t tokens, store_->CountTokens());
  if (tokens > 0) return absl::OkStatus();
  std::string token = auth::GenerateToken();
  TokenRecord record;
  record.subject = "bootstrap-admin";
  record.role = "platform-admin";
  // File first: a token only in the database would be a token nobody can use.
  RETURN_IF_ERROR(WriteSecretFile(config_.admin_token_file, token + "\n"));
  RETURN_IF_ERROR(store_->CreateToken(auth::HashToken(token), record));
  spdlog::info("no API tokens existed: wrote a platform-admin token to {}",
               config_.admin_token_file);
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
  http_ = std::make_unique<httplib::Server>();
  http_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
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
    absl::StatusOr<std::vector<std::pair<WorkloadState, int64_t>>> counts = store_->CountByState();
    if (counts.ok()) {
      for (int s = static_cast<int>(WorkloadState::kPending);
           s <= static_cast<int>(WorkloadState::kLost); ++s) {
        int64_t n = 0;
        for (const auto& [state, count] : *counts) {
          if (static_cast<int>(state) == s) n = count;
        }
        metrics_->workloads_by_state
            .Add({{"state", std::string(StateName(static_cast<WorkloadState>(s)))}})
            .Set(static_cast<double>(n));
      }
    }
    metrics_->scheduler_pending.Set(scheduler_->pending_count());
    prometheus::TextSerializer serializer;
    res.set_content(serializer.Serialize(registry_->Collect()),
                    "text/plain; version=0.0.4; charset=utf-8");
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

void Server::WakeScheduler() {
  absl::MutexLock lock(&wake_mu_);
  wake_ = true;
}

void Server::SchedulerLoop() {
  storage::LeaderLock lock(dsn_, storage::LeaderLock::kSchedulerKey);
  using Clock = std::chrono::steady_clock;
  const auto heartbeat_timeout = std::chrono::seconds(config_.heartbeat_timeout_seconds);
  constexpr auto kMinCycleInterval = std::chrono::milliseconds(10);
  Clock::time_point last_check{}, last_reload = Clock::now(), last_cycle{};
  bool leader = false;
  for (;;) {
    {
      absl::MutexLock l(&wake_mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake_mu_) { return wake_ || stopping_; };
      wake_mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Seconds(1));
      if (stopping_) break;
      wake_ = false;
    }
    const auto now = Clock::now();
    if (!leader) {
      scheduler_->ClearInbox();
      if (!lock.TryAcquire()) continue;
      absl::Status rebuilt = scheduler_->Rebuild();
      if (!rebuilt.ok()) {
        spdlog::error("scheduler: cannot load the pool: {}", rebuilt.ToString());
        lock.Release();
        continue;
      }
      leader = true;
      last_check = last_reload = now;
      metrics_->scheduler_leader.Set(1);
      spdlog::info("scheduler: active (holds the scheduler lock)");
    }
    if (now - last_check >= std::chrono::seconds(1)) {
      last_check = now;
      if (!lock.StillHeld()) {
        leader = false;
        metrics_->scheduler_leader.Set(0);
        spdlog::warn("scheduler: lost the scheduler lock; standing by");
        continue;
      }
      for (const std::string& cluster : agents_->TakeTimedOut(now, heartbeat_timeout)) {
        if (store_->SetClusterState(cluster, ClusterState::kUnreachable).ok()) {
          scheduler_->NotifyClusterState(cluster, ClusterState::kUnreachable);
          spdlog::warn("cluster {} unreachable: no heartbeat for {} s", cluster,
                       config_.heartbeat_timeout_seconds);
        }
      }
    }
    if (now - last_reload >= std::chrono::seconds(10)) {
      // Catches work submitted through other API replicas.
      last_reload = now;
      if (absl::Status s = scheduler_->ReloadPending(); !s.ok()) {
        spdlog::warn("scheduler: reload of the pending queue failed: {}", s.ToString());
      }
    }
    // Coalesce wake-ups: under a stream of submissions, one cycle per few milliseconds decides
    // (and commits) a batch instead of a transaction per submission.
    if (auto since = Clock::now() - last_cycle; since < kMinCycleInterval) {
      std::this_thread::sleep_for(kMinCycleInterval - since);
    }
    const auto t0 = Clock::now();
    last_cycle = t0;
    absl::StatusOr<CycleResult> cycle = scheduler_->RunCycle();
    metrics_->scheduler_cycle_seconds.Observe(
        std::chrono::duration<double>(Clock::now() - t0).count());
    if (!cycle.ok()) {
      spdlog::warn("scheduler cycle failed: {}", cycle.status().ToString());
      continue;
    }
    if (cycle->stats.repartitions > 0) {
      metrics_->mig_repartitions.Increment(cycle->stats.repartitions);
    }
    if (!cycle->placed.empty()) {
      metrics_->scheduler_placements.Increment(static_cast<double>(cycle->placed.size()));
      for (const Workload& w : cycle->placed) {
        for (const Repartition& r : w.assignment.repartitions) {
          spdlog::info("MIG repartition on {}/{} GPU {}: {}", w.assignment.cluster, r.node,
                       r.gpu_uuid, r.reason);
        }
      }
      agents_->Dispatch(cycle->placed);
      std::vector<WorkloadEvent> events;
      events.reserve(cycle->placed.size());
      for (const Workload& w : cycle->placed) {
        events.push_back(
            WorkloadEvent{w, WorkloadState::kPending, WorkloadState::kPlaced, w.update_time});
      }
      watch_->Publish(events);
      // More may fit (the cycle considers a bounded slice of the queue): go again at once.
      WakeScheduler();
    }
    metrics_->scheduler_pending.Set(scheduler_->pending_count());
  }
  lock.Release();
  metrics_->scheduler_leader.Set(0);
}

void Server::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (grpc_) grpc_->GetHealthCheckService()->SetServingStatus(false);
  {
    absl::MutexLock lock(&wake_mu_);
    stopping_ = true;
  }
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (grpc_) grpc_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  executor_.reset();  // finishes queued handler work
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
  if (grpc_) grpc_->Wait();
  store_.reset();
  if (embedded_) {
    if (absl::Status s = embedded_->Stop(); !s.ok()) {
      spdlog::warn("stopping embedded PostgreSQL: {}", s.ToString());
    }
  }
}

}  // namespace gpufed::server
