// Hostile input through the public API, as a client would send it: the real server in-process on
// 127.0.0.1 port 0 against a real PostgreSQL, called through a real gRPC channel. Every case must
// answer INVALID_ARGUMENT with a message that names the field (its path, e.g. "spec.run.env"),
// and leave nothing stored. The limits are federation/validation.h's (docs/interfaces.md#limits).

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/validation.h"
#include "gmock/gmock.h"
#include "gpufed/v1/agent_service.pb.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "gtest/gtest.h"
#include "pqxx/pqxx"
#include "server/server.h"
#include "tests/service/in_process_server.h"
#include "tests/service/raw_calls.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using ::gpufed::testing::FromByteBuffer;
using ::gpufed::testing::RawUnaryCall;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::ToByteBuffer;

grpc::Status Call(const std::string& token, auto&& fn) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  return fn(&ctx);
}

// INVALID_ARGUMENT whose message names `field` (contains its path).
::testing::AssertionResult InvalidNaming(const grpc::Status& s, const std::string& field) {
  if (s.error_code() != grpc::StatusCode::INVALID_ARGUMENT) {
    return ::testing::AssertionFailure()
           << "code " << s.error_code() << " (" << s.error_message() << "), expected "
           << "INVALID_ARGUMENT naming " << field;
  }
  if (s.error_message().find(field) == std::string::npos) {
    return ::testing::AssertionFailure()
           << "\"" << s.error_message() << "\" does not name " << field;
  }
  return ::testing::AssertionSuccess();
}

// `message` serialised, with the bytes of `marker` (a string field's value, once in the
// message) replaced by as many 0xff bytes: invalid UTF-8 that the C++ runtime would not send
// from a generated message.
std::string WithInvalidUtf8(const google::protobuf::Message& message, const std::string& marker) {
  std::string bytes = message.SerializeAsString();
  const size_t at = bytes.find(marker);
  EXPECT_NE(at, std::string::npos) << marker;
  EXPECT_EQ(bytes.find(marker, at + 1), std::string::npos) << marker << " occurs twice";
  if (at != std::string::npos) bytes.replace(at, marker.size(), std::string(marker.size(), '\xff'));
  return bytes;
}

// An agent stream that sends and receives raw bytes (generic async API, one operation at a
// time), so that a test can send what a generated stub would not and measure what it receives.
class RawAgentStream {
 public:
  RawAgentStream(const std::shared_ptr<grpc::Channel>& channel, const std::string& token)
      : stub_(channel) {
    ctx_.AddMetadata("authorization", "Bearer " + token);
    // A message that never comes fails the test instead of hanging it.
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    call_ = stub_.PrepareCall(&ctx_, "/gpufed.v1.AgentService/Connect", &cq_);
    call_->StartCall(this);
    started_ = Wait();
  }
  ~RawAgentStream() {
    if (!finished_) {
      ctx_.TryCancel();
      Finish();
    }
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  RawAgentStream(const RawAgentStream&) = delete;
  RawAgentStream& operator=(const RawAgentStream&) = delete;

  bool Write(const std::string& bytes) {
    if (!started_) return false;
    const grpc::ByteBuffer buffer = ToByteBuffer(bytes);
    call_->Write(buffer, this);
    return Wait();
  }
  bool Write(const v1::AgentMessage& m) { return Write(m.SerializeAsString()); }
  // Closes the sending side, as an agent that is done does.
  bool WritesDone() {
    if (!started_) return false;
    call_->WritesDone(this);
    return Wait();
  }
  // The next message: its size on the wire in `bytes`. False once the stream has ended.
  bool Read(v1::ServerMessage* m, size_t* bytes = nullptr) {
    if (!started_) return false;
    grpc::ByteBuffer buffer;
    call_->Read(&buffer, this);
    if (!Wait()) return false;
    if (bytes != nullptr) *bytes = buffer.Length();
    return m->ParseFromString(FromByteBuffer(buffer));
  }
  // Reads until the server ends the stream; the stream's status.
  grpc::Status ReadToEnd() {
    v1::ServerMessage m;
    while (Read(&m)) {
    }
    return Finish();
  }
  // The stream's status once the server has ended it.
  grpc::Status Finish() {
    finished_ = true;
    grpc::Status status;
    call_->Finish(&status, this);
    Wait();
    return status;
  }

 private:
  bool Wait() {
    void* tag = nullptr;
    bool ok = false;
    return cq_.Next(&tag, &ok) && ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool started_ = false;
  bool finished_ = false;
};

// A Register message for cluster `name`: `nodes` nodes of 8 H100s.
v1::AgentMessage Registration(const std::string& cluster, int nodes) {
  v1::AgentMessage m;
  m.set_seq(1);
  v1::Register* r = m.mutable_register_();
  r->set_cluster(cluster);
  r->mutable_info()->set_provider("onprem");
  for (int n = 0; n < nodes; ++n) {
    v1::Node* node = r->mutable_inventory()->add_nodes();
    node->set_name(absl::StrCat(cluster, "-n", n));
    node->set_schedulable(true);
    for (int g = 0; g < 8; ++g) {
      v1::Gpu* gpu = node->add_gpus();
      gpu->set_uuid(absl::StrCat("GPU-", cluster, "-", n, "-", g));
      gpu->set_index(g);
      gpu->set_model("H100-80GB");
      gpu->set_memory_mib(81559);
      gpu->set_healthy(true);
    }
  }
  return m;
}

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(testing::InProcessServer started,
                         testing::StartInProcessServer(dir_.path()));
    server_ = std::move(started.server);
    address_ = started.address;
    admin_ = started.admin_token;
    dsn_ = started.dsn;
    auto user = testing::BootstrapTenant(address_, admin_, "acme", "research");
    ASSERT_OK(user);
    user_ = *user;
    channel_ = testing::Connect(address_);
    workloads_ = v1::WorkloadService::NewStub(channel_);
    tenants_ = v1::TenantService::NewStub(channel_);
    clusters_ = v1::ClusterService::NewStub(channel_);
  }

  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  static v1::WorkloadSpec Spec() {
    v1::WorkloadSpec s;
    s.set_tenant("acme");
    s.set_project("research");
    s.set_name("job");
    s.set_replicas(1);
    s.mutable_per_replica()->set_gpus(1);
    return s;
  }

