// gpufed-bench: measures what issue #2 promises, against real processes on this machine.
//
//   gpufed-bench submit --clients 8 --count 20000   durable, acknowledged submissions, after
//                                                   as many empty calls (gRPC alone: the ceiling);
//                                                   paced, beside paced empty calls and one-row
//                                                   commits (the machine's floors)
//   gpufed-bench e2e --jobs 5000                    first submit to last SUCCEEDED, process backend
//                                                   (--backend sim: the control plane alone)
//   gpufed-bench failover --runs 10 --jobs 8        cut a cluster off: time until its work moved
//   gpufed-bench spot --runs 5 --jobs 8             spot reclaims: time until the work is placed
//                                                   again (bench/spot_bench.h)
//   gpufed-bench placement --gpus 100000 --clusters 1000
//                                                   the placement engine and pool alone, in memory
//   gpufed-bench watch-flood --streams 1000         Watch streams that never read: the server's
//                                                   memory, other callers' latency
//   gpufed-bench fleet --clusters 1000 --gpus 100000
//                                                   simulated clusters heartbeating against one
//                                                   server under a steady load
//                                                   (bench/fleet_bench.h)
//   gpufed-bench report --workloads 100000 --days 30
//                                                   usage reports over a month of metered
//                                                   history (bench/report_bench.h)
//
// submit and e2e start their own gpufed-server (embedded PostgreSQL, fsync on, in a temporary
// folder). Each prints its figures as one JSON object on its last line.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/fleet_bench.h"
#include "bench/placement_bench.h"
#include "bench/report_bench.h"
#include "bench/resuming_watch.h"
#include "bench/spot_bench.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "nlohmann/json.hpp"
#include "pqxx/pqxx"
#include "storage/embedded_postgres.h"
#include "tests/support/process_harness.h"
#include "tests/support/tcp_proxy.h"

