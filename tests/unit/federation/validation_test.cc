#include "federation/validation.h"

#include "gtest/gtest.h"
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
  EXPECT_TRUE(ValidateSpec(s).ok()) << ValidateSpec(s);
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
  EXPECT_TRUE(ValidateInventory(c.info, c.nodes).ok());
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

}  // namespace
}  // namespace gpufed