  grpc::Status Submit(const v1::WorkloadSpec& spec, v1::SubmitResponse* out = nullptr) {
    v1::SubmitRequest req;
    *req.mutable_spec() = spec;
    v1::SubmitResponse resp;
    return Call(user_, [&](grpc::ClientContext* c) {
      return workloads_->Submit(c, req, out != nullptr ? out : &resp);
    });
  }

  // What the platform admin's List shows: every workload of every tenant.
  int CountWorkloads() {
    v1::ListWorkloadsRequest req;
    req.set_page_size(1000);
    v1::ListWorkloadsResponse resp;
    grpc::Status s =
        Call(admin_, [&](grpc::ClientContext* c) { return workloads_->List(c, req, &resp); });
    EXPECT_OK(s);
    return resp.workloads_size();
  }

  std::vector<std::string> TenantNames() {
    v1::ListTenantsResponse resp;
    grpc::Status s = Call(admin_, [&](grpc::ClientContext* c) {
      return tenants_->ListTenants(c, v1::ListTenantsRequest(), &resp);
    });
    EXPECT_OK(s);
    std::vector<std::string> names;
    for (const v1::Tenant& t : resp.tenants()) names.push_back(t.name());
    return names;
  }

  // The API has no way to list tokens: read the table (only hashes are stored).
  std::vector<std::string> TokenSubjects() {
    pqxx::connection conn(dsn_);
    pqxx::nontransaction txn(conn);
    std::vector<std::string> subjects;
    for (const auto& row : txn.exec("SELECT subject FROM api_tokens ORDER BY id")) {
      subjects.push_back(row[0].as<std::string>());
    }
    return subjects;
  }

  grpc::Status GetCluster(const std::string& name, v1::Cluster* out) {
    v1::GetClusterRequest req;
    req.set_name(name);
    return Call(admin_, [&](grpc::ClientContext* c) { return clusters_->GetCluster(c, req, out); });
  }

  testing::TempDir dir_{"gpufed-hostile"};
  std::unique_ptr<server::Server> server_;
  std::string address_, admin_, user_, dsn_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
  std::unique_ptr<v1::TenantService::Stub> tenants_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
};

const std::string kNul("\0", 1);

