// The JSON stored in jsonb columns: round trips, determinism and tolerance.

#include "storage/json_codec.h"

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/replicas.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;
using std::chrono::microseconds;
using ::testing::HasSubstr;
using ::testing::Not;

WorkloadSpec FullSpec() {
  WorkloadSpec spec;
  spec.tenant = "acme";
  spec.project = "research";
  spec.name = "train-llm";
  spec.idempotency_key = "k-1";
  spec.workload_class = WorkloadClass::kInference;
  spec.priority = -3;
  spec.replicas = 2;
  spec.gpus_per_replica = 8;
  spec.gpu_models = {"H100-80GB", "A100-80GB"};
  spec.min_gpu_memory_mib = 81559;
  spec.topology = Topology::kSameNvlinkDomain;
  spec.estimated_duration_ms = 20000;
  spec.run.image = "registry/llm:1";
  spec.run.command = {"python", "train.py", "--quote=\"x\""};
  spec.run.env = {{"EPOCHS", "3"}, {"UNICODE", "żółw"}};
  spec.run.sim_outcome = SimOutcome::kFail;
  spec.run.sim_exit_code = 42;
  return spec;
}

TEST(JsonCodecTest, SpecRoundTrips) {
  const WorkloadSpec spec = FullSpec();
  auto back = WorkloadSpecFromJson(WorkloadSpecToJson(spec));
  ASSERT_OK(back);
  EXPECT_EQ(*back, spec);
  auto empty = WorkloadSpecFromJson(WorkloadSpecToJson(WorkloadSpec{}));
  ASSERT_OK(empty);
  EXPECT_EQ(*empty, WorkloadSpec{});
}

TEST(JsonCodecTest, EqualSpecsEncodeEqually) {
  EXPECT_EQ(WorkloadSpecToJson(FullSpec()), WorkloadSpecToJson(FullSpec()));
  WorkloadSpec other = FullSpec();
  other.run.env["EPOCHS"] = "4";
  EXPECT_NE(WorkloadSpecToJson(FullSpec()), WorkloadSpecToJson(other));
}

TEST(JsonCodecTest, MissingKeysTakeDefaults) {
  auto spec = WorkloadSpecFromJson(R"({"tenant":"a","project":"p","name":"n"})");
  ASSERT_OK(spec);
  EXPECT_EQ(spec->replicas, 1u);
  EXPECT_EQ(spec->gpus_per_replica, 1u);
  EXPECT_EQ(spec->topology, Topology::kNone);
  EXPECT_EQ(spec->workload_class, WorkloadClass::kUnspecified);
}

