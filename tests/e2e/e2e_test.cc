// End to end with real processes: PostgreSQL, gpufed-server, two gpufed-agents (process
// backend), 200 workloads including gangs, and a kill -9 of the server in the middle.
//
// Every replica's command appends "start"/"end" lines (workload, replica, node, GPUs, time) to
// one log, so the test sees what actually ran: nothing twice, no GPU shared by two running
// replicas, every gang's replicas running together.

#include <atomic>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using testing::ChildProcess;
using Clock = std::chrono::steady_clock;

constexpr int kWorkloads = 200;

std::string Topology(const std::string& cluster, const std::string& prefix,
                     const std::string& model) {
  return absl::StrCat("cluster:\n  name: ", cluster,
                      "\n  provider: onprem\n  region: test\n  jurisdiction: us\n"
                      "node_groups:\n  - name_prefix: ",
                      prefix,
                      "\n    count: 4\n    rack: r1\n    gpus:\n      count: 8\n"
                      "      model: ",
                      model, "\n      nvlink: node\n");
}

struct ReplicaRun {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  std::string node;
  std::string gpus;
  int starts = 0;
  int ends = 0;
};

class EndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pg = testing::TestPostgres::Get();
    ASSERT_OK(pg);
    auto dsn = (*pg)->CreateEmptyDatabase();
    ASSERT_OK(dsn);
    dsn_ = *dsn;
    StartServer();
    auto token = testing::BootstrapTenant(server_.address(), server_.admin_token, "e2e", "p");
    ASSERT_OK(token);
    user_token_ = *token;
    for (const auto& [cluster, prefix, model] :
         {std::tuple{"e2e-a", "a", "H100-80GB"}, std::tuple{"e2e-b", "b", "A100-80GB"}}) {
      std::string path = absl::StrCat(dir_.path(), "/", cluster, ".yaml");
      std::ofstream(path) << Topology(cluster, absl::StrCat(prefix, "-"), model);
      auto agent_token = testing::CreateAgentToken(server_.address(), server_.admin_token, cluster);
      ASSERT_OK(agent_token);
      testing::AgentOptions ao;
      ao.server_address = server_.address();
      ao.token = *agent_token;
      ao.topology = path;
      ao.backend = "process";
      ao.work_dir = absl::StrCat(dir_.path(), "/work-", cluster);
      ao.log_path = absl::StrCat(dir_.path(), "/agent-", cluster, ".log");
      auto agent = testing::StartAgent(ao);
      ASSERT_OK(agent);
      agents_.push_back(std::move(*agent));
    }
  }

  void TearDown() override {
    for (auto& a : agents_) a->Stop();
    if (server_.process) server_.process->Stop();
  }

  void StartServer() {
    testing::ServerOptions options;
    options.data_dir = dir_.path() + "/server";
    options.database_url = dsn_;
    // Keep the gRPC port across the restart so agents and clients find the new server.
    options.grpc_port = server_.grpc_port;
    auto server = testing::StartServer(options);
    ASSERT_OK(server);
    server_ = std::move(*server);
  }

  [[nodiscard]] v1::SubmitRequest Request(int i) const {
    v1::SubmitRequest req;
    auto* spec = req.mutable_spec();
    spec->set_tenant("e2e");
    spec->set_project("p");
    spec->set_name(absl::StrCat("job-", i));
    spec->set_idempotency_key(absl::StrCat("e2e-", i));
    // 150 single GPUs, 30 four-GPU jobs, 20 gangs of 2 x 8.
    if (i % 10 == 0) {
      spec->set_replicas(2);
      spec->mutable_per_replica()->set_gpus(8);
      spec->set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
    } else if (i % 10 == 5 || (i % 10 == 3 && i % 20 == 3)) {
      spec->set_replicas(1);
      spec->mutable_per_replica()->set_gpus(4);
    } else {
      spec->set_replicas(1);
      spec->mutable_per_replica()->set_gpus(1);
    }
    const std::string log = runs_log();
    spec->mutable_run()->add_command(absl::StrCat(
        "echo \"start $GPUFED_WORKLOAD_ID $GPUFED_REPLICA_INDEX $GPUFED_NODE "
        "$CUDA_VISIBLE_DEVICES $(date +%s%N)\" >> ",
        log,
        "; sleep 0.3; echo \"end $GPUFED_WORKLOAD_ID $GPUFED_REPLICA_INDEX $GPUFED_NODE "
        "$CUDA_VISIBLE_DEVICES $(date +%s%N)\" >> ",
        log));
    return req;
  }

  [[nodiscard]] std::string runs_log() const { return dir_.path() + "/runs.log"; }

  testing::TempDir dir_{"gpufed-e2e"};
  std::string dsn_;
  testing::ServerProcess server_;
  std::vector<std::unique_ptr<ChildProcess>> agents_;
  std::string user_token_;
};

