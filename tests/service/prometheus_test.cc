// The server's /metrics as Prometheus itself takes it (tests/service/prometheus_test.cc): the
// real server in-process with a registered cluster, placed and waiting work and some refused
// calls; `promtool check metrics` (Debian's prometheus package) passes on what /metrics serves,
// and a real Prometheus process scrapes the server and answers a query for one series.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/time_util.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/service/fake_agent.h"
#include "tests/service/in_process_server.h"
#include "tests/service/raw_calls.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// Debian's prometheus package (scripts/install-deps.sh).
constexpr char kPromtool[] = "/usr/bin/promtool";
constexpr char kPrometheus[] = "/usr/bin/prometheus";

// A loopback port nothing listens on now (the kernel's pick for a socket bound to port 0).
int FreeLoopbackPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

class PrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::ServerConfig config;
    // The fake agent sends no heartbeats: its cluster must not be declared lost meanwhile.
    config.heartbeat_timeout_seconds = 600;
    // The tenant usage gauges are refreshed after each meter pass.
    config.meter_interval_seconds = 1;
    auto server = testing::StartInProcessServer(dir_.path() + "/server", config);
    ASSERT_OK(server);
    server_ = std::move(*server);
    auto user = testing::BootstrapTenant(server_.address, server_.admin_token, "acme", "research");
    ASSERT_OK(user);
    user_ = *user;
    // Two nodes of four H100s.
    agent_ = RegisteredAgent(server_.address, server_.admin_token, "c1", 2, 4, "H100-80GB");
    ASSERT_NE(agent_, nullptr);
    workloads_ = v1::WorkloadService::NewStub(testing::Connect(server_.address));
    // Placed: one GPU. Waiting for good: eight GPUs on one node, which no node has.
    ASSERT_OK(Submit("placed", 1));
    ASSERT_OK(Submit("too-wide", 8));
    // Runs for a moment on a GPU of its own: metered when it ends, so acme has usage this month.
    ASSERT_OK(Submit("short", 1));
    std::string short_id;
    for (v1::ServerMessage m;
         short_id.empty() && agent_->ReadUntil(v1::ServerMessage::kAssign, &m);) {
      for (const v1::WorkAssignment& a : m.assign().assignments()) {
        if (a.spec().name() == "short") short_id = a.workload_id();
      }
    }
    ASSERT_FALSE(short_id.empty());
    // Each update carries when it happened, as a real agent's does: without it the server
    // stamps its own time, and a loaded server that takes both in one transaction would see a
    // run of no length (nothing to meter).
    for (v1::WorkloadState state : {v1::WORKLOAD_STATE_RUNNING, v1::WORKLOAD_STATE_SUCCEEDED}) {
      v1::AgentMessage status;
      v1::WorkloadStatus* u = status.mutable_status()->add_updates();
      u->set_workload_id(short_id);
      u->set_state(state);
      // (Not TimeUtil::GetCurrentTime: Debian's protobuf 3.21 answers whole seconds.)
      *u->mutable_time() =
          google::protobuf::util::TimeUtil::NanosecondsToTimestamp(absl::ToUnixNanos(absl::Now()));
      ASSERT_TRUE(agent_->Write(status));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    // Refused: a request without a spec.
    v1::SubmitRequest no_spec;
    v1::SubmitResponse r;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + user_);
    EXPECT_EQ(workloads_->Submit(&ctx, no_spec, &r).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    // Refused before any handler runs: {spec: {name: "\xff"}}, invalid UTF-8, is counted with
    // the code the client gets (INVALID_ARGUMENT naming the field, not gRPC's UNIMPLEMENTED).
    const std::shared_ptr<grpc::Channel> channel = testing::Connect(server_.address);
    EXPECT_EQ(testing::RawUnaryCall(channel, user_, "/gpufed.v1.WorkloadService/Submit",
                                    std::string("\x0a\x03\x1a\x01\xff", 5))
                  .error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    // A method nobody serves: counted, under "unknown" whatever its name.
    EXPECT_EQ(testing::RawUnaryCall(channel, "", "/gpufed.v1.Made/Up", "").error_code(),
              grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_OK(testing::RawUnaryCall(channel, "", "/grpc.health.v1.Health/Check", ""));
  }

  grpc::Status Submit(const std::string& name, uint32_t gpus) {
    v1::SubmitRequest req;
    v1::WorkloadSpec* s = req.mutable_spec();
    s->set_tenant("acme");
    s->set_project("research");
    s->set_name(name);
    s->set_replicas(1);
    s->mutable_per_replica()->set_gpus(gpus);
    s->set_workload_class(v1::WORKLOAD_CLASS_BATCH);
    v1::SubmitResponse r;
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + user_);
    return workloads_->Submit(&ctx, req, &r);
  }

  std::string Metrics() {
    httplib::Client http("127.0.0.1", server_.server->http_port());
    httplib::Result res = http.Get("/metrics");
    return res && res->status == 200 ? res->body : "";
  }

  // /metrics once it holds every line of `lines` (the scheduler reports the pool after a cycle,
  // at most every second); what it served last otherwise.
  std::string MetricsWith(const std::vector<std::string>& lines) {
    std::string body;
    for (const auto deadline = Clock::now() + std::chrono::seconds(30); Clock::now() < deadline;
         std::this_thread::sleep_for(std::chrono::milliseconds(100))) {
      body = Metrics();
      bool all = true;
      for (const std::string& line : lines) all = all && absl::StrContains(body, line);
      if (all) break;
    }
    return body;
  }

  // A line of the RPC counter (prometheus-cpp writes labels in name order).
  static std::string Handled(const std::string& code, const std::string& method,
                             const std::string& service, int count) {
    return absl::StrCat(R"(gpufed_grpc_server_handled_total{grpc_code=")", code,
                        R"(",grpc_method=")", method, R"(",grpc_service=")", service, R"("} )",
                        count);
  }

  // The lines this set-up must make appear.
  static std::vector<std::string> ExpectedLines() {
    return {R"(gpufed_pool_capacity_gpus{cluster="c1",model="H100-80GB"} 8)",
            R"(gpufed_pool_allocated_gpus{cluster="c1",model="H100-80GB"} 1)",
            R"(gpufed_pool_free_gpus{cluster="c1",model="H100-80GB"} 7)",
            R"(gpufed_scheduler_pending_workloads{reason="GpuCountUnsatisfiable"} 1)",
            Handled("OK", "Submit", "gpufed.v1.WorkloadService", 3),
            Handled("INVALID_ARGUMENT", "Submit", "gpufed.v1.WorkloadService", 2),
            Handled("UNIMPLEMENTED", "unknown", "unknown", 1),
            Handled("OK", "Check", "grpc.health.v1.Health", 1),
            absl::StrCat(R"(gpufed_grpc_server_handling_seconds_count{grpc_code="OK",)",
                         R"(grpc_method="Submit",grpc_service="gpufed.v1.WorkloadService"} 3)"),
            "gpufed_scheduler_cycle_seconds_bucket",
            // Its value is however long "short" ran.
            R"(gpufed_tenant_gpu_seconds{tenant="acme"} )",
            R"(gpufed_tenant_effective_gpu_seconds{tenant="acme"} 0)",
            R"(gpufed_telemetry_records_total{outcome="kept"} 0)"};
  }

  testing::TempDir dir_{"gpufed-prometheus"};
  testing::InProcessServer server_;
  std::string user_;
  std::unique_ptr<FakeAgentStream> agent_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
};