TEST_F(HostileInputTest, OversizedRunFieldsAreRefusedAndNotStored) {
  struct Case {
    const char* what;
    const char* field;
    std::function<void(v1::WorkloadSpec*)> mutate;
  };
  const std::vector<Case> cases = {
      {"10 MB env value", "spec.run.env",
       [](v1::WorkloadSpec* s) {
         (*s->mutable_run()->mutable_env())["BIG"] = std::string(10 << 20, 'v');
       }},
      {"1 MB env key", "spec.run.env",
       [](v1::WorkloadSpec* s) {
         (*s->mutable_run()->mutable_env())[std::string(1 << 20, 'K')] = "v";
       }},
      // 256 variables (the count limit) of 128 KiB each: 32 MB of env.
      {"32 MB of env", "spec.run.env",
       [](v1::WorkloadSpec* s) {
         for (size_t i = 0; i < kMaxEnvEntries; ++i) {
           (*s->mutable_run()->mutable_env())[absl::StrCat("V", i)] = std::string(128 << 10, 'v');
         }
       }},
      {"10 MB image", "spec.run.image",
       [](v1::WorkloadSpec* s) { s->mutable_run()->set_image(std::string(10 << 20, 'i')); }},
      {"10 MB command argument", "spec.run.command",
       [](v1::WorkloadSpec* s) { s->mutable_run()->add_command(std::string(10 << 20, 'c')); }},
      {"100k command arguments", "spec.run.command",
       [](v1::WorkloadSpec* s) {
         for (int i = 0; i < 100000; ++i) s->mutable_run()->add_command("x");
       }},
      {"10 MB idempotency key", "spec.idempotency_key",
       [](v1::WorkloadSpec* s) { s->set_idempotency_key(std::string(10 << 20, 'k')); }},
  };
  for (const Case& c : cases) {
    v1::WorkloadSpec spec = Spec();
    c.mutate(&spec);
    EXPECT_TRUE(InvalidNaming(Submit(spec), c.field)) << c.what;
  }
  EXPECT_EQ(CountWorkloads(), 0);
}

TEST_F(HostileInputTest, NulAndControlCharactersInASpecAreRefusedNotCut) {
  struct Case {
    const char* what;
    const char* field;
    std::function<void(v1::WorkloadSpec*)> mutate;
  };
  const std::vector<Case> cases = {
      {"NUL in name", "spec.name", [](v1::WorkloadSpec* s) { s->set_name("job" + kNul + "x"); }},
      {"NUL in image", "spec.run.image",
       [](v1::WorkloadSpec* s) { s->mutable_run()->set_image("busybox" + kNul + ":1"); }},
      {"NUL in a command argument", "spec.run.command",
       [](v1::WorkloadSpec* s) { s->mutable_run()->add_command("echo" + kNul + "hi"); }},
      {"NUL in an env value", "spec.run.env",
       [](v1::WorkloadSpec* s) { (*s->mutable_run()->mutable_env())["A"] = "x" + kNul + "y"; }},
      {"NUL in an env key", "spec.run.env",
       [](v1::WorkloadSpec* s) { (*s->mutable_run()->mutable_env())["A" + kNul + "B"] = "x"; }},
      {"escape sequence in image", "spec.run.image",
       [](v1::WorkloadSpec* s) { s->mutable_run()->set_image("busybox\x1b[2J"); }},
      {"env key that is no variable name", "spec.run.env",
       [](v1::WorkloadSpec* s) { (*s->mutable_run()->mutable_env())["1 A"] = "x"; }},
  };
  for (const Case& c : cases) {
    v1::WorkloadSpec spec = Spec();
    c.mutate(&spec);
    EXPECT_TRUE(InvalidNaming(Submit(spec), c.field)) << c.what;
  }
  EXPECT_EQ(CountWorkloads(), 0);
}

TEST_F(HostileInputTest, DurationNanosOutOfRangeAreRefusedNotNormalised) {
  v1::WorkloadSpec spec = Spec();
  spec.mutable_estimated_duration()->set_seconds(1);
  spec.mutable_estimated_duration()->set_nanos(1000000000);
  EXPECT_TRUE(InvalidNaming(Submit(spec), "spec.estimated_duration"));
  spec.mutable_estimated_duration()->set_seconds(0);
  spec.mutable_estimated_duration()->set_nanos(-1);
  EXPECT_TRUE(InvalidNaming(Submit(spec), "spec.estimated_duration"));
  spec = Spec();
  spec.mutable_checkpoint_interval()->set_nanos(1000000000);
  EXPECT_TRUE(InvalidNaming(Submit(spec), "spec.checkpoint_interval"));
  spec.mutable_checkpoint_interval()->set_nanos(0);
  spec.mutable_checkpoint_interval()->set_seconds(-60);
  EXPECT_TRUE(InvalidNaming(Submit(spec), "spec.checkpoint_interval"));
  spec.mutable_checkpoint_interval()->set_seconds(int64_t{400} * 24 * 3600);
  EXPECT_TRUE(InvalidNaming(Submit(spec), "spec.checkpoint_interval"));
  EXPECT_EQ(CountWorkloads(), 0);
}

