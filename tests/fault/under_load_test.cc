// Faults under load (issue #9 §5), against real processes: PostgreSQL, gpufed-server and two
// gpufed-agents on the process backend, while client threads keep submitting short workloads.
// The server is killed with -9 and started again on the same database and port; PostgreSQL is
// stopped (immediate mode: a crash) and started again on the same data folder and port.
//
// Each workload's replicas append "start"/"end" lines to one log, so the test sees what really
// ran; the agents' own logs say which attempt ran where and when. After each fault and at the
// end the test checks, from the database (workloads, workload_events) and those logs:
//   - no acknowledged submission is lost (every acknowledged key is stored, under its id);
//   - none is duplicated (one workload per idempotency key);
//   - nothing ran twice (no replica of one attempt started twice);
//   - nothing ran on two clusters at once;
// and at the end that every workload SUCCEEDED, or is PENDING with a reason, within a bound.

#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "storage/pg_errors.h"
#include "tests/fault/fault_support.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using testing::AgentRun;
using testing::ChildProcess;
using testing::Eventually;
using ::testing::IsEmpty;

// Sized for a 2-core machine with a build running beside it: each workload is one `sh` running
// two echos, and the whole test stays well under two minutes. Every tenth workload is a gang of
// two replicas.
constexpr int kClients = 4;
constexpr int kServerKillWorkloads = 3000;
// Warning or error lines the four server runs may log in all (none were seen; the defect this
// guards against logged thousands per restart).
constexpr int kMaxServerWarnings = 10;
constexpr int kServerKills = 3;
constexpr int kPostgresRestartWorkloads = 2000;
constexpr int kPostgresRestarts = 2;
// How long one submission may keep failing UNAVAILABLE before its client gives up, and how long
// the work may take to finish after the last submission: generous bounds, not speed limits.
constexpr auto kSubmitPatience = std::chrono::seconds(60);
constexpr auto kFinishWithin = std::chrono::seconds(90);

// The clusters, from deploy/topologies: 8 L4s and 64 A100s.
struct Cluster {
  const char* name;
  const char* topology;
};
constexpr Cluster kClusters[] = {{"edge-l4", "edge-l4"}, {"cloud-eu-a100", "cloud-a100"}};

// Client threads that submit workloads 0..n-1 (request(i) builds each, with its own idempotency
// key), and retry a call that fails UNAVAILABLE or DEADLINE_EXCEEDED (server or database away,
// connection refused or cut) with the same request until it is acknowledged, as a careful client
// does. Any other failure is kept as an error and that submission abandoned.
class Submitters {
 public:
  Submitters(const std::string& address, std::string token, int workloads,
             std::function<v1::SubmitRequest(int)> request)
      : channel_(testing::Connect(address)),
        token_(std::move(token)),
        workloads_(workloads),
        request_(std::move(request)) {}
  // Stops the clients at their next call (a test that ended early does not wait them out).
  ~Submitters() {
    stopping_ = true;
    Join();
  }

