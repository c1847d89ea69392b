// PgStore as a ClusterStore, against a real PostgreSQL.

#include <chrono>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/store_test_util.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;

using ::testing::HasSubstr;

class ClusterStoreTest : public StoreTest {
 protected:
  static ClusterInfo Info(const std::string& name) {
    ClusterInfo info;
    info.name = name;
    info.provider = "onprem";
    info.region = "us-east";
    info.zone = "dc1";
    info.jurisdiction = "us";
    info.compliance_labels = {"hipaa", "sovereign"};
    return info;
  }

  static NodeInfo Node(const std::string& cluster, const std::string& name, int gpus) {
    NodeInfo node;
    node.name = name;
    node.rack = "r1";
    node.block = "b1";
    node.cpu_millis = 224000;
    node.memory_mib = 2097152;
    node.labels = {{"pool", "training"}};
    for (int i = 0; i < gpus; ++i) {
      GpuInfo gpu;
      gpu.uuid = absl::StrCat("GPU-", cluster, "-", name, "-", i);
      gpu.index = i;
      gpu.model = "H100-80GB";
      gpu.memory_mib = 81559;
      gpu.nvlink_domain = name + "-nvl";
      gpu.numa_node = i / 4;
      gpu.pcie_switch = "sw" + std::to_string(i / 2);
      gpu.mig_capable = true;
      node.gpus.push_back(gpu);
    }
    return node;
  }
};