TEST_F(PrometheusTest, PromtoolChecksWhatMetricsServes) {
  const std::string body = MetricsWith(ExpectedLines());
  for (const std::string& line : ExpectedLines()) EXPECT_THAT(body, HasSubstr(line));
  // Fragmentation is there for the cluster and model, whatever its value.
  EXPECT_THAT(body, HasSubstr(R"(gpufed_pool_fragmented_gpus{cluster="c1",model="H100-80GB"})"));
  EXPECT_THAT(body,
              HasSubstr(R"(gpufed_pool_fragmentation_ratio{cluster="c1",model="H100-80GB"})"));

  const std::string path = dir_.path() + "/metrics.txt";
  std::ofstream(path) << body;
  const testing::RunResult check = testing::RunProgram(
      {"/bin/sh", "-c", absl::StrCat("exec ", kPromtool, " check metrics < ", path)}, dir_.path());
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;

  // The check can fail: a counter without its _total suffix is refused.
  std::ofstream(path)
      << "# HELP bad_counter A counter.\n# TYPE bad_counter counter\nbad_counter 1\n";
  const testing::RunResult refused = testing::RunProgram(
      {"/bin/sh", "-c", absl::StrCat("exec ", kPromtool, " check metrics < ", path)}, dir_.path());
  EXPECT_NE(refused.exit_code, 0) << refused.out << refused.err;
}

TEST_F(PrometheusTest, PrometheusScrapesTheServerAndAnswersAQuery) {
  // The series queried is there before Prometheus starts.
  ASSERT_THAT(MetricsWith(ExpectedLines()), HasSubstr(ExpectedLines()[0]));

  const std::string config = dir_.path() + "/prometheus.yml";
  std::ofstream(config) << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        << "scrape_configs:\n  - job_name: gpufed\n    static_configs:\n"
                        << "      - targets: ['127.0.0.1:" << server_.server->http_port() << "']\n";
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  auto prometheus =
      testing::ChildProcess::Spawn({kPrometheus, absl::StrCat("--config.file=", config),
                                    absl::StrCat("--storage.tsdb.path=", dir_.path(), "/tsdb"),
                                    absl::StrCat("--web.listen-address=127.0.0.1:", port)},
                                   dir_.path() + "/prometheus.log");
  ASSERT_OK(prometheus);

  // Until Prometheus has scraped the server: the query answers the series with its value.
  httplib::Client http("127.0.0.1", port);
  const std::string query = R"(gpufed_pool_capacity_gpus{cluster="c1",model="H100-80GB"})";
  nlohmann::json result;
  std::string last;
  for (const auto deadline = Clock::now() + std::chrono::seconds(60); Clock::now() < deadline;
       std::this_thread::sleep_for(std::chrono::milliseconds(250))) {
    httplib::Result res = http.Get("/api/v1/query", httplib::Params{{"query", query}}, {});
    if (!res || res->status != 200) continue;
    last = res->body;
    nlohmann::json answer = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    if (answer.is_discarded() || answer.value("status", "") != "success") continue;
    if (!answer["data"]["result"].empty()) {
      result = answer["data"]["result"];
      break;
    }
  }
  ASSERT_EQ(result.size(), 1U) << last << "\n"
                               << testing::ReadFileOrEmpty((*prometheus)->log_path());
  EXPECT_EQ(result[0]["metric"]["job"], "gpufed");
  EXPECT_EQ(result[0]["metric"]["cluster"], "c1");
  // An instant vector's value is [time, "value"].
  EXPECT_EQ(result[0]["value"][1], "8");

  // Stopped by the test: SIGTERM, and Prometheus shuts down cleanly.
  const int status = (*prometheus)->Stop();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << status << "\n"
      << testing::ReadFileOrEmpty((*prometheus)->log_path());
}

}  // namespace
}  // namespace gpufed