  void Start(int clients) {
    for (int c = 0; c < clients; ++c) threads_.emplace_back([this] { Run(); });
  }
  void Join() {
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  // Idempotency key -> the workload id its acknowledgement named.
  std::map<std::string, std::string> Acked() const {
    absl::MutexLock lock(&mu_);
    return acked_;
  }
  size_t acked_count() const {
    absl::MutexLock lock(&mu_);
    return acked_.size();
  }
  std::vector<std::string> Errors() const {
    absl::MutexLock lock(&mu_);
    return errors_;
  }
  // Calls that failed and were tried again.
  int retries() const { return retries_.load(); }
  // True once every submission was acknowledged or abandoned.
  bool done() const { return finished_.load() == workloads_; }

 private:
  void Run() {
    auto stub = v1::WorkloadService::NewStub(channel_);
    for (int i = next_.fetch_add(1); i < workloads_ && !stopping_; i = next_.fetch_add(1)) {
      const v1::SubmitRequest req = request_(i);
      const auto give_up = std::chrono::steady_clock::now() + kSubmitPatience;
      for (;;) {
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer " + token_);
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        v1::SubmitResponse resp;
        const grpc::Status s = stub->Submit(&ctx, req, &resp);
        if (s.ok()) {
          absl::MutexLock lock(&mu_);
          acked_[req.spec().idempotency_key()] = resp.workload().id();
          break;
        }
        const bool retry = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                           s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
        if (!retry || stopping_ || std::chrono::steady_clock::now() > give_up) {
          absl::MutexLock lock(&mu_);
          errors_.push_back(absl::StrCat(req.spec().idempotency_key(), ": code ", s.error_code(),
                                         " ", s.error_message(), retry ? " (gave up)" : ""));
          break;
        }
        ++retries_;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      ++finished_;
    }
  }

  const std::shared_ptr<grpc::Channel> channel_;
  const std::string token_;
  const int workloads_;
  const std::function<v1::SubmitRequest(int)> request_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> next_{0};
  std::atomic<int> finished_{0};
  std::atomic<int> retries_{0};
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> acked_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
};

// A workload as the database holds it.
struct StoredWorkload {
  std::string id;
  std::string key;
  std::string state;
  std::string pending_reason;
  int attempts = 0;
  int running_events = 0;  // workload_events rows that moved it to RUNNING
};

constexpr const char* kReadWorkloads = R"sql(
  SELECT w.id, coalesce(w.idempotency_key, ''), w.state, w.pending_reason, w.attempts,
         (SELECT count(*) FROM workload_events e
           WHERE e.workload_id = w.id AND e.to_state = 'RUNNING')
    FROM workloads w ORDER BY w.id)sql";

absl::StatusOr<std::vector<StoredWorkload>> ReadWorkloads(const std::string& dsn) {
  try {
    pqxx::connection conn(dsn);
    pqxx::read_transaction txn(conn);
    std::vector<StoredWorkload> out;
    for (const pqxx::row& row : txn.exec(kReadWorkloads)) {
      StoredWorkload& w = out.emplace_back();
      w.id = row[0].as<std::string>();
      w.key = row[1].as<std::string>();
      w.state = row[2].as<std::string>();
      w.pending_reason = row[3].as<std::string>();
      w.attempts = row[4].as<int>();
      w.running_events = row[5].as<int>();
    }
    return out;
  } catch (const std::exception& e) {
    return storage::StatusFromException(e, "reading workloads");
  }
}

// (workload id, replica index) -> how many times that replica's command started, from the runs
// log the commands append to. A line still being written is skipped.
std::map<std::pair<std::string, int>, int> ReplicaStarts(const std::string& path) {
  std::map<std::pair<std::string, int>, int> starts;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const std::vector<std::string> f = absl::StrSplit(line, ' ');
    int replica = 0;
    if (f.size() != 3 || f[0] != "start" || !absl::SimpleAtoi(f[2], &replica)) continue;
    ++starts[{f[1], replica}];
  }
  return starts;
}

class UnderLoadTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& agent : agents_) agent->Stop();
    if (server_.process) server_.process->Stop();
  }

  // A server on a fresh database of `postgres`, on a port outside the ephemeral range, and one
  // agent per cluster on the process backend.
  void StartAll(testing::TestPostgres& postgres) {
    ASSERT_OK_AND_ASSIGN(dsn_, postgres.CreateEmptyDatabase());
    ASSERT_OK_AND_ASSIGN(port_, testing::PortOutsideEphemeralRange());
    StartServer();
    ASSERT_OK_AND_ASSIGN(
        token_, testing::BootstrapTenant(server_.address(), server_.admin_token, "t", "p"));
    for (const Cluster& cluster : kClusters) {
      ASSERT_OK_AND_ASSIGN(
          std::string agent_token,
          testing::CreateAgentToken(server_.address(), server_.admin_token, cluster.name));
      testing::AgentOptions ao;
      ao.server_address = server_.address();
      ao.token = agent_token;
      ao.topology =
          absl::StrCat(testing::SourceDir(), "/deploy/topologies/", cluster.topology, ".yaml");
      ao.backend = "process";
      ao.work_dir = absl::StrCat(dir_.path(), "/", cluster.name);
      ao.log_path = AgentLog(cluster.name);
      ASSERT_OK_AND_ASSIGN(agents_.emplace_back(), testing::StartAgent(ao));
    }
  }

  // (Re)starts the server on the test's database and port: agents and clients keep dialling
  // the same address.
  void StartServer() {
    testing::ServerOptions options;
    options.data_dir = dir_.path() + "/server";
    options.database_url = dsn_;
    options.grpc_port = port_;
    ASSERT_OK_AND_ASSIGN(server_, testing::StartServer(options));
  }

  [[nodiscard]] std::string AgentLog(const std::string& cluster) const {
    return absl::StrCat(dir_.path(), "/agent-", cluster, ".log");
  }
  [[nodiscard]] std::string RunsLog() const { return dir_.path() + "/runs.log"; }

  // Workload i: one replica of one GPU (every tenth: two), no retry policy, a command that
  // records its start and end and exits 0.
  [[nodiscard]] v1::SubmitRequest Request(int i) const {
    v1::SubmitRequest req;
    v1::WorkloadSpec* spec = req.mutable_spec();
    spec->set_tenant("t");
    spec->set_project("p");
    spec->set_name(absl::StrCat("job-", i));
    spec->set_idempotency_key(absl::StrCat("load-", i));
    spec->set_replicas(i % 10 == 0 ? 2 : 1);
    spec->mutable_per_replica()->set_gpus(1);
    const std::string line = "$GPUFED_WORKLOAD_ID $GPUFED_REPLICA_INDEX\" >> " + RunsLog();
    spec->mutable_run()->add_command(absl::StrCat("echo \"start ", line, "; echo \"end ", line));
    return req;
  }

  // What must hold at any moment, given the submissions acknowledged before it: each problem
  // found, as a line (at most 20).
  std::vector<std::string> Violations(const std::map<std::string, std::string>& acked) {
    std::vector<std::string> found;
    auto add = [&](std::string problem) {
      if (found.size() < 20) found.push_back(std::move(problem));
    };
    // The logs first, then the database: whatever the logs show ran was stored before it ran.
    const std::map<std::pair<std::string, int>, int> replica_starts = ReplicaStarts(RunsLog());
    std::map<std::string, std::vector<AgentRun>> agent_runs;  // by cluster
    for (const Cluster& cluster : kClusters) {
      agent_runs[cluster.name] = testing::RunsInLog(AgentLog(cluster.name));
    }
    absl::StatusOr<std::vector<StoredWorkload>> stored = ReadWorkloads(dsn_);
    if (!stored.ok()) return {stored.status().ToString()};

    std::map<std::string, std::vector<const StoredWorkload*>> by_key;
    std::map<std::string, const StoredWorkload*> by_id;
    for (const StoredWorkload& w : *stored) {
      by_key[w.key].push_back(&w);
      by_id[w.id] = &w;
    }
    for (const auto& [key, ws] : by_key) {
      if (key.empty()) add(absl::StrCat(ws.size(), " workload(s) stored without a key"));
      if (ws.size() > 1) add(absl::StrCat("key ", key, " stored ", ws.size(), " times"));
    }
    for (const auto& [key, id] : acked) {
      auto it = by_key.find(key);
      if (it == by_key.end()) {
        add(absl::StrCat("acknowledged ", key, " (workload ", id, ") is not stored"));
      } else if (it->second.front()->id != id) {
        add(absl::StrCat("acknowledged ", key, " as workload ", id, ", stored as ",
                         it->second.front()->id));
      }
    }
    for (const StoredWorkload& w : *stored) {
      if (w.running_events > w.attempts) {
        add(absl::StrCat("workload ", w.id, ": ", w.running_events, " RUNNING events in ",
                         w.attempts, " attempt(s)"));
      }
    }

    // What the replicas' commands say ran.
    for (const auto& [replica, starts] : replica_starts) {
      auto it = by_id.find(replica.first);
      if (it == by_id.end()) {
        add(absl::StrCat("workload ", replica.first, " ran but is not stored"));
      } else if (starts > it->second->attempts) {
        add(absl::StrCat("workload ", replica.first, " replica ", replica.second, " started ",
                         starts, " times in ", it->second->attempts, " attempt(s)"));
      }
    }

    // What the agents say ran: one start per attempt, never on both clusters at once.
    std::map<std::string, std::vector<std::pair<std::string, AgentRun>>> runs;  // by workload
    for (auto& [cluster, list] : agent_runs) {
      for (AgentRun& run : list) {
        if (run.starts > 1) {
          add(absl::StrCat("workload ", run.workload, " attempt ", run.attempt, " started ",
                           run.starts, " times on ", cluster));
        }
        runs[run.workload].emplace_back(cluster, std::move(run));
      }
    }
    for (const auto& [workload, list] : runs) {
      for (size_t i = 0; i < list.size(); ++i) {
        for (size_t j = i + 1; j < list.size(); ++j) {
          const auto& [ca, a] = list[i];
          const auto& [cb, b] = list[j];
          if (ca == cb) continue;
          if (a.attempt == b.attempt) {
            add(absl::StrCat("workload ", workload, " attempt ", a.attempt, " ran on ", ca, " and ",
                             cb));
          }
          if (a.start < b.end && b.start < a.end) {
            add(absl::StrCat("workload ", workload, " ran on ", ca, " and ", cb, " at once"));
          }
        }
      }
    }
    return found;
  }

  // Waits (up to kFinishWithin) until every stored workload has ended, then checks the end
  // state: all `expected` workloads stored, each SUCCEEDED having really run, or PENDING with a
  // reason. Prints how long the wait took.
  void ExpectAllFinished(size_t expected) {
    std::vector<StoredWorkload> stored;
    auto ended = [&] {
      absl::StatusOr<std::vector<StoredWorkload>> now = ReadWorkloads(dsn_);
      if (!now.ok()) return false;
      stored = *std::move(now);
      for (const StoredWorkload& w : stored) {
        if (w.state != "SUCCEEDED" && w.state != "FAILED" && w.state != "CANCELLED" &&
            w.state != "LOST") {
          return false;
        }
      }
      return true;
    };
    const absl::Time from = absl::Now();
    Eventually(ended, kFinishWithin);
    std::cout << "all work ended " << absl::FormatDuration(absl::Now() - from)
              << " after the last submission\n";
    EXPECT_EQ(stored.size(), expected);
    const std::map<std::pair<std::string, int>, int> starts = ReplicaStarts(RunsLog());
    int pending = 0;
    std::vector<std::string> wrong;
    for (const StoredWorkload& w : stored) {
      if (w.state == "PENDING" && !w.pending_reason.empty()) {
        ++pending;
      } else if (w.state != "SUCCEEDED") {
        wrong.push_back(absl::StrCat(w.id, " ", w.state, " ", w.pending_reason));
      } else if (!starts.contains({w.id, 0})) {
        wrong.push_back(absl::StrCat(w.id, " SUCCEEDED but its command never started"));
      }
      if (wrong.size() >= 20) break;
    }
    EXPECT_THAT(wrong, IsEmpty()) << "workloads neither SUCCEEDED nor PENDING with a reason";
    if (pending > 0) std::cout << pending << " workload(s) still PENDING with a reason\n";
  }

  testing::TempDir dir_{"gpufed-load"};
  // A test's own PostgreSQL, if it has one; it outlives the processes TearDown stops.
  std::unique_ptr<testing::TestPostgres> own_postgres_;
  std::string dsn_;
  int port_ = 0;
  testing::ServerProcess server_;
  std::string token_;
  std::vector<std::unique_ptr<ChildProcess>> agents_;
};

