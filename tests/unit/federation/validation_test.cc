#include "federation/validation.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

void ExpectInvalid(const WorkloadSpec& spec, const std::string& field) {
  absl::Status s = ValidateSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field;
  EXPECT_EQ(std::string(s.message()).rfind(field + ":", 0), 0u)
      << "message must start with the field: " << s.message();
}

TEST(ValidateSpecTest, AcceptsAReasonableSpec) {
  WorkloadSpec s = testing::Gang(2, 8, {"H100-80GB"});
  s.name = "train-llm_v2.1";
  EXPECT_OK(ValidateSpec(s));
}

TEST(ValidateSpecTest, NamesTheFieldOfEveryMistake) {
  WorkloadSpec base = testing::Gang(1, 1);
  WorkloadSpec s = base;
  s.name = "";
  ExpectInvalid(s, "spec.name");
  s.name = std::string(64, 'a');
  ExpectInvalid(s, "spec.name");
  s.name = "Has Spaces";
  ExpectInvalid(s, "spec.name");
  s = base;
  s.tenant = "";
  ExpectInvalid(s, "spec.tenant");
  s = base;
  s.project = "UPPER";
  ExpectInvalid(s, "spec.project");
  s = base;
  s.replicas = 0;
  ExpectInvalid(s, "spec.replicas");
  s = base;
  s.gpus_per_replica = 0;
  ExpectInvalid(s, "spec.per_replica.gpus");
  s.gpus_per_replica = 65;
  ExpectInvalid(s, "spec.per_replica.gpus");
  s = base;
  s.gpu_models = {"H900"};
  ExpectInvalid(s, "spec.gpu_models[0]");
  s.gpu_models = {"L4", "L4"};
  ExpectInvalid(s, "spec.gpu_models[1]");
  s = base;
  s.priority = 5000;
  ExpectInvalid(s, "spec.priority");
  s = base;
  s.idempotency_key = "has space";
  ExpectInvalid(s, "spec.idempotency_key");
  s = base;
  s.gpu_models = {"L4"};
  s.min_gpu_memory_mib = 40000;
  ExpectInvalid(s, "spec.min_gpu_memory_mib");
  s = base;
  s.run.env["A=B"] = "x";
  ExpectInvalid(s, "spec.run.env");
}

TEST(ValidateInventoryTest, RejectsDuplicatesAndUnknownModels) {
  Cluster c = testing::MakeCluster("dgx", 2, 2, "H100-80GB");
  EXPECT_OK(ValidateInventory(c.info, c.nodes));
  Cluster dup = c;
  dup.nodes[1].name = dup.nodes[0].name;
  EXPECT_EQ(ValidateInventory(dup.info, dup.nodes).code(), absl::StatusCode::kInvalidArgument);
  Cluster uuid = c;
  uuid.nodes[1].gpus[0].uuid = uuid.nodes[0].gpus[0].uuid;
  EXPECT_EQ(ValidateInventory(uuid.info, uuid.nodes).code(), absl::StatusCode::kInvalidArgument);
  Cluster model = c;
  model.nodes[0].gpus[0].model = "GTX-480";
  absl::Status s = ValidateInventory(model.info, model.nodes);
  EXPECT_NE(std::string(s.message()).find("nodes[0].gpus[0].model"), std::string::npos) << s;
}

using ::testing::HasSubstr;

TEST(ValidateSpecTest, AcceptsGpuSharesAndMigProfiles) {
  WorkloadSpec s = testing::Gang(4, 1);
  s.gpu_milli = 250;
  s.cpu_millis = 4000;
  s.memory_mib = 16384;
  EXPECT_OK(ValidateSpec(s));
  s.gpu_milli = 999;
  EXPECT_OK(ValidateSpec(s));

  WorkloadSpec m = testing::Gang(2, 1, {"H100-80GB"});
  m.mig_profile = "3g.40gb";
  EXPECT_OK(ValidateSpec(m));
  // Enough that one allowed model has the profile; the others are simply not candidates.
  m.gpu_models = {"L4", "A100-40GB", "H100-80GB"};
  EXPECT_OK(ValidateSpec(m));
  // No model list: any MIG model may have it (A30's 2g.12gb).
  m.gpu_models = {};
  m.mig_profile = "2g.12gb";
  EXPECT_OK(ValidateSpec(m));
}

TEST(ValidateSpecTest, NamesTheFieldOfEveryShareMistake) {
  WorkloadSpec base = testing::Gang(1, 1, {"H100-80GB"});
  WorkloadSpec s = base;
  s.gpu_milli = 500;
  s.mig_profile = "1g.10gb";
  ExpectInvalid(s, "spec.per_replica");
  s = base;
  s.gpu_milli = 1000;
  ExpectInvalid(s, "spec.per_replica.gpu_milli");
  s.gpu_milli = 5000;
  ExpectInvalid(s, "spec.per_replica.gpu_milli");
  EXPECT_THAT(ValidateSpec(s).message(), HasSubstr("must be 1..999, got 5000"));
  s = base;
  s.gpu_milli = 500;
  s.gpus_per_replica = 2;
  ExpectInvalid(s, "spec.per_replica.gpus");
  s = base;
  s.mig_profile = "1g.10gb";
  s.gpus_per_replica = 8;
  ExpectInvalid(s, "spec.per_replica.gpus");
}

