// Spot reclaims against real processes (issue #11, point 4): a gpufed-server on the test
// binary's PostgreSQL and two gpufed-agents on the sim backend, one of them with spot nodes
// that it gives back on a schedule (--spot-reclaim-every / --spot-reclaim-for,
// docs/agent.md#spot-reclaims-simulated). The provider's reclaim reaches the server as nodes
// leaving the agent's inventory; the work on them is placed again within its rules.

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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

namespace gpufed {
namespace {

using testing::AgentRun;
using testing::ChildProcess;
using testing::Eventually;
using testing::RunsInLog;

// Cluster spot-a: one on-demand node and two spot nodes, four L4s each.
constexpr char kSpotTopology[] = R"(cluster:
  name: spot-a
  provider: aws
  region: us-west-2
  zone: us-west-2a
  jurisdiction: us
node_groups:
  - name_prefix: od-
    count: 1
    labels: {gpufed.io/capacity-type: on-demand}
    gpus: {count: 4, model: L4}
  - name_prefix: spot-
    count: 2
    labels: {gpufed.io/capacity-type: spot}
    gpus: {count: 4, model: L4}
)";

// The first reclaim comes this long after spot-a's agent starts; the nodes stay away for
// kReclaimFor. Long enough for the setup below on a loaded machine; the test checks that the
// reclaim found the work where it should be.
constexpr int kReclaimEverySeconds = 30;
constexpr int kReclaimForSeconds = 6;

bool IsSpotNode(const std::string& node) { return absl::StartsWith(node, "spot-"); }

// A line of an agent's log about a spot reclaim: when, and what it says after the timestamp.
struct ReclaimLine {
  absl::Time at;
  std::string text;
};

// The agent's "spot reclaim N: ..." lines, in order.
std::vector<ReclaimLine> ReclaimLines(const std::string& log_path) {
  std::vector<ReclaimLine> out;
  std::ifstream in(log_path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t at = line.find(" spot reclaim ");
    if (at == std::string::npos) continue;
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    ReclaimLine r;
    std::string err;
    if (!absl::ParseTime("%Y-%m-%dT%H:%M:%E*S%Ez", words[0], &r.at, &err)) continue;
    r.text = line.substr(at + 1);
    out.push_back(std::move(r));
  }
  return out;
}

absl::StatusOr<testing::ServerProcess> StartServerOnTestDatabase(const std::string& data_dir) {
  ASSIGN_OR_RETURN(testing::TestPostgres * pg, testing::TestPostgres::Get());
  testing::ServerOptions options;
  ASSIGN_OR_RETURN(options.database_url, pg->CreateEmptyDatabase());
  options.data_dir = data_dir;
  options.extra_args = {"--heartbeat-timeout=3", "--heartbeat-interval-ms=200"};
  return testing::StartServer(options);
}

class SpotReclaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(server_, StartServerOnTestDatabase(dir_.path() + "/server"));
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