namespace {

using Clock = std::chrono::steady_clock;
using gpufed::testing::ChildProcess;
using gpufed::testing::ServerProcess;

struct Target {
  std::string address;
  std::string token;
  std::unique_ptr<gpufed::testing::TempDir> dir;
  ServerProcess server;
};

int Fail(const std::string& what) {
  std::cerr << "gpufed-bench: " << what << "\n";
  return 1;
}

absl::Status StartTarget(Target* t, const std::string& tenant) {
  t->dir = std::make_unique<gpufed::testing::TempDir>("gpufed-bench");
  gpufed::testing::ServerOptions options;
  options.data_dir = t->dir->path() + "/server";
  // The benchmarks measure the server with one token at up to ~15,000 writes/s: no per-caller
  // write limit (default 1,000/s, burst 2,000; docs/operations.md#limits).
  options.extra_args = {"--write-rate=0"};
  auto server = gpufed::testing::StartServer(options);
  if (!server.ok()) return server.status();
  t->server = std::move(*server);
  t->address = t->server.address();
  auto token = gpufed::testing::BootstrapTenant(t->address, t->server.admin_token, tenant, "bench");
  if (!token.ok()) return token.status();
  t->token = *token;
  return absl::OkStatus();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

gpufed::v1::SubmitRequest MakeRequest(const std::string& tenant, const std::string& key,
                                      const std::vector<std::string>& command) {
  gpufed::v1::SubmitRequest req;
  auto* spec = req.mutable_spec();
  spec->set_tenant(tenant);
  spec->set_project("bench");
  spec->set_name("bench-job");
  spec->set_idempotency_key(key);
  spec->set_replicas(1);
  spec->mutable_per_replica()->set_gpus(1);
  spec->set_workload_class(gpufed::v1::WORKLOAD_CLASS_BATCH);
  for (const auto& c : command) spec->mutable_run()->add_command(c);
  return req;
}

// What one run of calls measured: the latencies of the calls answered OK, and the others.
struct SubmitResult {
  std::vector<double> latencies_ms;
  double seconds = 0;
  int errors = 0;
  Clock::time_point first;
};

// One client of a run (closed or open loop): starts call number `i` on the client's own channel and
// runs `done` when it completes.
using CallDone = std::function<void(const grpc::Status&)>;
using StartCall = std::function<void(int i, CallDone done)>;
// Makes a client's StartCall, given its channel.
using MakeClient = std::function<StartCall(std::shared_ptr<grpc::Channel>)>;

// `clients` clients, each on its own channel (one HTTP/2 connection), as separate programs would
// have.
std::vector<StartCall> Connect(const Target& t, int clients, const MakeClient& make_client) {
  std::vector<StartCall> out;
  out.reserve(clients);
  for (int c = 0; c < clients; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("gpufed.bench.client", c);
    out.push_back(make_client(
        grpc::CreateCustomChannel(t.address, grpc::InsecureChannelCredentials(), args)));
  }
  return out;
}

// Closed loop: each client is a chain of calls on its own channel, the next one started from the
// completion of the last, with gRPC's callback API. The load generator shares the machine's two
// cores with the server and its database: a thread blocked in a synchronous call per client
// (64 threads) spent about a third of the machine's CPU on thread switches.
SubmitResult RunClosedLoop(const Target& t, int clients, int count, const MakeClient& make_client) {
  struct Client {
    StartCall start;
    std::vector<double> latencies_ms;
    int errors = 0;
  };
  SubmitResult result;
  std::atomic<int> next{0};
  std::mutex mu;
  std::condition_variable all_done;
  int running = clients;
  std::vector<Client> all(static_cast<size_t>(clients));
  // Starts the client's next call, or ends its chain.
  std::function<void(Client&)> start_next = [&](Client& client) {
    const int i = next.fetch_add(1);
    if (i >= count) {
      std::lock_guard<std::mutex> lock(mu);
      if (--running == 0) all_done.notify_all();
      return;
    }
    const Clock::time_point start = Clock::now();
    client.start(i, [&, start](const grpc::Status& s) {
      if (s.ok()) {
        client.latencies_ms.push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      } else if (++client.errors <= 3) {
        std::cerr << "call: " << s.error_message() << "\n";
      }
      start_next(client);
    });
  };
  std::vector<StartCall> starts = Connect(t, clients, make_client);
  for (int c = 0; c < clients; ++c) all[c].start = std::move(starts[c]);
  const Clock::time_point start = Clock::now();
  result.first = start;
  for (Client& client : all) start_next(client);
  {
    std::unique_lock<std::mutex> lock(mu);
    all_done.wait(lock, [&] { return running == 0; });
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (Client& client : all) {
    result.latencies_ms.insert(result.latencies_ms.end(), client.latencies_ms.begin(),
                               client.latencies_ms.end());
    result.errors += client.errors;
  }
  return result;
}

// Clients that submit MakeRequest's workloads.
MakeClient Submitters(const Target& t, const std::string& tenant, const std::string& key_prefix,
                      const std::vector<std::string>& command) {
  return [&t, tenant, key_prefix, command](std::shared_ptr<grpc::Channel> channel) -> StartCall {
    std::shared_ptr<gpufed::v1::WorkloadService::Stub> stub =
        gpufed::v1::WorkloadService::NewStub(std::move(channel));
    return [&t, tenant, key_prefix, command, stub](int i, CallDone done) {
      struct Call {
        gpufed::v1::SubmitRequest request;
        gpufed::v1::SubmitResponse response;
        grpc::ClientContext context;
      };
      auto call = std::make_shared<Call>();
      call->request = MakeRequest(tenant, absl::StrCat(key_prefix, i), command);
      call->context.AddMetadata("authorization", "Bearer " + t.token);
      call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
      stub->async()->Submit(&call->context, &call->request, &call->response,
                            [call, done = std::move(done)](const grpc::Status& s) { done(s); });
    };
  };
}

// Clients that call grpc.health.v1.Health/Check with an empty request (the server's overall
// status). It touches neither authentication nor the database: what gRPC alone costs on this
// machine, with the same clients and channels as the submits.
StartCall HealthChecker(std::shared_ptr<grpc::Channel> channel) {
  auto stub = std::make_shared<grpc::GenericStub>(std::move(channel));
  return [stub](int /*i*/, CallDone done) {
    struct Call {
      grpc::ByteBuffer request;  // an empty HealthCheckRequest
      grpc::ByteBuffer response;
      grpc::ClientContext context;
    };
    auto call = std::make_shared<Call>();
    grpc::Slice nothing("");
    call->request = grpc::ByteBuffer(&nothing, 1);
    call->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stub->UnaryCall(&call->context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                    &call->request, &call->response,
                    [call, done = std::move(done)](const grpc::Status& s) { done(s); });
  };
}

// Sleeps until call `i` of a run paced at `rate` calls a second from `start` is due.
void SleepUntilSlot(Clock::time_point start, int i, double rate) {
  std::this_thread::sleep_until(
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(i / rate)));
}

// Open loop: call i starts at `rate` calls a second from the start, on client i % clients, whether
// or not the calls before it have been answered, so a slow answer delays no later call (and is not
// hidden by one). Callback API, as in the closed loop: no thread waits for an answer.
SubmitResult RunOpenLoop(const Target& t, int clients, int count, double rate,
                         const MakeClient& make_client) {
  std::vector<StartCall> all = Connect(t, clients, make_client);
  SubmitResult result;
  result.latencies_ms.reserve(static_cast<size_t>(count));
  std::mutex mu;
  std::condition_variable answered;
  int outstanding = 0;
  const Clock::time_point start = Clock::now();
  result.first = start;
  for (int i = 0; i < count; ++i) {
    SleepUntilSlot(start, i, rate);
    {
      std::lock_guard<std::mutex> lock(mu);
      ++outstanding;
    }
    const Clock::time_point sent = Clock::now();
    all[static_cast<size_t>(i % clients)](i, [&, sent](const grpc::Status& s) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - sent).count();
      std::lock_guard<std::mutex> lock(mu);
      if (s.ok()) {
        result.latencies_ms.push_back(ms);
      } else if (++result.errors <= 3) {
        std::cerr << "call: " << s.error_message() << "\n";
      }
      if (--outstanding == 0) answered.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    answered.wait(lock, [&] { return outstanding == 0; });
  }
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

// The database's own floor at the paced rate: one-row INSERTs, each its own transaction (so
// each waits for its WAL flush), on one connection to a fresh embedded PostgreSQL with the
// server's settings (fsync on), started at `rate` a second. A latency counts from the
// statement's start, as pgbench -R counts it. No durable submit can be acknowledged faster than
// such a commit.
absl::StatusOr<SubmitResult> RunPacedCommits(const std::string& data_dir, int count, double rate) {
  auto pg = gpufed::storage::EmbeddedPostgres::Create(data_dir);
  if (!pg.ok()) return pg.status();
  SubmitResult result;
  try {
    pqxx::connection conn((*pg)->dsn());
    pqxx::nontransaction(conn).exec0(
        "CREATE TABLE floor (id bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT now(),"
        " payload text NOT NULL)");
    conn.prepare("floor_insert", "INSERT INTO floor (payload) VALUES ($1)");
    const std::string payload(400, 'x');  // about a bench spec's size
    result.latencies_ms.reserve(static_cast<size_t>(count));
    const Clock::time_point start = Clock::now();
    result.first = start;
    for (int i = 0; i < count; ++i) {
      SleepUntilSlot(start, i, rate);
      const Clock::time_point sent = Clock::now();
      pqxx::nontransaction(conn).exec_prepared0("floor_insert", payload);
      result.latencies_ms.push_back(
          std::chrono::duration<double, std::milli>(Clock::now() - sent).count());
    }
    result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("paced commits: ", e.what()));
  }
  if (absl::Status s = (*pg)->Stop(); !s.ok()) return s;
  return result;
}

// Submits `count` workloads from `clients` clients: with rate > 0 paced at `rate` submissions per
// second in total (RunOpenLoop), otherwise as fast as acknowledgements come back (RunClosedLoop).
SubmitResult RunSubmits(const Target& t, const std::string& tenant, int clients, int count,
                        double rate, const std::string& key_prefix,
                        const std::vector<std::string>& command) {
  if (rate <= 0)
    return RunClosedLoop(t, clients, count, Submitters(t, tenant, key_prefix, command));
  return RunOpenLoop(t, clients, count, rate, Submitters(t, tenant, key_prefix, command));
}

int BenchSubmit(Target& t, int clients, int count, double paced_rate, double paced_seconds,
                int floor_count) {
  const std::string tenant = "bench";
  // The floor: as many empty calls, by as many clients, as the server answers with no work.
  SubmitResult empty;
  if (floor_count > 0) {
    empty = RunClosedLoop(t, clients, floor_count, HealthChecker);
    std::cerr << "empty calls: " << empty.latencies_ms.size() << " answered in " << empty.seconds
              << " s\n";
  }
  // The paced floor: empty calls at the paced rate, the latency gRPC and the machine alone give.
  SubmitResult paced_empty;
  if (floor_count > 0 && paced_rate > 0) {
    paced_empty = RunOpenLoop(t, clients, static_cast<int>(paced_rate * paced_seconds), paced_rate,
                              HealthChecker);
  }
  // Warm-up: connections, prepared statements, caches.
  RunSubmits(t, tenant, clients, std::min(500, count / 10 + 1), 0, "warm-", {"true"});
  SubmitResult closed = RunSubmits(t, tenant, clients, count, 0, "closed-", {"true"});
  std::cerr << "closed loop: " << closed.latencies_ms.size() << " acknowledged in "
            << closed.seconds << " s\n";
  SubmitResult paced;
  if (paced_rate > 0) {
    paced = RunSubmits(t, tenant, clients, static_cast<int>(paced_rate * paced_seconds), paced_rate,
                       "paced-", {"true"});
    std::cerr << "paced at " << paced_rate << "/s: " << paced.latencies_ms.size()
              << " acknowledged\n";
  }
  SubmitResult paced_commits;
  if (floor_count > 0 && paced_rate > 0) {
    auto commits = RunPacedCommits(t.dir->path() + "/floor-postgres",
                                   static_cast<int>(paced_rate * paced_seconds), paced_rate);
    if (!commits.ok()) return Fail(commits.status().ToString());
    paced_commits = std::move(*commits);
  }
  nlohmann::json out = {
      {"bench", "submit"},
      {"clients", clients},
      {"count", count},
      {"acknowledged", closed.latencies_ms.size()},
      {"errors", closed.errors + paced.errors},
      {"seconds", closed.seconds},
      {"submits_per_second", static_cast<double>(closed.latencies_ms.size()) / closed.seconds},
      {"p50_ms", Percentile(closed.latencies_ms, 0.50)},
      {"p99_ms", Percentile(closed.latencies_ms, 0.99)},
      {"paced_rate_per_second", paced_rate},
      {"paced_count", paced.latencies_ms.size()},
      {"paced_p50_ms", Percentile(paced.latencies_ms, 0.50)},
      {"paced_p99_ms", Percentile(paced.latencies_ms, 0.99)},
      {"empty_calls", empty.latencies_ms.size()},
      {"empty_calls_per_second",
       empty.seconds > 0 ? static_cast<double>(empty.latencies_ms.size()) / empty.seconds : 0},
      {"empty_call_p50_ms", Percentile(empty.latencies_ms, 0.50)},
      {"empty_call_p99_ms", Percentile(empty.latencies_ms, 0.99)},
      {"paced_empty_p50_ms", Percentile(paced_empty.latencies_ms, 0.50)},
      {"paced_empty_p99_ms", Percentile(paced_empty.latencies_ms, 0.99)},
      {"paced_commit_p50_ms", Percentile(paced_commits.latencies_ms, 0.50)},
      {"paced_commit_p99_ms", Percentile(paced_commits.latencies_ms, 0.99)},
  };
  std::cout << out.dump() << std::endl;
  return closed.errors + paced.errors + empty.errors + paced_empty.errors == 0 ? 0 : 1;
}

int BenchE2e(Target& t, int jobs, int clients, const std::string& topology,
             const std::string& backend) {
  const std::string tenant = "bench";
  auto agent_token =
      gpufed::testing::CreateAgentToken(t.address, t.server.admin_token, "bench-16x8");
  if (!agent_token.ok()) return Fail(agent_token.status().ToString());
  gpufed::testing::AgentOptions ao;
  ao.server_address = t.address;
  ao.token = *agent_token;
  ao.topology = topology;
  ao.backend = backend;
  ao.work_dir = t.dir->path() + "/agent";
  ao.log_path = t.dir->path() + "/agent.log";
  auto agent = gpufed::testing::StartAgent(ao);
  if (!agent.ok()) return Fail(agent.status().ToString());

  // Count the workloads that reached a terminal state, from one Watch of every workload that
  // resumes when the server ends it (this process also runs the submitting clients, so its
  // reader falls behind). A workload first learned of from a catch-up counts as ended when the
  // bench learned of it: later than it did, so the figure errs on the slow side.
  std::atomic<int> succeeded{0}, failed{0};
  std::atomic<int64_t> last_end_ns{0};
  auto watch_channel = gpufed::testing::Connect(t.address);
  std::set<std::string> ended;  // only the watch's thread touches it
  gpufed::bench::ResumingWatch watch(watch_channel, t.token,
                                     [&](const gpufed::v1::WorkloadEvent& e) {
                                       const gpufed::v1::WorkloadState to = e.to_state();
                                       const bool ok = to == gpufed::v1::WORKLOAD_STATE_SUCCEEDED;
                                       if (!ok && to != gpufed::v1::WORKLOAD_STATE_FAILED &&
                                           to != gpufed::v1::WORKLOAD_STATE_CANCELLED) {
                                         return;
                                       }
                                       if (!ended.insert(e.workload().id()).second) return;
                                       (ok ? succeeded : failed).fetch_add(1);
                                       last_end_ns.store(Clock::now().time_since_epoch().count());
                                     });
  // Submit once the agent has registered, so that its capacity exists when work arrives.
  auto clusters = gpufed::v1::ClusterService::NewStub(watch_channel);
  bool ready = false;
  for (int i = 0; i < 400 && !ready; ++i) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + t.server.admin_token);
    gpufed::v1::GetClusterRequest req;
    req.set_name("bench-16x8");
    gpufed::v1::Cluster cluster;
    ready = clusters->GetCluster(&ctx, req, &cluster).ok() &&
            cluster.state() == gpufed::v1::CLUSTER_STATE_READY;
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  if (!ready) {
    watch.Stop();
    return Fail("the agent did not register within 10 s");
  }

  SubmitResult submitted = RunSubmits(t, tenant, clients, jobs, 0, "e2e-", {"true"});
  const auto deadline = Clock::now() + std::chrono::minutes(10);
  while (succeeded.load() + failed.load() < static_cast<int>(submitted.latencies_ms.size()) &&
         Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  watch.Stop();
  double seconds = std::chrono::duration<double>(
                       Clock::time_point(Clock::duration(last_end_ns.load())) - submitted.first)
                       .count();
  nlohmann::json out = {
      {"bench", "e2e"},
      {"jobs", jobs},
      {"submitted", submitted.latencies_ms.size()},
      {"succeeded", succeeded.load()},
      {"failed", failed.load()},
      {"seconds", seconds},
      {"jobs_per_second", seconds > 0 ? succeeded.load() / seconds : 0.0},
      {"submit_seconds", submitted.seconds},
      {"watch_restarts", watch.restarts()},
      {"gpus", 128},
      {"backend", backend},
  };
  (*agent)->Stop();
  std::cout << out.dump() << std::endl;
  return succeeded.load() == jobs ? 0 : 1;
}

// Fenced failover with the server's default timings: two clusters, each agent behind a proxy the
// bench can partition. Each run cuts off the cluster that holds the work and measures how long
// after the cut every workload is placed on the other cluster (its next attempt), then heals the
// cut and waits for the cluster to come back; the next run cuts off the other one.
int BenchFailover(Target& t, int runs, int jobs) {
  struct Side {
    std::string cluster;
    std::string topology;
    std::unique_ptr<gpufed::testing::TcpProxy> proxy;
    std::unique_ptr<ChildProcess> agent;
  };
  Side sides[2] = {{"edge-l4", "edge-l4", nullptr, nullptr},
                   {"cloud-eu-a100", "cloud-a100", nullptr, nullptr}};
  std::vector<std::string> ids;
  auto channel = gpufed::testing::Connect(t.address);
  auto clusters = gpufed::v1::ClusterService::NewStub(channel);
  auto workloads = gpufed::v1::WorkloadService::NewStub(channel);
  auto cluster_state = [&](const std::string& name, uint64_t* epoch) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + t.server.admin_token);
    gpufed::v1::GetClusterRequest req;
    req.set_name(name);
    gpufed::v1::Cluster c;
    if (!clusters->GetCluster(&ctx, req, &c).ok()) return gpufed::v1::CLUSTER_STATE_UNSPECIFIED;
    if (epoch != nullptr) *epoch = c.epoch();
    return c.state();
  };
  auto wait_for = [](const std::function<bool()>& pred, std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!pred()) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return true;
  };
  for (int i = 0; i < 2; ++i) {
    auto proxy = gpufed::testing::TcpProxy::Start(t.server.grpc_port);
    if (!proxy.ok()) return Fail(proxy.status().ToString());
    sides[i].proxy = *std::move(proxy);
    auto token =
        gpufed::testing::CreateAgentToken(t.address, t.server.admin_token, sides[i].cluster);
    if (!token.ok()) return Fail(token.status().ToString());
    gpufed::testing::AgentOptions ao;
    ao.server_address = "127.0.0.1:" + std::to_string(sides[i].proxy->port());
    ao.token = *token;
    ao.topology =
        gpufed::testing::SourceDir() + "/deploy/topologies/" + sides[i].topology + ".yaml";
    ao.work_dir = t.dir->path() + "/" + sides[i].cluster;
    ao.log_path = t.dir->path() + "/" + sides[i].cluster + ".log";
    auto agent = gpufed::testing::StartAgent(ao);
    if (!agent.ok()) return Fail(agent.status().ToString());
    sides[i].agent = *std::move(agent);
    if (!wait_for(
            [&] {
              return cluster_state(sides[i].cluster, nullptr) == gpufed::v1::CLUSTER_STATE_READY;
            },
            std::chrono::seconds(30))) {
      return Fail("agent of " + sides[i].cluster + " did not register");
    }
    if (i == 0) {
      // The work starts on the first cluster: submit before the second exists.
      for (int j = 0; j < jobs; ++j) {
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer " + t.token);
        gpufed::v1::SubmitRequest req = MakeRequest("bench", absl::StrCat("failover-", j), {});
        req.mutable_spec()->mutable_estimated_duration()->set_seconds(int64_t{24} * 3600);
        req.mutable_spec()->mutable_retry()->set_max_attempts(100);
        gpufed::v1::SubmitResponse resp;
        if (!workloads->Submit(&ctx, req, &resp).ok()) return Fail("submit failed");
        ids.push_back(resp.workload().id());
      }
    }
  }
  // Where each workload is placed now, and at which attempt.
  auto placed_on = [&](const std::string& id, uint32_t* attempts) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + t.token);
    gpufed::v1::GetWorkloadRequest req;
    req.set_id(id);
    gpufed::v1::Workload w;
    if (!workloads->Get(&ctx, req, &w).ok()) return std::string();
    if (attempts != nullptr) *attempts = w.attempts();
    const bool holds = w.state() == gpufed::v1::WORKLOAD_STATE_PLACED ||
                       w.state() == gpufed::v1::WORKLOAD_STATE_RUNNING;
    return holds ? w.assignment().cluster() : std::string();
  };
  if (!wait_for([&] { return placed_on(ids.back(), nullptr) == sides[0].cluster; },
                std::chrono::seconds(30))) {
    return Fail("the work was not placed on " + sides[0].cluster);
  }
  std::vector<double> moved_s;
  std::vector<double> run_s;
  int holder = 0;
  for (int run = 0; run < runs; ++run) {
    Side& lost = sides[holder];
    Side& other = sides[1 - holder];
    uint64_t epoch = 0;
    cluster_state(lost.cluster, &epoch);
    std::vector<uint32_t> before(ids.size());
    for (size_t j = 0; j < ids.size(); ++j) placed_on(ids[j], &before[j]);
    const auto cut = Clock::now();
    lost.proxy->Partition();
    std::vector<bool> done(ids.size(), false);
    size_t left = ids.size();
    const auto deadline = cut + std::chrono::seconds(120);
    while (left > 0 && Clock::now() < deadline) {
      for (size_t j = 0; j < ids.size(); ++j) {
        uint32_t attempts = 0;
        if (done[j] || placed_on(ids[j], &attempts) != other.cluster || attempts <= before[j]) {
          continue;
        }
        done[j] = true;
        --left;
        moved_s.push_back(std::chrono::duration<double>(Clock::now() - cut).count());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (left > 0) return Fail("work did not move within 120 s");
    run_s.push_back(
        *std::max_element(moved_s.end() - static_cast<long>(ids.size()), moved_s.end()));
    std::cerr << "run " << run + 1 << ": " << lost.cluster << " cut off; all " << ids.size()
              << " workloads placed on " << other.cluster << " after " << run_s.back() << " s\n";
    lost.proxy->Heal();
    if (!wait_for(
            [&] {
              uint64_t now = 0;
              return cluster_state(lost.cluster, &now) == gpufed::v1::CLUSTER_STATE_READY &&
                     now > epoch;
            },
            std::chrono::seconds(60))) {
      return Fail(lost.cluster + " did not come back after the cut healed");
    }
    holder = 1 - holder;
  }
  nlohmann::json out = {
      {"bench", "failover"},
      {"runs", runs},
      {"workloads", jobs},
      {"heartbeat_interval_s", 2},
      {"agent_lease_s", 8},
      {"heartbeat_timeout_s", 20},
      {"cut_to_placed_elsewhere_s_p50", Percentile(moved_s, 0.50)},
      {"cut_to_placed_elsewhere_s_p99", Percentile(moved_s, 0.99)},
      {"cut_to_placed_elsewhere_s_max", *std::max_element(moved_s.begin(), moved_s.end())},
      // The last heartbeat that got through was sent at most one interval before the cut.
      {"last_heartbeat_to_placed_s_p99_at_most", Percentile(moved_s, 0.99) + 2},
  };
  for (Side& side : sides) side.agent->Stop();
  std::cout << out.dump() << std::endl;
  return 0;
}

// The resident memory of process `pid` in MiB (VmRSS in /proc/<pid>/status); -1 if unreadable.
double RssMiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    std::istringstream fields(line.substr(6));
    double kib = 0;
    fields >> kib;
    return kib / 1024;
  }
  return -1;
}