TEST_F(HostileInputTest, OnlyCanonicalWorkloadIdsAreAccepted) {
  v1::SubmitResponse created;
  ASSERT_OK(Submit(Spec(), &created));
  const std::string id = created.workload().id();
  ASSERT_FALSE(id.empty());
  for (const std::string& alias : {"+" + id, " " + id, id + "\n", "0" + id, id + kNul,
                                   std::string("9223372036854775808"), std::string("-1")}) {
    v1::GetWorkloadRequest get;
    get.set_id(alias);
    v1::Workload w;
    EXPECT_TRUE(InvalidNaming(
        Call(user_, [&](grpc::ClientContext* c) { return workloads_->Get(c, get, &w); }), "id"))
        << "\"" << alias << "\"";
    v1::CancelRequest cancel;
    cancel.set_id(alias);
    EXPECT_TRUE(InvalidNaming(
        Call(user_, [&](grpc::ClientContext* c) { return workloads_->Cancel(c, cancel, &w); }),
        "id"))
        << "\"" << alias << "\"";
  }
  // None of the aliases cancelled the workload.
  v1::GetWorkloadRequest get;
  get.set_id(id);
  v1::Workload w;
  ASSERT_OK(Call(user_, [&](grpc::ClientContext* c) { return workloads_->Get(c, get, &w); }));
  EXPECT_FALSE(w.cancel_requested());
  EXPECT_EQ(w.state(), v1::WORKLOAD_STATE_PENDING);
}

TEST_F(HostileInputTest, NulInACancelReasonIsRefusedNotCut) {
  v1::SubmitResponse created;
  ASSERT_OK(Submit(Spec(), &created));
  v1::CancelRequest cancel;
  cancel.set_id(created.workload().id());
  cancel.set_reason("done" + kNul + "; DROP TABLE workloads");
  v1::Workload w;
  EXPECT_TRUE(InvalidNaming(
      Call(user_, [&](grpc::ClientContext* c) { return workloads_->Cancel(c, cancel, &w); }),
      "reason"));
  cancel.set_reason(std::string(kMaxReasonBytes + 1, 'r'));
  EXPECT_TRUE(InvalidNaming(
      Call(user_, [&](grpc::ClientContext* c) { return workloads_->Cancel(c, cancel, &w); }),
      "reason"));
  v1::GetWorkloadRequest get;
  get.set_id(created.workload().id());
  ASSERT_OK(Call(user_, [&](grpc::ClientContext* c) { return workloads_->Get(c, get, &w); }));
  EXPECT_FALSE(w.cancel_requested());
  EXPECT_EQ(w.state(), v1::WORKLOAD_STATE_PENDING);
}

TEST_F(HostileInputTest, TenantNamesAndDisplayNamesFollowTheRules) {
  struct Case {
    std::string name, display_name;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"1abc", "", "name"},  // tenant_service.proto: names start with a letter
      {"ac" + kNul + "me2", "", "name"},
      {"nul-display", "Acme" + kNul + " Corp", "display_name"},
      {"ctl-display", "Acme\r\nX-Injected: 1", "display_name"},
      {"long-display", std::string(kMaxDisplayNameBytes + 1, 'd'), "display_name"},
  };
  const std::vector<std::string> before = TenantNames();
  for (const Case& c : cases) {
    v1::CreateTenantRequest req;
    req.set_name(c.name);
    req.set_display_name(c.display_name);
    v1::Tenant t;
    EXPECT_TRUE(InvalidNaming(
        Call(admin_,
             [&](grpc::ClientContext* ctx) { return tenants_->CreateTenant(ctx, req, &t); }),
        c.field))
        << c.name;
  }
  EXPECT_EQ(TenantNames(), before);
}

