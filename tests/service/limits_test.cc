// Limits that keep one caller from hurting others (docs/interfaces.md#limits): the real server
// in-process on 127.0.0.1 port 0 against a real PostgreSQL, called through real gRPC channels.
// Per-caller write rates, the Watch cap per caller (not per subject), one agent stream per
// cluster, request sizes, and the server's bound on a call's deadline.

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gpufed/v1/agent_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "pqxx/pqxx"
#include "server/server.h"
#include "tests/service/in_process_server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using Steady = std::chrono::steady_clock;

void Authorize(grpc::ClientContext* ctx, const std::string& token,
               std::chrono::seconds deadline = std::chrono::seconds(30)) {
  ctx->AddMetadata("authorization", "Bearer " + token);
  ctx->set_deadline(std::chrono::system_clock::now() + deadline);
}

class LimitsTest : public ::testing::Test {
 protected:
  // Starts the server with `config` and makes tenants acme and globex, each with a tenant-user
  // token; `same_subject` gives both tokens the subject "ci-bot".
  void Start(const server::ServerConfig& config, bool same_subject = false) {
    ASSERT_OK_AND_ASSIGN(testing::InProcessServer started,
                         testing::StartInProcessServer(dir_.path(), config));
    server_ = std::move(started.server);
    address_ = started.address;
    admin_ = started.admin_token;
    dsn_ = started.dsn;
    channel_ = testing::Connect(address_);
    workloads_ = v1::WorkloadService::NewStub(channel_);
    tenants_ = v1::TenantService::NewStub(channel_);
    acme_ = Tenant("acme", same_subject ? "ci-bot" : "acme-bot");
    globex_ = Tenant("globex", same_subject ? "ci-bot" : "globex-bot");
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  std::string Tenant(const std::string& name, const std::string& subject) {
    {
      grpc::ClientContext ctx;
      Authorize(&ctx, admin_);
      v1::CreateTenantRequest req;
      req.set_name(name);
      v1::Tenant resp;
      EXPECT_OK(tenants_->CreateTenant(&ctx, req, &resp));
    }
    {
      grpc::ClientContext ctx;
      Authorize(&ctx, admin_);
      v1::CreateProjectRequest req;
      req.set_tenant(name);
      req.set_name("research");
      v1::Project resp;
      EXPECT_OK(tenants_->CreateProject(&ctx, req, &resp));
    }
    grpc::ClientContext ctx;
    Authorize(&ctx, admin_);
    v1::CreateTokenRequest req;
    req.set_subject(subject);
    req.set_role(v1::ROLE_TENANT_USER);
    req.set_tenant(name);
    v1::CreateTokenResponse resp;
    EXPECT_OK(tenants_->CreateToken(&ctx, req, &resp));
    return resp.token();
  }

  static v1::SubmitRequest SubmitOf(const std::string& tenant, const std::string& name) {
    v1::SubmitRequest req;
    v1::WorkloadSpec* s = req.mutable_spec();
    s->set_tenant(tenant);
    s->set_project("research");
    s->set_name(name);
    s->set_replicas(1);
    s->mutable_per_replica()->set_gpus(1);
    s->set_workload_class(v1::WORKLOAD_CLASS_BATCH);
    return req;
  }

  grpc::Status Submit(const std::string& token, const v1::SubmitRequest& req,
                      v1::SubmitResponse* resp = nullptr) {
    grpc::ClientContext ctx;
    Authorize(&ctx, token);
    v1::SubmitResponse ignored;
    return workloads_->Submit(&ctx, req, resp != nullptr ? resp : &ignored);
  }

  // Workloads stored, read from the database itself.
  int64_t Stored() {
    pqxx::connection c(dsn_);
    pqxx::work txn(c);
    return txn.exec1("SELECT count(*) FROM workloads")[0].as<int64_t>();
  }

  testing::TempDir dir_{"gpufed-limits"};
  std::unique_ptr<server::Server> server_;
  std::string address_, admin_, dsn_, acme_, globex_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
  std::unique_ptr<v1::TenantService::Stub> tenants_;
};

// A tenant floods Submit from eight threads: past its burst it gets RESOURCE_EXHAUSTED, and
// what was refused is not stored; meanwhile another tenant's calls all succeed, and the flooder
// may still read.
TEST_F(LimitsTest, AWriteFloodIsRefusedForItsCallerWhileAnotherTenantsCallsSucceed) {
  server::ServerConfig config;
  config.write_rate_per_second = 5;
  config.write_burst = 20;
  Start(config);
  ASSERT_FALSE(HasFailure());

  std::atomic<int> accepted{0}, refused{0}, other{0};
  std::vector<std::string> other_failures;
  std::thread bystander([&] {
    // Another tenant's caller, well within its own rate: one submit every 300 ms.
    for (int i = 0; i < 5; ++i) {
      const grpc::Status s = Submit(globex_, SubmitOf("globex", absl::StrCat("calm-", i)));
      if (s.ok()) {
        ++other;
      } else {
        other_failures.push_back(absl::StrCat(s.error_code(), " ", s.error_message()));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
    }
  });
  const auto start = Steady::now();
  std::vector<std::thread> flooders;
  flooders.reserve(8);
  for (int t = 0; t < 8; ++t) {
    flooders.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const grpc::Status s = Submit(acme_, SubmitOf("acme", absl::StrCat("flood-", t, "-", i)));
        if (s.ok()) {
          ++accepted;
        } else {
          EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
          EXPECT_THAT(s.error_message(), HasSubstr("write rate limit"));
          ++refused;
        }
      }
    });
  }
  for (std::thread& t : flooders) t.join();
  const double seconds = std::chrono::duration<double>(Steady::now() - start).count();
  // Right after the flood: every write of the flooder counts (a cancel too); its reads do not.
  v1::CancelRequest cancel;
  cancel.set_id("1");
  v1::Workload cancelled;
  grpc::ClientContext cancel_ctx;
  Authorize(&cancel_ctx, acme_);
  EXPECT_EQ(workloads_->Cancel(&cancel_ctx, cancel, &cancelled).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  v1::ListWorkloadsRequest list;
  v1::ListWorkloadsResponse listed;
  grpc::ClientContext list_ctx;
  Authorize(&list_ctx, acme_);
  EXPECT_OK(workloads_->List(&list_ctx, list, &listed));
  bystander.join();

  EXPECT_GT(refused.load(), 0);
  // The burst, and what the rate refilled while the flood lasted (one more for rounding).
  EXPECT_LE(accepted.load(), 20 + static_cast<int>(5 * seconds) + 1) << seconds << " s";
  EXPECT_EQ(accepted.load() + refused.load(), 400);
  EXPECT_EQ(other.load(), 5) << ::testing::PrintToString(other_failures);
  EXPECT_EQ(Stored(), accepted.load() + other.load());

  // Operators see the refusals (the cancel above is one of them).
  httplib::Client http("127.0.0.1", server_->http_port());
  httplib::Result metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body,
              HasSubstr(absl::StrCat("gpufed_writes_rate_limited_total ", refused.load() + 1)));
}

