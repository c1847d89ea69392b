// The JSON stored in jsonb columns: round trips, determinism and tolerance.

#include "storage/json_codec.h"

#include "gtest/gtest.h"

namespace gpufed::storage {
namespace {

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
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, spec);
  auto empty = WorkloadSpecFromJson(WorkloadSpecToJson(WorkloadSpec{}));
  ASSERT_TRUE(empty.ok()) << empty.status();
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
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->replicas, 1u);
  EXPECT_EQ(spec->gpus_per_replica, 1u);
  EXPECT_EQ(spec->topology, Topology::kNone);
  EXPECT_EQ(spec->workload_class, WorkloadClass::kUnspecified);
}

TEST(JsonCodecTest, BadJsonIsInvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(WorkloadSpecFromJson("{not json").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(WorkloadSpecFromJson("[1,2]").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(WorkloadSpecFromJson(R"({"topology":"ring"})").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(WorkloadSpecFromJson(R"({"replicas":"two"})").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(AssignmentFromJson("7").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(LabelsFromJson(R"({"a":1})").status()));
}

TEST(JsonCodecTest, AssignmentAndLabelsRoundTrip) {
  Assignment a;
  a.cluster = "dgx";
  a.epoch = 9;
  a.replicas = {{"n1", {"GPU-1", "GPU-2"}, {0, 1}}, {"n2", {}, {}}};
  auto back = AssignmentFromJson(AssignmentToJson(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);

  std::map<std::string, std::string> labels = {{"pool", "training"}, {"tier", "gold"}};
  auto labels_back = LabelsFromJson(LabelsToJson(labels));
  ASSERT_TRUE(labels_back.ok());
  EXPECT_EQ(*labels_back, labels);
}

}  // namespace
}  // namespace gpufed::storage
