#include "tests/support/process_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

#ifndef GPUFED_SOURCE_DIR
#error "GPUFED_SOURCE_DIR must be defined by the build"
#endif

namespace gpufed::testing {

std::string BinDir() { return std::filesystem::canonical("/proc/self/exe").parent_path().string(); }

std::string SourceDir() { return GPUFED_SOURCE_DIR; }

std::string ReadFileOrEmpty(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv, const std::string& log_path,
    const std::map<std::string, std::string>& extra_env) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    // Die with the test: nothing it started may outlive it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    // The parent may block signals (the server does); children start with a clean mask.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    }
    for (const auto& [k, v] : extra_env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(pid, log_path));
}

ChildProcess::~ChildProcess() { Stop(); }

bool ChildProcess::Running() {
  if (reaped_) return false;
  pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

int ChildProcess::Stop(std::chrono::milliseconds grace) {
  if (!Running()) return status_;
  ::kill(pid_, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + grace;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!Running()) return status_;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Kill();
  return status_;
}

void ChildProcess::Kill() {
  if (!Running()) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, &status_, 0);
  reaped_ = true;
}

absl::StatusOr<ServerProcess> StartServer(const ServerOptions& options) {
  std::filesystem::create_directories(options.data_dir);
  const std::string ready = options.data_dir + "/ready.json";
  std::filesystem::remove(ready);
  std::vector<std::string> argv = {
      BinDir() + "/gpufed-server", absl::StrCat("--grpc-listen=127.0.0.1:", options.grpc_port),
      "--http-listen=127.0.0.1:0", "--data-dir=" + options.data_dir, "--ready-file=" + ready,
      "--log-level=info",
      // Tests and benchmarks talk plaintext to their own loopback servers; TLS is tested by
      // tests/service/tls_test.cc and the demo.
      "--insecure-plaintext"};
  if (!options.database_url.empty()) argv.push_back("--database-url=" + options.database_url);
  argv.insert(argv.end(), options.extra_args.begin(), options.extra_args.end());
  ServerProcess server;
  auto process = ChildProcess::Spawn(argv, options.data_dir + "/server.log");
  if (!process.ok()) return process.status();
  server.process = std::move(*process);
  const auto deadline = std::chrono::steady_clock::now() + options.ready_timeout;
  while (!std::filesystem::exists(ready)) {
    if (!server.process->Running()) {
      return absl::InternalError(
          absl::StrCat("gpufed-server exited during start; see ", options.data_dir, "/server.log"));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("gpufed-server did not become ready");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(ready);
  nlohmann::json j = nlohmann::json::parse(in);
  server.grpc_port = j.at("grpc_port").get<int>();
  server.http_port = j.at("http_port").get<int>();
  httplib::Client http("127.0.0.1", server.http_port);
  for (;;) {
    auto res = http.Get("/readyz");
    if (res && res->status == 200) break;
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError("gpufed-server /readyz never turned green");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream token_file(options.data_dir + "/admin.token");
  std::getline(token_file, server.admin_token);
  return server;
}

std::shared_ptr<grpc::Channel> Connect(const std::string& address) {
  // gRPC's default reconnect backoff grows to two minutes; tests restart servers and want the
  // channel back within a second.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::shared_ptr<grpc::Channel> ConnectSlowReader(const std::string& address, int connection) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 10);
  // Channels with different arguments get subchannels of their own.
  args.SetInt("gpufed.test.connection", connection);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

namespace {

// The setup calls below wait for the server to take the connection: Connect's channels give up
// on a connection attempt after ~100 ms to 1 s (the minimum reconnect backoff is also gRPC's
// connect timeout), which a loaded machine can exceed before the server's first HTTP/2 frame.
// A test's setup failing UNAVAILABLE for that was a flake, not a finding.
void Authorize(grpc::ClientContext* ctx, const std::string& token) {
  ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  ctx->set_wait_for_ready(true);
}

absl::Status FromGrpc(const grpc::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                      absl::StrCat(what, ": ", s.error_message()));
}

}  // namespace

absl::StatusOr<std::string> BootstrapTenant(const std::string& address,
                                            const std::string& admin_token,
                                            const std::string& tenant, const std::string& project) {
  auto stub = v1::TenantService::NewStub(Connect(address));
  {
    grpc::ClientContext ctx;
    Authorize(&ctx, admin_token);
    v1::CreateTenantRequest req;
    req.set_name(tenant);
    v1::Tenant resp;
    grpc::Status s = stub->CreateTenant(&ctx, req, &resp);
    if (!s.ok() && s.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
      return FromGrpc(s, "CreateTenant");
    }
  }
  {
    grpc::ClientContext ctx;
    Authorize(&ctx, admin_token);
    v1::CreateProjectRequest req;
    req.set_tenant(tenant);
    req.set_name(project);
    v1::Project resp;
    grpc::Status s = stub->CreateProject(&ctx, req, &resp);
    if (!s.ok() && s.error_code() != grpc::StatusCode::ALREADY_EXISTS) {
      return FromGrpc(s, "CreateProject");
    }
  }
  grpc::ClientContext ctx;
  Authorize(&ctx, admin_token);
  v1::CreateTokenRequest req;
  req.set_subject(tenant + "-user");
  req.set_role(v1::ROLE_TENANT_USER);
  req.set_tenant(tenant);
  v1::CreateTokenResponse resp;
  if (absl::Status s = FromGrpc(stub->CreateToken(&ctx, req, &resp), "CreateToken"); !s.ok()) {
    return s;
  }
  return resp.token();
}

absl::StatusOr<std::string> CreateAgentToken(const std::string& address,
                                             const std::string& admin_token,
                                             const std::string& cluster) {
  auto stub = v1::TenantService::NewStub(Connect(address));
  grpc::ClientContext ctx;
  Authorize(&ctx, admin_token);
  v1::CreateTokenRequest req;
  req.set_subject("agent-" + cluster);
  req.set_role(v1::ROLE_AGENT);
  req.set_cluster(cluster);
  v1::CreateTokenResponse resp;
  if (absl::Status s = FromGrpc(stub->CreateToken(&ctx, req, &resp), "CreateToken"); !s.ok()) {
    return s;
  }
  return resp.token();
}

absl::StatusOr<std::unique_ptr<ChildProcess>> StartAgent(const AgentOptions& o) {
  std::vector<std::string> argv = {BinDir() + "/gpufed-agent", "--server=" + o.server_address,
                                   "--topology=" + o.topology, "--backend=" + o.backend,
                                   "--insecure-plaintext"};
  if (!o.work_dir.empty()) argv.push_back("--work-dir=" + o.work_dir);
  argv.insert(argv.end(), o.extra_args.begin(), o.extra_args.end());
  // The token travels in the environment, not argv (argv is visible to every local user).
  return ChildProcess::Spawn(argv, o.log_path, {{"GPUFED_AGENT_TOKEN", o.token}});
}

TempDir::TempDir(const std::string& prefix) {
  std::string templ = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  char* made = ::mkdtemp(templ.data());
  path_ = made != nullptr ? made : templ;
  // PostgreSQL (run as the postgres user when we are root) must be able to enter it.
  ::chmod(path_.c_str(), 0755);
}

TempDir::~TempDir() {
  if (std::getenv("GPUFED_KEEP_TEMP") != nullptr) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

RunResult RunProgram(const std::vector<std::string>& argv, const std::string& home_dir) {
  RunResult outcome;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return outcome;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], STDERR_FILENO);
  posix_spawn_file_actions_addclose(&actions, out_pipe[0]);
  posix_spawn_file_actions_addclose(&actions, err_pipe[0]);
  std::vector<std::string> args = argv;
  std::vector<char*> cargv;
  cargv.reserve(args.size() + 1);
  for (std::string& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  std::string home = absl::StrCat("HOME=", home_dir);
  std::vector<char*> envp = {home.data(), nullptr};
  pid_t pid = -1;
  const int spawned =
      posix_spawn(&pid, args[0].c_str(), &actions, nullptr, cargv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (spawned == 0) {
    pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
    std::string* texts[2] = {&outcome.out, &outcome.err};
    int open_fds = 2;
    while (open_fds > 0) {
      if (poll(fds, 2, -1) < 0) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].fd < 0 || fds[i].revents == 0) continue;
        char buf[65536];
        const ssize_t n = read(fds[i].fd, buf, sizeof buf);
        if (n > 0) {
          texts[i]->append(buf, static_cast<size_t>(n));
        } else {
          fds[i].fd = -1;
          --open_fds;
        }
      }
    }
    int status = 0;
    waitpid(pid, &status, 0);
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  close(out_pipe[0]);
  close(err_pipe[0]);
  return outcome;
}

}  // namespace gpufed::testing
