// Faults an operator injects, against real processes: PostgreSQL (the test binary's, or a
// server's embedded one), a gpufed-server and a gpufed-agent on the sim backend, on 127.0.0.1
// ports the processes pick.

#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "federation/status_macros.h"
#include "gmock/gmock.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/fault/fault_support.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"
#include "tests/support/tcp_proxy.h"

namespace gpufed {
namespace {

using testing::AgentRun;
using testing::ChildProcess;
using testing::Eventually;
using testing::RunsInLog;

// The cluster as the server reports it to `token` (5 s deadline); state UNSPECIFIED when the
// call fails.
v1::Cluster ClusterAsServed(v1::ClusterService::Stub& clusters, const std::string& token,
                            const std::string& name) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetClusterRequest req;
  req.set_name(name);
  v1::Cluster out;
  if (!clusters.GetCluster(&ctx, req, &out).ok()) out.Clear();
  return out;
}

// A gpufed-server in `data_dir` on a fresh database of the test binary's PostgreSQL.
absl::StatusOr<testing::ServerProcess> StartServerOnTestDatabase(
    const std::string& data_dir, std::vector<std::string> extra_args) {
  ASSIGN_OR_RETURN(testing::TestPostgres * pg, testing::TestPostgres::Get());
  testing::ServerOptions options;
  ASSIGN_OR_RETURN(options.database_url, pg->CreateEmptyDatabase());
  options.data_dir = data_dir;
  options.extra_args = std::move(extra_args);
  return testing::StartServer(options);
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(server_, StartServerOnTestDatabase(
                                      dir_.path() + "/server",
                                      {"--heartbeat-timeout=2", "--heartbeat-interval-ms=200"}));
    clusters_ = v1::ClusterService::NewStub(testing::Connect(server_.address()));
  }

  void TearDown() override {
    if (agent_) {
      kill(agent_->pid(), SIGCONT);
      agent_->Stop();
    }
    if (server_.process) server_.process->Stop();
  }

  void StartAgent(const std::string& cluster, const std::string& topology) {
    ASSERT_OK_AND_ASSIGN(std::string token, testing::CreateAgentToken(
                                                server_.address(), server_.admin_token, cluster));
    testing::AgentOptions ao;
    ao.server_address = server_.address();
    ao.token = token;
    ao.topology = topology;
    ao.work_dir = dir_.path() + "/agent";
    ao.log_path = dir_.path() + "/agent.log";
    ASSERT_OK_AND_ASSIGN(agent_, testing::StartAgent(ao));
  }

  v1::Cluster GetCluster(const std::string& name) {
    return ClusterAsServed(*clusters_, server_.admin_token, name);
  }

  testing::TempDir dir_{"gpufed-fault"};
  testing::ServerProcess server_;
  std::unique_ptr<ChildProcess> agent_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
};

// An agent frozen past the heartbeat timeout (SIGSTOP), then resumed on the same connection:
// the server marks the cluster unreachable and moves its epoch on; the woken agent is told to
// register again, and the cluster comes back READY at the new epoch. (It used to stay
// UNREACHABLE for good while the agent heartbeated on the old connection.)
TEST_F(FaultTest, AnAgentFrozenPastTheTimeoutComesBackAtANewEpoch) {
  StartAgent("edge-l4", testing::SourceDir() + "/deploy/topologies/edge-l4.yaml");
  ASSERT_TRUE(Eventually([&] { return GetCluster("edge-l4").state() == v1::CLUSTER_STATE_READY; },
                         std::chrono::seconds(20)));
  const uint64_t epoch = GetCluster("edge-l4").epoch();

  ASSERT_EQ(kill(agent_->pid(), SIGSTOP), 0);
  ASSERT_TRUE(
      Eventually([&] { return GetCluster("edge-l4").state() == v1::CLUSTER_STATE_UNREACHABLE; },
                 std::chrono::seconds(20)));
  ASSERT_EQ(kill(agent_->pid(), SIGCONT), 0);

  ASSERT_TRUE(Eventually([&] { return GetCluster("edge-l4").state() == v1::CLUSTER_STATE_READY; },
                         std::chrono::seconds(20)))
      << "the woken agent must register again";
  EXPECT_GT(GetCluster("edge-l4").epoch(), epoch);
}

// ---- Fenced failover ------------------------------------------------------------------------

