// Service tests: the real server in-process on 127.0.0.1 port 0 against a real PostgreSQL,
// called through real gRPC channels. The agent side of the protocol is driven by hand here so
// each message is under the test's control (the agent program has its own end-to-end test).

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <optional>
#include <pqxx/pqxx>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "api/report_csv.h"
#include "gpufed/v1/agent_service.grpc.pb.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/quota_service.grpc.pb.h"
#include "gpufed/v1/report_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/server.h"
#include "tests/service/fake_agent.h"
#include "tests/service/in_process_server.h"
#include "tests/service/raw_calls.h"
#include "tests/support/postgres_harness.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using Clock = std::chrono::steady_clock;

grpc::Status Call(const std::string& token, auto&& fn) {
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  return fn(&ctx);
}

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server::ServerConfig config;
    config.heartbeat_interval_ms = 200;
    Configure(config);
    ASSERT_OK_AND_ASSIGN(testing::InProcessServer started,
                         testing::StartInProcessServer(dir_.path(), config));
    server_ = std::move(started.server);
    address_ = started.address;
    admin_ = started.admin_token;
    auto user = testing::BootstrapTenant(address_, admin_, "acme", "research");
    ASSERT_OK(user);
    user_ = *user;
    auto other = testing::BootstrapTenant(address_, admin_, "globex", "research");
    ASSERT_OK(other);
    other_ = *other;
    channel_ = testing::Connect(address_);
    workloads_ = v1::WorkloadService::NewStub(channel_);
    clusters_ = v1::ClusterService::NewStub(channel_);
  }

  // What a derived suite changes of the server's configuration.
  virtual void Configure(server::ServerConfig& /*config*/) {}

  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  static v1::WorkloadSpec Spec(const std::string& name, uint32_t replicas = 1, uint32_t gpus = 1) {
    v1::WorkloadSpec s;
    s.set_tenant("acme");
    s.set_project("research");
    s.set_name(name);
    s.set_replicas(replicas);
    s.mutable_per_replica()->set_gpus(gpus);
    s.set_workload_class(v1::WORKLOAD_CLASS_BATCH);
    return s;
  }

  grpc::Status Submit(const v1::WorkloadSpec& spec, v1::SubmitResponse* resp,
                      const std::string& token = "") {
    v1::SubmitRequest req;
    *req.mutable_spec() = spec;
    return Call(token.empty() ? user_ : token,
                [&](grpc::ClientContext* c) { return workloads_->Submit(c, req, resp); });
  }

  // A workload of two GPUs placed on cluster "dgx" (one node of eight H100s) of a fresh agent,
  // which has read the assignment. `agent` null when something failed (already reported).
  struct Placed {
    std::unique_ptr<FakeAgentStream> agent;
    std::string id;
    v1::WorkAssignment work;
  };
  Placed PlaceOnDgx(const std::string& name) {
    Placed p;
    std::unique_ptr<FakeAgentStream> agent =
        RegisteredAgent(address_, admin_, "dgx", 1, 8, "H100-80GB");
    v1::SubmitResponse submitted;
    v1::ServerMessage m;
    if (agent == nullptr || !Submit(Spec(name, 1, 2), &submitted).ok() ||
        !agent->ReadUntil(v1::ServerMessage::kAssign, &m) || m.assign().assignments_size() == 0) {
      ADD_FAILURE() << "placing " << name << " on dgx failed";
      return p;
    }
    p.agent = std::move(agent);
    p.id = submitted.workload().id();
    p.work = m.assign().assignments(0);
    return p;
  }

  int CountWorkloads() {
    v1::ListWorkloadsRequest req;
    req.set_page_size(1000);
    v1::ListWorkloadsResponse resp;
    EXPECT_OK(
        Call(admin_, [&](grpc::ClientContext* c) { return workloads_->List(c, req, &resp); }));
    return resp.workloads_size();
  }

  v1::Workload Get(const std::string& id) {
    v1::GetWorkloadRequest req;
    req.set_id(id);
    v1::Workload w;
    EXPECT_OK(Call(user_, [&](grpc::ClientContext* c) { return workloads_->Get(c, req, &w); }));
    return w;
  }

  grpc::Status Explain(const std::string& id, v1::ExplainResponse* resp,
                       const std::string& token = "") {
    v1::ExplainRequest req;
    req.set_id(id);
    return Call(token.empty() ? user_ : token,
                [&](grpc::ClientContext* c) { return workloads_->Explain(c, req, resp); });
  }

  // Waits (bounded) until the workload reaches `state` (one of `states`).
  v1::Workload WaitFor(const std::string& id, v1::WorkloadState state) {
    return WaitFor(id, std::vector<v1::WorkloadState>{state});
  }
  v1::Workload WaitFor(const std::string& id, const std::vector<v1::WorkloadState>& states) {
    auto deadline = Clock::now() + std::chrono::seconds(20);
    v1::Workload w;
    while (Clock::now() < deadline) {
      w = Get(id);
      if (std::find(states.begin(), states.end(), w.state()) != states.end()) return w;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "workload " << id << " stuck in " << v1::WorkloadState_Name(w.state()) << ": "
                  << w.pending_reason();
    return w;
  }

  testing::TempDir dir_{"gpufed-service"};
  std::unique_ptr<server::Server> server_;
  std::string address_, admin_, user_, other_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::WorkloadService::Stub> workloads_;
  std::unique_ptr<v1::ClusterService::Stub> clusters_;
};

// Puts `gpu` in MIG mode with two 3g.40gb instances (memory slots 0 and 4).
void SplitInTwo3g40gb(v1::Gpu& gpu) {
  gpu.set_mig_enabled(true);
  for (uint32_t start : {0u, 4u}) {
    v1::MigInstance* inst = gpu.add_mig_layout();
    inst->set_profile("3g.40gb");
    inst->set_start(start);
  }
}

v1::AgentMessage Status(const std::string& id, v1::WorkloadState state, int exit_code = 0) {
  v1::AgentMessage m;
  auto* u = m.mutable_status()->add_updates();
  u->set_workload_id(id);
  u->set_state(state);
  u->set_exit_code(exit_code);
  return m;
}