absl::StatusOr<std::string> CreateViewerToken(const Target& t, const std::string& subject) {
  auto stub = gpufed::v1::TenantService::NewStub(gpufed::testing::Connect(t.address));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + t.server.admin_token);
  gpufed::v1::CreateTokenRequest req;
  req.set_subject(subject);
  req.set_role(gpufed::v1::ROLE_VIEWER);  // no tenant: sees every workload
  gpufed::v1::CreateTokenResponse resp;
  grpc::Status s = stub->CreateToken(&ctx, req, &resp);
  if (!s.ok()) return absl::UnavailableError("CreateToken: " + s.error_message());
  return resp.token();
}

// One phase of the watch-flood bench: submissions paced at `rate`/s for `seconds` by the bench
// tenant's user, and a watcher of every workload (another caller, reading) timing each
// workload's first event from the start of its Submit.
struct LoadFigures {
  std::vector<double> submit_ms;
  std::vector<double> deliver_ms;
  int errors = 0;
  int undelivered = 0;
};

LoadFigures RunWatchedLoad(const Target& t, const std::string& watcher_token, double rate,
                           double seconds, const std::string& prefix) {
  LoadFigures out;
  std::mutex mu;
  std::map<std::string, Clock::time_point> sent, seen;  // by idempotency key
  grpc::ChannelArguments args;
  args.SetInt("gpufed.bench.observer", 1);
  auto stub = gpufed::v1::WorkloadService::NewStub(
      grpc::CreateCustomChannel(t.address, grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext watch_ctx;
  watch_ctx.AddMetadata("authorization", "Bearer " + watcher_token);
  auto reader = stub->Watch(&watch_ctx, gpufed::v1::WatchRequest());
  std::atomic<bool> watching{false};
  std::thread watcher([&] {
    gpufed::v1::WorkloadEvent e;
    while (reader->Read(&e)) {
      watching = true;
      const std::string& key = e.workload().spec().idempotency_key();
      if (key.rfind(prefix, 0) != 0) continue;
      std::lock_guard<std::mutex> lock(mu);
      seen.emplace(key, Clock::now());
    }
  });
  // The stream is subscribed a moment after it opens: poke until it delivers.
  for (int i = 0; !watching.load() && i < 200; ++i) {
    // A plain blocking call. One run of this bench aborted in gRPC ("ref_counted.h: prior > 0")
    // in its first seconds while these pokes went through RunClosedLoop, whose last callback
    // can still be running when it returns (suspected, not proven).
    // Not under `prefix`: the pokes are not part of what is timed or waited for.
    auto req = MakeRequest("bench", absl::StrCat("poke-", prefix, i), {"true"});
    gpufed::v1::SubmitResponse resp;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + t.token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    stub->Submit(&ctx, req, &resp);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int count = static_cast<int>(rate * seconds);
  std::atomic<int> next{0};
  const Clock::time_point start = Clock::now();
  std::vector<std::thread> clients;
  clients.reserve(4);
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      grpc::ChannelArguments client_args;
      client_args.SetInt("gpufed.bench.client", c);
      auto submit_stub = gpufed::v1::WorkloadService::NewStub(
          grpc::CreateCustomChannel(t.address, grpc::InsecureChannelCredentials(), client_args));
      for (int i = next.fetch_add(1); i < count; i = next.fetch_add(1)) {
        SleepUntilSlot(start, i, rate);
        const std::string key = absl::StrCat(prefix, i);
        auto req = MakeRequest("bench", key, {"true"});
        gpufed::v1::SubmitResponse resp;
        grpc::ClientContext ctx;
        ctx.AddMetadata("authorization", "Bearer " + t.token);
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        const Clock::time_point t0 = Clock::now();
        {
          std::lock_guard<std::mutex> lock(mu);
          sent.emplace(key, t0);
        }
        grpc::Status s = submit_stub->Submit(&ctx, req, &resp);
        std::lock_guard<std::mutex> lock(mu);
        if (!s.ok()) {
          if (++out.errors <= 3) std::cerr << "submit: " << s.error_message() << "\n";
          continue;
        }
        out.submit_ms.push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& c : clients) c.join();
  // What is still on its way, for at most 10 s.
  const Clock::time_point wait_until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < wait_until) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (seen.size() >= out.submit_ms.size()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  watch_ctx.TryCancel();
  watcher.join();
  reader->Finish();
  for (const auto& [key, t0] : sent) {
    auto it = seen.find(key);
    if (it == seen.end()) {
      ++out.undelivered;
      continue;
    }
    out.deliver_ms.push_back(std::chrono::duration<double, std::milli>(it->second - t0).count());
  }
  return out;
}

nlohmann::json LoadJson(const LoadFigures& f) {
  return {{"submits", f.submit_ms.size()},
          {"submit_errors", f.errors},
          {"submit_p50_ms", Percentile(f.submit_ms, 0.50)},
          {"submit_p99_ms", Percentile(f.submit_ms, 0.99)},
          {"deliver_p50_ms", Percentile(f.deliver_ms, 0.50)},
          {"deliver_p99_ms", Percentile(f.deliver_ms, 0.99)},
          {"undelivered", f.undelivered}};
}

constexpr int kFloodStreamsPerCaller = 64;  // the most one caller may hold

// The flooding client of watch-flood, in a process of its own: `streams` Watch streams of every
// workload, 64 per token of GPUFED_BENCH_FLOOD_TOKENS (comma-separated), each caller on one
// connection that takes no more than it reads, never read. Prints "open" once they are opened;
// on SIGTERM cancels them and prints how many the server had ended RESOURCE_EXHAUSTED.
int RunFloodStreams(const std::string& address, int streams) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, nullptr);  // before gRPC starts its threads
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read once, before gRPC starts any thread
  const char* env = std::getenv("GPUFED_BENCH_FLOOD_TOKENS");
  const std::vector<std::string> tokens = absl::StrSplit(env == nullptr ? "" : env, ',');
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<gpufed::v1::WorkloadEvent>> reader;
  };
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<Stream>> flood;
  flood.reserve(static_cast<size_t>(streams));
  for (size_t caller = 0; static_cast<int>(flood.size()) < streams; ++caller) {
    if (caller >= tokens.size()) return Fail("watch-flood-streams: too few tokens");
    channels.push_back(gpufed::testing::ConnectSlowReader(address, static_cast<int>(caller) + 1));
    auto stub = gpufed::v1::WorkloadService::NewStub(channels.back());
    for (int i = 0; i < kFloodStreamsPerCaller && static_cast<int>(flood.size()) < streams; ++i) {
      auto s = std::make_unique<Stream>();
      s->ctx.AddMetadata("authorization", "Bearer " + tokens[caller]);
      s->reader = stub->Watch(&s->ctx, gpufed::v1::WatchRequest());
      flood.push_back(std::move(s));
    }
  }
  std::cout << "open " << flood.size() << std::endl;
  int signal = 0;
  sigwait(&term, &signal);
  for (auto& s : flood) s->ctx.TryCancel();
  int ended_by_server = 0;
  for (auto& s : flood) {
    if (s->reader->Finish().error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++ended_by_server;
    }
  }
  std::cout << "ended_resource_exhausted " << ended_by_server << std::endl;
  return 0;
}

