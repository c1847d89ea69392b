// The JSON stored in jsonb columns: round trips, determinism and tolerance.

#include "storage/json_codec.h"

#include "gtest/gtest.h"
#include "tests/support/replicas.h"
#include "tests/support/status_matchers.h"

namespace gpufed::storage {
namespace {

using ::gpufed::testing::StatusIs;

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

}  // namespace
}  // namespace gpufed::storage