// Two clusters on the sim backend; the first reaches the server through a proxy the test can
// partition. Short timings: heartbeats every 200 ms, a 1.2 s lease, a 3 s timeout.
class FailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(
        server_, StartServerOnTestDatabase(dir_.path() + "/server",
                                           {"--heartbeat-timeout=3", "--heartbeat-interval-ms=200",
                                            "--agent-lease-ms=1200"}));
    ASSERT_OK_AND_ASSIGN(proxy_, testing::TcpProxy::Start(server_.grpc_port));
    ASSERT_OK_AND_ASSIGN(
        token_, testing::BootstrapTenant(server_.address(), server_.admin_token, "t", "p"));
    auto channel = testing::Connect(server_.address());
    clusters_ = v1::ClusterService::NewStub(channel);
    workloads_ = v1::WorkloadService::NewStub(channel);
  }

  void TearDown() override {
    for (auto& agent : agents_) {
      if (agent) agent->Stop();
    }
    if (server_.process) server_.process->Stop();
  }

  // Starts the agent of `topology` (deploy/topologies/<topology>.yaml), dialling `address`.
  std::unique_ptr<ChildProcess> StartAgent(const std::string& cluster, const std::string& topology,
                                           const std::string& address,
                                           const std::string& backend = "sim") {
    absl::StatusOr<std::string> token =
        testing::CreateAgentToken(server_.address(), server_.admin_token, cluster);
    EXPECT_OK(token);
    testing::AgentOptions ao;
    ao.server_address = address;
    ao.token = token.ok() ? *token : "";
    ao.topology = testing::SourceDir() + "/deploy/topologies/" + topology + ".yaml";
    ao.backend = backend;
    ao.work_dir = dir_.path() + "/" + cluster;
    ao.log_path = dir_.path() + "/" + cluster + ".log";
    absl::StatusOr<std::unique_ptr<ChildProcess>> agent = testing::StartAgent(ao);
    EXPECT_OK(agent);
    return agent.ok() ? *std::move(agent) : nullptr;
  }

  // Starts edge-l4's agent with `ao` (its topology and extra arguments; the rest is filled in
  // here), runs one job on each of its two nodes (four L4s each, retried on a node failure), then
  // starts the cloud cluster's agent as somewhere for them to go. Returns {the job on edge-02,
  // the job on edge-01}; empty ids if any step failed.
  std::pair<std::string, std::string> OneJobPerEdgeNode(testing::AgentOptions ao) {
    absl::StatusOr<std::string> token =
        testing::CreateAgentToken(server_.address(), server_.admin_token, "edge-l4");
    EXPECT_OK(token);
    if (!token.ok()) return {};
    ao.token = *token;
    ao.server_address = server_.address();
    ao.backend = "sim";
    ao.work_dir = dir_.path() + "/edge-l4";
    ao.log_path = dir_.path() + "/edge-l4.log";
    absl::StatusOr<std::unique_ptr<ChildProcess>> edge = testing::StartAgent(ao);
    EXPECT_OK(edge);
    if (!edge.ok()) return {};
    agents_.push_back(*std::move(edge));
    auto ready = [&](const std::string& cluster) {
      return Eventually([&] { return GetCluster(cluster).state() == v1::CLUSTER_STATE_READY; },
                        std::chrono::seconds(20));
    };
    if (!ready("edge-l4")) return {};
    const std::string a = SubmitRestartable("a", 600, 3, "", v1::RETRY_ON_NODE_FAILURE, 4);
    const std::string b = SubmitRestartable("b", 600, 3, "", v1::RETRY_ON_NODE_FAILURE, 4);
    auto running = [&](const std::string& id) {
      return GetWorkload(id).state() == v1::WORKLOAD_STATE_RUNNING;
    };
    if (!Eventually([&] { return running(a) && running(b); }, std::chrono::seconds(20))) return {};
    const bool a_on_02 = GetWorkload(a).assignment().replicas(0).node() == "edge-02";
    agents_.push_back(StartAgent("cloud-eu-a100", "cloud-a100", server_.address()));
    if (!ready("cloud-eu-a100")) return {};
    return a_on_02 ? std::make_pair(a, b) : std::make_pair(b, a);
  }

  v1::Cluster GetCluster(const std::string& name) {
    return ClusterAsServed(*clusters_, server_.admin_token, name);
  }

  // Submits a job of `gpus` GPUs that runs `seconds` (on the sim backend; `command` on the
  // process backend) and may run `attempts` times after the event `on`; returns its id ("" on
  // failure).
  std::string SubmitRestartable(const std::string& name, int seconds, uint32_t attempts = 3,
                                const std::string& command = "",
                                v1::RetryOn on = v1::RETRY_ON_CLUSTER_LOST, uint32_t gpus = 1) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::SubmitRequest req;
    v1::WorkloadSpec* spec = req.mutable_spec();
    spec->set_tenant("t");
    spec->set_project("p");
    spec->set_name(name);
    spec->set_replicas(1);
    spec->mutable_per_replica()->set_gpus(gpus);
    spec->mutable_estimated_duration()->set_seconds(seconds);
    spec->mutable_retry()->set_max_attempts(attempts);
    spec->mutable_retry()->add_on(on);
    if (!command.empty()) spec->mutable_run()->add_command(command);
    v1::SubmitResponse resp;
    return workloads_->Submit(&ctx, req, &resp).ok() ? resp.workload().id() : "";
  }

  v1::Workload GetWorkload(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetWorkloadRequest req;
    req.set_id(id);
    v1::Workload w;
    if (!workloads_->Get(&ctx, req, &w).ok()) w.Clear();
    return w;
  }

  testing::TempDir dir_{"gpufed-failover"};
  testing::ServerProcess server_;
  std::unique_ptr<testing::TcpProxy> proxy_;
  std::string token_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
  std::vector<std::unique_ptr<ChildProcess>> agents_;
};