// `streams` Watch streams of every workload that never read (64 per caller, the most one caller
// may hold, over one connection each with a small flow-control window, as a client that stops
// reading its socket), while another caller submits at `rate`/s and a third watches: the
// server's RSS before, during and after the streams are cancelled, and the other callers' p99,
// without and with the flood.
int BenchWatchFlood(Target& t, int streams, double rate, double seconds) {
  const pid_t pid = t.server.process->pid();
  auto observer = CreateViewerToken(t, "bench-observer");
  if (!observer.ok()) return Fail(observer.status().ToString());
  RunWatchedLoad(t, *observer, rate, 2, "warm-");
  const double rss_before = RssMiB(pid);
  LoadFigures quiet = RunWatchedLoad(t, *observer, rate, seconds, "quiet-");
  const double rss_after_quiet = RssMiB(pid);
  std::cerr << "without the flood: RSS " << rss_before << " -> " << rss_after_quiet << " MiB\n";

  // The flood comes from a process of its own, as from another client: in this one its gRPC
  // threads, taking in 1,000 streams' windows, would slow the measured callers' own calls.
  std::vector<std::string> tokens;
  for (int caller = 0; caller * kFloodStreamsPerCaller < streams; ++caller) {
    auto token = CreateViewerToken(t, absl::StrCat("bench-flood-", caller));
    if (!token.ok()) return Fail(token.status().ToString());
    tokens.push_back(*token);
  }
  const std::string flood_log = t.dir->path() + "/flood.log";
  auto flooder = gpufed::testing::ChildProcess::Spawn(
      {"/proc/self/exe", "watch-flood-streams", "--address", t.address, "--streams",
       std::to_string(streams)},
      flood_log, {{"GPUFED_BENCH_FLOOD_TOKENS", absl::StrJoin(tokens, ",")}});
  if (!flooder.ok()) return Fail(flooder.status().ToString());
  for (int i = 0;
       i < 600 && gpufed::testing::ReadFileOrEmpty(flood_log).find("open") == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (gpufed::testing::ReadFileOrEmpty(flood_log).find("open") == std::string::npos) {
    return Fail("the flooding process did not open its streams: " +
                gpufed::testing::ReadFileOrEmpty(flood_log));
  }
  std::atomic<bool> sampling{true};
  std::atomic<double> rss_peak{0};
  std::thread sampler([&] {
    while (sampling.load()) {
      const double rss = RssMiB(pid);
      if (rss > rss_peak.load()) rss_peak = rss;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  LoadFigures flooded = RunWatchedLoad(t, *observer, rate, seconds, "flood-");
  const double rss_flooded = RssMiB(pid);
  std::cerr << "with " << streams << " unread streams: RSS " << rss_flooded << " MiB\n";

  const Clock::time_point cancel_start = Clock::now();
  (*flooder)->Stop(std::chrono::seconds(60));
  int ended_by_server = -1;
  {
    std::istringstream lines(gpufed::testing::ReadFileOrEmpty(flood_log));
    for (std::string line; std::getline(lines, line);) {
      constexpr absl::string_view kEnded = "ended_resource_exhausted ";
      if (absl::StartsWith(line, kEnded)) ended_by_server = std::stoi(line.substr(kEnded.size()));
    }
  }
  const double cancel_seconds = std::chrono::duration<double>(Clock::now() - cancel_start).count();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double rss_after_2s = RssMiB(pid);
  std::this_thread::sleep_for(std::chrono::seconds(8));
  const double rss_after_10s = RssMiB(pid);
  sampling = false;
  sampler.join();
  LoadFigures after = RunWatchedLoad(t, *observer, rate, seconds, "after-");
  nlohmann::json out = {
      {"bench", "watch-flood"},
      {"streams", streams},
      {"rate_per_second", rate},
      {"seconds_per_phase", seconds},
      {"rss_mib_before", rss_before},
      {"rss_mib_after_quiet_load", rss_after_quiet},
      {"rss_mib_peak_during_flood", rss_peak.load()},
      {"rss_mib_end_of_flood", rss_flooded},
      {"rss_mib_2s_after_cancel", rss_after_2s},
      {"rss_mib_10s_after_cancel", rss_after_10s},
      {"streams_ended_resource_exhausted", ended_by_server},
      {"cancel_seconds", cancel_seconds},
      {"without_flood", LoadJson(quiet)},
      {"with_flood", LoadJson(flooded)},
      {"after_flood", LoadJson(after)},
  };
  std::cout << out.dump() << std::endl;
  return quiet.errors + flooded.errors + after.errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("gpufed-bench: benchmarks against real gpufed processes", "gpufed-bench");
  app.require_subcommand(1);
  int clients = 8, count = 20000, jobs = 5000;
  double paced_rate = 500, paced_seconds = 10;
  std::string topology = gpufed::testing::SourceDir() + "/bench/topologies/bench-16x8.yaml";
  auto* submit = app.add_subcommand("submit", "durable, acknowledged submissions");
  submit->add_option("--clients", clients)->check(CLI::Range(1, 256));
  submit->add_option("--count", count)->check(CLI::Range(1, 10000000));
  submit->add_option("--paced-rate", paced_rate, "second phase: submissions/s (0: skip)");
  submit->add_option("--paced-seconds", paced_seconds);
  int floor_count = -1;  // as many as --count
  submit
      ->add_option("--empty-calls", floor_count,
                   "first: health checks in a closed loop, what gRPC alone allows (default: as "
                   "many as --count; 0: skip); with --paced-rate also paced health checks and, "
                   "last, paced one-row commits on a fresh PostgreSQL (the machine's floors)")
      ->check(CLI::Range(0, 10000000));
  auto* e2e = app.add_subcommand("e2e", "one agent, one-GPU jobs running true (process backend)");
  int runs = 10;
  auto* failover =
      app.add_subcommand("failover", "two clusters, default timings, cut one off: time to move");
  failover->add_option("--runs", runs, "cuts, alternating between the clusters")
      ->check(CLI::Range(1, 1000));
  failover->add_option("--jobs", jobs, "one-GPU workloads that move (at most 8)")
      ->check(CLI::Range(1, 8));
  e2e->add_option("--jobs", jobs)->check(CLI::Range(1, 1000000));
  e2e->add_option("--clients", clients)->check(CLI::Range(1, 256));
  e2e->add_option("--topology", topology);
  std::string e2e_backend = "process";
  e2e->add_option("--backend", e2e_backend,
                  "process: each job is a process (`true`); sim: jobs end at once, no process")
      ->check(CLI::IsMember({"process", "sim"}));
  gpufed::bench::SpotBenchOptions sb;
  auto* spot = app.add_subcommand(
      "spot",
      "two sim clusters, one reclaiming its spot nodes: time until the work is placed again");
  spot->add_option("--runs", sb.runs, "reclaims measured")->check(CLI::Range(1, 1000));
  spot->add_option("--jobs", sb.jobs, "one-GPU workloads per case (at most 8)")
      ->check(CLI::Range(1, 8));
  auto duration = [](absl::Duration* out) {
    return [out](const std::string& text) {
      if (!absl::ParseDuration(text, out) || *out <= absl::ZeroDuration() ||
          *out == absl::InfiniteDuration()) {
        throw CLI::ValidationError("duration", "\"" + text + "\": want e.g. 30s, 2m");
      }
    };
  };
  spot->add_option_function<std::string>("--every", duration(&sb.every),
                                         "the agent's --spot-reclaim-every (default 30s)");
  spot->add_option_function<std::string>("--for", duration(&sb.away),
                                         "the agent's --spot-reclaim-for (default 10s)");
  gpufed::bench::PlacementBenchOptions pb;
  auto* placement =
      app.add_subcommand("placement", "placement engine and pool in memory, steady-state stream");
  placement->add_option("--gpus", pb.gpus, "GPUs in the federation")
      ->check(CLI::Range(1, 10000000));
  placement->add_option("--clusters", pb.clusters, "clusters they are spread over")
      ->check(CLI::Range(1, 100000));
  placement->add_option("--count", pb.count, "measured placements")
      ->check(CLI::Range(1, 100000000));
  placement->add_option("--warmup", pb.warmup,
                        "placements after the fill, before measuring (0: count/10)");
  placement
      ->add_option("--utilisation", pb.utilisation,
                   "share of GPU capacity held (departures keep it)")
      ->check(CLI::Range(0.01, 0.99));
  placement->add_option("--policy", pb.policy, "placement policy");
  placement->add_option("--seed", pb.seed, "federation, stream and engine seed");
  placement
      ->add_option("--max-clusters-scored", pb.max_clusters_scored,
                   "clusters scored per request (0: the engine's default)")
      ->check(CLI::Range(0, 100000));
  placement->add_flag("--digest", pb.digest,
                      "print a hash of every decision (same decisions, same digest)");
  placement->add_flag("!--no-accelerate", pb.accelerate,
                      "decide every request from scratch (no caches or bounds; same decisions)");
  int streams = 1000;
  std::string flood_address;
  auto* flood_streams = app.add_subcommand("watch-flood-streams", "")  // watch-flood's flooder
                            ->group("");
  flood_streams->add_option("--address", flood_address)->required();
  flood_streams->add_option("--streams", streams)->check(CLI::Range(1, 100000));
  double flood_rate = 200, flood_seconds = 10;
  auto* watch_flood = app.add_subcommand(
      "watch-flood", "Watch streams that never read: server memory, other callers' p99");
  watch_flood->add_option("--streams", streams, "unread Watch streams, 64 per caller")
      ->check(CLI::Range(1, 100000));
  watch_flood->add_option("--rate", flood_rate, "submissions/s by another caller")
      ->check(CLI::Range(1.0, 100000.0));
  watch_flood->add_option("--seconds", flood_seconds, "length of each measured phase")
      ->check(CLI::Range(1.0, 3600.0));
  // fleet: a thousand simulated clusters against one server (bench/fleet_bench.h)
  gpufed::bench::FleetBenchOptions fleet_options;
  auto* fleet = app.add_subcommand(
      "fleet", "simulated clusters heartbeating against one server under a steady load");
  gpufed::bench::AddFleetOptions(fleet, &fleet_options);
  gpufed::bench::ReportBenchOptions report_options;
  auto* report = app.add_subcommand("report", "usage reports over a month of metered history");
  report->add_option("--workloads", report_options.workloads, "runs in the history")
      ->check(CLI::Range(1, 10000000));
  report->add_option("--days", report_options.days, "length of the window")
      ->check(CLI::Range(1, 400));
  report->add_option("--tenants", report_options.tenants)->check(CLI::Range(1, 100000));
  report->add_option("--clusters", report_options.clusters)->check(CLI::Range(1, 100000));
  report->add_option("--repeats", report_options.repeats, "timed runs of each query")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  // The client side of the measurement: Debian's Abseil checks lock order on every Mutex
  // acquisition (gRPC's included), a cost a production client does not pay.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  if (placement->parsed()) return gpufed::bench::RunPlacementBench(pb);
  if (flood_streams->parsed()) return RunFloodStreams(flood_address, streams);
  if (fleet->parsed()) return gpufed::bench::RunFleetBench(fleet_options);
  if (report->parsed()) return gpufed::bench::RunReportBench(report_options);
  Target target;
  if (absl::Status s = StartTarget(&target, "bench"); !s.ok()) return Fail(s.ToString());
  if (spot->parsed()) {
    gpufed::bench::SpotBenchTarget st{target.address, target.server.admin_token, target.token,
                                      "bench", target.dir->path()};
    const int rc = gpufed::bench::RunSpotBench(st, sb);
    target.server.process->Stop();
    return rc;
  }
  int rc = submit->parsed()        ? BenchSubmit(target, clients, count, paced_rate, paced_seconds,
                                          floor_count < 0 ? count : floor_count)
           : failover->parsed()    ? BenchFailover(target, runs, jobs)
           : watch_flood->parsed() ? BenchWatchFlood(target, streams, flood_rate, flood_seconds)
                                   : BenchE2e(target, jobs, clients, topology, e2e_backend);
  target.server.process->Stop();
  return rc;
}