TEST_F(EndToEndTest, TwoHundredWorkloadsSurviveAServerKill) {
  std::mutex mu;
  std::map<int, std::string> acked;  // submission index -> workload id
  std::atomic<int> next{0};
  std::atomic<bool> killed{false};
  std::mutex restart_mu;

  auto submitter = [&] {
    auto stub = v1::WorkloadService::NewStub(testing::Connect(server_.address()));
    for (;;) {
      int i = next.fetch_add(1);
      if (i >= kWorkloads) return;
      v1::SubmitRequest req = Request(i);
      // Retry with the same idempotency key until acknowledged, as a careful client does.
      auto deadline = Clock::now() + std::chrono::seconds(90);
      for (;;) {
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer " + user_token_);
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        v1::SubmitResponse resp;
        grpc::Status s = stub->Submit(&ctx, req, &resp);
        if (s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          acked[i] = resp.workload().id();
          break;
        }
        ASSERT_TRUE(s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                    s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
            << s.error_message();
        ASSERT_LT(Clock::now(), deadline) << "server never came back";
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  std::vector<std::thread> clients;
  clients.reserve(4);
  for (int c = 0; c < 4; ++c) clients.emplace_back(submitter);

  // Kill the server once a third of the work is acknowledged and some of it is running.
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (acked.size() >= kWorkloads / 3) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  server_.process->Kill();
  killed = true;
  StartServer();
  for (auto& c : clients) c.join();
  ASSERT_EQ(acked.size(), static_cast<size_t>(kWorkloads));

  // Wait until everything acknowledged is terminal.
  auto stub = v1::WorkloadService::NewStub(testing::Connect(server_.address()));
  std::map<std::string, v1::Workload> seen;
  const auto deadline = Clock::now() + std::chrono::seconds(180);
  for (;;) {
    seen.clear();
    std::string token;
    do {
      grpc::ClientContext ctx;
      ctx.AddMetadata("authorization", "Bearer " + user_token_);
      v1::ListWorkloadsRequest req;
      req.set_page_size(1000);
      req.set_page_token(token);
      v1::ListWorkloadsResponse resp;
      grpc::Status s = stub->List(&ctx, req, &resp);
      ASSERT_OK(s);
      for (const auto& w : resp.workloads()) seen[w.id()] = w;
      token = resp.next_page_token();
    } while (!token.empty());
    int done = 0;
    for (const auto& [id, w] : seen) {
      if (w.state() == v1::WORKLOAD_STATE_SUCCEEDED || w.state() == v1::WORKLOAD_STATE_FAILED ||
          w.state() == v1::WORKLOAD_STATE_CANCELLED) {
        ++done;
      }
    }
    if (done == kWorkloads) break;
    ASSERT_LT(Clock::now(), deadline) << done << " of " << kWorkloads << " finished";
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }

  // Exactly one workload per submission: retries across the crash were not duplicated.
  EXPECT_EQ(seen.size(), static_cast<size_t>(kWorkloads));
  std::set<std::string> acked_ids;
  for (const auto& [i, id] : acked) acked_ids.insert(id);
  EXPECT_EQ(acked_ids.size(), static_cast<size_t>(kWorkloads));
  for (const std::string& id : acked_ids) {
    ASSERT_TRUE(seen.contains(id)) << "acknowledged workload " << id << " was lost";
    EXPECT_EQ(seen[id].state(), v1::WORKLOAD_STATE_SUCCEEDED)
        << id << ": " << seen[id].message() << seen[id].pending_reason();
  }

  // What actually ran.
  std::map<std::pair<std::string, int>, ReplicaRun> runs;  // (workload, replica)
  std::ifstream log(runs_log());
  std::string line;
  while (std::getline(log, line)) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    ASSERT_EQ(f.size(), 6u) << line;
    ReplicaRun& r = runs[{f[1], std::stoi(f[2])}];
    r.node = f[3];
    r.gpus = f[4];
    if (f[0] == "start") {
      ++r.starts;
      r.start_ns = std::stoll(f[5]);
    } else {
      ++r.ends;
      r.end_ns = std::stoll(f[5]);
    }
  }
  for (const auto& [id, w] : seen) {
    for (uint32_t r = 0; r < w.spec().replicas(); ++r) {
      auto it = runs.find({id, static_cast<int>(r)});
      ASSERT_NE(it, runs.end()) << "workload " << id << " replica " << r << " never ran";
      EXPECT_EQ(it->second.starts, 1) << "workload " << id << " replica " << r << " ran twice";
      EXPECT_EQ(it->second.ends, 1);
    }
    EXPECT_EQ(w.assignment().replicas_size(), static_cast<int>(w.spec().replicas()));
    if (w.spec().replicas() > 1) {
      // A gang runs together: every replica started before any replica ended.
      int64_t last_start = 0, first_end = INT64_MAX;
      for (uint32_t r = 0; r < w.spec().replicas(); ++r) {
        const ReplicaRun& run = runs[{id, static_cast<int>(r)}];
        last_start = std::max(last_start, run.start_ns);
        first_end = std::min(first_end, run.end_ns);
      }
      EXPECT_LT(last_start, first_end) << "gang " << id << " was partly running";
    }
  }
  // No GPU ran two replicas at once.
  std::map<std::string, std::vector<std::pair<int64_t, int64_t>>> by_gpu;
  for (const auto& [key, r] : runs) {
    for (absl::string_view g : absl::StrSplit(r.gpus, ',')) {
      by_gpu[absl::StrCat(r.node, "/", g)].push_back({r.start_ns, r.end_ns});
    }
  }
  for (auto& [gpu, intervals] : by_gpu) {
    std::sort(intervals.begin(), intervals.end());
    for (size_t i = 1; i < intervals.size(); ++i) {
      EXPECT_LE(intervals[i - 1].second, intervals[i].first) << "GPU " << gpu << " double-booked";
    }
  }
  EXPECT_TRUE(killed.load());
}

}  // namespace
}  // namespace gpufed