// A cluster cut off from the server: its agent's lease runs out and it stops the restartable
// work; the server declares the cluster lost and the work runs on the other cluster as attempt
// 2; when the partition heals the agent comes back at a new epoch. Both agents' own logs show
// that no workload ever ran on the two clusters at the same moment.
TEST_F(FailoverTest, APartitionedClustersWorkMovesAndNeverRunsInTwoPlacesAtOnce) {
  agents_.push_back(
      StartAgent("edge-l4", "edge-l4", "127.0.0.1:" + std::to_string(proxy_->port())));
  ASSERT_TRUE(Eventually([&] { return GetCluster("edge-l4").state() == v1::CLUSTER_STATE_READY; },
                         std::chrono::seconds(20)));
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ids.push_back(SubmitRestartable(absl::StrCat("job-", i), 600));
    ASSERT_FALSE(ids.back().empty());
  }
  auto all = [&](const std::function<bool(const v1::Workload&)>& pred) {
    for (const std::string& id : ids) {
      if (!pred(GetWorkload(id))) return false;
    }
    return true;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        return all([](const v1::Workload& w) {
          return w.state() == v1::WORKLOAD_STATE_RUNNING && w.assignment().cluster() == "edge-l4";
        });
      },
      std::chrono::seconds(20)));
  const uint64_t epoch = GetCluster("edge-l4").epoch();
  agents_.push_back(StartAgent("cloud-eu-a100", "cloud-a100", server_.address()));
  ASSERT_TRUE(
      Eventually([&] { return GetCluster("cloud-eu-a100").state() == v1::CLUSTER_STATE_READY; },
                 std::chrono::seconds(20)));

  const absl::Time cut = absl::Now();
  proxy_->Partition();
  ASSERT_TRUE(Eventually(
      [&] {
        return all([](const v1::Workload& w) {
          return w.state() == v1::WORKLOAD_STATE_RUNNING &&
                 w.assignment().cluster() == "cloud-eu-a100" && w.attempts() == 2;
        });
      },
      std::chrono::seconds(30)))
      << "the work must move to the other cluster";
  const absl::Duration moved_after = absl::Now() - cut;
  EXPECT_EQ(GetCluster("edge-l4").state(), v1::CLUSTER_STATE_UNREACHABLE);

  proxy_->Heal();
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Cluster c = GetCluster("edge-l4");
        return c.state() == v1::CLUSTER_STATE_READY && c.epoch() > epoch;
      },
      std::chrono::seconds(30)))
      << "the healed agent registers again at the new epoch";
  // Nothing moves back or runs twice after it returns.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_TRUE(all([](const v1::Workload& w) {
    return w.state() == v1::WORKLOAD_STATE_RUNNING && w.assignment().cluster() == "cloud-eu-a100" &&
           w.attempts() == 2;
  }));
  for (auto& agent : agents_) agent->Stop();

  const std::vector<AgentRun> first = RunsInLog(dir_.path() + "/edge-l4.log");
  const std::vector<AgentRun> second = RunsInLog(dir_.path() + "/cloud-eu-a100.log");
  ASSERT_EQ(first.size(), ids.size());
  ASSERT_EQ(second.size(), ids.size());
  absl::Duration closest = absl::InfiniteDuration();
  for (const AgentRun& a : first) {
    EXPECT_EQ(a.attempt, 1);
    EXPECT_EQ(a.end_state, "LOST") << "workload " << a.workload << ": stopped by the lease";
    for (const AgentRun& b : second) {
      if (b.workload != a.workload) continue;
      EXPECT_EQ(b.attempt, 2);
      EXPECT_LT(a.end, b.start) << "workload " << a.workload << " ran on both clusters at once";
      closest = std::min(closest, b.start - a.end);
    }
  }
  std::cout << "failover: work running elsewhere " << absl::FormatDuration(moved_after)
            << " after the partition; closest gap between the two runs of a workload "
            << absl::FormatDuration(closest) << "\n";
}

