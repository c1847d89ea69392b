#include "cli/output.h"

#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/support/status_matchers.h"

namespace gpufed::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const absl::Time kNow = absl::FromUnixSeconds(1'767'323'045);  // 2026-01-02T03:04:05Z

google::protobuf::Timestamp Ago(absl::Duration d) {
  google::protobuf::Timestamp t;
  t.set_seconds(absl::ToUnixSeconds(kNow - d));
  return t;
}

v1::Workload SampleWorkload() {
  v1::Workload w;
  w.set_id("42");
  w.mutable_spec()->set_name("train-llm");
  w.mutable_spec()->set_tenant("demo");
  w.mutable_spec()->set_project("research");
  w.mutable_spec()->set_replicas(2);
  w.mutable_spec()->mutable_per_replica()->set_gpus(8);
  w.set_state(v1::WORKLOAD_STATE_RUNNING);
  w.mutable_assignment()->set_cluster("onprem-dgx");
  *w.mutable_create_time() = Ago(absl::Minutes(5));
  return w;
}

TEST(TableTest, AlignsColumnsAndDoesNotPadTheLastOne) {
  Table table({"ID", "NAME", "REASON"});
  table.AddRow({"1", "a-long-name", "because"});
  table.AddRow({"1234", "b", ""});
  std::ostringstream out;
  table.Render(out);
  EXPECT_EQ(out.str(),
            "ID     NAME          REASON\n"
            "1      a-long-name   because\n"
            "1234   b\n");
}

TEST(TableTest, CountsUtf8CharactersNotBytes) {
  Table table({"NAME", "X"});
  table.AddRow({"Zürich", "1"});
  table.AddRow({"abcdef", "2"});
  std::ostringstream out;
  table.Render(out);
  EXPECT_EQ(out.str(),
            "NAME     X\n"
            "Zürich   1\n"
            "abcdef   2\n");
}

TEST(TableTest, ShortRowsArePaddedWithEmptyCells) {
  Table table({"A", "B", "C"});
  table.AddRow({"x"});
  std::ostringstream out;
  table.Render(out);
  EXPECT_EQ(out.str(), "A   B   C\nx\n");
}

TEST(SanitizeTest, EscapesControlCharacters) {
  EXPECT_EQ(SanitizeForTerminal("ok"), "ok");
  EXPECT_EQ(SanitizeForTerminal("a\nb\tc"), "a\\nb\\tc");
  EXPECT_EQ(SanitizeForTerminal("\x1b[2J"), "\\x1b[2J");
  EXPECT_EQ(SanitizeForTerminal("\xc2\x9b"
                                "31m"),
            "\\u009b31m");
  EXPECT_EQ(SanitizeForTerminal("Zürich"), "Zürich");
}

TEST(FormatAgeTest, IsCoarse) {
  EXPECT_EQ(FormatAge(absl::Seconds(-3)), "0s");
  EXPECT_EQ(FormatAge(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatAge(absl::Seconds(119)), "119s");
  EXPECT_EQ(FormatAge(absl::Minutes(5)), "5m");
  EXPECT_EQ(FormatAge(absl::Hours(5)), "5h");
  EXPECT_EQ(FormatAge(absl::Hours(24 * 3)), "3d");
}

TEST(FormatTimestampTest, Rfc3339UtcOrDash) {
  google::protobuf::Timestamp t;
  EXPECT_EQ(FormatTimestamp(t), "-");
  t.set_seconds(1'767'323'045);
  EXPECT_EQ(FormatTimestamp(t), "2026-01-02T03:04:05Z");
}

TEST(WorkloadTableTest, ShowsTheListColumns) {
  google::protobuf::RepeatedPtrField<v1::Workload> workloads;
  *workloads.Add() = SampleWorkload();
  v1::Workload& pending = *workloads.Add();
  pending.set_id("7");
  pending.mutable_spec()->set_name("infer");
  pending.mutable_spec()->set_tenant("demo");
  pending.mutable_spec()->set_project("default");
  pending.mutable_spec()->mutable_per_replica()->set_gpus(1);
  pending.set_state(v1::WORKLOAD_STATE_PENDING);
  pending.set_pending_reason("no cluster has a free L4");
  *pending.mutable_create_time() = Ago(absl::Seconds(30));

  std::ostringstream out;
  WriteWorkloadTable(workloads, kNow, out);
  EXPECT_EQ(out.str(),
            "ID   NAME        TENANT/PROJECT   STATE     GPUS   CLUSTER      AGE   REASON\n"
            "42   train-llm   demo/research    RUNNING   2x8    onprem-dgx   5m\n"
            "7    infer       demo/default     PENDING   1x1    -            30s   no cluster has "
            "a free L4\n");
}

TEST(WorkloadTableTest, MarksRequestedCancellation) {
  google::protobuf::RepeatedPtrField<v1::Workload> workloads;
  v1::Workload& w = *workloads.Add();
  w = SampleWorkload();
  w.set_cancel_requested(true);
  std::ostringstream out;
  WriteWorkloadTable(workloads, kNow, out);
  EXPECT_THAT(out.str(), HasSubstr("RUNNING (cancelling)"));
}

TEST(WorkloadDetailTest, ShowsSpecAndPlacement) {
  v1::Workload w = SampleWorkload();
  w.mutable_spec()->add_gpu_models("H100-80GB");
  w.mutable_spec()->set_topology(v1::TOPOLOGY_REQUIREMENT_SAME_NODE);
  w.mutable_spec()->mutable_estimated_duration()->set_seconds(int64_t{90} * 60);
  w.mutable_spec()->mutable_run()->add_command("python");
  w.mutable_spec()->mutable_run()->add_command("train.py");
  w.mutable_spec()->mutable_run()->add_command("--note=two words");
  v1::ReplicaAssignment& r = *w.mutable_assignment()->add_replicas();
  r.set_node("dgx-01");
  r.add_gpu_indices(0);
  r.add_gpu_indices(1);
  r.add_gpu_uuids("GPU-a");
  r.add_gpu_uuids("GPU-b");
  std::ostringstream out;
  WriteWorkloadDetail(w, kNow, out);
  EXPECT_EQ(out.str(),
            "ID:               42\n"
            "Name:             train-llm\n"
            "Tenant/Project:   demo/research\n"
            "State:            RUNNING\n"
            "Class:            unspecified\n"
            "Priority:         0\n"
            "Replicas x GPUs:  2x8\n"
            "GPU models:       H100-80GB\n"
            "Topology:         same_node\n"
            "Duration:         1h30m\n"
            "Command:          python train.py '--note=two words'\n"
            "Cluster:          onprem-dgx (epoch 0)\n"
            "Replica 0:        dgx-01 GPUs 0,1 (GPU-a,GPU-b)\n"
            "Created:          2026-01-02T02:59:05Z (5m ago)\n"
            "Version:          0\n");
}

TEST(WorkloadDetailTest, ShowsThePlacementRulesGiven) {
  v1::Workload w = SampleWorkload();
  w.clear_assignment();
  v1::PlacementConstraints& p = *w.mutable_spec()->mutable_placement();
  p.add_jurisdictions("eu");
  p.add_jurisdictions("de");
  p.add_compliance_labels("gdpr");
  p.add_denied_clusters("edge-l4");
  p.set_max_price_per_gpu_hour_micros(4'000'000);
  p.set_spot_tolerated(true);
  p.set_objective(v1::OBJECTIVE_LATENCY);
  p.set_client_region("eu-west");
  p.mutable_max_rtt()->set_nanos(30'000'000);
  std::ostringstream out;
  WriteWorkloadDetail(w, kNow, out);
  EXPECT_THAT(out.str(), HasSubstr("Jurisdictions:      eu, de\n"
                                   "Compliance labels:  gdpr\n"
                                   "Denied clusters:    edge-l4\n"
                                   "Max price:          4.00 per GPU-hour\n"
                                   "Spot:               tolerated\n"
                                   "Objective:          latency (clients in eu-west, max RTT "
                                   "30ms)\n"));
  EXPECT_THAT(out.str(), Not(HasSubstr("Providers")));

  // Rules left out are not shown; the objective the server applies is.
  v1::Workload plain = SampleWorkload();
  plain.mutable_spec()->mutable_placement()->add_regions("us-east-1");
  out.str("");
  WriteWorkloadDetail(plain, kNow, out);
  EXPECT_THAT(out.str(), HasSubstr("Regions:          us-east-1\n"));
  EXPECT_THAT(out.str(), HasSubstr("Spot:             not tolerated\n"));
  EXPECT_THAT(out.str(), HasSubstr("Objective:        pack\n"));
  EXPECT_THAT(out.str(), Not(HasSubstr("Max price")));

  out.str("");
  WriteWorkloadDetail(SampleWorkload(), kNow, out);
  EXPECT_THAT(out.str(), Not(HasSubstr("Objective")));
}

TEST(ApplyResultTest, OneRowPerChangeAndASummary) {
  v1::ApplyClustersResponse response;
  v1::DeclarationDiff* added = response.add_diffs();
  added->set_cluster("onprem-dgx-fra");
  added->set_kind(v1::DECLARATION_CHANGE_ADDED);
  added->add_changes("jurisdiction: \"\" -> de");
  added->add_changes("+ price H100-80GB committed from 2026-01-01T00:00:00Z: 0.000000");
  v1::DeclarationDiff* same = response.add_diffs();
  same->set_cluster("edge-l4");
  same->set_kind(v1::DECLARATION_CHANGE_UNCHANGED);
  response.set_dry_run(true);
  std::ostringstream out;
  WriteApplyResult(response, out);
  EXPECT_EQ(out.str(),
            "CLUSTER          RESULT      CHANGES\n"
            "onprem-dgx-fra   added       jurisdiction: \"\" -> de\n"
            "                             + price H100-80GB committed from "
            "2026-01-01T00:00:00Z: 0.000000\n"
            "edge-l4          unchanged   -\n"
            "2 cluster(s): 1 unchanged, 1 added (dry run: nothing was stored)\n");

  response.set_dry_run(false);
  response.mutable_diffs(0)->set_kind(v1::DECLARATION_CHANGE_CHANGED);
  out.str("");
  WriteApplyResult(response, out);
  EXPECT_THAT(out.str(), HasSubstr("\n2 cluster(s): 1 unchanged, 1 changed\n"));
}

TEST(DeclarationTablesTest, AttributesThenPriceBooks) {
  google::protobuf::RepeatedPtrField<v1::ClusterDeclaration> declarations;
  v1::ClusterDeclaration& dgx = *declarations.Add();
  dgx.set_cluster("onprem-dgx-fra");
  dgx.set_provider("onprem");
  dgx.set_jurisdiction("de");
  dgx.mutable_compliance_labels()->add_labels("gdpr");
  dgx.mutable_compliance_labels()->add_labels("sovereign");
  dgx.set_default_capacity(v1::CAPACITY_TYPE_COMMITTED);
  (*dgx.mutable_client_rtts())["us-east"].set_nanos(92'000'000);
  (*dgx.mutable_client_rtts())["eu-west"].set_nanos(14'000'000);
  v1::PriceEntry& price = *dgx.add_prices();
  price.set_gpu_model("H100-80GB");
  price.set_mig_profile("3g.40gb");
  price.set_capacity_type(v1::CAPACITY_TYPE_SPOT);
  price.set_price_per_hour_micros(1'640'000);
  price.mutable_effective_from()->set_seconds(1782864000);
  v1::ClusterDeclaration& edge = *declarations.Add();
  edge.set_cluster("edge-l4");
  edge.mutable_compliance_labels();  // declared: none
  edge.set_default_capacity(v1::CAPACITY_TYPE_ON_DEMAND);
  v1::ClusterDeclaration& bare = *declarations.Add();
  bare.set_cluster("bare");
  std::ostringstream out;
  WriteDeclarationTables(declarations, out);
  EXPECT_EQ(out.str(),
            "CLUSTER          PROVIDER   REGION   ZONE   JURISDICTION   LABELS           "
            "DEFAULT-CAPACITY   RTT\n"
            "onprem-dgx-fra   onprem     -        -      de             gdpr,sovereign   "
            "committed          eu-west=14ms,us-east=92ms\n"
            "edge-l4          -          -        -      -              (none)           "
            "on-demand          -\n"
            "bare             -          -        -      -              -                "
            "unspecified        -\n"
            "\n"
            "CLUSTER          MODEL       MIG       CAPACITY   PER-HOUR   EFFECTIVE-FROM\n"
            "onprem-dgx-fra   H100-80GB   3g.40gb   spot       1.64       2026-07-01T00:00:00Z\n");
}

TEST(WorkloadTableTest, ShowsMigProfilesAndShares) {
  google::protobuf::RepeatedPtrField<v1::Workload> workloads;
  v1::Workload& mig = *workloads.Add();
  mig = SampleWorkload();
  mig.mutable_spec()->mutable_per_replica()->set_mig_profile("3g.40gb");
  v1::Workload& share = *workloads.Add();
  share = SampleWorkload();
  share.mutable_spec()->set_replicas(4);
  share.mutable_spec()->mutable_per_replica()->set_gpu_milli(250);
  v1::Workload& tiny = *workloads.Add();
  tiny = SampleWorkload();
  tiny.mutable_spec()->mutable_per_replica()->set_gpu_milli(5);
  std::ostringstream out;
  WriteWorkloadTable(workloads, kNow, out);
  EXPECT_THAT(out.str(), HasSubstr("RUNNING   2x3g.40gb   onprem-dgx"));
  EXPECT_THAT(out.str(), HasSubstr("RUNNING   4x0.25      onprem-dgx"));
  EXPECT_THAT(out.str(), HasSubstr("RUNNING   2x0.005     onprem-dgx"));
}

TEST(WorkloadDetailTest, ShowsMigInstanceShareAndRepartitions) {
  v1::Workload w = SampleWorkload();
  v1::ReplicaResources& per_replica = *w.mutable_spec()->mutable_per_replica();
  per_replica.set_mig_profile("3g.40gb");
  per_replica.set_cpu_millis(4000);
  per_replica.set_memory_mib(16384);
  v1::ReplicaAssignment& r0 = *w.mutable_assignment()->add_replicas();
  r0.set_node("dgx-01");
  r0.add_gpu_indices(3);
  r0.add_gpu_uuids("GPU-c");
  r0.set_mig_profile("3g.40gb");
  r0.set_mig_start(4);
  v1::ReplicaAssignment& r1 = *w.mutable_assignment()->add_replicas();
  r1 = r0;
  r1.set_mig_profile("");
  r1.set_mig_start(0);
  r1.set_gpu_milli(250);
  v1::Repartition& on = *w.mutable_assignment()->add_repartitions();
  on.set_node("dgx-01");
  on.set_gpu_uuid("GPU-c");
  on.set_mig_enabled(true);
  for (int start : {0, 4}) {
    v1::MigInstance& m = *on.add_layout();
    m.set_profile("3g.40gb");
    m.set_start(start);
  }
  on.set_reason("3g.40gb for workload 42");
  v1::Repartition& off = *w.mutable_assignment()->add_repartitions();
  off.set_node("dgx-02");
  off.set_gpu_uuid("GPU-d");
  std::ostringstream out;
  WriteWorkloadDetail(w, kNow, out);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("Replicas x GPUs:  2x3g.40gb\n"));
  EXPECT_THAT(text, HasSubstr("MIG profile:      3g.40gb per replica\n"));
  EXPECT_THAT(text, HasSubstr("CPU:              4000m per replica\n"));
  EXPECT_THAT(text, HasSubstr("Memory:           16384 MiB per replica\n"));
  EXPECT_THAT(text, HasSubstr("Replica 0:        dgx-01 GPUs 3 (GPU-c) MIG 3g.40gb at slot 4\n"));
  EXPECT_THAT(text, HasSubstr("Replica 1:        dgx-01 GPUs 3 (GPU-c) share 0.25 (250m)\n"));
  EXPECT_THAT(text, HasSubstr("Repartition 0:    dgx-01 GPU-c MIG on: 3g.40gb@0,3g.40gb@4 "
                              "(3g.40gb for workload 42)\n"));
  EXPECT_THAT(text, HasSubstr("Repartition 1:    dgx-02 GPU-d MIG off\n"));

  per_replica.set_gpu_milli(500);
  std::ostringstream share;
  WriteWorkloadDetail(w, kNow, share);
  EXPECT_THAT(share.str(), HasSubstr("GPU share:        500 milli-GPU per replica\n"));
}

TEST(WorkloadDetailTest, ShowsTheRetryPolicyAndAttemptsBeyondTheFirst) {
  v1::Workload w = SampleWorkload();
  w.mutable_spec()->mutable_retry()->set_max_attempts(3);
  w.mutable_spec()->mutable_retry()->add_on(v1::RETRY_ON_CLUSTER_LOST);
  w.set_attempts(1);
  std::ostringstream first;
  WriteWorkloadDetail(w, kNow, first);
  EXPECT_THAT(first.str(), HasSubstr("Retry:            up to 3 attempts, on cluster_lost\n"));
  EXPECT_THAT(first.str(), Not(HasSubstr("Attempts:")));
  w.set_attempts(2);
  std::ostringstream second;
  WriteWorkloadDetail(w, kNow, second);
  EXPECT_THAT(second.str(), HasSubstr("Attempts:         2\n"));
}

TEST(WatchEventTest, OneLinePerEvent) {
  v1::WorkloadEvent event;
  *event.mutable_workload() = SampleWorkload();
  event.set_from_state(v1::WORKLOAD_STATE_PLACED);
  event.set_to_state(v1::WORKLOAD_STATE_RUNNING);
  event.mutable_time()->set_seconds(1'767'323'045);
  std::ostringstream out;
  WriteWatchEvent(event, out);
  EXPECT_EQ(out.str(),
            "2026-01-02T03:04:05Z  42  train-llm  PLACED -> RUNNING  cluster=onprem-dgx\n");
}

TEST(WatchEventTest, ACatchUpShowsTheStateNotAChange) {
  v1::WorkloadEvent event;
  *event.mutable_workload() = SampleWorkload();
  // A resumed Watch's catch-up: the workload as it is now (from_state = to_state).
  event.set_resync(true);
  event.set_from_state(v1::WORKLOAD_STATE_RUNNING);
  event.set_to_state(v1::WORKLOAD_STATE_RUNNING);
  event.mutable_time()->set_seconds(1'767'323'045);
  std::ostringstream out;
  WriteWatchEvent(event, out);
  EXPECT_EQ(out.str(), "2026-01-02T03:04:05Z  42  train-llm  RUNNING  cluster=onprem-dgx\n");
}

TEST(WatchEventTest, MessagesCannotBreakTheLine) {
  v1::WorkloadEvent event;
  *event.mutable_workload() = SampleWorkload();
  event.mutable_workload()->set_state(v1::WORKLOAD_STATE_FAILED);
  event.mutable_workload()->set_exit_code(3);
  event.mutable_workload()->set_message("boom\n\x1b[2Jgone");
  event.set_to_state(v1::WORKLOAD_STATE_FAILED);
  std::ostringstream out;
  WriteWatchEvent(event, out);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("FAILED  cluster=onprem-dgx  exit_code=3  boom\\n\\x1b[2Jgone\n"));
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

v1::Cluster SampleCluster() {
  v1::Cluster c;
  c.set_name("onprem-dgx");
  c.mutable_info()->set_provider("onprem");
  c.mutable_info()->set_region("us-east");
  c.set_state(v1::CLUSTER_STATE_READY);
  c.set_gpus_total(16);
  c.set_gpus_free(9);
  v1::ModelCapacity& m = *c.add_capacity();
  m.set_model("H100-80GB");
  m.set_total(16);
  m.set_free(9);
  for (int n = 1; n <= 2; ++n) {
    v1::Node& node = *c.add_nodes();
    node.set_name("dgx-0" + std::to_string(n));
    node.set_rack("r1");
    node.set_schedulable(n == 1);
    v1::Gpu& gpu = *node.add_gpus();
    gpu.set_index(0);
    gpu.set_model("H100-80GB");
    gpu.set_memory_mib(81559);
    gpu.set_nvlink_domain(node.name() + "-nvl");
    gpu.set_healthy(true);
    if (n == 1) gpu.set_allocated_to("42");
  }
  return c;
}

TEST(ClusterTableTest, ShowsCapacityPerModel) {
  google::protobuf::RepeatedPtrField<v1::Cluster> clusters;
  *clusters.Add() = SampleCluster();
  std::ostringstream out;
  WriteClusterTable(clusters, out);
  EXPECT_EQ(out.str(),
            "NAME         PROVIDER   REGION    STATE   NODES   GPUS   FREE   MODELS\n"
            "onprem-dgx   onprem     us-east   ready   2       16     9      H100-80GB:9/16\n");
}

// One candidate with one offer of `key` (RTT 12 ms, priced 2.50), and one without offers.
google::protobuf::RepeatedPtrField<v1::ClusterCandidate> OneOffer(double key) {
  google::protobuf::RepeatedPtrField<v1::ClusterCandidate> candidates;
  v1::ClusterCandidate& c = *candidates.Add();
  c.set_cluster("edge");
  c.set_allowed(true);
  v1::OfferCheck& o = *c.add_offers();
  o.set_gpu_model("L4");
  o.set_capacity_type(v1::CAPACITY_TYPE_ON_DEMAND);
  o.set_price_per_hour_micros(2'500'000);
  o.mutable_rtt()->set_nanos(12'000'000);
  o.set_key(key);
  candidates.Add()->set_cluster("empty");
  return candidates;
}

TEST(CandidateTableTest, TheKeyReadsInTheObjectivesUnits) {
  const auto key_cell = [](v1::Objective objective, double key) {
    std::ostringstream out;
    WriteCandidateTable(objective, OneOffer(key), out);
    std::vector<std::string> rows = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
    std::vector<std::string> cells = absl::StrSplit(rows.at(1), ' ', absl::SkipEmpty());
    return cells.at(8);  // CLUSTER ALLOWED CHOSEN RULES MODEL CAPACITY PRICE/H RTT KEY
  };
  EXPECT_EQ(key_cell(v1::OBJECTIVE_COST, 2'500'000), "2.50");
  EXPECT_EQ(key_cell(v1::OBJECTIVE_LATENCY, 12'000), "12ms");
  EXPECT_EQ(key_cell(v1::OBJECTIVE_BALANCED, 2.74), "2.740");
  EXPECT_EQ(key_cell(v1::OBJECTIVE_PACK, 0), "-");
  EXPECT_EQ(key_cell(v1::OBJECTIVE_UNSPECIFIED, 0), "-");
  EXPECT_EQ(key_cell(v1::OBJECTIVE_LATENCY, std::numeric_limits<double>::infinity()), "last");
}

TEST(CandidateTableTest, AClusterWithoutOffersGetsOneRowOfDashes) {
  std::ostringstream out;
  WriteCandidateTable(v1::OBJECTIVE_LATENCY, OneOffer(12'000), out);
  EXPECT_EQ(out.str(),
            "CLUSTER   ALLOWED   CHOSEN   RULES   MODEL   CAPACITY    PRICE/H   RTT    KEY    "
            "REFUSED   FITS-NOW\n"
            "edge      yes       -        -       L4      on-demand   2.50      12ms   12ms   -   "
            "      no\n"
            "empty     no        -        -       -       -           -         -      -      -   "
            "      -\n");
}

TEST(GpuTableTest, ShowsWhatHoldsEachGpu) {
  google::protobuf::RepeatedPtrField<v1::Cluster> clusters;
  *clusters.Add() = SampleCluster();
  std::ostringstream out;
  WriteGpuTable(clusters, out);
  EXPECT_EQ(
      out.str(),
      "CLUSTER      NODE     RACK   GPU   MODEL       MEMORY     NVLINK       MIG   STATUS    "
      "ALLOCATED_TO\n"
      "onprem-dgx   dgx-01   r1     0     H100-80GB   81559MiB   dgx-01-nvl   -     ok        "
      "42\n"
      "onprem-dgx   dgx-02   r1     0     H100-80GB   81559MiB   dgx-02-nvl   -     drained   "
      "-\n");
}

TEST(GpuTableTest, ShowsMigModeAndLayout) {
  google::protobuf::RepeatedPtrField<v1::Cluster> clusters;
  v1::Cluster& c = *clusters.Add();
  c = SampleCluster();
  v1::Gpu& on = *c.mutable_nodes(0)->mutable_gpus(0);
  on.set_mig_capable(true);
  on.set_mig_enabled(true);
  on.set_allocated_to("42,43");
  for (const auto& [profile, start] : {std::pair{"3g.40gb", 0}, std::pair{"2g.20gb", 4}}) {
    v1::MigInstance& m = *on.add_mig_layout();
    m.set_profile(profile);
    m.set_start(start);
  }
  c.mutable_nodes(1)->mutable_gpus(0)->set_mig_capable(true);
  v1::Gpu& empty = *c.mutable_nodes(1)->add_gpus();
  empty = c.nodes(1).gpus(0);
  empty.set_index(1);
  empty.set_mig_enabled(true);
  std::ostringstream out;
  WriteGpuTable(clusters, out);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("dgx-01-nvl   3g.40gb@0,2g.20gb@4   ok        42,43\n"));
  EXPECT_THAT(text, HasSubstr("dgx-02-nvl   off                   drained   -\n"));
  EXPECT_THAT(text, HasSubstr("dgx-02-nvl   on                    drained   -\n"));
}

TEST(JsonTest, OneLineWithProtoFieldNamesAndZeroFields) {
  v1::SubmitResponse response;
  *response.mutable_workload() = SampleWorkload();
  response.set_created(false);
  std::ostringstream out;
  ASSERT_OK(WriteJson(response, out));
  const std::string text = out.str();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  const nlohmann::json json = nlohmann::json::parse(text);
  EXPECT_EQ(json["created"], false);  // Present although it is the zero value.
  EXPECT_EQ(json["workload"]["id"], "42");
  EXPECT_EQ(json["workload"]["state"], "WORKLOAD_STATE_RUNNING");
  EXPECT_EQ(json["workload"]["spec"]["per_replica"]["gpus"], 8);
  EXPECT_EQ(json["workload"]["create_time"], "2026-01-02T02:59:05Z");
  EXPECT_TRUE(json["workload"].contains("pending_reason"));
  EXPECT_TRUE(json["workload"].contains("pending_reason_code"));
}

// -o json carries the reason both ways: the code for machines and the words for people.
TEST(JsonTest, PendingReasonCarriesCodeAndWords) {
  v1::Workload w = SampleWorkload();
  w.set_state(v1::WORKLOAD_STATE_PENDING);
  w.set_pending_reason("waiting for capacity: needs 8 GPUs; nothing that matches is free");
  w.set_pending_reason_code("NothingFree");
  std::ostringstream out;
  ASSERT_OK(WriteJson(w, out));
  const nlohmann::json json = nlohmann::json::parse(out.str());
  EXPECT_EQ(json["pending_reason_code"], "NothingFree");
  EXPECT_EQ(json["pending_reason"], w.pending_reason());
}

}  // namespace
}  // namespace gpufed::cli