  // Starts the agent of `cluster` with `topology` (a path) and `extra_args`; its log is
  // <dir>/<cluster>.log.
  void StartAgent(const std::string& cluster, const std::string& topology,
                  std::vector<std::string> extra_args = {}) {
    ASSERT_OK_AND_ASSIGN(std::string token, testing::CreateAgentToken(
                                                server_.address(), server_.admin_token, cluster));
    testing::AgentOptions ao;
    ao.server_address = server_.address();
    ao.token = token;
    ao.topology = topology;
    ao.work_dir = dir_.path() + "/" + cluster;
    ao.log_path = LogOf(cluster);
    ao.extra_args = std::move(extra_args);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<ChildProcess> agent, testing::StartAgent(ao));
    agents_.push_back(std::move(agent));
    ASSERT_TRUE(Eventually(
        [&] {
          grpc::ClientContext ctx;
          ctx.AddMetadata("authorization", "Bearer " + server_.admin_token);
          ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
          v1::GetClusterRequest req;
          req.set_name(cluster);
          v1::Cluster c;
          return clusters_->GetCluster(&ctx, req, &c).ok() && c.state() == v1::CLUSTER_STATE_READY;
        },
        std::chrono::seconds(20)))
        << cluster << " did not register";
  }

  [[nodiscard]] std::string LogOf(const std::string& cluster) const {
    return dir_.path() + "/" + cluster + ".log";
  }

  // Submits a one-GPU (or `gpus`) job that runs ten minutes on the sim backend, may run three
  // times after a node failure, tolerates spot capacity when `spot`, and may use only `clusters`
  // (empty: any). Returns its id ("" on failure).
  std::string Submit(const std::string& name, bool spot,
                     const std::vector<std::string>& clusters = {}, uint32_t gpus = 1) {
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
    spec->mutable_estimated_duration()->set_seconds(600);
    spec->mutable_retry()->set_max_attempts(3);
    spec->mutable_retry()->add_on(v1::RETRY_ON_NODE_FAILURE);
    spec->mutable_placement()->set_spot_tolerated(spot);
    for (const std::string& c : clusters) spec->mutable_placement()->add_clusters(c);
    v1::SubmitResponse resp;
    const grpc::Status s = workloads_->Submit(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << name << ": " << s.error_message();
    return s.ok() ? resp.workload().id() : "";
  }

  v1::Workload Get(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::GetWorkloadRequest req;
    req.set_id(id);
    v1::Workload w;
    if (!workloads_->Get(&ctx, req, &w).ok()) w.Clear();
    return w;
  }

  bool Cancel(const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::CancelRequest req;
    req.set_id(id);
    v1::Workload resp;
    return workloads_->Cancel(&ctx, req, &resp).ok();
  }

  // RUNNING as attempt `attempts`.
  static bool RunningAt(const v1::Workload& w, uint32_t attempts) {
    return w.state() == v1::WORKLOAD_STATE_RUNNING && w.attempts() == attempts &&
           w.assignment().replicas_size() > 0;
  }

  testing::TempDir dir_{"gpufed-spot"};
  testing::ServerProcess server_;
  std::string token_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
  std::vector<std::unique_ptr<ChildProcess>> agents_;
};