// Every run of `ids` in `from`'s log ended (`end_state`) before its next attempt started in
// `to`'s, which holds one run of each at attempt 2.
void ExpectMovedWithoutOverlap(const std::vector<std::string>& ids, const std::string& from,
                               const std::string& to, const std::string& end_state) {
  const std::vector<AgentRun> first = RunsInLog(from);
  const std::vector<AgentRun> second = RunsInLog(to);
  for (const std::string& id : ids) {
    int seen = 0;
    for (const AgentRun& a : first) {
      if (a.workload != id) continue;
      ++seen;
      EXPECT_EQ(a.attempt, 1);
      EXPECT_EQ(a.starts, 1);
      EXPECT_EQ(a.end_state, end_state) << "workload " << id;
      for (const AgentRun& b : second) {
        if (b.workload != id) continue;
        EXPECT_EQ(b.attempt, 2);
        EXPECT_EQ(b.starts, 1);
        EXPECT_LT(a.end, b.start) << "workload " << id << " ran on both clusters at once";
      }
    }
    EXPECT_EQ(seen, 1) << "workload " << id;
  }
}

// A drain with eviction: the agent stops the restartable work first, and only then does it run
// on the other cluster, as attempt 2; work that may not be restarted keeps running.
TEST_F(FailoverTest, ADrainedClustersRestartableWorkMovesOnlyAfterItsAgentStopsIt) {
  agents_.push_back(StartAgent("edge-l4", "edge-l4", server_.address()));
  ASSERT_TRUE(Eventually([&] { return GetCluster("edge-l4").state() == v1::CLUSTER_STATE_READY; },
                         std::chrono::seconds(20)));
  std::vector<std::string> moves;
  for (int i = 0; i < 3; ++i) {
    moves.push_back(
        SubmitRestartable(absl::StrCat("moves-", i), 600, 3, "", v1::RETRY_ON_PREEMPTION));
    ASSERT_FALSE(moves.back().empty());
  }
  const std::string stays = SubmitRestartable("stays", 600, 1);
  ASSERT_FALSE(stays.empty());
  auto running_on = [&](const std::string& id, const std::string& cluster, uint32_t attempts) {
    const v1::Workload w = GetWorkload(id);
    return w.state() == v1::WORKLOAD_STATE_RUNNING && w.assignment().cluster() == cluster &&
           w.attempts() == attempts;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        return running_on(stays, "edge-l4", 1) &&
               std::all_of(moves.begin(), moves.end(),
                           [&](const std::string& id) { return running_on(id, "edge-l4", 1); });
      },
      std::chrono::seconds(20)));
  agents_.push_back(StartAgent("cloud-eu-a100", "cloud-a100", server_.address()));
  ASSERT_TRUE(
      Eventually([&] { return GetCluster("cloud-eu-a100").state() == v1::CLUSTER_STATE_READY; },
                 std::chrono::seconds(20)));

  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + server_.admin_token);
  v1::DrainRequest req;
  req.set_name("edge-l4");
  req.set_evict(true);
  v1::DrainResponse drained;
  ASSERT_OK(clusters_->Drain(&ctx, req, &drained));
  EXPECT_THAT(drained.evicted_workload_ids(), ::testing::UnorderedElementsAreArray(moves));
  EXPECT_THAT(drained.staying_workload_ids(), ::testing::ElementsAre(stays));
  ASSERT_TRUE(Eventually(
      [&] {
        return std::all_of(moves.begin(), moves.end(), [&](const std::string& id) {
          return running_on(id, "cloud-eu-a100", 2);
        });
      },
      std::chrono::seconds(30)))
      << "the evicted work must run on the other cluster";
  EXPECT_TRUE(running_on(stays, "edge-l4", 1));
  for (auto& agent : agents_) agent->Stop();
  ExpectMovedWithoutOverlap(moves, dir_.path() + "/edge-l4.log", dir_.path() + "/cloud-eu-a100.log",
                            "CANCELLED");
}