TEST_F(HostileInputTest, TokenSubjectsAndRolesAreChecked) {
  const std::vector<std::string> before = TokenSubjects();
  ASSERT_FALSE(before.empty()) << "the admin's and the tenant user's";
  v1::CreateTokenRequest req;
  req.set_role(v1::ROLE_TENANT_USER);
  req.set_tenant("acme");
  req.set_subject("alice" + kNul + "admin");
  v1::CreateTokenResponse resp;
  EXPECT_TRUE(InvalidNaming(
      Call(admin_, [&](grpc::ClientContext* c) { return tenants_->CreateToken(c, req, &resp); }),
      "subject"));
  req.set_subject("alice");
  req.set_role(static_cast<v1::Role>(42));
  EXPECT_TRUE(InvalidNaming(
      Call(admin_, [&](grpc::ClientContext* c) { return tenants_->CreateToken(c, req, &resp); }),
      "role"));
  EXPECT_TRUE(resp.token().empty());
  // Nothing stored: not the subject cut at the NUL ("alice"), nor a token of no role.
  EXPECT_EQ(TokenSubjects(), before);
}

// A string field holding invalid UTF-8 cannot be sent with the generated stub (the C++ runtime
// refuses to serialise it), so the bytes go through the generic stub: SubmitRequest{spec: {name:
// "\xff"}} = field 1 (spec, length 3) holding field 3 (name, length 1).
TEST_F(HostileInputTest, InvalidUtf8IsInvalidArgumentNamingTheField) {
  const std::string bytes("\x0a\x03\x1a\x01\xff", 5);
  EXPECT_TRUE(InvalidNaming(
      RawUnaryCall(channel_, user_, "/gpufed.v1.WorkloadService/Submit", bytes), "spec.name"));
  // WhatIf takes the same request.
  EXPECT_TRUE(InvalidNaming(
      RawUnaryCall(channel_, user_, "/gpufed.v1.WorkloadService/WhatIf", bytes), "spec.name"));
  EXPECT_EQ(CountWorkloads(), 0);
}

// The same holds for every unary call, whichever string field carries it.
TEST_F(HostileInputTest, InvalidUtf8InOtherCallsIsInvalidArgumentAndChangesNothing) {
  const std::vector<std::string> tenants = TenantNames();
  v1::CreateTenantRequest tenant;
  tenant.set_name("globex");
  tenant.set_display_name("Globex MARKER");
  EXPECT_TRUE(InvalidNaming(RawUnaryCall(channel_, admin_, "/gpufed.v1.TenantService/CreateTenant",
                                         WithInvalidUtf8(tenant, "MARKER")),
                            "display_name"));
  EXPECT_EQ(TenantNames(), tenants);

  v1::SubmitResponse created;
  ASSERT_OK(Submit(Spec(), &created));
  v1::CancelRequest cancel;
  cancel.set_id(created.workload().id());
  cancel.set_reason("done MARKER");
  EXPECT_TRUE(InvalidNaming(RawUnaryCall(channel_, user_, "/gpufed.v1.WorkloadService/Cancel",
                                         WithInvalidUtf8(cancel, "MARKER")),
                            "reason"));
  v1::GetWorkloadRequest get;
  get.set_id(created.workload().id());
  v1::Workload w;
  ASSERT_OK(Call(user_, [&](grpc::ClientContext* c) { return workloads_->Get(c, get, &w); }));
  EXPECT_FALSE(w.cancel_requested());
  EXPECT_EQ(w.state(), v1::WORKLOAD_STATE_PENDING);
}

