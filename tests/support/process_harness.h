#ifndef GPUFED_TESTS_SUPPORT_PROCESS_HARNESS_H_
#define GPUFED_TESTS_SUPPORT_PROCESS_HARNESS_H_

// Real processes for end-to-end tests and benchmarks: gpufed-server and gpufed-agent started
// from build/bin, on loopback ports they pick themselves, stopped by their owner (and killed by
// the kernel if the owner dies: PR_SET_PDEATHSIG).

#include <sys/types.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace gpufed::testing {

// The folder holding the running binary (build/bin), where the other programs are.
std::string BinDir();
// The source tree (for topology files and examples).
std::string SourceDir();
// The whole text of the file at `path`; empty if it cannot be read (a log not written yet).
std::string ReadFileOrEmpty(const std::string& path);

// What a program run to completion printed, and how it ended.
struct RunResult {
  int exit_code = -1;  // 128 + signal when killed; -1 if it could not start
  std::string out;
  std::string err;
};

// Runs argv[0] with argv to completion, stdout and stderr on pipes (not terminals), with HOME set
// to `home_dir` and no other environment (no config or token from whoever runs the tests).
RunResult RunProgram(const std::vector<std::string>& argv, const std::string& home_dir);

class ChildProcess {
 public:
  // Starts argv[0] with argv; stdout and stderr go to `log_path`.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(
      const std::vector<std::string>& argv, const std::string& log_path,
      const std::map<std::string, std::string>& extra_env = {});
  ~ChildProcess();  // Stop()

  // SIGTERM, then SIGKILL after `grace`; returns the exit status (waitpid form).
  int Stop(std::chrono::milliseconds grace = std::chrono::milliseconds(5000));
  // SIGKILL at once (a crash), and reap.
  void Kill();
  bool Running();
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] const std::string& log_path() const { return log_path_; }

 private:
  ChildProcess(pid_t pid, std::string log_path) : pid_(pid), log_path_(std::move(log_path)) {}
  pid_t pid_;
  bool reaped_ = false;
  int status_ = 0;
  std::string log_path_;
};

struct ServerProcess {
  std::unique_ptr<ChildProcess> process;
  int grpc_port = 0;
  int http_port = 0;
  std::string admin_token;
  [[nodiscard]] std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port); }
};

struct ServerOptions {
  std::string data_dir;      // required
  std::string database_url;  // empty: embedded PostgreSQL in data_dir
  int grpc_port = 0;         // 0: the server picks a free port
  std::vector<std::string> extra_args;
  std::chrono::seconds ready_timeout{90};
};

// Starts gpufed-server on 127.0.0.1 port 0 and waits until it is serving and /readyz is green.
absl::StatusOr<ServerProcess> StartServer(const ServerOptions& options);

// A channel to `address` whose calls carry `token`.
std::shared_ptr<grpc::Channel> Connect(const std::string& address);

// A channel whose transport takes no more than its caller reads (no bandwidth probing, a 16 KiB
// window), so that what a server sends past it waits on the server's side, as for a client that
// stops reading its socket. Channels with different `connection` values do not share a
// connection.
std::shared_ptr<grpc::Channel> ConnectSlowReader(const std::string& address, int connection = 0);

// Creates tenant + project (both may exist already) and a tenant-user token; returns the token.
absl::StatusOr<std::string> BootstrapTenant(const std::string& address,
                                            const std::string& admin_token,
                                            const std::string& tenant, const std::string& project);
absl::StatusOr<std::string> CreateAgentToken(const std::string& address,
                                             const std::string& admin_token,
                                             const std::string& cluster);

struct AgentOptions {
  std::string server_address;
  std::string token;
  std::string topology;  // path
  std::string backend = "sim";
  std::string work_dir;
  std::string log_path;
  std::vector<std::string> extra_args;
};
absl::StatusOr<std::unique_ptr<ChildProcess>> StartAgent(const AgentOptions& options);

// A fresh temporary directory, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "gpufed-test");
  ~TempDir();
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_PROCESS_HARNESS_H_