// A node that dies (gone from the agent's topology, reloaded on SIGHUP): its work is stopped,
// then runs on another cluster as attempt 2; the work on the other node stays.
TEST_F(FailoverTest, WorkOnANodeThatDiedMovesOnlyAfterItsAgentStopsIt) {
  const std::string source = testing::SourceDir() + "/deploy/topologies/edge-l4.yaml";
  const std::string topology = dir_.path() + "/edge-l4.yaml";
  std::string yaml = testing::ReadFileOrEmpty(source);
  ASSERT_NE(yaml.find("count: 2"), std::string::npos);
  {
    std::ofstream out(topology);
    out << yaml;
  }
  testing::AgentOptions ao;
  ao.topology = topology;
  const std::pair<std::string, std::string> jobs = OneJobPerEdgeNode(ao);
  const std::string& on_dead = jobs.first;
  const std::string& on_live = jobs.second;
  ASSERT_FALSE(on_dead.empty());

  // edge-02 dies: the operator (or a health checker) takes it out of the topology.
  yaml.replace(yaml.find("count: 2"), 8, "count: 1");
  {
    std::ofstream out(topology);
    out << yaml;
  }
  ASSERT_EQ(kill(agents_.front()->pid(), SIGHUP), 0);
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Workload w = GetWorkload(on_dead);
        return w.state() == v1::WORKLOAD_STATE_RUNNING &&
               w.assignment().cluster() == "cloud-eu-a100" && w.attempts() == 2;
      },
      std::chrono::seconds(30)))
      << "the dead node's work must run on the other cluster";
  EXPECT_EQ(GetCluster("edge-l4").nodes_size(), 1);
  const v1::Workload live = GetWorkload(on_live);
  EXPECT_EQ(live.state(), v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(live.assignment().cluster(), "edge-l4");
  EXPECT_EQ(live.attempts(), 1u);
  for (auto& agent : agents_) agent->Stop();
  ExpectMovedWithoutOverlap({on_dead}, dir_.path() + "/edge-l4.log",
                            dir_.path() + "/cloud-eu-a100.log", "CANCELLED");
}