TEST(JsonCodecTest, BadJsonIsInvalidArgument) {
  EXPECT_THAT(WorkloadSpecFromJson("{not json"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(WorkloadSpecFromJson("[1,2]"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(WorkloadSpecFromJson(R"({"topology":"ring"})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(WorkloadSpecFromJson(R"({"replicas":"two"})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(AssignmentFromJson("7"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(LabelsFromJson(R"({"a":1})"), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(JsonCodecTest, AssignmentAndLabelsRoundTrip) {
  Assignment a;
  a.cluster = "dgx";
  a.epoch = 9;
  a.replicas = {testing::ReplicaOn("n1", {"GPU-1", "GPU-2"}, {0, 1}),
                testing::ReplicaOn("n2", {}, {})};
  auto back = AssignmentFromJson(AssignmentToJson(a));
  ASSERT_OK(back);
  EXPECT_EQ(*back, a);

  std::map<std::string, std::string> labels = {{"pool", "training"}, {"tier", "gold"}};
  auto labels_back = LabelsFromJson(LabelsToJson(labels));
  ASSERT_OK(labels_back);
  EXPECT_EQ(*labels_back, labels);
}

TEST(JsonCodecTest, SharingFieldsRoundTrip) {
  WorkloadSpec mig = FullSpec();
  mig.gpus_per_replica = 1;
  mig.mig_profile = "3g.40gb";
  mig.cpu_millis = 8000;
  mig.memory_mib = 65536;
  auto back = WorkloadSpecFromJson(WorkloadSpecToJson(mig));
  ASSERT_OK(back);
  EXPECT_EQ(*back, mig);

  WorkloadSpec share = FullSpec();
  share.gpus_per_replica = 1;
  share.gpu_milli = 250;
  back = WorkloadSpecFromJson(WorkloadSpecToJson(share));
  ASSERT_OK(back);
  EXPECT_EQ(*back, share);
  EXPECT_NE(WorkloadSpecToJson(share), WorkloadSpecToJson(mig));

  Assignment a;
  a.cluster = "dgx";
  a.epoch = 3;
  ReplicaAssignment on_mig = testing::ReplicaOn("n1", {"GPU-1"}, {1});
  on_mig.mig_profile = "3g.40gb";
  on_mig.mig_start = 0;  // 0 is a real start and must not read back as "unset"
  ReplicaAssignment shared = testing::ReplicaOn("n2", {"GPU-7"}, {7});
  shared.gpu_milli = 500;
  a.replicas = {on_mig, shared};
  a.repartitions = {
      {"n1", "GPU-1", true, {{"3g.40gb", 0}, {"2g.20gb", 4}}, "3g.40gb for workload 17"},
      {"n3", "GPU-9", false, {}, "whole GPU again"},
  };
  auto assignment = AssignmentFromJson(AssignmentToJson(a));
  ASSERT_OK(assignment);
  EXPECT_EQ(*assignment, a);

  const std::vector<MigInstance> layout = {{"1g.10gb", 6}, {"4g.40gb", 0}};
  auto layout_back = MigLayoutFromJson(MigLayoutToJson(layout));
  ASSERT_OK(layout_back);
  EXPECT_EQ(*layout_back, layout);
  EXPECT_EQ(MigLayoutToJson({}), "[]");
  EXPECT_THAT(MigLayoutFromJson(R"({"profile":"1g.10gb"})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(MigLayoutFromJson(R"([{"profile":1}])"),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(AssignmentFromJson(R"({"repartitions":[{"layout":"3g.40gb"}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// Rows written before the sharing fields existed: they decode to whole-GPU defaults, and a spec
// that does not use the new fields still encodes to the very same text (idempotent resubmission
// compares the stored jsonb).
TEST(JsonCodecTest, RowsWithoutSharingFieldsDecodeToDefaults) {
  const std::string old_spec =
      R"({"class":"batch","estimated_duration_ms":0,"gpu_models":[],"gpus_per_replica":2,)"
      R"("idempotency_key":"","min_gpu_memory_mib":0,"name":"n","priority":0,"project":"p",)"
      R"("replicas":1,"run":{"command":[],"env":{},"image":"","sim_exit_code":0,)"
      R"("sim_outcome":"succeed"},"tenant":"a","topology":"none"})";
  auto spec = WorkloadSpecFromJson(old_spec);
  ASSERT_OK(spec);
  EXPECT_EQ(spec->mig_profile, "");
  EXPECT_EQ(spec->gpu_milli, 0u);
  EXPECT_EQ(spec->cpu_millis, 0u);
  EXPECT_EQ(spec->memory_mib, 0u);
  EXPECT_FALSE(spec->SharesGpu());
  EXPECT_EQ(WorkloadSpecToJson(*spec), old_spec);

  const std::string old_assignment =
      R"({"cluster":"c","epoch":2,"replicas":[{"gpu_indices":[0],"gpu_uuids":["GPU-0"],)"
      R"("node":"n"}]})";
  auto a = AssignmentFromJson(old_assignment);
  ASSERT_OK(a);
  ASSERT_EQ(a->replicas.size(), 1u);
  EXPECT_EQ(a->replicas[0].gpu_milli, 0u);
  EXPECT_EQ(a->replicas[0].mig_profile, "");
  EXPECT_EQ(a->replicas[0].mig_start, -1);
  EXPECT_TRUE(a->repartitions.empty());
  EXPECT_EQ(AssignmentToJson(*a), old_assignment);
}

TEST(JsonCodecTest, ReasonFiguresRoundTripAsNumbersAndStrings) {
  const PendingReason r = PendingReason(ReasonCode::kGpusBusy)
                              .Set(figure::kWhere, "c/n0")
                              .Set(figure::kLargest, 6)
                              .Set(figure::kNeeds, "8 GPUs");
  const std::string text = ReasonFiguresToJson(r.figures);
  EXPECT_EQ(text, R"({"largest":6,"needs":"8 GPUs","where":"c/n0"})");
  auto back = ReasonFiguresFromJson(text);
  ASSERT_OK(back);
  EXPECT_EQ(*back, r.figures);
  // Key order in the stored text does not matter (jsonb reorders keys).
  EXPECT_EQ(*ReasonFiguresFromJson(R"({"where":"c/n0","needs":"8 GPUs","largest":6})"), r.figures);
  EXPECT_EQ(ReasonFiguresToJson({}), "{}");
  EXPECT_TRUE(absl::IsInvalidArgument(ReasonFiguresFromJson("[1]").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReasonFiguresFromJson(R"({"a":1.5})").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(ReasonFiguresFromJson(R"({"a":[1]})").status()));
}

// ---- Routing (issue #11): spec.placement and cluster declarations ----------------------------

PlacementConstraints FullPlacement() {
  PlacementConstraints p;
  p.jurisdictions = {"eu", "ch"};
  p.compliance_labels = {"gdpr", "iso27001"};
  p.providers = {"aws", "onprem"};
  p.regions = {"eu-west-1", "eu-central"};
  p.clusters = {"dgx-a", "dgx-b"};
  p.denied_clusters = {"edge-1"};
  p.max_price_per_gpu_hour_micros = 3'250'000;
  p.spot_tolerated = true;
  p.objective = Objective::kBalanced;
  p.client_region = "eu-west";
  p.max_rtt_micros = 45'000;
  p.min_driver_version = "550.54.15";
  p.min_cuda_version = "12.4";
  return p;
}

TEST(JsonCodecTest, PlacementRoundTrips) {
  WorkloadSpec spec = FullSpec();
  spec.placement = FullPlacement();
  auto back = WorkloadSpecFromJson(WorkloadSpecToJson(spec));
  ASSERT_OK(back);
  EXPECT_EQ(*back, spec);
  EXPECT_EQ(WorkloadSpecToJson(spec), WorkloadSpecToJson(*back));
  WorkloadSpec other = spec;
  other.placement.denied_clusters.clear();
  EXPECT_NE(WorkloadSpecToJson(spec), WorkloadSpecToJson(other));

  // Every objective by name.
  for (Objective o :
       {Objective::kPack, Objective::kCost, Objective::kLatency, Objective::kBalanced}) {
    spec.placement.objective = o;
    back = WorkloadSpecFromJson(WorkloadSpecToJson(spec));
    ASSERT_OK(back);
    EXPECT_EQ(back->placement.objective, o);
  }
}

// Only what is set is written: an empty placement leaves the spec's text as it was before the
// key existed (the old-row test above still holds), and one constraint writes one key.
TEST(JsonCodecTest, PlacementIsWrittenOnlyWhenSetAndOnlyWhatIsSet) {
  EXPECT_THAT(WorkloadSpecToJson(FullSpec()), Not(HasSubstr("placement")));
  WorkloadSpec spot = FullSpec();
  spot.placement.spot_tolerated = true;
  EXPECT_THAT(WorkloadSpecToJson(spot), HasSubstr(R"("placement":{"spot_tolerated":true})"));
  WorkloadSpec cost = FullSpec();
  cost.placement.objective = Objective::kCost;
  cost.placement.max_price_per_gpu_hour_micros = 2'000'000;
  EXPECT_THAT(WorkloadSpecToJson(cost),
              HasSubstr(R"("placement":{"max_price_per_gpu_hour_micros":2000000,)"
                        R"("objective":"cost"})"));

  // Absent, null or {}: no constraints.
  auto absent = WorkloadSpecFromJson(R"({"tenant":"a","project":"p","name":"n"})");
  ASSERT_OK(absent);
  EXPECT_TRUE(absent->placement.empty());
  auto null = WorkloadSpecFromJson(R"({"name":"n","placement":null})");
  ASSERT_OK(null);
  EXPECT_TRUE(null->placement.empty());
  auto braces = WorkloadSpecFromJson(R"({"name":"n","placement":{}})");
  ASSERT_OK(braces);
  EXPECT_TRUE(braces->placement.empty());
}

TEST(JsonCodecTest, BadPlacementIsInvalidArgument) {
  for (const char* bad : {
           R"({"placement":[1]})",
           R"({"placement":{"objective":"fastest"}})",
           R"({"placement":{"regions":"eu"}})",
           R"({"placement":{"max_rtt_micros":1.5}})",
           R"({"placement":{"max_price_per_gpu_hour_micros":"3"}})",
           R"({"placement":{"max_price_per_gpu_hour_micros":9223372036854775808}})",
           R"({"placement":{"spot_tolerated":"yes"}})",
       }) {
    EXPECT_THAT(WorkloadSpecFromJson(bad), StatusIs(absl::StatusCode::kInvalidArgument)) << bad;
  }
}

Timestamp At(int64_t us) { return Timestamp(microseconds(us)); }

ClusterDeclaration FullDeclaration() {
  ClusterDeclaration d;
  d.cluster = "dgx-a";
  d.provider = "aws";
  d.region = "eu-west-1";
  d.zone = "eu-west-1a";
  d.jurisdiction = "eu";
  d.compliance_labels = std::vector<std::string>{"gdpr", "iso27001"};
  d.default_capacity = CapacityType::kCommitted;
  d.prices = {
      {"A100-80GB", "", CapacityType::kOnDemand, 4'100'000, At(1'717'200'000'000'000)},
      {"H100-80GB", "", CapacityType::kSpot, 2'100'000, At(1'717'200'000'123'456)},
      {"H100-80GB", "3g.40gb", CapacityType::kOnDemand, 1'600'000, At(1'717'200'000'000'001)},
      {"H100-80GB", "3g.40gb", CapacityType::kCommitted, 0, At(1)},
  };
  d.rtt_micros = {{"eu-west", 1'200}, {"us-east", 85'000}, {"zero", 0}};
  return d;
}

TEST(JsonCodecTest, DeclarationRoundTrips) {
  const ClusterDeclaration d = FullDeclaration();
  const std::string text = ClusterDeclarationToJson(d);
  auto back = ClusterDeclarationFromJson(text);
  ASSERT_OK(back);
  EXPECT_EQ(*back, d);
  EXPECT_EQ(ClusterDeclarationToJson(*back), text);

  auto empty = ClusterDeclarationFromJson(ClusterDeclarationToJson(ClusterDeclaration{}));
  ASSERT_OK(empty);
  EXPECT_EQ(*empty, ClusterDeclaration{});
  // Missing keys take the defaults (a later field must not need old rows rewritten).
  auto bare = ClusterDeclarationFromJson("{}");
  ASSERT_OK(bare);
  EXPECT_EQ(*bare, ClusterDeclaration{});
}

// The stored shape: keys sorted, capacity types by name, prices as integers of micro-units,
// effective dates as integers of microseconds since the epoch.
TEST(JsonCodecTest, DeclarationTextIsFixed) {
  ClusterDeclaration d;
  d.cluster = "edge";
  d.default_capacity = CapacityType::kSpot;
  d.prices = {{"L4", "", CapacityType::kOnDemand, 650'000, At(1'700'000'000'000'001)}};
  d.rtt_micros = {{"eu-west", 9'000}};
  EXPECT_EQ(ClusterDeclarationToJson(d),
            R"({"cluster":"edge","default_capacity":"spot","jurisdiction":"",)"
            R"("prices":[{"capacity":"on-demand","effective_from_us":1700000000000001,)"
            R"("gpu_model":"L4","micros_per_hour":650000,"mig_profile":""}],)"
            R"("provider":"","region":"","rtt_micros":{"eu-west":9000},"zone":""})");
}

// Absent labels leave the agent's in force; an empty list declares "none": both survive.
TEST(JsonCodecTest, DeclaredLabelsAbsentAndEmptyStayApart) {
  ClusterDeclaration absent = FullDeclaration();
  absent.compliance_labels.reset();
  ClusterDeclaration none = FullDeclaration();
  none.compliance_labels = std::vector<std::string>{};
  EXPECT_THAT(ClusterDeclarationToJson(absent), Not(HasSubstr("compliance_labels")));
  EXPECT_THAT(ClusterDeclarationToJson(none), HasSubstr(R"("compliance_labels":[])"));

  auto absent_back = ClusterDeclarationFromJson(ClusterDeclarationToJson(absent));
  ASSERT_OK(absent_back);
  EXPECT_FALSE(absent_back->compliance_labels.has_value());
  EXPECT_EQ(*absent_back, absent);
  auto none_back = ClusterDeclarationFromJson(ClusterDeclarationToJson(none));
  ASSERT_OK(none_back);
  ASSERT_TRUE(none_back->compliance_labels.has_value());
  EXPECT_TRUE(none_back->compliance_labels->empty());
  EXPECT_EQ(*none_back, none);
  auto null = ClusterDeclarationFromJson(R"({"compliance_labels":null})");
  ASSERT_OK(null);
  EXPECT_FALSE(null->compliance_labels.has_value());
}

// PostgreSQL keeps microseconds: a finer effective date loses what is below one.
TEST(JsonCodecTest, DeclarationTimesAreKeptToTheMicrosecond) {
  ClusterDeclaration d;
  d.cluster = "c";
  const Timestamp exact = At(1'717'200'000'654'321);
  d.prices = {{"H100-80GB", "", CapacityType::kOnDemand, 1, exact + std::chrono::nanoseconds(999)}};
  auto back = ClusterDeclarationFromJson(ClusterDeclarationToJson(d));
  ASSERT_OK(back);
  ASSERT_EQ(back->prices.size(), 1u);
  EXPECT_EQ(back->prices[0].effective_from, exact);
  // Before the epoch, too.
  d.prices[0].effective_from = At(-5);
  back = ClusterDeclarationFromJson(ClusterDeclarationToJson(d));
  ASSERT_OK(back);
  EXPECT_EQ(back->prices[0].effective_from, At(-5));
}

TEST(JsonCodecTest, BadDeclarationIsInvalidArgument) {
  for (const char* bad : {
           "7",
           "{not json",
           R"({"default_capacity":"reserved"})",
           R"({"prices":{}})",
           R"({"prices":[1]})",
           R"({"prices":[{"capacity":"preemptible"}]})",
           R"({"prices":[{"micros_per_hour":1.25}]})",
           R"({"prices":[{"micros_per_hour":"100"}]})",
           R"({"prices":[{"effective_from_us":"2024-06-01T00:00:00Z"}]})",
           R"({"prices":[{"micros_per_hour":18446744073709551615}]})",
           R"({"rtt_micros":[]})",
           R"({"rtt_micros":{"eu":0.5}})",
           R"({"compliance_labels":"gdpr"})",
           R"({"cluster":1})",
       }) {
    EXPECT_THAT(ClusterDeclarationFromJson(bad), StatusIs(absl::StatusCode::kInvalidArgument))
        << bad;
  }
  EXPECT_THAT(ClusterDeclarationFromJson(R"({"prices":[{"capacity":"preemptible"}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prices[0].capacity")));
}

}  // namespace
}  // namespace gpufed::storage
