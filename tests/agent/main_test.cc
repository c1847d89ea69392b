// The gpufed-agent binary as a real process: flag errors, and a full run against a test
// AgentService with the process backend, ended by SIGTERM.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill
#include <spawn.h>
#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): POSIX mkdtemp
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/agent/event_collector.h"
#include "tests/agent/test_agent_server.h"

extern char** environ;

namespace gpufed {
namespace {

using ::gpufed::testing::MakeAssignment;
using ::gpufed::testing::StatusesOn;
using ::gpufed::testing::TestAgentServer;
using ::testing::HasSubstr;
using Log = TestAgentServer::Log;

std::optional<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// gpufed-agent started with stdout/stderr in files and GPUFED_* removed from its environment.
class AgentProcess {
 public:
  AgentProcess(const std::vector<std::string>& args, const std::string& dir) {
    out_ = dir + "/agent.out";
    err_ = dir + "/agent.err";
    // The test server is plaintext.
    std::vector<std::string> argv_s = {GPUFED_AGENT_BIN, "--insecure-plaintext"};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    argv.reserve(argv_s.size() + 1);
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!absl::StartsWith(*e, "GPUFED_")) envp.push_back(*e);
    }
    envp.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (posix_spawn(&pid_, argv[0], &fa, nullptr, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
  }
  ~AgentProcess() {
    if (pid_ > 0 && !exit_code_.has_value()) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  [[nodiscard]] bool started() const { return pid_ > 0; }
  void Signal(int sig) { kill(pid_, sig); }

  // The exit code (128 + signal when killed), or nullopt if still running after `timeout`.
  std::optional<int> Wait(absl::Duration timeout = absl::Seconds(30)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (!exit_code_.has_value()) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      } else if (absl::Now() > deadline) {
        return std::nullopt;
      } else {
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
    return exit_code_;
  }

  [[nodiscard]] std::string Stderr() const { return ReadFile(err_).value_or(""); }

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string out_;
  std::string err_;
};

class AgentBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ =
        (std::filesystem::temp_directory_path() / "gpufed-agent-bin-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    chmod(path.c_str(), 0600);  // the agent refuses a token file other users may read
    return path;
  }
  static std::string Topology() {
    return absl::StrCat(GPUFED_SOURCE_DIR, "/deploy/topologies/edge-l4.yaml");
  }

  std::string dir_;
};

// Exit 2 and exactly one line on stderr.
void ExpectConfigError(AgentProcess& p, const std::string& needle) {
  ASSERT_TRUE(p.started());
  EXPECT_EQ(p.Wait(), 2);
  const std::string err = p.Stderr();
  EXPECT_THAT(err, HasSubstr(needle));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST_F(AgentBinaryTest, BadFlagIsOneLineExitTwo) {
  AgentProcess p({"--bogus"}, dir_);
  ExpectConfigError(p, "--bogus");
}

TEST_F(AgentBinaryTest, BadTopologyIsOneLineExitTwo) {
  const std::string topo =
      Write("bad.yaml",
            "cluster: {name: c1, provider: onprem, region: r}\n"
            "node_groups:\n"
            "  - {name_prefix: n-, count: 1, gpus: {count: 8, model: H900}}\n");
  AgentProcess p({"--topology", topo, "--token", "t"}, dir_);
  ExpectConfigError(p, absl::StrCat(topo, ":3: node_groups[0].gpus.model: unknown GPU model"));
}

TEST_F(AgentBinaryTest, RepeatedSigtermStillStopsCleanly) {
  std::unique_ptr<TestAgentServer> server = TestAgentServer::Start();
  ASSERT_NE(server, nullptr);
  // A work dir of its own: the default one ($TMPDIR/gpufed-agent-<cluster>) is shared with
  // whatever else runs an agent for that cluster here, and would keep this test's ledger.
  AgentProcess p({"--server", server->address(), "--token", "t", "--topology", Topology(),
                  "--work-dir", dir_ + "/work"},
                 dir_);
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(server->WaitFor([](const Log& log) {
    return !log.streams.empty() && log.streams[0].messages.size() >= 2;
  })) << p.Stderr();
  // An unacknowledged status keeps the agent in its shutdown flush for a while (3 s), so the
  // second SIGTERM lands while it is still stopping.
  server->set_auto_ack(false);
  v1::ServerMessage assign;
  *assign.mutable_assign()->add_assignments() = MakeAssignment("w1");
  ASSERT_TRUE(server->Send(assign));
  ASSERT_TRUE(server->WaitFor([](const Log& log) {
    for (const v1::WorkloadStatus& s : StatusesOn(log.streams[0])) {
      if (s.state() == v1::WORKLOAD_STATE_SUCCEEDED) return true;
    }
    return false;
  })) << p.Stderr();
  p.Signal(SIGTERM);
  // The second one after the first was taken (pending signals of one kind merge).
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!absl::StrContains(p.Stderr(), "SIGTERM: shutting down") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(), 0) << p.Stderr();
}

TEST_F(AgentBinaryTest, RunsProcessWorkAndStopsCleanlyOnSigterm) {
  std::unique_ptr<TestAgentServer> server = TestAgentServer::Start();
  ASSERT_NE(server, nullptr);
  server->set_epoch(3);
  Write("agent.token", "tok-from-file\n");
  const std::string config = Write("agent.yaml", absl::StrCat("server: ", server->address(),
                                                              "\n"
                                                              "token_file: agent.token\n"
                                                              "topology: ",
                                                              Topology(),
                                                              "\n"
                                                              "backend: process\n"
                                                              "work_dir: work\n"
                                                              "kill_grace: 5\n"));
  AgentProcess p({"--config", config, "--log-level", "debug"}, dir_);
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(server->WaitFor([](const Log& log) {
    return !log.streams.empty() && log.streams[0].messages.size() >= 2;
  })) << p.Stderr();
  EXPECT_EQ(server->Snapshot().streams[0].authorization, "Bearer tok-from-file");

  v1::ServerMessage assign;
  v1::WorkAssignment hello = MakeAssignment("hello");
  hello.mutable_spec()->mutable_run()->add_command("echo hello-from-$GPUFED_WORKLOAD_ID");
  hello.mutable_assignment()->set_epoch(3);
  v1::WorkAssignment sleeper = MakeAssignment("sleeper");
  sleeper.mutable_spec()->mutable_run()->add_command(
      absl::StrCat("sleep 1000 & echo $! > ", dir_, "/gc.pid; wait"));
  sleeper.mutable_assignment()->set_epoch(3);
  *assign.mutable_assign()->add_assignments() = hello;
  *assign.mutable_assign()->add_assignments() = sleeper;
  ASSERT_TRUE(server->Send(assign));
  ASSERT_TRUE(server->WaitFor([](const Log& log) {
    bool hello_done = false;
    bool sleeper_running = false;
    for (const v1::WorkloadStatus& s : StatusesOn(log.streams[0])) {
      hello_done |= s.workload_id() == "hello" && s.state() == v1::WORKLOAD_STATE_SUCCEEDED;
      sleeper_running |= s.workload_id() == "sleeper" && s.state() == v1::WORKLOAD_STATE_RUNNING;
    }
    return hello_done && sleeper_running;
  })) << p.Stderr();
  EXPECT_EQ(ReadFile(dir_ + "/work/logs/hello.log"), "hello-from-hello\n");

  // The documented shutdown: SIGTERM stops the agent and the work it runs, exit 0.
  std::optional<std::string> gc;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!(gc = ReadFile(dir_ + "/gc.pid")).has_value() || gc->empty()) {
    ASSERT_LT(absl::Now(), deadline);
    absl::SleepFor(absl::Milliseconds(10));
  }
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripSuffix(*gc, "\n"), &grandchild));
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(), 0) << p.Stderr();
  const absl::Time dead_by = absl::Now() + absl::Seconds(20);
  bool dead = false;
  while (!dead && absl::Now() < dead_by) {
    std::optional<std::string> stat = ReadFile(absl::StrCat("/proc/", grandchild, "/stat"));
    dead = !stat.has_value() || stat->find(") Z") != std::string::npos;
    if (!dead) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(dead) << "the workload's grandchild outlived the agent";
  // One line per connect at info level, none per workload.
  const std::string err = p.Stderr();
  EXPECT_THAT(err, HasSubstr("connected to"));
  EXPECT_THAT(err, HasSubstr("SIGTERM: shutting down"));
  EXPECT_THAT(err, ::testing::Not(HasSubstr("tok-from-file")));  // the token is never logged
}