// A GPU that fails as the agent's health probe sees it (nvidia-smi reads "[GPU requires reset]"):
// the work on that GPU is stopped and runs on another cluster as attempt 2, the GPU shows
// unhealthy, and the work on the other node stays.
TEST_F(FailoverTest, WorkOnAGpuTheHealthProbeFailsMovesOnlyAfterItsAgentStopsIt) {
  const std::string probe = dir_.path() + "/nvidia-smi.csv";
  auto write_probe = [&](const std::string& failed_uuid) {
    std::ofstream out(probe, std::ios::trunc);
    out << "uuid, pci.bus_id, ecc.errors.uncorrected.volatile.total\n";
    int bus = 0x18;
    for (const char* node : {"edge-01", "edge-02"}) {
      for (int i = 0; i < 4; ++i) {
        const std::string uuid = absl::StrCat("GPU-edge-l4-", node, "-", i);
        out << absl::StrCat(uuid, ", 00000000:", absl::Hex(bus++, absl::kZeroPad2), ":00.0, ",
                            uuid == failed_uuid ? "[GPU requires reset]" : "0", "\n");
      }
    }
  };
  write_probe("");
  testing::AgentOptions ao;
  ao.topology = testing::SourceDir() + "/deploy/topologies/edge-l4.yaml";
  ao.extra_args = {"--health-command", "cat '" + probe + "'", "--health-interval", "1"};
  const std::pair<std::string, std::string> jobs = OneJobPerEdgeNode(ao);
  const std::string& on_failed = jobs.first;
  const std::string& on_well = jobs.second;
  ASSERT_FALSE(on_failed.empty());
  EXPECT_EQ(GetWorkload(on_failed).attempts(), 1u) << "a probe that finds all well moves nothing";

  write_probe("GPU-edge-l4-edge-02-2");
  ASSERT_TRUE(Eventually(
      [&] {
        const v1::Workload w = GetWorkload(on_failed);
        return w.state() == v1::WORKLOAD_STATE_RUNNING &&
               w.assignment().cluster() == "cloud-eu-a100" && w.attempts() == 2;
      },
      std::chrono::seconds(30)))
      << "the failed GPU's work must run on the other cluster";
  int unhealthy = 0;
  const v1::Cluster edge_now = GetCluster("edge-l4");
  for (const v1::Node& node : edge_now.nodes()) {
    for (const v1::Gpu& gpu : node.gpus()) {
      if (!gpu.healthy()) {
        ++unhealthy;
        EXPECT_EQ(gpu.uuid(), "GPU-edge-l4-edge-02-2");
      }
    }
  }
  EXPECT_EQ(unhealthy, 1);
  const v1::Workload well = GetWorkload(on_well);
  EXPECT_EQ(well.state(), v1::WORKLOAD_STATE_RUNNING);
  EXPECT_EQ(well.assignment().cluster(), "edge-l4");
  EXPECT_EQ(well.attempts(), 1u);
  for (auto& agent : agents_) agent->Stop();
  ExpectMovedWithoutOverlap({on_failed}, dir_.path() + "/edge-l4.log",
                            dir_.path() + "/cloud-eu-a100.log", "CANCELLED");
}

// An agent killed with -9 while its work runs, then started again on the same state folder: the
// processes it left are killed, what ran is reported LOST, restartable work runs again as
// attempt 2 and the rest ends LOST, and no run is ever started twice under one attempt. (A
// restarted agent used to start every running workload again while the server recorded one
// start.)
TEST_F(FailoverTest, AnAgentKilledAndRestartedRunsNothingTwice) {
  const std::string address = server_.address();
  agents_.push_back(StartAgent("edge-l4", "edge-l4", address, "process"));
  ASSERT_TRUE(Eventually([&] { return GetCluster("edge-l4").state() == v1::CLUSTER_STATE_READY; },
                         std::chrono::seconds(20)));
  const std::string pids = dir_.path() + "/pids";
  const std::string command = "echo $$ >> " + pids + "; exec sleep 600";
  const std::string moves = SubmitRestartable("moves", 600, 3, command);
  const std::string stays = SubmitRestartable("stays", 600, 1, command);
  ASSERT_FALSE(moves.empty());
  ASSERT_FALSE(stays.empty());
  auto state_of = [&](const std::string& id) { return GetWorkload(id).state(); };
  ASSERT_TRUE(Eventually(
      [&] {
        return state_of(moves) == v1::WORKLOAD_STATE_RUNNING &&
               state_of(stays) == v1::WORKLOAD_STATE_RUNNING;
      },
      std::chrono::seconds(20)));
  std::vector<pid_t> first_runs;
  {
    std::ifstream in(pids);
    for (pid_t pid = 0; in >> pid;) first_runs.push_back(pid);
  }
  ASSERT_EQ(first_runs.size(), 2u);

  agents_.back()->Kill();
  for (pid_t pid : first_runs) EXPECT_EQ(kill(pid, 0), 0) << "outlives its agent until the next";
  agents_.back() = StartAgent("edge-l4", "edge-l4", address, "process");

  EXPECT_TRUE(Eventually([&] { return state_of(stays) == v1::WORKLOAD_STATE_LOST; },
                         std::chrono::seconds(20)));
  EXPECT_TRUE(Eventually(
      [&] {
        const v1::Workload w = GetWorkload(moves);
        return w.state() == v1::WORKLOAD_STATE_RUNNING && w.attempts() == 2;
      },
      std::chrono::seconds(20)));
  for (pid_t pid : first_runs) {
    EXPECT_TRUE(Eventually([&] { return kill(pid, 0) != 0; }, std::chrono::seconds(10)))
        << "the restarted agent kills what its predecessor left running";
  }
  agents_.back()->Stop();
  // In all: the two first runs and one second run of the restartable workload.
  std::ifstream in(pids);
  int runs = 0;
  for (pid_t pid = 0; in >> pid;) ++runs;
  EXPECT_EQ(runs, 3);
}