// kill -9 of the server, kServerKills times while clients submit and agents run and report,
// each time started again on the same database and port.
TEST_F(UnderLoadTest, ServerKilledRepeatedlyLosesDuplicatesAndRerunsNothing) {
  ASSERT_OK_AND_ASSIGN(testing::TestPostgres * postgres, testing::TestPostgres::Get());
  ASSERT_NO_FATAL_FAILURE(StartAll(*postgres));
  Submitters load(server_.address(), token_, kServerKillWorkloads,
                  [this](int i) { return Request(i); });
  load.Start(kClients);

  for (int kill = 1; kill <= kServerKills; ++kill) {
    const auto at = static_cast<size_t>(kill * kServerKillWorkloads / (kServerKills + 1));
    ASSERT_TRUE(Eventually([&] { return load.acked_count() >= at || load.done(); },
                           std::chrono::seconds(120)));
    ASSERT_FALSE(load.done()) << "the load ended before kill " << kill;
    server_.process->Kill();
    ASSERT_NO_FATAL_FAILURE(StartServer());
    const size_t before = load.acked_count();
    EXPECT_TRUE(Eventually([&] { return load.acked_count() > before || load.done(); },
                           std::chrono::seconds(60)))
        << "clients must get through to the restarted server";
    EXPECT_THAT(Violations(load.Acked()), IsEmpty()) << "after kill " << kill;
  }
  load.Join();
  EXPECT_THAT(load.Errors(), IsEmpty());
  EXPECT_GT(load.retries(), 0) << "no call ever met the killed server";
  EXPECT_EQ(load.acked_count(), static_cast<size_t>(kServerKillWorkloads));
  ExpectAllFinished(kServerKillWorkloads);
  // Restarts are quiet: what the agents report again after each one is expected, not warned
  // about (an operator once saw thousands of "reported workload ... which is not assigned to it"
  // warnings after every restart). The servers' log (all four runs, appended) must show every
  // agent registering again after each restart, and next to no warnings.
  {
    std::ifstream in(server_.process->log_path());
    std::vector<std::string> warnings;
    int registrations = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.find("] [warning] ") != std::string::npos ||
          line.find("] [error] ") != std::string::npos) {
        warnings.push_back(line.substr(0, 300));
      }
      if (line.find("] [info] agent for cluster ") != std::string::npos) ++registrations;
    }
    EXPECT_GE(registrations, 2 * (kServerKills + 1));
    EXPECT_LE(warnings.size(), static_cast<size_t>(kMaxServerWarnings))
        << "first: " << warnings.front();
  }
  for (auto& agent : agents_) agent->Stop();
  EXPECT_THAT(Violations(load.Acked()), IsEmpty()) << "at the end";
  std::cout << "server kills: " << kServerKills << ", calls retried: " << load.retries() << "\n";
}