// A stand-in nvidia-smi that prints dir/q.xml for `-q -x` and dir/topo.txt for `topo -m`.
std::string FakeNvidiaSmi(const std::string& dir) {
  std::string path = dir + "/nvidia-smi";
  std::ofstream(path) << "#!/bin/sh\n"
                      << "case \"$1\" in\n"
                      << "  -q) cat '" << dir << "/q.xml' ;;\n"
                      << "  topo) cat '" << dir << "/topo.txt' ;;\n"
                      << "esac\n";
  chmod(path.c_str(), 0755);
  return path;
}

std::string DiscoverySample(const std::string& name) {
  return ReadFile(absl::StrCat(GPUFED_SOURCE_DIR, "/tests/agent/testdata/discovery/", name))
      .value_or("");
}

const v1::Node* NodeNamed(const v1::Inventory& inventory, const std::string& name) {
  for (const v1::Node& n : inventory.nodes()) {
    if (n.name() == name) return &n;
  }
  return nullptr;
}

TEST_F(AgentBinaryTest, DiscoversItsNodeAtStartAndOnSighup) {
  std::unique_ptr<TestAgentServer> server = TestAgentServer::Start();
  ASSERT_NE(server, nullptr);
  const std::string xml = DiscoverySample("dgx-h100-q.xml");
  ASSERT_FALSE(xml.empty());
  Write("q.xml", xml);
  Write("topo.txt", DiscoverySample("dgx-h100-topo.txt"));
  // The file names the cluster and another node; dgx-01 is discovered.
  const std::string topology = Write("cluster.yaml",
                                     "cluster: {name: onprem, provider: onprem, region: us-east}\n"
                                     "nodes:\n"
                                     "  - {name: dgx-01, rack: r7}\n"
                                     "  - {name: cpu-01, gpus: [{model: L4}]}\n");
  AgentProcess p(
      {"--server", server->address(), "--token", "t", "--topology", topology, "--discover",
       "dgx-01", "--nvidia-smi", FakeNvidiaSmi(dir_), "--work-dir", dir_ + "/work"},
      dir_);
  ASSERT_TRUE(p.started());
  ASSERT_TRUE(server->WaitFor([](const Log& log) {
    return !log.streams.empty() && !log.streams[0].messages.empty();
  })) << p.Stderr();
  const v1::AgentMessage first = server->Snapshot().streams[0].messages[0];
  ASSERT_TRUE(first.has_register_()) << p.Stderr();
  const v1::Inventory& inventory = first.register_().inventory();
  ASSERT_EQ(inventory.nodes_size(), 2);
  const v1::Node* dgx = NodeNamed(inventory, "dgx-01");
  ASSERT_NE(dgx, nullptr);
  EXPECT_EQ(dgx->rack(), "r7");
  ASSERT_EQ(dgx->gpus_size(), 8);
  EXPECT_EQ(dgx->gpus(1).model(), "H100-80GB");
  EXPECT_EQ(dgx->gpus(1).nvlink_domain(), "dgx-01-nvl");
  EXPECT_TRUE(dgx->gpus(1).healthy());
  EXPECT_EQ(dgx->labels().at("gpufed.io/driver-version"), "550.54.15");
  EXPECT_THAT(p.Stderr(), HasSubstr("discovery: node dgx-01: 8 GPU(s) H100-80GB, driver "
                                    "550.54.15, CUDA 12.4"));

  // GPU 1 now asks for a reset: SIGHUP runs nvidia-smi again and reports it.
  const std::string gpu1 = "<gpu id=\"00000000:2A:00.0\">";
  const size_t at = xml.find("<reset_required>No</reset_required>", xml.find(gpu1));
  ASSERT_NE(at, std::string::npos);
  std::string failed = xml;
  failed.replace(at, std::string("<reset_required>No</reset_required>").size(),
                 "<reset_required>Yes</reset_required>");
  Write("q.xml", failed);
  p.Signal(SIGHUP);
  ASSERT_TRUE(server->WaitFor([](const Log& log) {
    for (const v1::AgentMessage& m : log.streams.back().messages) {
      if (!m.has_inventory()) continue;
      const v1::Node* node = NodeNamed(m.inventory().inventory(), "dgx-01");
      if (node != nullptr && node->gpus_size() == 8 && !node->gpus(1).healthy()) return true;
    }
    return false;
  })) << p.Stderr();
  EXPECT_THAT(p.Stderr(), HasSubstr("reported unhealthy: reset required"));

  // Output that does not parse changes nothing and is logged.
  Write("topo.txt", "garbage\n");
  p.Signal(SIGHUP);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!absl::StrContains(p.Stderr(), "no header line naming GPU0") && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_THAT(p.Stderr(), HasSubstr("not reloaded: INVALID_ARGUMENT: nvidia-smi topo -m"));
  p.Signal(SIGTERM);
  EXPECT_EQ(p.Wait(), 0) << p.Stderr();
}

TEST_F(AgentBinaryTest, DiscoveryThatFailsAtStartIsOneLineExitTwo) {
  const std::string topology =
      Write("cluster.yaml", "cluster: {name: onprem, provider: onprem, region: us-east}\n");
  // Runs, prints nothing (as a shell does for a missing nvidia-smi, on stderr).
  const std::string silent = Write("nvidia-smi", "#!/bin/sh\nexit 0\n");
  chmod(silent.c_str(), 0755);
  AgentProcess p(
      {"--token", "t", "--topology", topology, "--discover", "dgx-01", "--nvidia-smi", silent},
      dir_);
  ExpectConfigError(p, "nvidia-smi -q -x: printed nothing");
}

}  // namespace
}  // namespace gpufed