// Spot-tolerant, restartable work runs on spot-a's spot nodes; a workload that does not tolerate
// spot waits rather than take them. The reclaim stops the spot work, and each workload runs
// again as attempt 2 where its rules allow: the one allowed anywhere on edge-l4 or spot-a's
// on-demand node at once, the one kept to spot-a on its on-demand node or, if that is taken,
// back on a spot node once they return. None ever runs on capacity its rules forbid, and no
// attempt starts before the previous one's stop.
TEST_F(SpotReclaimTest, ReclaimedSpotWorkRunsAgainWithinItsRules) {
  const std::string topology = dir_.path() + "/spot-a.yaml";
  std::ofstream(topology) << kSpotTopology;
  ASSERT_NO_FATAL_FAILURE(
      StartAgent("spot-a", topology,
                 {absl::StrCat("--spot-reclaim-every=", kReclaimEverySeconds, "s"),
                  absl::StrCat("--spot-reclaim-for=", kReclaimForSeconds, "s")}));
  const absl::Time agent_started = absl::Now();

  // A job that does not tolerate spot fills the on-demand node; the two spot-tolerant ones then
  // land on the spot nodes, the only room left.
  const std::string filler = Submit("filler", false, {}, 4);
  ASSERT_TRUE(Eventually([&] { return RunningAt(Get(filler), 1); }, std::chrono::seconds(20)));
  EXPECT_EQ(Get(filler).assignment().replicas(0).node(), "od-01");
  const std::string anywhere = Submit("anywhere", true);
  const std::string kept = Submit("kept-to-spot-a", true, {"spot-a"});
  ASSERT_TRUE(Eventually([&] { return RunningAt(Get(anywhere), 1) && RunningAt(Get(kept), 1); },
                         std::chrono::seconds(20)));
  for (const std::string& id : {anywhere, kept}) {
    EXPECT_TRUE(IsSpotNode(Get(id).assignment().replicas(0).node())) << id;
  }

  // One that does not tolerate spot waits (not placed) next to six free spot GPUs...
  const std::string not_spot = Submit("not-spot", false);
  absl::SleepFor(absl::Seconds(2));
  const v1::Workload waiting = Get(not_spot);
  EXPECT_TRUE(waiting.state() == v1::WORKLOAD_STATE_PENDING ||
              waiting.state() == v1::WORKLOAD_STATE_ADMITTED)
      << v1::WorkloadState_Name(waiting.state());
  EXPECT_EQ(waiting.assignment().replicas_size(), 0);
  std::cout << "not spot-tolerant, only spot capacity free: " << waiting.pending_reason_code()
            << ": " << waiting.pending_reason() << "\n";
  // ... and runs on edge-l4 once it joins.
  ASSERT_NO_FATAL_FAILURE(
      StartAgent("edge-l4", testing::SourceDir() + "/deploy/topologies/edge-l4.yaml"));
  ASSERT_TRUE(Eventually([&] { return RunningAt(Get(not_spot), 1); }, std::chrono::seconds(20)));
  EXPECT_EQ(Get(not_spot).assignment().cluster(), "edge-l4");

  // The on-demand node keeps one GPU free: room for one of the two after the reclaim.
  ASSERT_TRUE(Cancel(filler));
  ASSERT_TRUE(Eventually([&] { return Get(filler).state() == v1::WORKLOAD_STATE_CANCELLED; },
                         std::chrono::seconds(20)));
  const std::string filler3 = Submit("filler-3", false, {"spot-a"}, 3);
  ASSERT_TRUE(Eventually([&] { return RunningAt(Get(filler3), 1); }, std::chrono::seconds(20)));
  EXPECT_EQ(Get(filler3).assignment().replicas(0).node(), "od-01");
  ASSERT_TRUE(ReclaimLines(LogOf("spot-a")).empty())
      << "the setup took longer than " << kReclaimEverySeconds << " s ("
      << absl::FormatDuration(absl::Now() - agent_started) << ")";

  // The reclaim. Every observation on the way: nothing ever on capacity its rules forbid.
  auto check_rules = [&] {
    v1::Workload a = Get(anywhere);
    const v1::Workload k = Get(kept);
    const v1::Workload n = Get(not_spot);
    if (n.assignment().replicas_size() > 0) {
      EXPECT_FALSE(IsSpotNode(n.assignment().replicas(0).node())) << "not-spot on spot";
    }
    if (k.assignment().replicas_size() > 0) {
      EXPECT_EQ(k.assignment().cluster(), "spot-a") << "kept-to-spot-a elsewhere";
    }
    if (a.attempts() >= 2 && a.assignment().replicas_size() > 0 &&
        a.state() != v1::WORKLOAD_STATE_PENDING) {
      EXPECT_FALSE(IsSpotNode(a.assignment().replicas(0).node()))
          << "placed on a spot node while the spot nodes were away";
    }
    return a;
  };
  ASSERT_TRUE(Eventually(
      [&] {
        check_rules();
        return RunningAt(Get(anywhere), 2);
      },
      std::chrono::seconds(kReclaimEverySeconds + 30)))
      << "the work on the reclaimed spot nodes must run again";
  const absl::Time anywhere_again = absl::Now();
  ASSERT_TRUE(Eventually(
      [&] {
        check_rules();
        return RunningAt(Get(kept), 2);
      },
      std::chrono::seconds(kReclaimForSeconds + 30)));

  const std::vector<ReclaimLine> lines = ReclaimLines(LogOf("spot-a"));
  ASSERT_FALSE(lines.empty());
  EXPECT_THAT(lines[0].text, ::testing::HasSubstr("spot reclaim 1: the provider takes back 2 "
                                                  "spot node(s) for 6s: spot-01, spot-02"));
  EXPECT_THAT(lines[0].text, ::testing::HasSubstr("stopping the 2 workload(s) on them"));
  EXPECT_THAT(lines[0].text, ::testing::HasSubstr(anywhere));
  EXPECT_THAT(lines[0].text, ::testing::HasSubstr(kept));

  const v1::Workload a = Get(anywhere);
  const v1::Workload k = Get(kept);
  const std::string a_node = a.assignment().replicas(0).node();
  const std::string k_node = k.assignment().replicas(0).node();
  std::cout << "spot reclaim: anywhere -> " << a.assignment().cluster() << "/" << a_node
            << " (observed " << absl::FormatDuration(anywhere_again - lines[0].at)
            << " after the reclaim), kept-to-spot-a -> " << k_node << "\n";
  EXPECT_FALSE(IsSpotNode(a_node)) << "the spot nodes were away when it was placed again";
  EXPECT_EQ(k.assignment().cluster(), "spot-a");
  // The one free on-demand GPU went to one of the two; the other was on edge-l4 (allowed
  // anywhere) or waited for the spot nodes (kept to spot-a).
  if (a_node == "od-01") {
    EXPECT_TRUE(IsSpotNode(k_node)) << "od-01 had room for one";
    ASSERT_GE(lines.size(), 2u);
    EXPECT_THAT(lines[1].text, ::testing::HasSubstr("spot node(s) back"));
  } else {
    EXPECT_EQ(a.assignment().cluster(), "edge-l4");
  }
  EXPECT_LT(anywhere_again - lines[0].at, absl::Seconds(5))
      << "capacity existed elsewhere: placed again within 5 s";

  // Work that does not tolerate spot, or did not run there, was never touched.
  const v1::Workload n = Get(not_spot);
  EXPECT_EQ(n.attempts(), 1u);
  EXPECT_EQ(n.assignment().cluster(), "edge-l4");
  EXPECT_EQ(Get(filler3).attempts(), 1u);
  EXPECT_TRUE(RunningAt(Get(filler3), 1));

  // The nodes come back (reported again) after the reclaim's six seconds.
  ASSERT_TRUE(Eventually(
      [&] {
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer " + server_.admin_token);
        v1::GetClusterRequest req;
        req.set_name("spot-a");
        v1::Cluster c;
        return clusters_->GetCluster(&ctx, req, &c).ok() && c.nodes_size() == 3;
      },
      std::chrono::seconds(kReclaimForSeconds + 20)));

  for (auto& agent : agents_) agent->Stop();
  // From the agents' own logs: attempt 1 of each ended (CANCELLED: stopped by the reclaim) on
  // spot-a before attempt 2 started anywhere, and each attempt started once.
  std::vector<AgentRun> runs = RunsInLog(LogOf("spot-a"));
  const std::vector<AgentRun> edge = RunsInLog(LogOf("edge-l4"));
  runs.insert(runs.end(), edge.begin(), edge.end());
  for (const std::string& id : {anywhere, kept}) {
    const AgentRun* first = nullptr;
    const AgentRun* second = nullptr;
    for (const AgentRun& r : runs) {
      if (r.workload != id) continue;
      EXPECT_EQ(r.starts, 1) << id << " attempt " << r.attempt;
      if (r.attempt == 1) first = &r;
      if (r.attempt == 2) second = &r;
    }
    ASSERT_NE(first, nullptr) << id;
    ASSERT_NE(second, nullptr) << id;
    EXPECT_EQ(first->end_state, "CANCELLED") << id;
    EXPECT_LT(first->end, second->start) << id << " ran twice at once";
  }
  for (const AgentRun& r : RunsInLog(LogOf("spot-a"))) {
    EXPECT_NE(r.workload, not_spot) << "not-spot ran on spot-a";
  }
  for (const AgentRun& r : edge) EXPECT_NE(r.workload, kept) << "kept-to-spot-a ran on edge-l4";
}

}  // namespace
}  // namespace gpufed