// The Watch cap counts streams per caller (API token), not per subject: two tenants' tokens
// that happen to share a subject ("ci-bot") each get their own streams.
TEST_F(LimitsTest, TheWatchCapIsPerCallerNotPerSubject) {
  server::ServerConfig config;
  config.max_watch_streams = 3;
  Start(config, /*same_subject=*/true);
  ASSERT_FALSE(HasFailure());

  struct Open {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::WorkloadEvent>> reader;
  };
  auto open = [&](const std::string& token) {
    auto o = std::make_unique<Open>();
    Authorize(&o->ctx, token, std::chrono::seconds(60));
    o->reader = workloads_->Watch(&o->ctx, v1::WatchRequest());
    return o;
  };
  // The stream's fate: its status if it ends, OK once an event reaches it. Submissions of the
  // stream's tenant go on until one does (the server subscribes a stream a moment after it opens).
  auto outcome = [&](Open& o, const std::string& token, const std::string& tenant) {
    std::atomic<bool> done{false};
    std::thread poker([&] {
      for (int i = 0; !done.load(); ++i) {
        EXPECT_OK(Submit(token, SubmitOf(tenant, absl::StrCat("poke-", i))));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
    v1::WorkloadEvent e;
    grpc::Status status = o.reader->Read(&e) ? grpc::Status::OK : o.reader->Finish();
    done = true;
    poker.join();
    return status;
  };
  std::vector<std::unique_ptr<Open>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(open(acme_));
    ASSERT_OK(outcome(*held.back(), acme_, "acme"));
  }
  std::unique_ptr<Open> fourth = open(acme_);
  const grpc::Status over = fourth->reader->Finish();
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();
  EXPECT_THAT(over.error_message(), HasSubstr("at most 3 streams per caller"));

  std::unique_ptr<Open> theirs = open(globex_);
  const grpc::Status their_outcome = outcome(*theirs, globex_, "globex");
  EXPECT_OK(their_outcome) << "another tenant's ci-bot is another caller";
  if (their_outcome.ok()) held.push_back(std::move(theirs));  // else it has finished
  for (auto& o : held) {
    o->ctx.TryCancel();
    o->reader->Finish();
  }
}

// One live agent stream per cluster: a second stream that registers for the cluster replaces
// the first, which ends ABORTED, and only the second is served.
TEST_F(LimitsTest, ASecondAgentStreamForAClusterReplacesTheFirst) {
  Start(server::ServerConfig{});
  ASSERT_FALSE(HasFailure());
  ASSERT_OK_AND_ASSIGN(std::string token, testing::CreateAgentToken(address_, admin_, "edge"));
  auto stub = v1::AgentService::NewStub(channel_);
  v1::AgentMessage reg;
  reg.set_seq(1);
  reg.mutable_register_()->set_cluster("edge");
  reg.mutable_register_()->mutable_info()->set_provider("onprem");
  auto registered = [](grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>& s) {
    v1::ServerMessage m;
    while (s.Read(&m)) {
      if (m.has_registered()) return true;
    }
    return false;
  };
  grpc::ClientContext first_ctx;
  Authorize(&first_ctx, token, std::chrono::seconds(60));
  auto first = stub->Connect(&first_ctx);
  ASSERT_TRUE(first->Write(reg));
  ASSERT_TRUE(registered(*first));

  grpc::ClientContext second_ctx;
  Authorize(&second_ctx, token, std::chrono::seconds(60));
  auto second = stub->Connect(&second_ctx);
  ASSERT_TRUE(second->Write(reg));
  ASSERT_TRUE(registered(*second));

  v1::ServerMessage m;
  while (first->Read(&m)) {
  }
  const grpc::Status replaced = first->Finish();
  EXPECT_EQ(replaced.error_code(), grpc::StatusCode::ABORTED) << replaced.error_message();
  EXPECT_THAT(replaced.error_message(), HasSubstr("another agent stream registered"));

  // The second is the cluster's stream: its heartbeat renews the lease.
  v1::AgentMessage beat;
  beat.set_seq(2);
  beat.mutable_heartbeat();
  ASSERT_TRUE(second->Write(beat));
  bool lease = false;
  while (!lease && second->Read(&m)) lease = m.has_lease();
  EXPECT_TRUE(lease);
  second->WritesDone();
  second_ctx.TryCancel();
  second->Finish();
}

// An agent stream that never registers is closed when agent_register_timeout_ms runs out,
// whether its credential is good or not (it is only checked with the first message); one that
// registers in time stays open past it.
TEST_F(LimitsTest, AnAgentStreamThatNeverRegistersIsClosed) {
  server::ServerConfig config;
  config.agent_register_timeout_ms = 300;
  Start(config);
  ASSERT_FALSE(HasFailure());
  ASSERT_OK_AND_ASSIGN(std::string token, testing::CreateAgentToken(address_, admin_, "edge"));
  auto stub = v1::AgentService::NewStub(channel_);
  for (const std::string& credential : {token, std::string("not-a-token")}) {
    // No client deadline: only the server can end this stream.
    grpc::ClientContext silent_ctx;
    silent_ctx.AddMetadata("authorization", "Bearer " + credential);
    auto silent = stub->Connect(&silent_ctx);
    v1::ServerMessage m;
    while (silent->Read(&m)) {
    }
    EXPECT_EQ(silent->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }

  grpc::ClientContext ctx;
  Authorize(&ctx, token, std::chrono::seconds(30));
  auto stream = stub->Connect(&ctx);
  v1::AgentMessage reg;
  reg.set_seq(1);
  reg.mutable_register_()->set_cluster("edge");
  reg.mutable_register_()->mutable_info()->set_provider("onprem");
  ASSERT_TRUE(stream->Write(reg));
  v1::ServerMessage m;
  bool registered = false;
  while (!registered && stream->Read(&m)) registered = m.has_registered();
  ASSERT_TRUE(registered);
  // Well past the timeout, the stream still answers a heartbeat with a lease.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  v1::AgentMessage beat;
  beat.set_seq(2);
  beat.mutable_heartbeat();
  ASSERT_TRUE(stream->Write(beat));
  bool lease = false;
  while (!lease && stream->Read(&m)) lease = m.has_lease();
  EXPECT_TRUE(lease);
  stream->WritesDone();
  ctx.TryCancel();
  stream->Finish();
}

// A user call's request is at most 1 MiB (api/limits.h), whatever carries the bytes: a valid
// spec with 2 MiB in a field this server does not know is refused, naming where the bytes are,
// and nothing is stored. Past 64 MiB gRPC itself refuses any message.
TEST_F(LimitsTest, AnOversizedRequestIsRefusedAndNothingIsStored) {
  Start(server::ServerConfig{});
  ASSERT_FALSE(HasFailure());
  v1::SubmitRequest padded = SubmitOf("acme", "padded");
  padded.GetReflection()->MutableUnknownFields(&padded)->AddLengthDelimited(
      4242, std::string(2 << 20, 'x'));
  const grpc::Status s = Submit(acme_, padded);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), StartsWith("request: request too large: "));
  EXPECT_THAT(s.error_message(), HasSubstr("at most 1048576"));
  EXPECT_EQ(Stored(), 0);

  // The same bytes in a known field name it.
  v1::SubmitRequest big_env = SubmitOf("acme", "big-env");
  for (int i = 0; i < 40; ++i) {
    (*big_env.mutable_spec()->mutable_run()->mutable_env())[absl::StrCat("V", i)] =
        std::string(16 << 10, 'v');
  }
  big_env.GetReflection()->MutableUnknownFields(&big_env)->AddLengthDelimited(
      4242, std::string(400 << 10, 'x'));
  big_env.mutable_spec()
      ->GetReflection()
      ->MutableUnknownFields(big_env.mutable_spec())
      ->AddLengthDelimited(4243, std::string(100 << 10, 'x'));
  const grpc::Status named = Submit(acme_, big_env);
  EXPECT_EQ(named.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << named.error_message();
  EXPECT_THAT(named.error_message(), StartsWith("spec.run.env: request too large: "));

  // A Watch request too.
  v1::WatchRequest watch;
  watch.GetReflection()->MutableUnknownFields(&watch)->AddLengthDelimited(
      4242, std::string(2 << 20, 'x'));
  grpc::ClientContext watch_ctx;
  Authorize(&watch_ctx, acme_);
  auto reader = workloads_->Watch(&watch_ctx, watch);
  v1::WorkloadEvent e;
  EXPECT_FALSE(reader->Read(&e));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // Beyond the server-wide limit gRPC answers before any handler runs.
  v1::SubmitRequest huge = SubmitOf("acme", "huge");
  huge.GetReflection()->MutableUnknownFields(&huge)->AddLengthDelimited(
      4242, std::string((64 << 20) + 1, 'x'));
  EXPECT_EQ(Submit(acme_, huge).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Stored(), 0);

  // Within the limit a request is served as before.
  EXPECT_OK(Submit(acme_, SubmitOf("acme", "fine")));
  EXPECT_EQ(Stored(), 1);
}

// A call without a deadline, or with one far away, is served under the server's bound
// (max_call_seconds): a read blocked behind a table lock ends DEADLINE_EXCEEDED after about a
// second, not after the client's minute or the database's 30 s statement timeout.
TEST_F(LimitsTest, ADeadlineFarAwayOrNoneIsCutToTheServersBound) {
  server::ServerConfig config;
  config.max_call_seconds = 1;
  Start(config);
  ASSERT_FALSE(HasFailure());
  // The admin token is in the authenticator's cache now; only the tenants table is locked.
  pqxx::connection locker(dsn_);
  pqxx::work lock(locker);
  lock.exec("LOCK TABLE tenants IN ACCESS EXCLUSIVE MODE");

  for (const bool client_deadline : {true, false}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + admin_);
    if (client_deadline) {
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
    }
    v1::ListTenantsResponse resp;
    const auto start = Steady::now();
    const grpc::Status s = tenants_->ListTenants(&ctx, v1::ListTenantsRequest(), &resp);
    const double seconds = std::chrono::duration<double>(Steady::now() - start).count();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
        << client_deadline << ": " << s.error_message();
    EXPECT_LT(seconds, 10) << "client deadline " << client_deadline;
  }
  lock.abort();
  grpc::ClientContext ctx;
  Authorize(&ctx, admin_);
  v1::ListTenantsResponse resp;
  EXPECT_OK(tenants_->ListTenants(&ctx, v1::ListTenantsRequest(), &resp));
  EXPECT_EQ(resp.tenants_size(), 2);
}

}  // namespace
}  // namespace gpufed
