// Faults an operator injects, against real processes: PostgreSQL (the test binary's, or a
// server's embedded one), a gpufed-server and a gpufed-agent on the sim backend, on 127.0.0.1
// ports the processes pick.

#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using testing::ChildProcess;

// Polls `pred` every 50 ms for up to `timeout`; true once it holds.
bool Eventually(const std::function<bool()>& pred, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(testing::TestPostgres * pg, testing::TestPostgres::Get());
    ASSERT_OK_AND_ASSIGN(std::string dsn, pg->CreateEmptyDatabase());
    testing::ServerOptions options;
    options.data_dir = dir_.path() + "/server";
    options.database_url = dsn;
    options.extra_args = {"--heartbeat-timeout=2", "--heartbeat-interval-ms=200"};
    ASSERT_OK_AND_ASSIGN(server_, testing::StartServer(options));
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

  // The cluster as the server reports it; state UNSPECIFIED when the call fails.
  v1::Cluster GetCluster(const std::string& name) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + server_.admin_token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetClusterRequest req;
    req.set_name(name);
    v1::Cluster out;
    if (!clusters_->GetCluster(&ctx, req, &out).ok()) out.Clear();
    return out;
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