TEST(ValidateSpecTest, MigProfileMustExistOnAnAllowedModel) {
  WorkloadSpec s = testing::Gang(1, 1, {"H100-80GB"});
  s.mig_profile = "3g.41gb";
  ExpectInvalid(s, "spec.per_replica.mig_profile");
  EXPECT_EQ(ValidateSpec(s).message(),
            "spec.per_replica.mig_profile: \"3g.41gb\" is not a MIG profile of H100-80GB (valid: "
            "1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb)");

  // Profile names are per product: A100-40GB's 1g.5gb is no H100 profile.
  s.mig_profile = "1g.5gb";
  s.gpu_models = {"H100-80GB", "A30"};
  ExpectInvalid(s, "spec.per_replica.mig_profile");
  EXPECT_THAT(ValidateSpec(s).message(), HasSubstr("of H100-80GB (valid: 1g.10gb"));
  EXPECT_THAT(ValidateSpec(s).message(), HasSubstr(" or A30 (valid: 1g.6gb"));

  s.gpu_models = {"L4", "T4"};
  ExpectInvalid(s, "spec.per_replica.mig_profile");
  EXPECT_THAT(ValidateSpec(s).message(),
              HasSubstr("none of spec.gpu_models (L4, T4) supports MIG"));

  s.gpu_models = {};
  s.mig_profile = "9g.1tb";
  ExpectInvalid(s, "spec.per_replica.mig_profile");
  EXPECT_THAT(ValidateSpec(s).message(), HasSubstr("not a MIG profile of any GPU model"));
  EXPECT_THAT(ValidateSpec(s).message(), HasSubstr("A30 (valid: 1g.6gb"));
}

Cluster MigCluster() {
  Cluster c = testing::MakeCluster("dgx", 1, 2, "A100-80GB");
  for (GpuInfo& g : c.nodes[0].gpus) g.mig_capable = true;
  return c;
}

TEST(ValidateInventoryTest, AcceptsValidMigLayouts) {
  Cluster c = MigCluster();
  c.nodes[0].gpus[0].mig_enabled = true;
  c.nodes[0].gpus[0].mig_layout = {{"3g.40gb", 0}, {"2g.20gb", 4}, {"1g.10gb", 6}};
  // MIG on with no instances yet is a valid state too.
  c.nodes[0].gpus[1].mig_enabled = true;
  EXPECT_OK(ValidateInventory(c.info, c.nodes));
}

TEST(ValidateInventoryTest, RefusesBadMigState) {
  const std::string gpu0 = "register.inventory.nodes[0].gpus[0]";
  Cluster c = MigCluster();
  c.nodes[0].gpus[0].mig_layout = {{"1g.10gb", 0}};
  absl::Status s = ValidateInventory(c.info, c.nodes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(gpu0 + ".mig_layout: a MIG layout needs mig_enabled"));

  c = MigCluster();
  c.nodes[0].gpus[0].mig_enabled = true;
  c.nodes[0].gpus[0].mig_layout = {{"3g.40gb", 2}};
  s = ValidateInventory(c.info, c.nodes);
  EXPECT_EQ(s.message(), gpu0 + ".mig_layout: 3g.40gb at slot 2: allowed starts are 0, 4");
  c.nodes[0].gpus[0].mig_layout = {{"4g.40gb", 0}, {"3g.40gb", 0}};
  EXPECT_THAT(ValidateInventory(c.info, c.nodes).message(), HasSubstr("overlaps 4g.40gb"));
  c.nodes[0].gpus[0].mig_layout = {{"1g.5gb", 0}};  // an A100-40GB name
  EXPECT_THAT(ValidateInventory(c.info, c.nodes).message(),
              HasSubstr(gpu0 + ".mig_layout: \"1g.5gb\" is not a MIG profile of A100-80GB"));

  // Not MIG-capable: by model, or as reported.
  Cluster l4 = testing::MakeCluster("edge", 1, 1, "L4");
  l4.nodes[0].gpus[0].mig_enabled = true;
  EXPECT_EQ(ValidateInventory(l4.info, l4.nodes).message(),
            gpu0 + ".mig_enabled: L4 (mig_capable: false) does not support MIG");
  c = MigCluster();
  c.nodes[0].gpus[0].mig_capable = false;
  c.nodes[0].gpus[0].mig_enabled = true;
  EXPECT_THAT(ValidateInventory(c.info, c.nodes).message(),
              HasSubstr(gpu0 + ".mig_enabled: A100-80GB (mig_capable: false)"));

  // MIG-capable hardware whose geometry gpufed does not know.
  Cluster b200 = testing::MakeCluster("bw", 1, 1, "B200");
  b200.nodes[0].gpus[0].mig_capable = true;
  b200.nodes[0].gpus[0].mig_enabled = true;
  EXPECT_THAT(ValidateInventory(b200.info, b200.nodes).message(),
              HasSubstr(gpu0 + ".mig_enabled: gpufed has no MIG geometry for B200"));
}

}  // namespace
}  // namespace gpufed