// PostgreSQL stopped at once (as a crash) and started again on the same data folder and port,
// kPostgresRestarts times, while clients submit and agents report. The server keeps running.
TEST_F(UnderLoadTest, PostgresRestartedLosesDuplicatesAndRerunsNothing) {
  // A PostgreSQL of the test's own: the binary's shared one must stay up for other tests.
  ASSERT_OK_AND_ASSIGN(own_postgres_, testing::TestPostgres::StartOwn());
  testing::TestPostgres* postgres = own_postgres_.get();
  ASSERT_NO_FATAL_FAILURE(StartAll(*postgres));
  Submitters load(server_.address(), token_, kPostgresRestartWorkloads,
                  [this](int i) { return Request(i); });
  load.Start(kClients);

  for (int restart = 1; restart <= kPostgresRestarts; ++restart) {
    const auto at =
        static_cast<size_t>(restart * kPostgresRestartWorkloads / (kPostgresRestarts + 1));
    ASSERT_TRUE(Eventually([&] { return load.acked_count() >= at || load.done(); },
                           std::chrono::seconds(120)));
    ASSERT_FALSE(load.done()) << "the load ended before restart " << restart;
    const int retries = load.retries();
    ASSERT_OK(postgres->Stop());
    // Down until the clients have noticed: at least one call failed and was retried.
    EXPECT_TRUE(Eventually([&] { return load.retries() > retries; }, std::chrono::seconds(20)));
    ASSERT_OK(postgres->Restart());
    const size_t before = load.acked_count();
    EXPECT_TRUE(Eventually([&] { return load.acked_count() > before || load.done(); },
                           std::chrono::seconds(60)))
        << "the server must serve again once PostgreSQL is back";
    EXPECT_TRUE(server_.process->Running()) << "the server must outlive its database's restart";
    EXPECT_THAT(Violations(load.Acked()), IsEmpty()) << "after restart " << restart;
  }
  load.Join();
  EXPECT_THAT(load.Errors(), IsEmpty());
  EXPECT_EQ(load.acked_count(), static_cast<size_t>(kPostgresRestartWorkloads));
  ExpectAllFinished(kPostgresRestartWorkloads);
  for (auto& agent : agents_) agent->Stop();
  EXPECT_THAT(Violations(load.Acked()), IsEmpty()) << "at the end";
  std::cout << "PostgreSQL restarts: " << kPostgresRestarts << ", calls retried: " << load.retries()
            << "\n";
}

}  // namespace
}  // namespace gpufed