TEST_F(ServiceTest, SubmitGetListAndIdempotency) {
  v1::WorkloadSpec spec = Spec("first");
  spec.set_idempotency_key("key-1");
  v1::SubmitResponse a, b;
  ASSERT_OK(Submit(spec, &a));
  EXPECT_TRUE(a.created());
  EXPECT_EQ(a.workload().state(), v1::WORKLOAD_STATE_PENDING);
  ASSERT_OK(Submit(spec, &b));
  EXPECT_FALSE(b.created());
  EXPECT_EQ(a.workload().id(), b.workload().id());

  v1::WorkloadSpec changed = spec;
  changed.set_priority(5);
  v1::SubmitResponse c;
  grpc::Status s = Submit(changed, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_NE(s.error_message().find("idempotency_key"), std::string::npos) << s.error_message();

  for (int i = 0; i < 5; ++i) {
    v1::SubmitResponse r;
    ASSERT_OK(Submit(Spec(absl::StrCat("more-", i)), &r));
  }
  // Pages of 2, newest first, covering all 6 exactly once.
  std::vector<std::string> ids;
  std::string token;
  do {
    v1::ListWorkloadsRequest req;
    req.set_page_size(2);
    req.set_page_token(token);
    v1::ListWorkloadsResponse resp;
    ASSERT_OK(Call(user_, [&](grpc::ClientContext* c) { return workloads_->List(c, req, &resp); }));
    for (const auto& w : resp.workloads()) ids.push_back(w.id());
    token = resp.next_page_token();
  } while (!token.empty());
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(ids.back(), a.workload().id());
  EXPECT_TRUE(std::is_sorted(
      ids.rbegin(), ids.rend(),
      [](const std::string& x, const std::string& y) { return std::stoll(x) < std::stoll(y); }));

  v1::ListWorkloadsRequest bad;
  bad.set_page_token("garbage");
  v1::ListWorkloadsResponse resp;
  s = Call(user_, [&](grpc::ClientContext* c) { return workloads_->List(c, bad, &resp); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("page_token"), std::string::npos);
}

TEST_F(ServiceTest, BadInputIsInvalidArgumentNamingTheFieldAndChangesNothing) {
  struct Case {
    std::string field;
    std::function<void(v1::WorkloadSpec*)> mutate;
  };
  std::vector<Case> cases = {
      {"spec.name", [](v1::WorkloadSpec* s) { s->set_name(""); }},
      {"spec.name", [](v1::WorkloadSpec* s) { s->set_name(std::string(300, 'x')); }},
      {"spec.per_replica.gpus", [](v1::WorkloadSpec* s) { s->mutable_per_replica()->set_gpus(0); }},
      {"spec.per_replica", [](v1::WorkloadSpec* s) { s->clear_per_replica(); }},
      {"spec.gpu_models[0]", [](v1::WorkloadSpec* s) { s->add_gpu_models("H900"); }},
      {"spec.workload_class",
       [](v1::WorkloadSpec* s) { s->set_workload_class(static_cast<v1::WorkloadClass>(42)); }},
      {"spec.topology",
       [](v1::WorkloadSpec* s) { s->set_topology(static_cast<v1::TopologyRequirement>(9)); }},
      {"spec.project", [](v1::WorkloadSpec* s) { s->set_project(""); }},
      {"spec.priority", [](v1::WorkloadSpec* s) { s->set_priority(-99999); }},
      {"spec.per_replica.gpu_milli",
       [](v1::WorkloadSpec* s) { s->mutable_per_replica()->set_gpu_milli(0); }},
      {"spec.per_replica.gpu_milli",
       [](v1::WorkloadSpec* s) { s->mutable_per_replica()->set_gpu_milli(1000); }},
      {"spec.per_replica.mig_profile",
       [](v1::WorkloadSpec* s) {
         s->add_gpu_models("H100-80GB");
         s->mutable_per_replica()->set_mig_profile("3g.41gb");
       }},
  };
  const int before = CountWorkloads();
  for (const Case& c : cases) {
    v1::WorkloadSpec spec = Spec("bad");
    c.mutate(&spec);
    v1::SubmitResponse resp;
    grpc::Status s = Submit(spec, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_EQ(s.error_message().rfind(c.field, 0), 0u)
        << "expected the message to name " << c.field << ": " << s.error_message();
  }
  v1::SubmitResponse resp;
  v1::WorkloadSpec missing = Spec("unknown-project");
  missing.set_project("nope");
  grpc::Status s = Submit(missing, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("spec.project"), std::string::npos) << s.error_message();
  EXPECT_EQ(CountWorkloads(), before);
}

// The sharing fields survive the API both ways (SpecFromProto / SpecToProto and the store).
TEST_F(ServiceTest, MigProfileShareAndHostResourcesRoundTrip) {
  v1::WorkloadSpec mig = Spec("mig", 2);
  mig.add_gpu_models("H100-80GB");
  mig.mutable_per_replica()->set_mig_profile("3g.40gb");
  mig.mutable_per_replica()->set_cpu_millis(4000);
  mig.mutable_per_replica()->set_memory_mib(16384);
  v1::SubmitResponse resp;
  ASSERT_OK(Submit(mig, &resp));
  v1::Workload got = Get(resp.workload().id());
  EXPECT_EQ(got.spec().per_replica().kind_case(), v1::ReplicaResources::kMigProfile);
  EXPECT_EQ(got.spec().per_replica().mig_profile(), "3g.40gb");
  EXPECT_EQ(got.spec().per_replica().cpu_millis(), 4000u);
  EXPECT_EQ(got.spec().per_replica().memory_mib(), 16384u);

  v1::WorkloadSpec share = Spec("share", 4);
  share.mutable_per_replica()->set_gpu_milli(250);
  ASSERT_OK(Submit(share, &resp));
  got = Get(resp.workload().id());
  EXPECT_EQ(got.spec().per_replica().kind_case(), v1::ReplicaResources::kGpuMilli);
  EXPECT_EQ(got.spec().per_replica().gpu_milli(), 250u);
}

// A checkpointable workload keeps its interval through the API and the store; one without keeps
// none.
TEST_F(ServiceTest, CheckpointIntervalRoundTrips) {
  v1::WorkloadSpec saves = Spec("saves", 1);
  saves.mutable_checkpoint_interval()->set_seconds(900);
  saves.mutable_checkpoint_interval()->set_nanos(500000000);
  v1::SubmitResponse resp;
  ASSERT_OK(Submit(saves, &resp));
  v1::Workload got = Get(resp.workload().id());
  EXPECT_EQ(got.spec().checkpoint_interval().seconds(), 900);
  EXPECT_EQ(got.spec().checkpoint_interval().nanos(), 500000000);

  ASSERT_OK(Submit(Spec("plain", 1), &resp));
  got = Get(resp.workload().id());
  EXPECT_FALSE(got.spec().has_checkpoint_interval());
}

// A workload's placement rules survive the API and the store; a spec without keeps none. What
// the domain cannot hold, or a rule the server refuses, is INVALID_ARGUMENT naming the field.
TEST_F(ServiceTest, PlacementRulesRoundTrip) {
  v1::WorkloadSpec ruled = Spec("ruled", 1);
  v1::PlacementConstraints& p = *ruled.mutable_placement();
  p.add_jurisdictions("eu");
  p.add_jurisdictions("de");
  p.add_compliance_labels("gdpr");
  p.add_providers("aws");
  p.add_regions("eu-west-1");
  p.add_clusters("cloud-eu");
  p.add_denied_clusters("edge");
  p.set_max_price_per_gpu_hour_micros(4'000'000);
  p.set_spot_tolerated(true);
  p.set_objective(v1::OBJECTIVE_LATENCY);
  p.set_client_region("eu-west");
  p.mutable_max_rtt()->set_nanos(30'000'000);
  v1::SubmitResponse resp;
  ASSERT_OK(Submit(ruled, &resp));
  v1::Workload got = Get(resp.workload().id());
  ASSERT_TRUE(got.spec().has_placement());
  EXPECT_EQ(got.spec().placement().SerializeAsString(), p.SerializeAsString())
      << got.spec().placement().DebugString();

  ASSERT_OK(Submit(Spec("anywhere", 1), &resp));
  EXPECT_FALSE(Get(resp.workload().id()).spec().has_placement());

  v1::WorkloadSpec bad = Spec("bad", 1);
  bad.mutable_placement()->set_objective(static_cast<v1::Objective>(42));
  grpc::Status status = Submit(bad, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "spec.placement.objective: unknown value 42");
  bad = Spec("bad", 1);
  bad.mutable_placement()->add_clusters("c");
  bad.mutable_placement()->add_denied_clusters("c");
  status = Submit(bad, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), ::testing::StartsWith("spec.placement."));
}

// After a MIG repartition the agent sends its whole inventory again; the server stores it as
// registration does and shows it. An invalid one ends the stream, naming the field.
TEST_F(ServiceTest, AgentInventoryUpdateReplacesTheInventory) {
  auto agent_token = testing::CreateAgentToken(address_, admin_, "dgx");
  ASSERT_OK(agent_token);
  FakeAgentStream agent(address_, *agent_token);
  v1::AgentMessage reg = Registration("dgx", 1, 2, "H100-80GB");
  for (v1::Gpu& gpu :
       *reg.mutable_register_()->mutable_inventory()->mutable_nodes(0)->mutable_gpus()) {
    gpu.set_mig_capable(true);
  }
  ASSERT_TRUE(agent.Write(reg));
  v1::ServerMessage m;
  ASSERT_TRUE(agent.ReadUntil(v1::ServerMessage::kRegistered, &m));

  v1::AgentMessage update;
  *update.mutable_inventory()->mutable_inventory() = reg.register_().inventory();
  v1::Gpu& gpu0 =
      *update.mutable_inventory()->mutable_inventory()->mutable_nodes(0)->mutable_gpus(0);
  SplitInTwo3g40gb(gpu0);
  ASSERT_TRUE(agent.Write(update));
  v1::GetClusterRequest gr;
  gr.set_name("dgx");
  v1::Cluster cluster;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    ASSERT_OK(Call(user_,
                   [&](grpc::ClientContext* c) { return clusters_->GetCluster(c, gr, &cluster); }));
  } while (!cluster.nodes(0).gpus(0).mig_enabled() && Clock::now() < deadline);
  const v1::Gpu& shown = cluster.nodes(0).gpus(0);
  EXPECT_TRUE(shown.mig_enabled());
  ASSERT_EQ(shown.mig_layout_size(), 2);
  EXPECT_EQ(shown.mig_layout(1).profile(), "3g.40gb");
  EXPECT_EQ(shown.mig_layout(1).start(), 4u);
  EXPECT_FALSE(cluster.nodes(0).gpus(1).mig_enabled());

  v1::MigInstance* bad = gpu0.add_mig_layout();
  bad->set_profile("1g.10gb");
  bad->set_start(1);  // inside the first 3g.40gb
  ASSERT_TRUE(agent.Write(update));
  while (agent.Read(&m)) {
  }
  const grpc::Status ended = agent.Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(ended.error_message().find("nodes[0].gpus[0].mig_layout: 1g.10gb at slot 1: overlaps"),
            std::string::npos)
      << ended.error_message();
}

TEST_F(ServiceTest, APlatformAdminCordonsAClusterOrANode) {
  std::unique_ptr<FakeAgentStream> agent =
      RegisteredAgent(address_, admin_, "dgx", 2, 2, "H100-80GB");
  ASSERT_NE(agent, nullptr);

  v1::CordonRequest req;
  req.set_name("dgx");
  v1::Cluster cluster;
  EXPECT_EQ(Call(user_, [&](grpc::ClientContext* c) { return clusters_->Cordon(c, req, &cluster); })
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_OK(
      Call(admin_, [&](grpc::ClientContext* c) { return clusters_->Cordon(c, req, &cluster); }));
  EXPECT_TRUE(cluster.cordoned());
  EXPECT_EQ(cluster.state(), v1::CLUSTER_STATE_DRAINING);
  ASSERT_OK(
      Call(admin_, [&](grpc::ClientContext* c) { return clusters_->Uncordon(c, req, &cluster); }));
  EXPECT_EQ(cluster.state(), v1::CLUSTER_STATE_READY);

  req.set_node(cluster.nodes(1).name());
  ASSERT_OK(
      Call(admin_, [&](grpc::ClientContext* c) { return clusters_->Cordon(c, req, &cluster); }));
  EXPECT_EQ(cluster.state(), v1::CLUSTER_STATE_READY);
  EXPECT_TRUE(cluster.nodes(1).cordoned());
  EXPECT_FALSE(cluster.nodes(1).schedulable());
  EXPECT_FALSE(cluster.nodes(0).cordoned());

  req.set_node("no such node");
  EXPECT_EQ(
      Call(admin_, [&](grpc::ClientContext* c) { return clusters_->Cordon(c, req, &cluster); })
          .error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
  req.set_node("");
  req.set_name("elsewhere");
  EXPECT_EQ(
      Call(admin_, [&](grpc::ClientContext* c) { return clusters_->Cordon(c, req, &cluster); })
          .error_code(),
      grpc::StatusCode::NOT_FOUND);
}

// Declarations (issue #11) through the API: ApplyClusters is declarative (applying twice changes
// nothing), a dry run stores nothing, only platform admins apply, a cluster may be declared
// before it registers, and an agent registering again never overwrites the declaration.
TEST_F(ServiceTest, APlatformAdminDeclaresClustersAndApplyingTwiceChangesNothing) {
  std::unique_ptr<FakeAgentStream> agent =
      RegisteredAgent(address_, admin_, "dgx", 1, 2, "H100-80GB");
  ASSERT_NE(agent, nullptr);

  const auto price = [](v1::ClusterDeclaration* d, const std::string& model, v1::CapacityType type,
                        int64_t micros) {
    v1::PriceEntry* p = d->add_prices();
    p->set_gpu_model(model);
    p->set_capacity_type(type);
    p->set_price_per_hour_micros(micros);
    p->mutable_effective_from()->set_seconds(1577836800);  // 2020-01-01: in force
    return p;
  };
  v1::ApplyClustersRequest req;
  v1::ClusterDeclaration* dgx = req.add_declarations();
  dgx->set_cluster("dgx");
  dgx->set_jurisdiction("de");
  dgx->mutable_compliance_labels()->add_labels("gdpr");
  dgx->set_default_capacity(v1::CAPACITY_TYPE_COMMITTED);
  price(dgx, "H100-80GB", v1::CAPACITY_TYPE_COMMITTED, 0);
  (*dgx->mutable_client_rtts())["eu-west"].set_nanos(12'000'000);
  v1::ClusterDeclaration* cloud = req.add_declarations();
  cloud->set_cluster("cloud-eu");  // never registers in this test
  cloud->set_provider("aws");
  cloud->set_jurisdiction("eu");
  price(cloud, "A100-80GB", v1::CAPACITY_TYPE_ON_DEMAND, 4'100'000);
  price(cloud, "A100-80GB", v1::CAPACITY_TYPE_SPOT, 1'640'000);

  const auto apply = [&](const std::string& token, v1::ApplyClustersResponse* resp) {
    return Call(token,
                [&](grpc::ClientContext* c) { return clusters_->ApplyClusters(c, req, resp); });
  };
  const auto declarations = [&] {
    v1::ListDeclarationsResponse resp;
    EXPECT_OK(Call(admin_, [&](grpc::ClientContext* c) {
      return clusters_->ListDeclarations(c, v1::ListDeclarationsRequest(), &resp);
    }));
    return resp;
  };
  const auto get_dgx = [&] {
    v1::GetClusterRequest get;
    get.set_name("dgx");
    v1::Cluster c;
    EXPECT_OK(Call(admin_,
                   [&](grpc::ClientContext* ctx) { return clusters_->GetCluster(ctx, get, &c); }));
    return c;
  };

  // Only platform admins declare.
  v1::ApplyClustersResponse resp;
  EXPECT_EQ(apply(user_, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(declarations().declarations_size(), 0);

  // A dry run says what would change and stores nothing.
  req.set_dry_run(true);
  ASSERT_OK(apply(admin_, &resp));
  EXPECT_TRUE(resp.dry_run());
  ASSERT_EQ(resp.diffs_size(), 2);
  EXPECT_EQ(resp.diffs(0).cluster(), "dgx");
  EXPECT_EQ(resp.diffs(0).kind(), v1::DECLARATION_CHANGE_ADDED);
  EXPECT_FALSE(resp.diffs(0).changes().empty());
  EXPECT_EQ(resp.diffs(1).cluster(), "cloud-eu");
  EXPECT_EQ(resp.diffs(1).kind(), v1::DECLARATION_CHANGE_ADDED);
  EXPECT_EQ(declarations().declarations_size(), 0);
  EXPECT_FALSE(get_dgx().has_declaration());
  EXPECT_EQ(get_dgx().info().jurisdiction(), "");

  // Applied: stored, and laid over what the agent reported.
  req.set_dry_run(false);
  ASSERT_OK(apply(admin_, &resp));
  EXPECT_FALSE(resp.dry_run());
  ASSERT_EQ(resp.diffs_size(), 2);
  EXPECT_EQ(resp.diffs(0).kind(), v1::DECLARATION_CHANGE_ADDED);
  EXPECT_EQ(resp.diffs(1).kind(), v1::DECLARATION_CHANGE_ADDED);
  v1::ListDeclarationsResponse listed = declarations();
  ASSERT_EQ(listed.declarations_size(), 2);
  EXPECT_EQ(listed.declarations(0).cluster(), "cloud-eu");
  EXPECT_EQ(listed.declarations(0).prices_size(), 2);
  const v1::ClusterDeclaration& stored = listed.declarations(1);
  EXPECT_EQ(stored.cluster(), "dgx");
  EXPECT_EQ(stored.default_capacity(), v1::CAPACITY_TYPE_COMMITTED);
  ASSERT_EQ(stored.prices_size(), 1);
  EXPECT_EQ(stored.prices(0).capacity_type(), v1::CAPACITY_TYPE_COMMITTED);
  EXPECT_EQ(stored.prices(0).effective_from().seconds(), 1577836800);
  EXPECT_EQ(stored.client_rtts().at("eu-west").nanos(), 12'000'000);
  ASSERT_TRUE(stored.has_compliance_labels());
  v1::Cluster cluster = get_dgx();
  ASSERT_TRUE(cluster.has_declaration());
  EXPECT_EQ(cluster.info().jurisdiction(), "de");
  EXPECT_EQ(cluster.info().provider(), "onprem");  // not declared: the agent's
  EXPECT_EQ(cluster.reported_info().jurisdiction(), "");

  // Applying the same again changes nothing.
  ASSERT_OK(apply(admin_, &resp));
  ASSERT_EQ(resp.diffs_size(), 2);
  for (const v1::DeclarationDiff& diff : resp.diffs()) {
    EXPECT_EQ(diff.kind(), v1::DECLARATION_CHANGE_UNCHANGED) << diff.cluster();
    EXPECT_TRUE(diff.changes().empty()) << diff.cluster();
  }

  // The agent registering again (a new connection) leaves the declaration in force.
  agent.reset();
  agent = RegisteredAgent(address_, admin_, "dgx", 1, 2, "H100-80GB");
  ASSERT_NE(agent, nullptr);
  cluster = get_dgx();
  EXPECT_EQ(cluster.info().jurisdiction(), "de");
  EXPECT_THAT(cluster.info().compliance_labels(), ::testing::ElementsAre("gdpr"));

  // A price in force is history: another price for it is refused, and nothing changes.
  v1::ApplyClustersRequest repriced = req;
  repriced.mutable_declarations(1)->mutable_prices(0)->set_price_per_hour_micros(3'000'000);
  v1::ApplyClustersResponse refused;
  EXPECT_EQ(
      Call(admin_,
           [&](grpc::ClientContext* c) { return clusters_->ApplyClusters(c, repriced, &refused); })
          .error_code(),
      grpc::StatusCode::FAILED_PRECONDITION);

  // What cannot be represented is refused naming the field; nothing is stored.
  v1::ApplyClustersRequest bad = req;
  bad.mutable_declarations(1)->mutable_prices(0)->set_capacity_type(v1::CAPACITY_TYPE_UNSPECIFIED);
  bad.mutable_declarations(0)->set_jurisdiction("fr");
  const grpc::Status status = Call(
      admin_, [&](grpc::ClientContext* c) { return clusters_->ApplyClusters(c, bad, &refused); });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("declarations[1].prices[0].capacity_type"));
  EXPECT_EQ(get_dgx().info().jurisdiction(), "de");
  EXPECT_EQ(declarations().declarations(0).prices(0).price_per_hour_micros(), 4'100'000);
}

// What-if (issue #11): where a workload would go now and what it would cost, through the API,
// checked like a submission, and nothing stored.
TEST_F(ServiceTest, WhatIfRoutesOnTheLivePoolAndSubmitsNothing) {
  std::vector<std::unique_ptr<FakeAgentStream>> agents;
  for (const char* name : {"cheap-eu", "cheap-us", "pricey-eu"}) {
    agents.push_back(RegisteredAgent(address_, admin_, name, 1, 8, "H100-80GB"));
    ASSERT_NE(agents.back(), nullptr) << name;
  }
  v1::ApplyClustersRequest declare;
  const auto declared = [&](const std::string& cluster, const std::string& jurisdiction,
                            int64_t micros) {
    v1::ClusterDeclaration* d = declare.add_declarations();
    d->set_cluster(cluster);
    d->set_jurisdiction(jurisdiction);
    v1::PriceEntry* p = d->add_prices();
    p->set_gpu_model("H100-80GB");
    p->set_capacity_type(v1::CAPACITY_TYPE_ON_DEMAND);
    p->set_price_per_hour_micros(micros);
    p->mutable_effective_from()->set_seconds(1577836800);  // 2020-01-01: in force
  };
  declared("cheap-eu", "eu", 2'000'000);
  declared("cheap-us", "us", 1'000'000);  // the cheapest, but outside the rule
  declared("pricey-eu", "eu", 3'000'000);
  v1::ApplyClustersResponse applied;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) {
    return clusters_->ApplyClusters(c, declare, &applied);
  }));

  v1::WorkloadSpec spec = Spec("what-if", 1, 4);
  spec.mutable_placement()->add_jurisdictions("eu");
  spec.mutable_placement()->set_objective(v1::OBJECTIVE_COST);
  spec.mutable_estimated_duration()->set_seconds(int64_t{90} * 60);
  const auto what_if = [&](const v1::WorkloadSpec& s, v1::WhatIfResponse* resp,
                           const std::string& token) {
    v1::SubmitRequest req;
    *req.mutable_spec() = s;
    return Call(token, [&](grpc::ClientContext* c) { return workloads_->WhatIf(c, req, resp); });
  };

  // The scheduler takes in the clusters and their declarations in its next cycles (one cluster
  // at a time); until it has loaded the pool it says so (NotLoaded), never "never".
  const auto settled = [](const v1::WhatIfResponse& r) {
    if (r.candidates_size() != 3) return false;
    for (const v1::ClusterCandidate& c : r.candidates()) {
      if (c.rules_size() != 1 || c.rules(0).detail().empty() || c.offers_size() != 1 ||
          !c.offers(0).has_price_per_hour_micros()) {
        return false;
      }
    }
    return true;
  };
  v1::WhatIfResponse r;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    r.Clear();
    ASSERT_OK(what_if(spec, &r, user_));
    if (r.reason_code() == "NotLoaded") {
      EXPECT_FALSE(r.never_fits()) << r.explanation();
    }
  } while (!settled(r) && Clock::now() < deadline);
  ASSERT_TRUE(r.has_assignment()) << r.reason_code() << ": " << r.explanation();
  EXPECT_EQ(r.assignment().cluster(), "cheap-eu");
  ASSERT_EQ(r.assignment().replicas_size(), 1);
  EXPECT_EQ(r.assignment().replicas(0).node(), "cheap-eu-n0");
  EXPECT_EQ(r.assignment().replicas(0).gpu_uuids_size(), 4);
  EXPECT_TRUE(r.explanation().empty()) << r.explanation();
  EXPECT_TRUE(r.reason_code().empty());
  EXPECT_EQ(r.objective(), v1::OBJECTIVE_COST);
  // 4 GPUs x 2.00 per hour, over 1.5 hours.
  ASSERT_TRUE(r.has_price_per_hour_micros());
  EXPECT_EQ(r.price_per_hour_micros(), 8'000'000);
  EXPECT_EQ(r.estimated_hours(), 1.5);
  ASSERT_TRUE(r.has_estimated_cost_micros());
  EXPECT_EQ(r.estimated_cost_micros(), 12'000'000);
  // Every cluster, in name order, with its rule and its offer.
  ASSERT_EQ(r.candidates_size(), 3);
  EXPECT_EQ(r.candidates(0).cluster(), "cheap-eu");
  EXPECT_TRUE(r.candidates(0).allowed());
  EXPECT_TRUE(r.candidates(0).chosen());
  const v1::ClusterCandidate& us = r.candidates(1);
  EXPECT_EQ(us.cluster(), "cheap-us");
  EXPECT_FALSE(us.allowed());
  EXPECT_FALSE(us.chosen());
  ASSERT_EQ(us.rules_size(), 1);
  EXPECT_EQ(us.rules(0).rule(), "jurisdiction");
  EXPECT_FALSE(us.rules(0).passed());
  EXPECT_EQ(us.rules(0).detail(), "us");
  ASSERT_EQ(us.offers_size(), 1);
  EXPECT_EQ(us.offers(0).gpu_model(), "H100-80GB");
  EXPECT_EQ(us.offers(0).capacity_type(), v1::CAPACITY_TYPE_ON_DEMAND);
  EXPECT_EQ(us.offers(0).price_per_hour_micros(), 4'000'000) << "one replica of 4 GPUs";
  EXPECT_FALSE(us.offers(0).fits_now()) << "not allowed: not tried";
  const v1::ClusterCandidate& pricey = r.candidates(2);
  EXPECT_EQ(pricey.cluster(), "pricey-eu");
  EXPECT_TRUE(pricey.allowed());
  EXPECT_FALSE(pricey.chosen());
  ASSERT_EQ(pricey.offers_size(), 1);
  EXPECT_TRUE(pricey.offers(0).fits_now());
  EXPECT_GT(pricey.offers(0).key(), r.candidates(0).offers(0).key());

  // A rule no cluster meets: nowhere, the rule named, and waiting will not help.
  v1::WorkloadSpec nowhere = spec;
  nowhere.mutable_placement()->set_jurisdictions(0, "de");
  ASSERT_OK(what_if(nowhere, &r, user_));
  EXPECT_FALSE(r.has_assignment());
  EXPECT_EQ(r.reason_code(), "NoClusterAllowed") << r.explanation();
  EXPECT_NE(r.explanation().find("jurisdiction de"), std::string::npos) << r.explanation();
  EXPECT_TRUE(r.never_fits());
  EXPECT_FALSE(r.has_price_per_hour_micros());
  EXPECT_EQ(r.candidates_size(), 3);

  // Checked like a submission: another tenant's user may not, a bad spec names the field.
  grpc::Status status = what_if(spec, &r, other_);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  v1::WorkloadSpec bad = spec;
  bad.mutable_placement()->mutable_max_rtt()->set_nanos(500);  // not whole microseconds
  status = what_if(bad, &r, user_);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("spec.placement.max_rtt"), std::string::npos)
      << status.error_message();
  bad = spec;
  bad.set_name("");
  status = what_if(bad, &r, user_);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("spec.name"), std::string::npos) << status.error_message();
  status = Call(user_, [&](grpc::ClientContext* c) {
    return workloads_->WhatIf(c, v1::SubmitRequest(), &r);
  });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "spec: required");
  EXPECT_EQ(what_if(spec, &r, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Nothing was submitted.
  EXPECT_EQ(CountWorkloads(), 0);
}

// A drain with eviction: the restartable workload is stopped by its agent first and requeued
// only once the agent confirms; the other keeps running.
TEST_F(ServiceTest, APlatformAdminDrainsAClusterAndItsRestartableWorkIsStoppedThenRequeued) {
  std::unique_ptr<FakeAgentStream> agent =
      RegisteredAgent(address_, admin_, "dgx", 1, 8, "H100-80GB");
  ASSERT_NE(agent, nullptr);
  v1::WorkloadSpec restartable = Spec("moves");
  restartable.mutable_retry()->set_max_attempts(3);
  restartable.mutable_retry()->add_on(v1::RETRY_ON_PREEMPTION);
  v1::SubmitResponse moves, stays;
  ASSERT_OK(Submit(restartable, &moves));
  ASSERT_OK(Submit(Spec("stays"), &stays));
  const std::string moves_id = moves.workload().id();
  WaitFor(moves_id, v1::WORKLOAD_STATE_PLACED);
  WaitFor(stays.workload().id(), v1::WORKLOAD_STATE_PLACED);

  v1::DrainRequest req;
  req.set_name("dgx");
  req.set_evict(true);
  v1::DrainResponse drained;
  EXPECT_EQ(Call(user_, [&](grpc::ClientContext* c) { return clusters_->Drain(c, req, &drained); })
                .error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_FALSE(Get(moves_id).evicting());
  req.set_node("not a node!");
  EXPECT_EQ(Call(admin_, [&](grpc::ClientContext* c) { return clusters_->Drain(c, req, &drained); })
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  req.clear_node();
  ASSERT_OK(
      Call(admin_, [&](grpc::ClientContext* c) { return clusters_->Drain(c, req, &drained); }));
  EXPECT_EQ(drained.cluster().state(), v1::CLUSTER_STATE_DRAINING);
  EXPECT_THAT(drained.evicted_workload_ids(), ::testing::ElementsAre(moves_id));
  EXPECT_THAT(drained.staying_workload_ids(), ::testing::ElementsAre(stays.workload().id()));
  v1::Workload w = Get(moves_id);
  EXPECT_EQ(w.state(), v1::WORKLOAD_STATE_PLACED) << "not requeued before the agent stops it";
  EXPECT_EQ(w.evicting(), v1::RETRY_ON_PREEMPTION);

  v1::ServerMessage m;
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kCancel, &m));
  EXPECT_THAT(m.cancel().workload_ids(), ::testing::ElementsAre(moves_id));
  ASSERT_TRUE(agent->Write(Status(moves_id, v1::WORKLOAD_STATE_CANCELLED)));
  // Back in the queue: PENDING, and ADMITTED by the next cycle (no cluster is free to place it).
  WaitFor(moves_id, {v1::WORKLOAD_STATE_PENDING, v1::WORKLOAD_STATE_ADMITTED});
  w = Get(moves_id);
  EXPECT_EQ(w.evicting(), v1::RETRY_ON_UNSPECIFIED);
  EXPECT_EQ(w.attempts(), 1u);
  EXPECT_EQ(Get(stays.workload().id()).state(), v1::WORKLOAD_STATE_PLACED);
}

TEST_F(ServiceTest, TenantsAreIsolatedAndTokensRequired) {
  v1::SubmitResponse mine;
  ASSERT_OK(Submit(Spec("mine"), &mine));

  v1::SubmitResponse r;
  grpc::Status s = Submit(Spec("intruder"), &r, other_);  // globex submitting to acme
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(s.error_message().find("acme"), std::string::npos) << "no names leaked";

  v1::GetWorkloadRequest get;
  get.set_id(mine.workload().id());
  v1::Workload w;
  s = Call(other_, [&](grpc::ClientContext* c) { return workloads_->Get(c, get, &w); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);

  v1::ListWorkloadsRequest list;
  v1::ListWorkloadsResponse resp;
  ASSERT_OK(Call(other_, [&](grpc::ClientContext* c) { return workloads_->List(c, list, &resp); }));
  EXPECT_EQ(resp.workloads_size(), 0);

  s = Call("", [&](grpc::ClientContext* c) { return workloads_->Get(c, get, &w); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  s = Call("gpf_not-a-real-token",
           [&](grpc::ClientContext* c) { return workloads_->Get(c, get, &w); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Only platform admins create tenants.
  auto tenants = v1::TenantService::NewStub(channel_);
  v1::CreateTenantRequest ct;
  ct.set_name("sneaky");
  v1::Tenant t;
  s = Call(user_, [&](grpc::ClientContext* c) { return tenants->CreateTenant(c, ct, &t); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ServiceTest, AgentRunsPlacedWorkToSuccessAndWatchSeesEveryStep) {
  auto agent_token = testing::CreateAgentToken(address_, admin_, "dgx");
  ASSERT_OK(agent_token);
  FakeAgentStream agent(address_, *agent_token);
  ASSERT_TRUE(agent.Write(Registration("dgx", 2, 8, "H100-80GB")));
  v1::ServerMessage m;
  ASSERT_TRUE(agent.ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(m.registered().cluster(), "dgx");

  v1::SubmitResponse gang;
  v1::WorkloadSpec spec = Spec("train", 2, 8);
  spec.add_gpu_models("H100-80GB");
  ASSERT_OK(Submit(spec, &gang));
  const std::string id = gang.workload().id();

  // Watch it from the start.
  grpc::ClientContext watch_ctx;
  watch_ctx.AddMetadata("authorization", "Bearer " + user_);
  v1::WatchRequest wr;
  wr.set_workload_id(id);
  auto watch = workloads_->Watch(&watch_ctx, wr);

  ASSERT_TRUE(agent.ReadUntil(v1::ServerMessage::kAssign, &m));
  ASSERT_EQ(m.assign().assignments_size(), 1);
  const auto& a = m.assign().assignments(0);
  EXPECT_EQ(a.workload_id(), id);
  ASSERT_EQ(a.assignment().replicas_size(), 2);
  EXPECT_NE(a.assignment().replicas(0).node(), a.assignment().replicas(1).node());
  EXPECT_EQ(a.assignment().replicas(0).gpu_uuids_size(), 8);

  ASSERT_TRUE(agent.Write(Status(id, v1::WORKLOAD_STATE_RUNNING)));
  WaitFor(id, v1::WORKLOAD_STATE_RUNNING);
  ASSERT_TRUE(agent.Write(Status(id, v1::WORKLOAD_STATE_SUCCEEDED)));
  ASSERT_TRUE(agent.ReadUntil(v1::ServerMessage::kAck, &m));
  v1::Workload done = WaitFor(id, v1::WORKLOAD_STATE_SUCCEEDED);
  EXPECT_TRUE(done.has_end_time());

  std::vector<v1::WorkloadState> states;
  v1::WorkloadEvent e;
  while (watch->Read(&e)) states.push_back(e.workload().state());
  EXPECT_OK(watch->Finish());
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.back(), v1::WORKLOAD_STATE_SUCCEEDED);
  EXPECT_TRUE(std::is_sorted(states.begin(), states.end())) << "states never go backwards";

  // The GPUs are free again.
  v1::ListClustersRequest lr;
  v1::ListClustersResponse clusters;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    ASSERT_OK(Call(
        user_, [&](grpc::ClientContext* c) { return clusters_->ListClusters(c, lr, &clusters); }));
    ASSERT_EQ(clusters.clusters_size(), 1);
  } while (clusters.clusters(0).gpus_free() != 16 && Clock::now() < deadline);
  EXPECT_EQ(clusters.clusters(0).gpus_total(), 16u);
  EXPECT_EQ(clusters.clusters(0).gpus_free(), 16u);
}

// One caller holds at most 64 Watch streams at once: the 65th is RESOURCE_EXHAUSTED while
// another caller still watches; closing one lets the next in.
TEST_F(ServiceTest, WatchStreamsPerCallerAreCapped) {
  struct Open {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::WorkloadEvent>> reader;
  };
  auto open = [&](const std::string& token) {
    auto o = std::make_unique<Open>();
    o->ctx.AddMetadata("authorization", "Bearer " + token);
    o->ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    o->reader = workloads_->Watch(&o->ctx, v1::WatchRequest());
    return o;
  };
  // Waits until the stream's fate is known: it ends (its status), or an event reaches it (OK).
  // Submissions go on until one does: the server subscribes a stream a moment after it opens.
  auto outcome = [&](Open& o, const std::string& token = "") {
    std::atomic<bool> done{false};
    std::thread poker([&] {
      v1::WorkloadSpec poke = Spec("poke");
      if (!token.empty()) poke.set_tenant("globex");
      while (!done.load()) {
        v1::SubmitResponse r;
        EXPECT_OK(Submit(poke, &r, token));
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
  held.reserve(64);
  for (int i = 0; i < 64; ++i) held.push_back(open(user_));
  for (auto& o : held) ASSERT_OK(outcome(*o));
  std::unique_ptr<Open> one_more = open(user_);
  EXPECT_EQ(one_more->reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  std::unique_ptr<Open> other = open(other_);
  EXPECT_OK(outcome(*other, other_));

  held.back()->ctx.TryCancel();
  held.back()->reader->Finish();
  held.pop_back();
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  grpc::Status next;
  do {
    std::unique_ptr<Open> again = open(user_);
    next = outcome(*again);
    if (next.ok()) {
      again->ctx.TryCancel();
      again->reader->Finish();
    }
  } while (!next.ok() && Clock::now() < deadline);
  EXPECT_OK(next) << "a closed stream frees its place";
  for (auto& o : held) {
    o->ctx.TryCancel();
    o->reader->Finish();
  }
  other->ctx.TryCancel();
  other->reader->Finish();
}

// A watcher that never reads is ended with RESOURCE_EXHAUSTED once what waits for it passes the
// per-stream bound; what it had been sent is still readable first. Once its events were dropped,
// nothing published after the drop reaches it: it resumes from the last event it got, so an
// event from after the gap would move its resume point past the workloads it never saw. What it
// gets of a run of submissions is therefore a prefix of them. (Found by review: after a drop the
// stream went on queueing, and the reader got the newest events after a gap.)
TEST_F(ServiceTest, AWatcherThatNeverReadsIsEndedAndGetsNothingFromAfterTheDrop) {
  // A client whose transport takes no more than it reads: no bandwidth probing, a small
  // window, so what the server sends past it waits on the server's side, as for a client that
  // stops reading its socket.
  auto slow = v1::WorkloadService::NewStub(testing::ConnectSlowReader(address_));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + user_);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = slow->Watch(&ctx, v1::WatchRequest());
  v1::SubmitResponse r;
  v1::WorkloadEvent e;
  // The stream is subscribed a moment after it opens: submit until its first event comes.
  {
    std::atomic<bool> got{false};
    std::thread poker([&] {
      for (int i = 0; !got.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        if (!got.load()) {
          ASSERT_OK(Submit(Spec("poke-" + std::to_string(i)), &r));
        }
      }
    });
    ASSERT_TRUE(reader->Read(&e));
    got = true;
    poker.join();
  }
  // Far more than the bound (1,000 events or 128 KiB) plus gRPC's flow-control window.
  std::vector<std::string> flood;
  v1::WorkloadSpec big = Spec("big");
  (*big.mutable_run()->mutable_env())["PAD"] = std::string(2000, 'x');
  for (int i = 0; i < 1500; ++i) {
    ASSERT_OK(Submit(big, &r));
    flood.push_back(r.workload().id());
  }
  std::set<std::string> submitted_seen;
  while (reader->Read(&e)) {
    if (e.from_state() == v1::WORKLOAD_STATE_UNSPECIFIED) submitted_seen.insert(e.workload().id());
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  size_t prefix = 0;
  while (prefix < flood.size() && submitted_seen.count(flood[prefix]) == 1) ++prefix;
  ASSERT_LT(prefix, flood.size()) << "nothing was dropped: the test proves nothing";
  for (size_t i = prefix; i < flood.size(); ++i) {
    EXPECT_EQ(submitted_seen.count(flood[i]), 0u)
        << "submission " << i << " delivered after submission " << prefix << " was dropped";
  }
}

// Quotas over the real API: who may set them, guarantees that must fit the pool (or be set with
// overcommit), and a tenant's quotas hidden from another tenant.
TEST_F(ServiceTest, QuotasAreSetByAdminsAndMustFitThePool) {
  std::unique_ptr<FakeAgentStream> agent =
      RegisteredAgent(address_, admin_, "dgx", 2, 8, "H100-80GB");  // 16 H100
  ASSERT_NE(agent, nullptr);
  auto quotas = v1::QuotaService::NewStub(channel_);
  auto set = [&](const std::string& token, const std::string& tenant, int64_t guaranteed,
                 std::optional<int64_t> limit, bool overcommit, v1::Quota* out) {
    v1::SetQuotaRequest req;
    req.mutable_quota()->set_tenant(tenant);
    req.mutable_quota()->set_resource("H100-80GB");
    req.mutable_quota()->set_guaranteed_milli(guaranteed);
    if (limit) req.mutable_quota()->set_limit_milli(*limit);
    req.set_overcommit(overcommit);
    return Call(token, [&](grpc::ClientContext* c) { return quotas->SetQuota(c, req, out); });
  };
  v1::Quota q;
  ASSERT_OK(set(admin_, "acme", 8000, 16000, false, &q));
  EXPECT_EQ(q.tenant(), "acme");
  EXPECT_EQ(q.guaranteed_milli(), 8000);
  EXPECT_TRUE(q.has_limit_milli());
  EXPECT_EQ(q.limit_milli(), 16000);
  EXPECT_FALSE(q.overcommitted());
  EXPECT_EQ(set(user_, "acme", 16000, std::nullopt, false, &q).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(set(admin_, "globex", 12000, std::nullopt, false, &q).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  ASSERT_OK(set(admin_, "globex", 12000, std::nullopt, true, &q));
  EXPECT_TRUE(q.overcommitted());
  EXPECT_FALSE(q.has_limit_milli());
  EXPECT_EQ(set(admin_, "acme", 8000, 4000, false, &q).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::SetQuotaRequest empty;
  EXPECT_EQ(Call(admin_, [&](grpc::ClientContext* c) { return quotas->SetQuota(c, empty, &q); })
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  auto list = [&](const std::string& token, const std::string& tenant,
                  v1::ListQuotasResponse* out) {
    v1::ListQuotasRequest req;
    req.set_tenant(tenant);
    return Call(token, [&](grpc::ClientContext* c) { return quotas->ListQuotas(c, req, out); });
  };
  v1::ListQuotasResponse listed;
  ASSERT_OK(list(user_, "acme", &listed));
  ASSERT_EQ(listed.quotas_size(), 1);
  EXPECT_EQ(listed.quotas(0).guaranteed_milli(), 8000);
  EXPECT_EQ(list(other_, "acme", &listed).error_code(), grpc::StatusCode::NOT_FOUND);
  // Naming no tenant: the caller's own quotas only.
  listed.Clear();
  ASSERT_OK(list(other_, "", &listed));
  ASSERT_EQ(listed.quotas_size(), 1);
  EXPECT_EQ(listed.quotas(0).tenant(), "globex");
  listed.Clear();
  ASSERT_OK(list(admin_, "", &listed));
  EXPECT_EQ(listed.quotas_size(), 2);

  // Usage: nothing runs yet, so each quota's row holds nothing.
  v1::GetQuotaUsageRequest usage_req;
  usage_req.set_tenant("acme");
  v1::GetQuotaUsageResponse usage;
  ASSERT_OK(Call(
      user_, [&](grpc::ClientContext* c) { return quotas->GetQuotaUsage(c, usage_req, &usage); }));
  ASSERT_EQ(usage.usage_size(), 1);
  EXPECT_EQ(usage.usage(0).resource(), "H100-80GB");
  EXPECT_TRUE(usage.usage(0).has_quota());
  EXPECT_EQ(usage.usage(0).used_milli(), 0);
  EXPECT_EQ(
      Call(other_,
           [&](grpc::ClientContext* c) { return quotas->GetQuotaUsage(c, usage_req, &usage); })
          .error_code(),
      grpc::StatusCode::NOT_FOUND);

  v1::DeleteQuotaRequest del;
  del.set_tenant("globex");
  del.set_resource("H100-80GB");
  v1::DeleteQuotaResponse deleted;
  EXPECT_EQ(
      Call(other_, [&](grpc::ClientContext* c) { return quotas->DeleteQuota(c, del, &deleted); })
          .error_code(),
      grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_OK(
      Call(admin_, [&](grpc::ClientContext* c) { return quotas->DeleteQuota(c, del, &deleted); }));
  EXPECT_EQ(
      Call(admin_, [&](grpc::ClientContext* c) { return quotas->DeleteQuota(c, del, &deleted); })
          .error_code(),
      grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceTest, GangLargerThanAnyClusterStaysPendingWithAReason) {
  std::unique_ptr<FakeAgentStream> agent = RegisteredAgent(address_, admin_, "edge", 2, 4, "L4");
  ASSERT_NE(agent, nullptr);

  v1::SubmitResponse huge;
  ASSERT_OK(Submit(Spec("huge", 4, 8), &huge));
  auto deadline = Clock::now() + std::chrono::seconds(10);
  v1::Workload w;
  do {
    w = Get(huge.workload().id());
  } while ((w.pending_reason_code().empty() || w.pending_reason_code() == "QueueDepth") &&
           Clock::now() < deadline);
  EXPECT_EQ(w.state(), v1::WORKLOAD_STATE_PENDING);
  // The code for machines, the words for people.
  EXPECT_EQ(w.pending_reason_code(), "GpuCountUnsatisfiable") << w.pending_reason();
  EXPECT_FALSE(w.pending_reason().empty());
}

// Explain over the real API: the engine's words for a PENDING workload, a one-line summary for
// a placed one, tenant isolation and a bad id naming the field.
// Through the real server and PostgreSQL: an owner within its guarantee waits ADMITTED while a
// borrower is stopped for it, is placed once the agent confirms, and the preemption is recorded.
TEST_F(ServiceTest, AnOwnerReclaimsItsGuaranteeFromABorrowerAndThePreemptionIsRecorded) {
  std::unique_ptr<FakeAgentStream> agent =
      RegisteredAgent(address_, admin_, "dgx", 1, 8, "H100-80GB");
  ASSERT_NE(agent, nullptr);
  auto quotas = v1::QuotaService::NewStub(channel_);
  v1::SetQuotaRequest set;
  set.mutable_quota()->set_tenant("acme");
  set.mutable_quota()->set_resource("H100-80GB");
  set.mutable_quota()->set_guaranteed_milli(8000);
  v1::Quota q;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) { return quotas->SetQuota(c, set, &q); }));

  // globex has no quota: all it holds is borrowed.
  v1::WorkloadSpec borrower = Spec("borrower", 1, 8);
  borrower.set_tenant("globex");
  borrower.mutable_retry()->set_max_attempts(3);
  borrower.mutable_retry()->add_on(v1::RETRY_ON_PREEMPTION);
  v1::SubmitResponse borrowed;
  ASSERT_OK(Submit(borrower, &borrowed, other_));
  v1::ServerMessage m;
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kAssign, &m));
  ASSERT_TRUE(agent->Write(Status(borrowed.workload().id(), v1::WORKLOAD_STATE_RUNNING)));

  v1::SubmitResponse owner;
  ASSERT_OK(Submit(Spec("owner", 1, 8), &owner));
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kCancel, &m));
  EXPECT_THAT(m.cancel().workload_ids(), ::testing::ElementsAre(borrowed.workload().id()));
  WaitFor(owner.workload().id(), v1::WORKLOAD_STATE_ADMITTED);
  ASSERT_TRUE(agent->Write(Status(borrowed.workload().id(), v1::WORKLOAD_STATE_CANCELLED)));
  WaitFor(owner.workload().id(), v1::WORKLOAD_STATE_PLACED);

  auto list = [&](const std::string& token, const std::string& tenant,
                  v1::ListPreemptionsResponse* out) {
    v1::ListPreemptionsRequest req;
    req.set_tenant(tenant);
    return Call(token,
                [&](grpc::ClientContext* c) { return quotas->ListPreemptions(c, req, out); });
  };
  v1::ListPreemptionsResponse all;
  ASSERT_OK(list(admin_, "", &all));
  ASSERT_EQ(all.preemptions_size(), 1);
  const v1::Preemption& p = all.preemptions(0);
  EXPECT_EQ(p.reason(), v1::PREEMPTION_REASON_GUARANTEE_RECLAIM);
  EXPECT_EQ(p.preemptor_workload_id(), owner.workload().id());
  EXPECT_EQ(p.tenant(), "acme");
  EXPECT_EQ(p.resource(), "H100-80GB");
  EXPECT_EQ(p.cluster(), "dgx");
  EXPECT_EQ(p.needed_milli(), 8000);
  EXPECT_EQ(p.evicted_milli(), 8000);
  ASSERT_EQ(p.victims_size(), 1);
  EXPECT_EQ(p.victims(0).workload_id(), borrowed.workload().id());
  EXPECT_EQ(p.victims(0).tenant(), "globex");
  EXPECT_TRUE(all.next_page_token().empty());
  // Each tenant sees its own part: acme what it took, not from whom; globex what it lost, not to
  // whom.
  v1::ListPreemptionsResponse mine;
  ASSERT_OK(list(user_, "acme", &mine));
  ASSERT_EQ(mine.preemptions_size(), 1);
  EXPECT_EQ(mine.preemptions(0).preemptor_workload_id(), owner.workload().id());
  EXPECT_EQ(mine.preemptions(0).victims_size(), 0);
  EXPECT_EQ(mine.preemptions(0).evicted_milli(), 8000);
  v1::ListPreemptionsResponse theirs;
  ASSERT_OK(list(other_, "globex", &theirs));
  ASSERT_EQ(theirs.preemptions_size(), 1);
  ASSERT_EQ(theirs.preemptions(0).victims_size(), 1);
  EXPECT_EQ(theirs.preemptions(0).victims(0).workload_id(), borrowed.workload().id());
  EXPECT_TRUE(theirs.preemptions(0).preemptor_workload_id().empty());
  EXPECT_TRUE(theirs.preemptions(0).tenant().empty());
  EXPECT_EQ(theirs.SerializeAsString().find("acme"), std::string::npos);
  EXPECT_EQ(list(user_, "globex", &mine).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::ListPreemptionsRequest bad;
  bad.set_tenant("acme");
  bad.set_page_token("not-a-token");
  EXPECT_EQ(
      Call(user_, [&](grpc::ClientContext* c) { return quotas->ListPreemptions(c, bad, &mine); })
          .error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceTest, ExplainGivesTheEnginesReasonOrWhereTheWorkloadIs) {
  // Two nodes of 8 H100, each node its own NVLink domain.
  std::unique_ptr<FakeAgentStream> agent =
      RegisteredAgent(address_, admin_, "dgx", 2, 8, "H100-80GB");
  ASSERT_NE(agent, nullptr);
  v1::ServerMessage m;

  // A model no cluster has: waiting will not help.
  v1::WorkloadSpec h200 = Spec("h200", 1, 8);
  h200.add_gpu_models("H200");
  v1::SubmitResponse wrong_model;
  ASSERT_OK(Submit(h200, &wrong_model));
  // Explain judges by the scheduler's view of the pool, which takes in the new cluster in its
  // next cycle; until the scheduler has loaded the pool at all, it must not say "never".
  v1::ExplainResponse e;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  do {
    ASSERT_OK(Explain(wrong_model.workload().id(), &e));
    if (e.reason_code() == "NotLoaded") {
      EXPECT_FALSE(e.never_fits()) << e.explanation();
    }
  } while (e.reason_code() != "NoMatchingGpu" && Clock::now() < deadline);
  EXPECT_EQ(e.workload().id(), wrong_model.workload().id());
  EXPECT_EQ(e.workload().state(), v1::WORKLOAD_STATE_PENDING);
  EXPECT_TRUE(e.never_fits());
  EXPECT_TRUE(e.fits_now_on().empty());
  EXPECT_EQ(e.reason_code(), "NoMatchingGpu") << e.explanation();
  EXPECT_NE(e.explanation().find("H200"), std::string::npos) << e.explanation();
  EXPECT_NE(e.explanation().find("H100-80GB"), std::string::npos)
      << "names the models the pool has: " << e.explanation();

  // A gang that must share one NVLink domain, bigger than any domain: never split, never fits.
  v1::WorkloadSpec gang = Spec("gang", 2, 8);
  gang.set_topology(v1::TOPOLOGY_REQUIREMENT_SAME_NVLINK_DOMAIN);
  v1::SubmitResponse too_big;
  ASSERT_OK(Submit(gang, &too_big));
  ASSERT_OK(Explain(too_big.workload().id(), &e));
  EXPECT_TRUE(e.never_fits()) << e.explanation();
  EXPECT_EQ(e.reason_code(), "TopologyUnsatisfiable") << e.explanation();

  // One that fits is placed; while it holds a node, another 8-GPU job that would need a whole
  // domain waits, and Explain says so without "never".
  v1::SubmitResponse first, second, third;
  ASSERT_OK(Submit(Spec("first", 1, 8), &first));
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kAssign, &m));
  ASSERT_OK(Submit(Spec("second", 1, 8), &second));
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kAssign, &m));
  WaitFor(second.workload().id(), v1::WORKLOAD_STATE_PLACED);
  ASSERT_OK(Submit(Spec("third", 1, 8), &third));
  deadline = Clock::now() + std::chrono::seconds(10);
  // Stored as queued; the scheduler's judgement replaces that.
  auto judged = [&] {
    const std::string code = Get(third.workload().id()).pending_reason_code();
    return !code.empty() && code != "QueueDepth";
  };
  while (!judged() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_OK(Explain(third.workload().id(), &e));
  // Admitted (no quota holds it back) and waiting for capacity.
  EXPECT_EQ(e.workload().state(), v1::WORKLOAD_STATE_ADMITTED);
  EXPECT_FALSE(e.never_fits()) << e.explanation();
  EXPECT_TRUE(e.fits_now_on().empty()) << e.explanation();
  EXPECT_EQ(e.reason_code(), "NothingFree") << e.explanation();
  EXPECT_EQ(e.workload().pending_reason_code(), "NothingFree");
  EXPECT_EQ(e.workload().pending_reason(), e.explanation());

  // Placed and running workloads: where they are.
  ASSERT_OK(Explain(first.workload().id(), &e));
  EXPECT_EQ(e.workload().state(), v1::WORKLOAD_STATE_PLACED);
  EXPECT_EQ(e.explanation(), "PLACED on dgx (1 replica)");
  EXPECT_FALSE(e.never_fits());
  ASSERT_TRUE(agent->Write(Status(first.workload().id(), v1::WORKLOAD_STATE_RUNNING)));
  WaitFor(first.workload().id(), v1::WORKLOAD_STATE_RUNNING);
  ASSERT_OK(Explain(first.workload().id(), &e));
  EXPECT_EQ(e.explanation(), "RUNNING on dgx (1 replica)");

  // Another tenant's workload looks absent.
  grpc::Status s = Explain(first.workload().id(), &e, other_);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << s.error_message();
  EXPECT_EQ(s.error_message().find("dgx"), std::string::npos) << "nothing leaked";
  // The admin sees every tenant.
  EXPECT_OK(Explain(first.workload().id(), &e, admin_));

  for (const char* bad : {"", "abc", "-3", "0"}) {
    s = Explain(bad, &e);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "id \"" << bad << "\"";
    EXPECT_EQ(s.error_message().rfind("id: ", 0), 0u) << s.error_message();
  }
  s = Explain("987654321", &e);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  s = Call("", [&](grpc::ClientContext* c) {
    v1::ExplainRequest req;
    req.set_id(first.workload().id());
    return workloads_->Explain(c, req, &e);
  });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// Reads Assign messages until every id in `ids` has its assignment.
std::map<std::string, v1::Assignment> ReadAssignments(FakeAgentStream& agent,
                                                      const std::set<std::string>& ids) {
  std::map<std::string, v1::Assignment> got;
  v1::ServerMessage m;
  while (got.size() < ids.size() && agent.ReadUntil(v1::ServerMessage::kAssign, &m)) {
    for (const auto& a : m.assign().assignments()) {
      if (ids.contains(a.workload_id())) got[a.workload_id()] = a.assignment();
    }
  }
  return got;
}

// Two workloads that each ask for part of a GPU share one GPU; the assignment says how much.
TEST_F(ServiceTest, GpuSharesLandTwoWorkloadsOnOneGpu) {
  std::unique_ptr<FakeAgentStream> agent = RegisteredAgent(address_, admin_, "infer", 1, 1, "L4");
  ASSERT_NE(agent, nullptr);

  v1::WorkloadSpec big = Spec("big-share");
  big.mutable_per_replica()->set_gpu_milli(600);
  v1::WorkloadSpec small = Spec("small-share");
  small.mutable_per_replica()->set_gpu_milli(400);
  v1::SubmitResponse a, b;
  ASSERT_OK(Submit(big, &a));
  ASSERT_OK(Submit(small, &b));
  const std::map<std::string, v1::Assignment> got =
      ReadAssignments(*agent, {a.workload().id(), b.workload().id()});
  ASSERT_EQ(got.size(), 2u);
  const v1::Assignment& ga = got.at(a.workload().id());
  const v1::Assignment& gb = got.at(b.workload().id());
  ASSERT_EQ(ga.replicas_size(), 1);
  ASSERT_EQ(gb.replicas_size(), 1);
  EXPECT_EQ(ga.replicas(0).gpu_milli(), 600u);
  EXPECT_EQ(gb.replicas(0).gpu_milli(), 400u);
  ASSERT_EQ(ga.replicas(0).gpu_uuids_size(), 1);
  ASSERT_EQ(gb.replicas(0).gpu_uuids_size(), 1);
  EXPECT_EQ(ga.replicas(0).gpu_uuids(0), "GPU-infer-0-0");
  EXPECT_EQ(ga.replicas(0).gpu_uuids(0), gb.replicas(0).gpu_uuids(0)) << "one GPU, two holders";
  EXPECT_TRUE(ga.repartitions().empty());
  // Stored the same way.
  EXPECT_EQ(Get(a.workload().id()).assignment().replicas(0).gpu_milli(), 600u);

  // The GPU is full (600 + 400): a third share waits and says why.
  v1::WorkloadSpec more = Spec("one-more");
  more.mutable_per_replica()->set_gpu_milli(100);
  v1::SubmitResponse c;
  ASSERT_OK(Submit(more, &c));
  // No quota holds it back: the scheduler admits it and it waits for capacity. (Explain judges
  // live, so asking before that cycle commits would see it still PENDING: wait for the state.)
  WaitFor(c.workload().id(), v1::WORKLOAD_STATE_ADMITTED);
  v1::ExplainResponse e;
  ASSERT_OK(Explain(c.workload().id(), &e));
  EXPECT_EQ(e.workload().state(), v1::WORKLOAD_STATE_ADMITTED);
  EXPECT_FALSE(e.never_fits());
  EXPECT_EQ(e.reason_code(), "NothingFree") << e.explanation();
  EXPECT_NE(e.explanation().find("milli-GPU"), std::string::npos) << e.explanation();

  // The cluster view lists both holders on the GPU.
  v1::GetClusterRequest gr;
  gr.set_name("infer");
  v1::Cluster cluster;
  ASSERT_OK(Call(
      user_, [&](grpc::ClientContext* ctx) { return clusters_->GetCluster(ctx, gr, &cluster); }));
  const std::string holders = cluster.nodes(0).gpus(0).allocated_to();
  EXPECT_NE(holders.find(a.workload().id()), std::string::npos) << holders;
  EXPECT_NE(holders.find(b.workload().id()), std::string::npos) << holders;
}

// MIG: a free instance is used as it is; a profile with no free instance gets an idle
// MIG-capable GPU repartitioned, sent to the agent in the assignment, counted in /metrics.
TEST_F(ServiceTest, MigWorkloadsGetAnInstanceAndIdleGpusAreRepartitioned) {
  auto agent_token = testing::CreateAgentToken(address_, admin_, "mig");
  ASSERT_OK(agent_token);
  FakeAgentStream agent(address_, *agent_token);
  v1::AgentMessage reg = Registration("mig", 1, 2, "H100-80GB");
  auto* gpus = reg.mutable_register_()->mutable_inventory()->mutable_nodes(0)->mutable_gpus();
  for (v1::Gpu& gpu : *gpus) gpu.set_mig_capable(true);
  // GPU 0 is already in MIG mode with two 3g.40gb instances; GPU 1 is a whole idle GPU.
  v1::Gpu& gpu0 = gpus->at(0);
  SplitInTwo3g40gb(gpu0);
  ASSERT_TRUE(agent.Write(reg));
  v1::ServerMessage m;
  ASSERT_TRUE(agent.ReadUntil(v1::ServerMessage::kRegistered, &m));

  v1::WorkloadSpec existing = Spec("uses-an-instance");
  existing.add_gpu_models("H100-80GB");
  existing.mutable_per_replica()->set_mig_profile("3g.40gb");
  v1::SubmitResponse a;
  ASSERT_OK(Submit(existing, &a));
  auto got = ReadAssignments(agent, {a.workload().id()});
  ASSERT_EQ(got.size(), 1u);
  const v1::Assignment ga = got.at(a.workload().id());
  ASSERT_EQ(ga.replicas_size(), 1);
  EXPECT_EQ(ga.replicas(0).mig_profile(), "3g.40gb");
  EXPECT_TRUE(ga.replicas(0).mig_start() == 0 || ga.replicas(0).mig_start() == 4)
      << ga.replicas(0).mig_start();
  ASSERT_EQ(ga.replicas(0).gpu_uuids_size(), 1);
  EXPECT_EQ(ga.replicas(0).gpu_uuids(0), "GPU-mig-0-0");
  EXPECT_EQ(ga.replicas(0).gpu_milli(), 0u);
  EXPECT_TRUE(ga.repartitions().empty()) << "a free instance needs no new layout";

  // 1g.10gb: no such instance on GPU 0 (full), so the idle GPU 1 is turned into MIG mode.
  v1::WorkloadSpec small = Spec("needs-a-new-layout");
  small.add_gpu_models("H100-80GB");
  small.mutable_per_replica()->set_mig_profile("1g.10gb");
  v1::SubmitResponse b;
  ASSERT_OK(Submit(small, &b));
  got = ReadAssignments(agent, {b.workload().id()});
  ASSERT_EQ(got.size(), 1u);
  const v1::Assignment gb = got.at(b.workload().id());
  ASSERT_EQ(gb.replicas_size(), 1);
  const v1::ReplicaAssignment& r = gb.replicas(0);
  EXPECT_EQ(r.mig_profile(), "1g.10gb");
  ASSERT_EQ(r.gpu_uuids_size(), 1);
  EXPECT_EQ(r.gpu_uuids(0), "GPU-mig-0-1");
  ASSERT_EQ(gb.repartitions_size(), 1);
  const v1::Repartition& rp = gb.repartitions(0);
  EXPECT_EQ(rp.node(), "mig-n0");
  EXPECT_EQ(rp.gpu_uuid(), "GPU-mig-0-1");
  EXPECT_TRUE(rp.mig_enabled());
  EXPECT_FALSE(rp.reason().empty());
  EXPECT_NE(rp.reason().find(b.workload().id()), std::string::npos)
      << "the reason names the workload: " << rp.reason();
  bool has_instance = false;
  for (const v1::MigInstance& inst : rp.layout()) {
    has_instance = has_instance || (inst.profile() == "1g.10gb" && inst.start() == r.mig_start());
  }
  EXPECT_TRUE(has_instance) << "the new layout holds the assigned instance at slot "
                            << r.mig_start();
  // What Get shows is what the agent got.
  const v1::Workload stored = Get(b.workload().id());
  ASSERT_EQ(stored.assignment().repartitions_size(), 1);
  EXPECT_EQ(stored.assignment().repartitions(0).gpu_uuid(), "GPU-mig-0-1");
  EXPECT_EQ(stored.assignment().replicas(0).mig_start(), r.mig_start());

  httplib::Client http("127.0.0.1", server_->http_port());
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("gpufed_mig_repartitions_total 1"), std::string::npos)
      << metrics->body;
}

TEST_F(ServiceTest, CancelPendingAndRunning) {
  v1::SubmitResponse pending;
  ASSERT_OK(Submit(Spec("waits"), &pending));  // no clusters: stays pending
  v1::CancelRequest cr;
  cr.set_id(pending.workload().id());
  v1::Workload w;
  ASSERT_OK(Call(user_, [&](grpc::ClientContext* c) { return workloads_->Cancel(c, cr, &w); }));
  EXPECT_EQ(w.state(), v1::WORKLOAD_STATE_CANCELLED);
  grpc::Status again =
      Call(user_, [&](grpc::ClientContext* c) { return workloads_->Cancel(c, cr, &w); });
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  std::unique_ptr<FakeAgentStream> agent =
      RegisteredAgent(address_, admin_, "dgx", 1, 8, "H100-80GB");
  ASSERT_NE(agent, nullptr);
  v1::ServerMessage m;
  v1::SubmitResponse running;
  ASSERT_OK(Submit(Spec("runs"), &running));
  const std::string id = running.workload().id();
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kAssign, &m));
  ASSERT_TRUE(agent->Write(Status(id, v1::WORKLOAD_STATE_RUNNING)));
  WaitFor(id, v1::WORKLOAD_STATE_RUNNING);

  cr.set_id(id);
  ASSERT_OK(Call(user_, [&](grpc::ClientContext* c) { return workloads_->Cancel(c, cr, &w); }));
  EXPECT_TRUE(w.cancel_requested());
  EXPECT_EQ(w.state(), v1::WORKLOAD_STATE_RUNNING) << "the agent confirms the stop";
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kCancel, &m));
  EXPECT_EQ(m.cancel().workload_ids(0), id);
  ASSERT_TRUE(agent->Write(Status(id, v1::WORKLOAD_STATE_CANCELLED)));
  WaitFor(id, v1::WORKLOAD_STATE_CANCELLED);
}

TEST_F(ServiceTest, AgentMaySpeakOnlyForItsCluster) {
  auto agent_token = testing::CreateAgentToken(address_, admin_, "edge");
  ASSERT_OK(agent_token);
  FakeAgentStream agent(address_, *agent_token);
  ASSERT_TRUE(agent.Write(Registration("dgx", 1, 8, "H100-80GB")));
  v1::ServerMessage m;
  EXPECT_FALSE(agent.Read(&m));
  EXPECT_EQ(agent.Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);

  FakeAgentStream user_as_agent(address_, user_);
  ASSERT_TRUE(user_as_agent.Write(Registration("edge", 1, 8, "L4")));
  EXPECT_FALSE(user_as_agent.Read(&m));
  EXPECT_EQ(user_as_agent.Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(ServiceTest, AnAgentStreamWithoutAValidCredentialIsUnauthenticatedWhateverItSends) {
  v1::AgentMessage heartbeat;
  heartbeat.mutable_heartbeat();
  v1::ServerMessage m;
  {
    FakeAgentStream silent(address_, "");
    EXPECT_FALSE(silent.Read(&m));
    EXPECT_EQ(silent.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  for (const std::string& token : {std::string(), std::string("gpf_not-a-real-token")}) {
    FakeAgentStream agent(address_, token);
    agent.Write(heartbeat);  // not a register: still the credential is what is wrong
    EXPECT_FALSE(agent.Read(&m));
    EXPECT_EQ(agent.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED) << token;
  }
  FakeAgentStream bad(address_, "gpf_not-a-real-token");
  ASSERT_TRUE(bad.Write(Registration("edge", 1, 8, "L4")));
  EXPECT_FALSE(bad.Read(&m));
  EXPECT_EQ(bad.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ServiceTest, AnAgentCredentialMayNotWatch) {
  auto agent_token = testing::CreateAgentToken(address_, admin_, "edge");
  ASSERT_OK(agent_token);
  for (const std::string& id : {std::string(), std::string("1")}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + *agent_token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::WatchRequest req;
    req.set_workload_id(id);
    auto stream = workloads_->Watch(&ctx, req);
    v1::WorkloadEvent e;
    EXPECT_FALSE(stream->Read(&e));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED) << id;
  }
}

TEST_F(ServiceTest, TheClusterViewNamesOnlyTheCallersOwnWorkloadsOnGpus) {
  auto agent = RegisteredAgent(address_, admin_, "dgx", 1, 8, "H100-80GB");
  ASSERT_NE(agent, nullptr);
  v1::SubmitResponse mine, theirs;
  ASSERT_OK(Submit(Spec("mine"), &mine));
  v1::WorkloadSpec other_spec = Spec("theirs");
  other_spec.set_tenant("globex");
  ASSERT_OK(Submit(other_spec, &theirs, other_));
  WaitFor(mine.workload().id(), v1::WORKLOAD_STATE_PLACED);
  auto theirs_placed = [&] {
    v1::GetWorkloadRequest get;
    get.set_id(theirs.workload().id());
    v1::Workload w;
    EXPECT_OK(Call(other_, [&](grpc::ClientContext* c) { return workloads_->Get(c, get, &w); }));
    return w.state() == v1::WORKLOAD_STATE_PLACED || w.state() == v1::WORKLOAD_STATE_RUNNING;
  };
  for (int i = 0; i < 1000 && !theirs_placed(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(theirs_placed());

  // Per caller: the ids named on GPUs and how many GPUs are held, by ListClusters and GetCluster.
  auto view = [&](const std::string& token) {
    std::vector<std::pair<std::set<std::string>, int>> out;
    v1::ListClustersRequest list;
    list.set_include_nodes(true);
    v1::ListClustersResponse listed;
    EXPECT_OK(Call(
        token, [&](grpc::ClientContext* c) { return clusters_->ListClusters(c, list, &listed); }));
    v1::GetClusterRequest get;
    get.set_name("dgx");
    v1::Cluster got;
    EXPECT_OK(
        Call(token, [&](grpc::ClientContext* c) { return clusters_->GetCluster(c, get, &got); }));
    if (listed.clusters_size() != 1) {
      ADD_FAILURE() << "listed " << listed.clusters_size() << " clusters";
      return out;
    }
    for (const v1::Cluster* c :
         std::initializer_list<const v1::Cluster*>{&listed.clusters(0), &got}) {
      std::set<std::string> named;
      int held = 0;
      for (const v1::Gpu& g : c->nodes(0).gpus()) {
        if (!g.allocated_to().empty()) named.insert(g.allocated_to());
        held += g.allocated() ? 1 : 0;
      }
      out.emplace_back(named, held);
    }
    return out;
  };
  const std::string my_id = mine.workload().id();
  const std::string their_id = theirs.workload().id();
  for (const auto& [named, held] : view(user_)) {
    EXPECT_EQ(named, std::set<std::string>{my_id});
    EXPECT_EQ(held, 2);  // its own and, unnamed, the other tenant's
  }
  for (const auto& [named, held] : view(other_)) {
    EXPECT_EQ(named, std::set<std::string>{their_id});
    EXPECT_EQ(held, 2);
  }
  for (const auto& [named, held] : view(admin_)) {
    EXPECT_EQ(named, (std::set<std::string>{my_id, their_id}));
    EXPECT_EQ(held, 2);
  }
}

TEST_F(ServiceTest, ARevokedTokenIsCutOffAtOnceLiveStreamsIncluded) {
  auto tenants = v1::TenantService::NewStub(channel_);
  const auto make = [&](const std::string& by, v1::CreateTokenRequest request) {
    v1::CreateTokenResponse made;
    EXPECT_OK(
        Call(by, [&](grpc::ClientContext* c) { return tenants->CreateToken(c, request, &made); }));
    return made;
  };
  const auto revoke = [&](const std::string& by, int64_t id) {
    v1::RevokeTokenRequest request;
    request.set_token_id(id);
    v1::RevokeTokenResponse done;
    return Call(by,
                [&](grpc::ClientContext* c) { return tenants->RevokeToken(c, request, &done); });
  };
  v1::CreateTokenRequest agent_request;
  agent_request.set_subject("agent-edge");
  agent_request.set_role(v1::ROLE_AGENT);
  agent_request.set_cluster("edge");
  const v1::CreateTokenResponse agent_token = make(admin_, agent_request);
  v1::CreateTokenRequest user_request;
  user_request.set_subject("ci");
  user_request.set_role(v1::ROLE_TENANT_USER);
  user_request.set_tenant("acme");
  const v1::CreateTokenResponse user_token = make(admin_, user_request);
  ASSERT_GT(agent_token.token_id(), 0);
  ASSERT_NE(agent_token.token_id(), user_token.token_id());

  // A registered agent, heartbeating.
  FakeAgentStream agent(address_, agent_token.token());
  v1::ServerMessage m;
  ASSERT_TRUE(agent.Write(Registration("edge", 1, 8, "L4")));
  ASSERT_TRUE(agent.ReadUntil(v1::ServerMessage::kRegistered, &m));
  // A Watch of every workload with the user's token, and a call that caches the token.
  grpc::ClientContext watch_ctx;
  watch_ctx.AddMetadata("authorization", "Bearer " + user_token.token());
  watch_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto watch = workloads_->Watch(&watch_ctx, v1::WatchRequest());
  v1::ListWorkloadsResponse listed;
  ASSERT_OK(Call(user_token.token(), [&](grpc::ClientContext* c) {
    return workloads_->List(c, v1::ListWorkloadsRequest(), &listed);
  }));

  // Another tenant's admin learns nothing and changes nothing.
  v1::CreateTokenRequest globex_admin_request;
  globex_admin_request.set_subject("gadmin");
  globex_admin_request.set_role(v1::ROLE_TENANT_ADMIN);
  globex_admin_request.set_tenant("globex");
  const v1::CreateTokenResponse globex_admin = make(admin_, globex_admin_request);
  EXPECT_EQ(revoke(globex_admin.token(), user_token.token_id()).error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(revoke(user_, user_token.token_id()).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_OK(Call(user_token.token(), [&](grpc::ClientContext* c) {
    return workloads_->List(c, v1::ListWorkloadsRequest(), &listed);
  }));

  ASSERT_OK(revoke(admin_, user_token.token_id()));
  ASSERT_OK(revoke(admin_, agent_token.token_id()));
  // At once: the next call, not the next cache expiry, and the open streams end.
  EXPECT_EQ(Call(user_token.token(),
                 [&](grpc::ClientContext* c) {
                   return workloads_->List(c, v1::ListWorkloadsRequest(), &listed);
                 })
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  v1::WorkloadEvent e;
  while (watch->Read(&e)) {
  }
  EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  while (agent.Read(&m)) {
  }
  EXPECT_EQ(agent.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // And it cannot come back with it.
  FakeAgentStream again(address_, agent_token.token());
  ASSERT_TRUE(again.Write(Registration("edge", 1, 8, "L4")));
  EXPECT_FALSE(again.Read(&m));
  EXPECT_EQ(again.Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ServiceTest, AMembersTokensFollowItsBindingAtOnce) {
  auto tenants = v1::TenantService::NewStub(channel_);
  const auto bind = [&](const std::string& by, v1::Role role) {
    v1::SetRoleBindingRequest request;
    request.mutable_binding()->set_subject("dev");
    request.mutable_binding()->set_role(role);
    request.mutable_binding()->set_tenant("acme");
    v1::SetRoleBindingResponse bound;
    grpc::Status status = Call(
        by, [&](grpc::ClientContext* c) { return tenants->SetRoleBinding(c, request, &bound); });
    return std::make_pair(status, bound);
  };
  v1::CreateTokenRequest admin_request;
  admin_request.set_subject("acme-admin");
  admin_request.set_role(v1::ROLE_TENANT_ADMIN);
  admin_request.set_tenant("acme");
  v1::CreateTokenResponse acme_admin;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) {
    return tenants->CreateToken(c, admin_request, &acme_admin);
  }));

  // The tenant's admin makes "dev" a member, and a token for it at that role.
  ASSERT_OK(bind(acme_admin.token(), v1::ROLE_TENANT_USER).first);
  v1::CreateTokenRequest dev_request;
  dev_request.set_subject("dev");
  dev_request.set_role(v1::ROLE_TENANT_ADMIN);
  dev_request.set_tenant("acme");
  v1::CreateTokenResponse dev;
  // Not above the binding.
  EXPECT_EQ(Call(acme_admin.token(),
                 [&](grpc::ClientContext* c) { return tenants->CreateToken(c, dev_request, &dev); })
                .error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  dev_request.set_role(v1::ROLE_TENANT_USER);
  ASSERT_OK(Call(acme_admin.token(), [&](grpc::ClientContext* c) {
    return tenants->CreateToken(c, dev_request, &dev);
  }));
  v1::SubmitResponse submitted;
  ASSERT_OK(Submit(Spec("before"), &submitted, dev.token()));
  grpc::ClientContext watch_ctx;
  watch_ctx.AddMetadata("authorization", "Bearer " + dev.token());
  watch_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto watch = workloads_->Watch(&watch_ctx, v1::WatchRequest());

  // Lowered to viewer: the token's next call is a viewer's, not after the cache expires, and
  // its open Watch ends.
  const auto [status, lowered] = bind(acme_admin.token(), v1::ROLE_VIEWER);
  ASSERT_OK(status);
  EXPECT_THAT(lowered.lowered_token_ids(), ::testing::ElementsAre(dev.token_id()));
  EXPECT_EQ(Submit(Spec("after"), &submitted, dev.token()).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::WorkloadEvent e;
  while (watch->Read(&e)) {
  }
  EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  v1::ListWorkloadsResponse listed;
  ASSERT_OK(Call(dev.token(), [&](grpc::ClientContext* c) {
    return workloads_->List(c, v1::ListWorkloadsRequest(), &listed);
  }));

  // Removed: the token authenticates nothing more, at once.
  v1::DeleteRoleBindingRequest remove;
  remove.set_subject("dev");
  remove.set_tenant("acme");
  v1::DeleteRoleBindingResponse removed;
  ASSERT_OK(Call(acme_admin.token(), [&](grpc::ClientContext* c) {
    return tenants->DeleteRoleBinding(c, remove, &removed);
  }));
  EXPECT_THAT(removed.revoked_token_ids(), ::testing::ElementsAre(dev.token_id()));
  EXPECT_EQ(Call(dev.token(),
                 [&](grpc::ClientContext* c) {
                   return workloads_->List(c, v1::ListWorkloadsRequest(), &listed);
                 })
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(ServiceTest, HttpSideAndGrpcHealth) {
  httplib::Client http("127.0.0.1", server_->http_port());
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto ready = http.Get("/readyz");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << ready->body;
  v1::SubmitResponse r;
  ASSERT_OK(Submit(Spec("counted"), &r));
  // Refused for a missing spec, a spec that does not convert and one that breaks a rule: each
  // counted once.
  v1::SubmitRequest no_spec;
  EXPECT_EQ(Call(user_, [&](grpc::ClientContext* c) { return workloads_->Submit(c, no_spec, &r); })
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::WorkloadSpec unconvertible = Spec("bad");
  unconvertible.mutable_per_replica()->set_gpu_milli(0);
  EXPECT_EQ(Submit(unconvertible, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::WorkloadSpec too_wide = Spec("bad");
  too_wide.set_replicas(5000);
  EXPECT_EQ(Submit(too_wide, &r).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("gpufed_submissions_total{outcome=\"created\"} 1"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("gpufed_submissions_total{outcome=\"rejected\"} 3"),
            std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("gpufed_workloads{state=\"PENDING\"} 1"), std::string::npos);
  EXPECT_NE(metrics->body.find("gpufed_scheduler_cycle_seconds_bucket"), std::string::npos);

  // grpc.health.v1.Health/Check with an empty service name, via the generic stub: the reply
  // is HealthCheckResponse{status: SERVING} = field 1, varint 1.
  std::string bytes;
  ASSERT_OK(testing::RawUnaryCall(channel_, "", "/grpc.health.v1.Health/Check", "", &bytes));
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST_F(ServiceTest, ReflectionListsTheServices) {
  // grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo with list_services = ""
  // (field 7, length-delimited, empty), through the generic stub: what grpcurl and grpc_cli do.
  grpc::GenericStub generic(channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call = generic.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  auto step = [&](intptr_t tag) {
    void* got = nullptr;
    bool ok = false;
    EXPECT_TRUE(cq.Next(&got, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(got), tag);
    return ok;
  };
  call->StartCall(reinterpret_cast<void*>(1));
  ASSERT_TRUE(step(1));
  call->Write(testing::ToByteBuffer(std::string("\x3a\x00", 2)), reinterpret_cast<void*>(2));
  ASSERT_TRUE(step(2));
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  ASSERT_TRUE(step(3));
  call->WritesDone(reinterpret_cast<void*>(4));
  step(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  const std::string bytes = testing::FromByteBuffer(response);
  for (const char* service :
       {"gpufed.v1.WorkloadService", "gpufed.v1.ClusterService", "gpufed.v1.TenantService",
        "gpufed.v1.AgentService", "grpc.health.v1.Health"}) {
    EXPECT_NE(bytes.find(service), std::string::npos) << service << " not listed";
  }
  cq.Shutdown();
  void* ignored = nullptr;
  bool ok = false;
  while (cq.Next(&ignored, &ok)) {
  }
}

google::protobuf::Timestamp ToTimestamp(int64_t seconds) {
  google::protobuf::Timestamp t;
  t.set_seconds(seconds);
  return t;
}

// The server's meter pass every second: idle guarantees are sampled with it.
class ShowbackTest : public ServiceTest {
 protected:
  void Configure(server::ServerConfig& config) override { config.meter_interval_seconds = 1; }
};

// Guaranteed capacity left idle shows against the tenant that reserved it, and the cost
// allocation splits the cluster's capacity cost into the tenants' charges and idle
// (docs/chargeback.md#idle-guarantees, #cost-allocation).
TEST_F(ShowbackTest, IdleGuaranteesAndTheCostAllocationReachTheirReadersOnly) {
  v1::ApplyClustersRequest declare;
  v1::ClusterDeclaration* dgx = declare.add_declarations();
  dgx->set_cluster("dgx");
  v1::PriceEntry* price = dgx->add_prices();
  price->set_gpu_model("H100-80GB");
  price->set_capacity_type(v1::CAPACITY_TYPE_ON_DEMAND);
  price->set_price_per_hour_micros(3'600'000);
  price->mutable_effective_from()->set_seconds(1577836800);
  v1::ApplyClustersResponse applied;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) {
    return clusters_->ApplyClusters(c, declare, &applied);
  }));
  Placed placed = PlaceOnDgx("held");
  ASSERT_NE(placed.agent, nullptr);
  ASSERT_TRUE(placed.agent->Write(Status(placed.id, v1::WORKLOAD_STATE_RUNNING)));
  WaitFor(placed.id, v1::WORKLOAD_STATE_RUNNING);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(placed.agent->Write(Status(placed.id, v1::WORKLOAD_STATE_SUCCEEDED)));
  const v1::Workload done = WaitFor(placed.id, v1::WORKLOAD_STATE_SUCCEEDED);

  auto quotas = v1::QuotaService::NewStub(channel_);
  v1::SetQuotaRequest quota;
  quota.mutable_quota()->set_tenant("acme");
  quota.mutable_quota()->set_resource("H100-80GB");
  quota.mutable_quota()->set_guaranteed_milli(4000);
  quota.mutable_quota()->set_limit_milli(8000);
  v1::Quota set;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) { return quotas->SetQuota(c, quota, &set); }));

  auto reports = v1::ReportService::NewStub(channel_);
  const int64_t day = done.start_time().seconds() / 86400 * 86400;
  v1::GetUsageReportRequest req;
  req.mutable_start_time()->set_seconds(day - 86400);
  req.mutable_end_time()->set_seconds(day + int64_t{2} * 86400);
  req.add_group_by(v1::REPORT_DIMENSION_TENANT);
  v1::GetUsageReportResponse report;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    report.Clear();
    ASSERT_OK(Call(
        user_, [&](grpc::ClientContext* c) { return reports->GetUsageReport(c, req, &report); }));
  } while ((report.guarantees_size() == 0 || report.guarantees(0).idle_unit_microseconds() == 0) &&
           std::chrono::steady_clock::now() < deadline);
  ASSERT_EQ(report.guarantees_size(), 1);
  const v1::IdleGuaranteeLine& g = report.guarantees(0);
  EXPECT_EQ(g.tenant(), "acme");
  EXPECT_EQ(g.project(), "");
  EXPECT_EQ(g.resource(), "H100-80GB");
  EXPECT_GT(g.idle_unit_microseconds(), 0);
  EXPECT_LE(g.idle_unit_microseconds(), g.reserved_unit_microseconds());
  ASSERT_EQ(report.lines_size(), 1);
  const int64_t acme_cost = report.lines(0).cost_micros();
  EXPECT_GT(acme_cost, 0);

  // Another tenant sees neither acme's lines nor its guarantees.
  v1::GetUsageReportResponse theirs;
  ASSERT_OK(Call(other_,
                 [&](grpc::ClientContext* c) { return reports->GetUsageReport(c, req, &theirs); }));
  EXPECT_EQ(theirs.lines_size(), 0);
  EXPECT_EQ(theirs.guarantees_size(), 0);

  v1::GetCostAllocationRequest cost;
  *cost.mutable_start_time() = req.start_time();
  *cost.mutable_end_time() = req.end_time();
  v1::GetCostAllocationResponse separate;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* c) {
    return reports->GetCostAllocation(c, cost, &separate);
  }));
  EXPECT_EQ(separate.idle_policy(), v1::IDLE_POLICY_SEPARATE);  // the server's default
  ASSERT_EQ(separate.clusters_size(), 1);
  const v1::ClusterCostAllocation& c = separate.clusters(0);
  EXPECT_EQ(c.cluster(), "dgx");
  // Eight H100s for three days at 3,600,000 an hour.
  EXPECT_EQ(c.capacity_cost_micros(), int64_t{8} * 72 * 3'600'000);
  ASSERT_EQ(c.tenants_size(), 1);
  EXPECT_EQ(c.tenants(0).tenant(), "acme");
  EXPECT_EQ(c.tenants(0).charge_micros(), acme_cost);
  EXPECT_EQ(c.tenants(0).charge_micros() + c.idle_micros() + c.unallocated_micros(),
            c.capacity_cost_micros());

  cost.set_idle_policy(v1::IDLE_POLICY_SPREAD);
  v1::GetCostAllocationResponse spread;
  ASSERT_OK(Call(admin_, [&](grpc::ClientContext* ctx) {
    return reports->GetCostAllocation(ctx, cost, &spread);
  }));
  ASSERT_EQ(spread.clusters_size(), 1);
  EXPECT_EQ(spread.clusters(0).tenants(0).charge_micros(), c.capacity_cost_micros());
  EXPECT_EQ(spread.clusters(0).tenants(0).idle_share_micros(), c.idle_micros());
  EXPECT_EQ(spread.clusters(0).idle_micros(), 0);

  // Platform readers only; a bad policy or window is refused naming the field.
  auto code_of = [&](const std::string& token, const v1::GetCostAllocationRequest& r) {
    v1::GetCostAllocationResponse refused;
    return Call(token,
                [&](grpc::ClientContext* ctx) {
                  return reports->GetCostAllocation(ctx, r, &refused);
                })
        .error_code();
  };
  EXPECT_EQ(code_of(user_, cost), grpc::StatusCode::PERMISSION_DENIED);
  v1::GetCostAllocationRequest bad = cost;
  bad.set_idle_policy(static_cast<v1::IdlePolicy>(9));
  EXPECT_EQ(code_of(admin_, bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = cost;
  bad.mutable_end_time()->set_seconds(day + 3600);
  EXPECT_EQ(code_of(admin_, bad), grpc::StatusCode::INVALID_ARGUMENT);
  bad = cost;
  bad.set_cluster("nowhere");
  EXPECT_EQ(code_of(admin_, bad), grpc::StatusCode::NOT_FOUND);
}

// A run the agent confirmed is metered, and reported to who may see it (docs/chargeback.md).
TEST_F(ServiceTest, AgentTelemetryBecomesEffectiveGpuTimeInTheReport) {
  Placed placed = PlaceOnDgx("measured");
  ASSERT_NE(placed.agent, nullptr);
  FakeAgentStream& agent = *placed.agent;
  const std::string& id = placed.id;
  v1::ServerMessage m;
  const v1::WorkAssignment& work = placed.work;
  const std::string gpu = work.assignment().replicas(0).gpu_uuids(0);
  ASSERT_TRUE(agent.Write(Status(id, v1::WORKLOAD_STATE_RUNNING)));
  WaitFor(id, v1::WORKLOAD_STATE_RUNNING);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(agent.Write(Status(id, v1::WORKLOAD_STATE_SUCCEEDED)));
  const v1::Workload done = WaitFor(id, v1::WORKLOAD_STATE_SUCCEEDED);

  // As an agent sends it once the minute has ended: the minute the run started in, on one of its
  // two GPUs, SM activity 0.5; twice (a repeat counts once).
  const int64_t minute_s = done.start_time().seconds() / 60 * 60;
  v1::AgentMessage telemetry;
  v1::GpuMinute* g = telemetry.mutable_telemetry()->add_minutes();
  g->set_gpu_uuid(gpu);
  g->mutable_minute()->set_seconds(minute_s);
  g->set_covered_seconds(60);
  g->set_workload_id(id);
  g->set_attempt(work.attempt());
  g->set_sm_active(0.5);
  g->set_power_watts(400);
  *telemetry.mutable_telemetry()->add_minutes() = *g;
  ASSERT_TRUE(agent.Write(telemetry));
  // Messages are handled in order: the answer to a heartbeat sent after it means it was applied.
  v1::AgentMessage heartbeat;
  heartbeat.mutable_heartbeat();
  ASSERT_TRUE(agent.Write(heartbeat));
  ASSERT_TRUE(agent.ReadUntil(v1::ServerMessage::kLease, &m));
  auto micros = [](const google::protobuf::Timestamp& t) {
    return t.seconds() * 1'000'000 + t.nanos() / 1000;
  };
  // The run's part of the minute.
  const int64_t measured_us =
      std::min(micros(done.end_time()), (minute_s + 60) * 1'000'000) - micros(done.start_time());
  ASSERT_GT(measured_us, 0);

  auto reports = v1::ReportService::NewStub(channel_);
  const int64_t day = minute_s / 86400 * 86400;
  v1::GetUsageReportRequest req;
  req.mutable_start_time()->set_seconds(day - 86400);
  req.mutable_end_time()->set_seconds(day + int64_t{2} * 86400);
  req.add_group_by(v1::REPORT_DIMENSION_TENANT);
  v1::GetUsageReportResponse report;
  ASSERT_OK(Call(user_,
                 [&](grpc::ClientContext* c) { return reports->GetUsageReport(c, req, &report); }));
  ASSERT_EQ(report.lines_size(), 1);
  EXPECT_EQ(report.lines(0).measured_gpu_microseconds(), measured_us);
  EXPECT_EQ(report.lines(0).effective_gpu_microseconds(), (measured_us + 1) / 2);
  EXPECT_EQ(report.lines(0).coarse_gpu_microseconds(), 0);

  // The minute itself, to whoever may read the workload.
  v1::ListWorkloadTelemetryRequest list;
  list.set_workload_id(id);
  list.mutable_start_time()->set_seconds(minute_s - 3600);
  list.mutable_end_time()->set_seconds(minute_s + 60);
  v1::ListWorkloadTelemetryResponse listed;
  ASSERT_OK(Call(user_, [&](grpc::ClientContext* c) {
    return reports->ListWorkloadTelemetry(c, list, &listed);
  }));
  ASSERT_EQ(listed.minutes_size(), 1);
  EXPECT_EQ(listed.minutes(0).cluster(), "dgx");
  EXPECT_EQ(listed.minutes(0).minute().gpu_uuid(), gpu);
  EXPECT_EQ(listed.minutes(0).minute().sm_active(), 0.5);
  EXPECT_EQ(listed.minutes(0).minute().power_watts(), 400);
  EXPECT_FALSE(listed.minutes(0).minute().has_gpu_util());
  EXPECT_EQ(listed.minutes(0).activity_source(), "sm_active");
  EXPECT_EQ(listed.minutes(0).measured_gpu_microseconds(), measured_us);
  EXPECT_FALSE(listed.truncated());
  v1::ListWorkloadTelemetryResponse hidden;
  EXPECT_EQ(
      Call(other_,
           [&](grpc::ClientContext* c) { return reports->ListWorkloadTelemetry(c, list, &hidden); })
          .error_code(),
      grpc::StatusCode::NOT_FOUND);
  list.set_page_size(-1);
  EXPECT_EQ(
      Call(user_,
           [&](grpc::ClientContext* c) { return reports->ListWorkloadTelemetry(c, list, &hidden); })
          .error_code(),
      grpc::StatusCode::INVALID_ARGUMENT);

  // A reading that is not a number ends the agent's stream with INVALID_ARGUMENT naming it, and
  // changes nothing.
  v1::AgentMessage bad = telemetry;
  bad.mutable_telemetry()->mutable_minutes(0)->set_gpu_uuid(
      work.assignment().replicas(0).gpu_uuids(1));
  bad.mutable_telemetry()->mutable_minutes(1)->set_sm_active(std::nan(""));
  ASSERT_TRUE(agent.Write(bad));
  while (agent.Read(&m)) {
  }
  const grpc::Status ended = agent.Finish();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(ended.error_message(), ::testing::HasSubstr("telemetry.minutes[1].sm_active"));
  v1::GetUsageReportResponse again;
  ASSERT_OK(
      Call(user_, [&](grpc::ClientContext* c) { return reports->GetUsageReport(c, req, &again); }));
  EXPECT_EQ(again.SerializeAsString(), report.SerializeAsString());
}

TEST_F(ServiceTest, ARunIsMeteredAndReportedToItsTenantOnly) {
  Placed placed = PlaceOnDgx("metered");
  ASSERT_NE(placed.agent, nullptr);
  FakeAgentStream& agent = *placed.agent;
  const std::string& id = placed.id;
  v1::ServerMessage m;
  ASSERT_TRUE(agent.Write(Status(id, v1::WORKLOAD_STATE_RUNNING)));
  WaitFor(id, v1::WORKLOAD_STATE_RUNNING);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a span of some length
  ASSERT_TRUE(agent.Write(Status(id, v1::WORKLOAD_STATE_SUCCEEDED)));
  const v1::Workload done = WaitFor(id, v1::WORKLOAD_STATE_SUCCEEDED);
  const int64_t ran_us = (done.end_time().seconds() - done.start_time().seconds()) * 1'000'000 +
                         (done.end_time().nanos() - done.start_time().nanos()) / 1000;
  ASSERT_GT(ran_us, 0);

  auto reports = v1::ReportService::NewStub(channel_);
  const int64_t day = done.start_time().seconds() / 86400 * 86400;
  auto report = [&](const std::string& token, const std::string& tenant,
                    v1::GetUsageReportResponse* out) {
    v1::GetUsageReportRequest req;
    req.mutable_start_time()->set_seconds(day - 86400);
    req.mutable_end_time()->set_seconds(day + int64_t{2} * 86400);
    req.set_period(v1::REPORT_PERIOD_DAY);
    req.add_group_by(v1::REPORT_DIMENSION_TENANT);
    req.add_group_by(v1::REPORT_DIMENSION_GPU_MODEL);
    req.set_tenant(tenant);
    return Call(token,
                [&](grpc::ClientContext* c) { return reports->GetUsageReport(c, req, out); });
  };
  v1::GetUsageReportResponse all;
  ASSERT_OK(report(admin_, "", &all));
  int64_t gpu_us = 0;
  for (const v1::UsageReportLine& line : all.lines()) {
    ASSERT_EQ(line.keys_size(), 2);
    EXPECT_EQ(line.keys(0), "acme");
    EXPECT_EQ(line.keys(1), "H100-80GB");
    EXPECT_EQ(line.unpriced_gpu_microseconds(), line.gpu_microseconds());  // no price book
    gpu_us += line.gpu_microseconds();
  }
  EXPECT_EQ(gpu_us, 2 * ran_us);  // two whole GPUs, from the confirmed start to the end

  v1::GetUsageReportResponse acme;
  ASSERT_OK(report(user_, "", &acme));
  EXPECT_EQ(acme.SerializeAsString(), all.SerializeAsString());  // its own lines, byte for byte
  v1::GetUsageReportResponse globex;
  ASSERT_OK(report(other_, "", &globex));
  EXPECT_EQ(globex.lines_size(), 0);
  EXPECT_EQ(report(other_, "acme", &globex).error_code(), grpc::StatusCode::NOT_FOUND);

  // The same report as CSV over HTTP: what gpufedctl report -o csv prints, byte for byte.
  httplib::Client http("127.0.0.1", server_->http_port());
  const std::string from = absl::FormatTime(
      "%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(day - 86400), absl::UTCTimeZone());
  const std::string to = absl::FormatTime(
      "%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(day + int64_t{2} * 86400), absl::UTCTimeZone());
  const std::string path =
      absl::StrCat("/reports/usage.csv?from=", from, "&to=", to, "&period=day&by=tenant,gpu_model");
  auto csv = http.Get(path, {{"Authorization", "Bearer " + user_}});
  ASSERT_TRUE(csv);
  EXPECT_EQ(csv->status, 200);
  v1::GetUsageReportRequest same;
  *same.mutable_start_time() = ToTimestamp(day - 86400);
  *same.mutable_end_time() = ToTimestamp(day + int64_t{2} * 86400);
  same.set_period(v1::REPORT_PERIOD_DAY);
  same.add_group_by(v1::REPORT_DIMENSION_TENANT);
  same.add_group_by(v1::REPORT_DIMENSION_GPU_MODEL);
  EXPECT_EQ(csv->body, api::UsageReportCsv(same, acme));
  auto anonymous = http.Get(path);
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  auto other_tenant = http.Get(path + "&tenant=acme", {{"Authorization", "Bearer " + other_}});
  ASSERT_TRUE(other_tenant);
  EXPECT_EQ(other_tenant->status, 404);
  auto unknown = http.Get(path + "&user=alice", {{"Authorization", "Bearer " + user_}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 400);

  v1::GetUsageReportRequest bad;
  bad.mutable_start_time()->set_seconds(day + 3600);  // not a midnight
  bad.mutable_end_time()->set_seconds(day + 86400);
  v1::GetUsageReportResponse ignored;
  EXPECT_EQ(Call(admin_,
                 [&](grpc::ClientContext* c) { return reports->GetUsageReport(c, bad, &ignored); })
                .error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace gpufed