// The pid in a PostgreSQL data folder's postmaster.pid; 0 when there is none.
pid_t PostmasterPid(const std::string& pgdata) {
  std::ifstream in(pgdata + "/postmaster.pid");
  pid_t pid = 0;
  in >> pid;
  return pid;
}

// kill -9 of the embedded PostgreSQL under a running gpufed-server: the server restarts it, calls
// succeed again, and what was acknowledged before is still there. (It used to stay down: the
// server kept running, /healthz green, and every call answered UNAVAILABLE for good.)
TEST(EmbeddedDatabaseFaultTest, AKilledEmbeddedPostgresIsRestartedAndNothingIsLost) {
  testing::TempDir dir("gpufed-fault");
  testing::ServerOptions options;
  options.data_dir = dir.path() + "/server";  // no database_url: embedded PostgreSQL
  ASSERT_OK_AND_ASSIGN(testing::ServerProcess server, testing::StartServer(options));
  ASSERT_OK_AND_ASSIGN(std::string token,
                       testing::BootstrapTenant(server.address(), server.admin_token, "t", "p"));
  auto workloads = v1::WorkloadService::NewStub(testing::Connect(server.address()));
  auto submit = [&](const std::string& name, std::string* id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::SubmitRequest req;
    req.mutable_spec()->set_tenant("t");
    req.mutable_spec()->set_project("p");
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->set_replicas(1);
    req.mutable_spec()->mutable_per_replica()->set_gpus(1);
    v1::SubmitResponse resp;
    const grpc::Status s = workloads->Submit(&ctx, req, &resp);
    if (s.ok() && id != nullptr) *id = resp.workload().id();
    return s.ok();
  };
  std::string before;
  ASSERT_TRUE(submit("before", &before));

  const pid_t postmaster = PostmasterPid(options.data_dir + "/postgres/pgdata");
  ASSERT_GT(postmaster, 0);
  ASSERT_EQ(kill(postmaster, SIGKILL), 0);

  // The killed postmaster's backends may serve a call or two before they notice; what counts
  // is that a new postmaster comes up and serves.
  const std::string pgdata = options.data_dir + "/postgres/pgdata";
  EXPECT_TRUE(Eventually(
      [&] {
        const pid_t now = PostmasterPid(pgdata);
        return now != 0 && now != postmaster && submit("after", nullptr);
      },
      std::chrono::seconds(60)))
      << "a new postmaster must serve calls again";
  auto get = [&] {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetWorkloadRequest req;
    req.set_id(before);
    v1::Workload w;
    return workloads->Get(&ctx, req, &w).ok() && w.id() == before;
  };
  EXPECT_TRUE(Eventually(get, std::chrono::seconds(10))) << "acknowledged before the kill";
  server.process->Stop();
}

// An embedded PostgreSQL that cannot be started again (here its data folder is gone): after its
// restart attempts (~30 s) the server stops and exits non-zero, so that systemd restarts it,
// rather than serving UNAVAILABLE for good.
TEST(EmbeddedDatabaseFaultTest, AnEmbeddedPostgresThatWillNotRestartStopsTheServerNonZero) {
  testing::TempDir dir("gpufed-fault");
  testing::ServerOptions options;
  options.data_dir = dir.path() + "/server";
  ASSERT_OK_AND_ASSIGN(testing::ServerProcess server, testing::StartServer(options));
  const std::string pgdata = options.data_dir + "/postgres/pgdata";
  const pid_t postmaster = PostmasterPid(pgdata);
  ASSERT_GT(postmaster, 0);
  ASSERT_EQ(kill(postmaster, SIGKILL), 0);
  std::filesystem::rename(pgdata, pgdata + ".gone");

  EXPECT_TRUE(Eventually([&] { return !server.process->Running(); }, std::chrono::seconds(90)))
      << "the server must give up and exit";
  const int status = server.process->Stop();
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_NE(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace gpufed