// Agent streams are not unary (the parse-error interceptor does not see them): a message that
// does not parse ends the stream. The server stays up, stores nothing of it, and a good agent
// still registers. (The status the agent gets: the next test.)
TEST_F(HostileInputTest, InvalidUtf8OnAnAgentStreamIsStoredNowhere) {
  ASSERT_OK_AND_ASSIGN(std::string token, testing::CreateAgentToken(address_, admin_, "dgx"));
  v1::AgentMessage bad = Registration("dgx", 1);
  bad.mutable_register_()->mutable_inventory()->mutable_nodes(0)->set_name("qqqqqqqq");
  {
    RawAgentStream agent(channel_, token);
    ASSERT_TRUE(agent.Write(WithInvalidUtf8(bad, "qqqqqqqq")));
    v1::ServerMessage m;
    while (agent.Read(&m)) {
      EXPECT_NE(m.body_case(), v1::ServerMessage::kRegistered) << "registered from garbage";
    }
    agent.Finish();
  }
  v1::Cluster cluster;
  EXPECT_THAT(GetCluster("dgx", &cluster), StatusIs(absl::StatusCode::kNotFound));

  // A good registration, then an inventory update that does not parse.
  RawAgentStream agent(channel_, token);
  const v1::AgentMessage good = Registration("dgx", 1);
  ASSERT_TRUE(agent.Write(good));
  v1::ServerMessage m;
  ASSERT_TRUE(agent.Read(&m));
  ASSERT_EQ(m.body_case(), v1::ServerMessage::kRegistered);
  v1::AgentMessage update;
  update.set_seq(2);
  *update.mutable_inventory()->mutable_inventory() = good.register_().inventory();
  update.mutable_inventory()->mutable_inventory()->mutable_nodes(0)->set_name("qqqqqqqq");
  ASSERT_TRUE(agent.Write(WithInvalidUtf8(update, "qqqqqqqq")));
  while (agent.Read(&m)) {
    EXPECT_NE(m.body_case(), v1::ServerMessage::kRegistered);
  }
  agent.Finish();
  ASSERT_OK(GetCluster("dgx", &cluster));
  ASSERT_EQ(cluster.nodes_size(), 1);
  EXPECT_EQ(cluster.nodes(0).name(), "dgx-n0");
}

// A message the server cannot parse ends the agent stream with INVALID_ARGUMENT, naming the
// field whose string is not UTF-8 when there is one, so the agent (and its operator) learns why;
// an agent that closes its side still gets OK.
TEST_F(HostileInputTest, AnUnparsableAgentMessageEndsTheStreamWithInvalidArgument) {
  ASSERT_OK_AND_ASSIGN(std::string token, testing::CreateAgentToken(address_, admin_, "dgx"));
  auto registered = [&](RawAgentStream& agent) {
    ASSERT_TRUE(agent.Write(Registration("dgx", 1)));
    v1::ServerMessage m;
    ASSERT_TRUE(agent.Read(&m));
    ASSERT_EQ(m.body_case(), v1::ServerMessage::kRegistered);
  };
  {
    v1::AgentMessage bad = Registration("dgx", 1);
    bad.mutable_register_()->mutable_inventory()->mutable_nodes(0)->set_name("qqqqqqqq");
    RawAgentStream agent(channel_, token);
    ASSERT_TRUE(agent.Write(WithInvalidUtf8(bad, "qqqqqqqq")));
    const grpc::Status s = agent.ReadToEnd();
    EXPECT_TRUE(InvalidNaming(s, "register.inventory.nodes.name"));
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("UTF-8"));
  }
  {
    // A length-delimited field that claims 5 bytes and has 2: not an AgentMessage at all.
    RawAgentStream agent(channel_, token);
    ASSERT_TRUE(agent.Write(std::string("\x0a\x05\x61\x62", 4)));
    EXPECT_TRUE(InvalidNaming(agent.ReadToEnd(), "not a valid gpufed.v1.AgentMessage"));
  }
  {
    // After a good registration too.
    RawAgentStream agent(channel_, token);
    ASSERT_NO_FATAL_FAILURE(registered(agent));
    ASSERT_TRUE(agent.Write(std::string("\xff\xff\xff", 3)));
    EXPECT_TRUE(InvalidNaming(agent.ReadToEnd(), "not a valid gpufed.v1.AgentMessage"));
  }
  {
    RawAgentStream agent(channel_, token);
    ASSERT_NO_FATAL_FAILURE(registered(agent));
    ASSERT_TRUE(agent.WritesDone());
    EXPECT_OK(agent.ReadToEnd());
  }
}