TEST_F(ClusterStoreTest, RegisterCreatesReadyClusterAtEpochOneWithItsInventory) {
  std::vector<NodeInfo> nodes = {Node("dgx", "dgx-02", 8), Node("dgx", "dgx-01", 8)};
  nodes[1].gpus[3].healthy = false;
  nodes[0].schedulable = false;
  auto registered = store_->RegisterCluster(Info("dgx"), nodes);
  ASSERT_OK(registered);
  EXPECT_EQ(registered->info, Info("dgx"));
  EXPECT_EQ(registered->state, ClusterState::kReady);
  EXPECT_EQ(registered->epoch, 1u);
  EXPECT_TRUE(registered->last_heartbeat.has_value());
  // Stored order: nodes by name, GPUs by index.
  ASSERT_EQ(registered->nodes.size(), 2u);
  EXPECT_EQ(registered->nodes[0], nodes[1]);
  EXPECT_EQ(registered->nodes[1], nodes[0]);

  auto got = store_->GetCluster("dgx");
  ASSERT_OK(got);
  EXPECT_EQ(got->nodes, registered->nodes);
  EXPECT_EQ(got->info, Info("dgx"));
  EXPECT_THAT(store_->GetCluster("nope"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(Scalar("SELECT count(*) FROM gpus WHERE cluster = 'dgx'"), 16);
}

TEST_F(ClusterStoreTest, MigModeAndLayoutAreStored) {
  std::vector<NodeInfo> nodes = {Node("dgx", "dgx-01", 4)};
  nodes[0].gpus[0].mig_enabled = true;
  nodes[0].gpus[0].mig_layout = {{"3g.40gb", 4}, {"1g.10gb", 0}, {"2g.20gb", 2}};
  nodes[0].gpus[1].mig_enabled = true;  // MIG on, no instances yet
  auto registered = store_->RegisterCluster(Info("dgx"), nodes);
  ASSERT_OK(registered);
  ASSERT_EQ(registered->nodes.size(), 1u);
  EXPECT_EQ(registered->nodes[0], nodes[0]);  // layout order as reported
  auto got = store_->GetCluster("dgx");
  ASSERT_OK(got);
  EXPECT_EQ(got->nodes, registered->nodes);
  EXPECT_EQ(Scalar("SELECT count(*) FROM gpus WHERE mig_enabled"), 2);
  EXPECT_EQ(Scalar("SELECT jsonb_array_length(mig_layout) FROM gpus WHERE index = 0"), 3);
  EXPECT_EQ(Scalar("SELECT count(*) FROM gpus WHERE mig_layout = '[]'"), 3);

  // Registering again replaces the layouts (MIG turned off on GPU 0).
  nodes[0].gpus[0].mig_enabled = false;
  nodes[0].gpus[0].mig_layout.clear();
  auto again = store_->RegisterCluster(Info("dgx"), nodes);
  ASSERT_OK(again);
  EXPECT_EQ(again->nodes[0], nodes[0]);
  EXPECT_EQ(Scalar("SELECT count(*) FROM gpus WHERE mig_enabled"), 1);
}

TEST_F(ClusterStoreTest, RegisterAgainReplacesInventoryAndKeepsEpoch) {
  ASSERT_OK(store_->RegisterCluster(Info("dgx"), {Node("dgx", "a", 8), Node("dgx", "b", 8)}));
  ASSERT_OK(store_->SetClusterState("dgx", ClusterState::kUnreachable));
  ASSERT_EQ(store_->GetCluster("dgx")->epoch, 2u);

  ClusterInfo moved = Info("dgx");
  moved.zone = "dc2";
  moved.compliance_labels = {};
  NodeInfo b = Node("dgx", "b", 4);
  b.rack = "r9";
  auto again = store_->RegisterCluster(moved, {b, Node("dgx", "c", 2)});
  ASSERT_OK(again);
  EXPECT_EQ(again->state, ClusterState::kReady);
  EXPECT_EQ(again->epoch, 2u);
  EXPECT_EQ(again->info, moved);
  ASSERT_EQ(again->nodes.size(), 2u);
  EXPECT_EQ(again->nodes[0], b);
  EXPECT_EQ(again->nodes[1].name, "c");
  EXPECT_EQ(Scalar("SELECT count(*) FROM nodes WHERE cluster = 'dgx'"), 2);
  EXPECT_EQ(Scalar("SELECT count(*) FROM gpus WHERE cluster = 'dgx'"), 6);
  EXPECT_EQ(Scalar("SELECT count(*) FROM gpus WHERE node = 'a'"), 0);
}

TEST_F(ClusterStoreTest, BadInventoryIsRefusedAndLeavesTheOldOne) {
  ASSERT_OK(store_->RegisterCluster(Info("edge"), {Node("edge", "n1", 2)}));

  auto bad_name = store_->RegisterCluster(Info("Edge_1"), {});
  EXPECT_THAT(bad_name, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(bad_name.status().message()), HasSubstr("register.cluster"));

  auto dup_node =
      store_->RegisterCluster(Info("edge"), {Node("edge", "x", 1), Node("edge", "x", 1)});
  EXPECT_THAT(dup_node, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(dup_node.status().message()), HasSubstr("nodes[1].name"));

  NodeInfo twin = Node("edge", "y", 1);
  twin.name = "z";
  auto dup_uuid = store_->RegisterCluster(Info("edge"), {Node("edge", "y", 1), twin});
  EXPECT_THAT(dup_uuid, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(dup_uuid.status().message()), HasSubstr("nodes[1].gpus[0].uuid"));

  NodeInfo dup_index = Node("edge", "w", 2);
  dup_index.gpus[1].index = 0;
  auto r = store_->RegisterCluster(Info("edge"), {dup_index});
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nodes[0].gpus[1].index"));

  auto cluster = store_->GetCluster("edge");
  ASSERT_OK(cluster);
  ASSERT_EQ(cluster->nodes.size(), 1u);
  EXPECT_EQ(cluster->nodes[0], Node("edge", "n1", 2));
  EXPECT_EQ(Scalar("SELECT count(*) FROM clusters"), 1);
}

TEST_F(ClusterStoreTest, UnreachableBumpsTheEpochOnce) {
  ASSERT_OK(store_->RegisterCluster(Info("c1"), {}));
  ASSERT_OK(store_->SetClusterState("c1", ClusterState::kDegraded));
  EXPECT_EQ(store_->GetCluster("c1")->epoch, 1u);
  EXPECT_EQ(store_->GetCluster("c1")->state, ClusterState::kDegraded);
  ASSERT_OK(store_->SetClusterState("c1", ClusterState::kUnreachable));
  ASSERT_OK(store_->SetClusterState("c1", ClusterState::kUnreachable));
  EXPECT_EQ(store_->GetCluster("c1")->epoch, 2u);
  ASSERT_OK(store_->SetClusterState("c1", ClusterState::kDraining));
  ASSERT_OK(store_->SetClusterState("c1", ClusterState::kUnreachable));
  EXPECT_EQ(store_->GetCluster("c1")->epoch, 3u);
  EXPECT_THAT(store_->SetClusterState("c9", ClusterState::kReady),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(store_->SetClusterState("c1", ClusterState::kUnspecified),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ClusterStoreTest, HeartbeatsMoveForwardOnly) {
  ASSERT_OK(store_->RegisterCluster(Info("c1"), {}));
  const Timestamp later = std::chrono::system_clock::now() + std::chrono::hours(1);
  ASSERT_OK(store_->RecordHeartbeat("c1", later));
  const auto stored = store_->GetCluster("c1")->last_heartbeat;
  ASSERT_TRUE(stored.has_value());
  EXPECT_LT(std::chrono::abs(*stored - later), std::chrono::milliseconds(1));
  ASSERT_OK(store_->RecordHeartbeat("c1", later - std::chrono::minutes(5)));
  EXPECT_EQ(store_->GetCluster("c1")->last_heartbeat, stored);
  EXPECT_THAT(store_->RecordHeartbeat("c9", later), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ClusterStoreTest, ListClustersWithAndWithoutNodes) {
  ASSERT_OK(store_->RegisterCluster(Info("b-site"), {Node("b-site", "n1", 1)}));
  ASSERT_OK(
      store_->RegisterCluster(Info("a-site"), {Node("a-site", "n1", 2), Node("a-site", "n2", 0)}));
  auto bare = store_->ListClusters(false);
  ASSERT_OK(bare);
  ASSERT_EQ(bare->size(), 2u);
  EXPECT_EQ((*bare)[0].info.name, "a-site");
  EXPECT_TRUE((*bare)[0].nodes.empty());

  auto full = store_->ListClusters(true);
  ASSERT_OK(full);
  ASSERT_EQ(full->size(), 2u);
  ASSERT_EQ((*full)[0].nodes.size(), 2u);
  EXPECT_EQ((*full)[0].nodes[0], Node("a-site", "n1", 2));
  EXPECT_TRUE((*full)[0].nodes[1].gpus.empty());
  ASSERT_EQ((*full)[1].nodes.size(), 1u);
  EXPECT_EQ((*full)[1].nodes[0], Node("b-site", "n1", 1));
}

// ---- Declarations (migrations/0017) ----------------------------------------------------------

ClusterDeclaration Declared(const std::string& cluster) {
  ClusterDeclaration d;
  d.cluster = cluster;
  d.region = "eu-west-1";
  d.jurisdiction = "eu";
  d.compliance_labels = std::vector<std::string>{"gdpr"};
  d.prices = {{"H100-80GB", "", CapacityType::kSpot, 2'100'000,
               Timestamp(std::chrono::microseconds(1'717'200'000'123'456))}};
  d.rtt_micros = {{"eu-west", 1'200}};
  return d;
}

// One jsonb document per cluster, readable with psql: names for enums, integers for figures.
TEST_F(ClusterStoreTest, ADeclarationIsOneReadableJsonbRow) {
  ASSERT_OK(store_->PutDeclarations({Declared("dgx")}));
  EXPECT_EQ(Scalar("SELECT count(*) FROM cluster_declarations"), 1);
  EXPECT_EQ(Scalar("SELECT (declaration->'prices'->0->>'micros_per_hour')::bigint "
                   "FROM cluster_declarations WHERE cluster = 'dgx'"),
            2'100'000);
  EXPECT_EQ(Scalar("SELECT (declaration->'prices'->0->>'effective_from_us')::bigint "
                   "FROM cluster_declarations WHERE cluster = 'dgx'"),
            1'717'200'000'123'456);
  EXPECT_EQ(Scalar("SELECT count(*) FROM cluster_declarations WHERE cluster = 'dgx' AND "
                   "declaration->'prices'->0->>'capacity' = 'spot' AND "
                   "declaration->>'default_capacity' = 'on-demand' AND "
                   "(declaration->'rtt_micros'->>'eu-west')::bigint = 1200"),
            1);
  // Declared without its cluster: no clusters row (and no foreign key asks for one).
  EXPECT_EQ(Scalar("SELECT count(*) FROM clusters"), 0);
}

// Registration reads the declaration but never writes it.
TEST_F(ClusterStoreTest, RegisteringNeverWritesTheDeclarationsTable) {
  ASSERT_OK(store_->PutDeclarations({Declared("dgx")}));
  const int64_t written =
      Scalar("SELECT epoch_us(updated_at) FROM cluster_declarations WHERE cluster = 'dgx'");
  const int64_t xmin =
      Scalar("SELECT xmin::text::bigint FROM cluster_declarations WHERE cluster = 'dgx'");
  ASSERT_OK(store_->RegisterCluster(Info("dgx"), {Node("dgx", "n1", 2)}));
  ASSERT_OK(store_->RegisterCluster(Info("dgx"), {}));
  ASSERT_OK(store_->RegisterCluster(Info("other"), {}));
  EXPECT_EQ(Scalar("SELECT epoch_us(updated_at) FROM cluster_declarations WHERE cluster = 'dgx'"),
            written);
  EXPECT_EQ(Scalar("SELECT xmin::text::bigint FROM cluster_declarations WHERE cluster = 'dgx'"),
            xmin);
  EXPECT_EQ(Scalar("SELECT count(*) FROM cluster_declarations"), 1);
}

// The table holds what the store would write even against direct SQL.
TEST_F(ClusterStoreTest, TheDeclarationsTableChecksNamesAndShape) {
  EXPECT_THROW(
      Exec("INSERT INTO cluster_declarations (cluster, declaration) VALUES ('Bad_Name', '{}')"),
      pqxx::check_violation);
  EXPECT_THROW(Exec("INSERT INTO cluster_declarations (cluster, declaration) VALUES ('ok', '[]')"),
               pqxx::check_violation);
  EXPECT_EQ(Scalar("SELECT count(*) FROM cluster_declarations"), 0);
}

// A row this build cannot read (written by a newer one, or by hand) fails the read loudly, naming
// the cluster, rather than reading as "no declaration".
TEST_F(ClusterStoreTest, AnUnreadableDeclarationIsInternal) {
  ASSERT_OK(store_->RegisterCluster(Info("dgx"), {}));
  Exec(
      "INSERT INTO cluster_declarations (cluster, declaration) "
      "VALUES ('dgx', '{\"default_capacity\": \"reserved\"}')");
  EXPECT_THAT(store_->GetCluster("dgx"), StatusIs(absl::StatusCode::kInternal, HasSubstr("dgx")));
  EXPECT_THAT(store_->ListClusters(false), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(store_->ListDeclarations(), StatusIs(absl::StatusCode::kInternal));
}

}  // namespace
}  // namespace gpufed::storage