// Large workloads, each within the limits, add up: a List page of them must still be readable
// by a client with gRPC's default 4 MiB receive limit, and following the page tokens must give
// every workload exactly once.
TEST_F(HostileInputTest, ListPagesStayReadableHoweverLargeTheWorkloads) {
  v1::WorkloadSpec big = Spec();
  for (const char* key : {"A", "B", "C"}) {
    (*big.mutable_run()->mutable_env())[key] = std::string(16000, 'x');
  }
  constexpr int kCount = 120;  // ~48 KB each: ~5.8 MB in all
  std::set<std::string> submitted;
  for (int i = 0; i < kCount; ++i) {
    v1::SubmitResponse resp;
    ASSERT_OK(Submit(big, &resp));
    submitted.insert(resp.workload().id());
  }
  std::set<std::string> listed;
  std::string token;
  int pages = 0;
  do {
    v1::ListWorkloadsRequest req;
    req.set_page_size(1000);
    req.set_page_token(token);
    v1::ListWorkloadsResponse resp;
    grpc::Status s =
        Call(admin_, [&](grpc::ClientContext* c) { return workloads_->List(c, req, &resp); });
    ASSERT_OK(s);
    ASSERT_GT(resp.workloads_size(), 0);
    for (const v1::Workload& w : resp.workloads()) {
      EXPECT_TRUE(listed.insert(w.id()).second) << "listed twice: " << w.id();
    }
    token = resp.next_page_token();
    ASSERT_LT(++pages, kCount);
  } while (!token.empty());
  EXPECT_GT(pages, 1);
  EXPECT_EQ(listed, submitted);
}

// A cluster's agent must be able to read whatever the server sends it, however much work other
// tenants put on the cluster: with every spec within its limits, a cluster holding more than
// 4 MiB of specs re-sends them on reconnect in several messages, each within gRPC's default
// 4 MiB receive limit (the agent's), and every assignment arrives.
TEST_F(HostileInputTest, AReconnectingAgentGetsEveryAssignmentInMessagesItCanRead) {
  constexpr size_t kAgentReceiveLimit = size_t{4} << 20;  // gRPC's default, as the agent has it
  constexpr int kWorkloads = 90;                          // ~61 KB each: ~5.5 MB in all
  ASSERT_OK_AND_ASSIGN(std::string token, testing::CreateAgentToken(address_, admin_, "big"));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(static_cast<int>(kAgentReceiveLimit));
  const std::shared_ptr<grpc::Channel> agent_channel =
      grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);

  v1::WorkloadSpec big = Spec();
  for (const char* key : {"A", "B", "C"}) {
    (*big.mutable_run()->mutable_env())[key] = std::string(kMaxEnvValueBytes, 'x');
  }
  big.mutable_run()->add_command(std::string(12000, 'c'));
  ASSERT_GT(big.ByteSizeLong() * kWorkloads, kAgentReceiveLimit + (kAgentReceiveLimit / 4));

  // Reads assignments until `want` distinct workloads came, or the stream ends; every message
  // and its size on the wire.
  struct Received {
    std::set<std::string> ids;
    int assignments = 0;
    int messages = 0;
    size_t largest = 0;
  };
  auto read_assignments = [](RawAgentStream& agent, size_t want) {
    Received got;
    v1::ServerMessage m;
    size_t bytes = 0;
    while (got.ids.size() < want && agent.Read(&m, &bytes)) {
      if (m.body_case() != v1::ServerMessage::kAssign) continue;
      ++got.messages;
      got.largest = std::max(got.largest, bytes);
      for (const v1::WorkAssignment& a : m.assign().assignments()) {
        got.ids.insert(a.workload_id());
        ++got.assignments;
      }
    }
    return got;
  };

  const v1::AgentMessage registration = Registration("big", 12);  // 96 GPUs
  auto first = std::make_unique<RawAgentStream>(agent_channel, token);
  ASSERT_TRUE(first->Write(registration));
  std::set<std::string> submitted;
  for (int i = 0; i < kWorkloads; ++i) {
    v1::SubmitResponse resp;
    ASSERT_OK(Submit(big, &resp));
    submitted.insert(resp.workload().id());
  }
  const Received placed = read_assignments(*first, kWorkloads);
  ASSERT_EQ(placed.ids, submitted) << "placed as they came, in " << placed.messages << " messages";
  EXPECT_LE(placed.largest, kAgentReceiveLimit);

  // The agent reconnects: the server re-sends all it holds for the cluster at once.
  RawAgentStream second(agent_channel, token);
  ASSERT_TRUE(second.Write(registration));
  const Received resent = read_assignments(second, kWorkloads);
  EXPECT_EQ(resent.ids, submitted);
  EXPECT_EQ(resent.assignments, kWorkloads) << "each once";
  EXPECT_GT(resent.messages, 1);
  EXPECT_LE(resent.largest, kAgentReceiveLimit);
  first.reset();  // the server closed it when the second registered
}

}  // namespace
}  // namespace gpufed
