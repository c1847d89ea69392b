#include "federation/validation.h"

#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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

// ---- Names, labels, tokens and text ----------------------------------------------------------

TEST(NameRulesTest, ResourceNamesStartWithALetterLabelsWithALetterOrDigit) {
  EXPECT_TRUE(IsName("acme"));
  EXPECT_TRUE(IsName("a-1"));
  EXPECT_FALSE(IsName("1abc"));  // tenant_service.proto: tenant names start with a letter
  EXPECT_FALSE(IsName("-abc"));
  EXPECT_FALSE(IsName(""));
  EXPECT_FALSE(IsName(std::string(kMaxNameLength + 1, 'a')));
  EXPECT_TRUE(IsName(std::string(kMaxNameLength, 'a')));
  EXPECT_FALSE(IsName(std::string("ac\0me", 5)));
  EXPECT_FALSE(IsName("Acme"));
  EXPECT_TRUE(IsLabel("1abc"));
  EXPECT_TRUE(IsLabel("us-east-1a"));
  EXPECT_FALSE(IsLabel("-abc"));
  EXPECT_FALSE(IsLabel("dgx_01"));
  EXPECT_EQ(ValidateName("tenant", "1abc").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ValidateName("tenant", "1abc").message()),
              ::testing::StartsWith("tenant: "));
  EXPECT_OK(ValidateLabel("node", "1abc"));
}

TEST(TextRulesTest, RefusesControlCharactersAndBrokenUtf8) {
  EXPECT_TRUE(IsText("", 10));
  EXPECT_TRUE(IsText("Acme Corp. — Zürich 東京 🚀", 100));
  EXPECT_FALSE(IsText(std::string("a\0b", 3), 10));
  EXPECT_FALSE(IsText("a\x01", 10));
  EXPECT_FALSE(IsText("a\x7f", 10));
  EXPECT_FALSE(IsText("a\xc2\x85", 10));  // U+0085, a C1 control
  EXPECT_FALSE(IsText("a\nb", 10));
  EXPECT_TRUE(IsText("a\nb\tc", 10, /*allow_newlines=*/true));
  EXPECT_FALSE(IsText("a\rb", 10, /*allow_newlines=*/true));
  EXPECT_FALSE(IsText(std::string("a\0b", 3), 10, /*allow_newlines=*/true));
  EXPECT_FALSE(IsText("\xff", 10));
  EXPECT_FALSE(IsText("\xc3", 10));              // truncated
  EXPECT_FALSE(IsText("\xc0\xaf", 10));          // overlong '/'
  EXPECT_FALSE(IsText("\xed\xa0\x80", 10));      // a surrogate
  EXPECT_FALSE(IsText("\xf4\x90\x80\x80", 10));  // above U+10FFFF
  EXPECT_FALSE(IsText("abcd", 3));
  EXPECT_TRUE(IsText("abc", 3));
  absl::Status s = ValidateText("display_name", std::string("x\0y", 3), kMaxDisplayNameBytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::StartsWith("display_name: "));
  EXPECT_EQ(ValidateSubject("").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateSubject(std::string(kMaxSubjectBytes + 1, 'a')).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_OK(ValidateSubject("ci-bot"));
}

TEST(TextRulesTest, EnvKeysArePosixNames) {
  EXPECT_TRUE(IsEnvKey("EPOCHS"));
  EXPECT_TRUE(IsEnvKey("_private_1"));
  EXPECT_TRUE(IsEnvKey("lower"));
  EXPECT_FALSE(IsEnvKey(""));
  EXPECT_FALSE(IsEnvKey("1ABC"));
  EXPECT_FALSE(IsEnvKey("A=B"));
  EXPECT_FALSE(IsEnvKey("A-B"));
  EXPECT_FALSE(IsEnvKey(std::string("A\0B", 3)));
  EXPECT_TRUE(IsEnvKey(std::string(kMaxEnvKeyBytes, 'A')));
  EXPECT_FALSE(IsEnvKey(std::string(kMaxEnvKeyBytes + 1, 'A')));
}

// ---- Every string of a spec has a limit; the spec has a total ----------------------------------

TEST(ValidateSpecTest, EveryRunFieldHasASizeLimit) {
  const WorkloadSpec base = testing::Gang(1, 1);
  WorkloadSpec s = base;
  s.run.image = std::string(kMaxImageBytes, 'i');
  EXPECT_OK(ValidateSpec(s));
  s.run.image += "i";
  ExpectInvalid(s, "spec.run.image");

  s = base;
  s.run.command.assign(kMaxCommandArgs + 1, "x");
  ExpectInvalid(s, "spec.run.command");
  s.run.command.assign(2, std::string(kMaxCommandBytes / 2 + 1, 'x'));
  ExpectInvalid(s, "spec.run.command");

  s = base;
  s.run.env["BIG"] = std::string(10 << 20, 'v');  // 10 MB
  ExpectInvalid(s, "spec.run.env");
  s.run.env.clear();
  s.run.env[std::string(1 << 20, 'K')] = "v";  // a 1 MB name
  ExpectInvalid(s, "spec.run.env");
  s.run.env.clear();
  for (size_t i = 0; i <= kMaxEnvEntries; ++i) s.run.env[absl::StrCat("V", i)] = "1";
  ExpectInvalid(s, "spec.run.env");
  s.run.env.clear();
  s.run.env["OK"] = std::string(kMaxEnvValueBytes, 'v');
  EXPECT_OK(ValidateSpec(s));
}

TEST(ValidateSpecTest, TheWholeSpecHasASizeLimit) {
  WorkloadSpec s = testing::Gang(1, 1);
  // Every value within its own limit, together above kMaxSpecBytes.
  for (int i = 0; i < 5; ++i) s.run.env[absl::StrCat("V", i)] = std::string(kMaxEnvValueBytes, 'v');
  ASSERT_GT(SpecTextBytes(s), kMaxSpecBytes);
  ExpectInvalid(s, "spec");
  s.run.env.erase("V4");
  s.run.env.erase("V3");
  EXPECT_LE(SpecTextBytes(s), kMaxSpecBytes);
  EXPECT_OK(ValidateSpec(s));
}

TEST(ValidateSpecTest, RefusesNulAndControlCharactersInRunFields) {
  const WorkloadSpec base = testing::Gang(1, 1);
  WorkloadSpec s = base;
  s.run.image = std::string("busybox\0:evil", 13);
  ExpectInvalid(s, "spec.run.image");
  s = base;
  s.run.command = {"sh", std::string("-c\0x", 4)};
  ExpectInvalid(s, "spec.run.command[1]");
  s.run.command = {"sh", "-c", "echo one\necho two\tthree"};  // a script spans lines
  EXPECT_OK(ValidateSpec(s));
  s.run.command = {"\xff"};
  ExpectInvalid(s, "spec.run.command[0]");
  s = base;
  s.run.env["A"] = std::string("x\0y", 3);
  ExpectInvalid(s, "spec.run.env");
  s = base;
  s.run.env["1A"] = "x";
  ExpectInvalid(s, "spec.run.env");
  s = base;
  s.name = std::string("job\0x", 5);
  ExpectInvalid(s, "spec.name");
  s = base;
  s.tenant = "1abc";
  ExpectInvalid(s, "spec.tenant");
  s = base;
  s.estimated_duration_ms = (kMaxEstimatedDurationSeconds + 1) * 1000;
  ExpectInvalid(s, "spec.estimated_duration");
  s = base;
  s.checkpoint_interval_ms = -1;
  ExpectInvalid(s, "spec.checkpoint_interval");
  s.checkpoint_interval_ms = (kMaxEstimatedDurationSeconds + 1) * 1000;
  ExpectInvalid(s, "spec.checkpoint_interval");
}

// ---- Inventory: the rules of the agent's topology file ---------------------------------------

TEST(ValidateInventoryTest, AppliesTheTopologyFileRules) {
  const Cluster base = testing::MakeCluster("dgx", 2, 2, "H100-80GB");
  ASSERT_OK(ValidateInventory(base.info, base.nodes));
  struct Case {
    const char* field;
    std::function<void(Cluster&)> mutate;
  };
  const std::string n0 = "register.inventory.nodes[0]";
  const std::vector<Case> cases = {
      {"register.cluster", [](Cluster& c) { c.info.name = "1dgx"; }},
      {"register.info.region", [](Cluster& c) { c.info.region = "US East"; }},
      {"register.info.compliance_labels[1]",
       [](Cluster& c) {
         c.info.compliance_labels = {"gdpr", "gdpr"};
       }},
      {"register.inventory.nodes[0].name", [](Cluster& c) { c.nodes[0].name = "DGX_01"; }},
      {"register.inventory.nodes[0].name",
       [](Cluster& c) { c.nodes[0].name = std::string(kMaxNameLength + 1, 'n'); }},
      {"register.inventory.nodes[0].rack", [](Cluster& c) { c.nodes[0].rack = "rack 1"; }},
      {"register.inventory.nodes[0].labels",
       [](Cluster& c) { c.nodes[0].labels["bad key"] = "v"; }},
      {"register.inventory.nodes[0].labels.pool",
       [](Cluster& c) { c.nodes[0].labels["pool"] = std::string("a\0b", 3); }},
      {"register.inventory.nodes[0].gpus[0].uuid",
       [](Cluster& c) { c.nodes[0].gpus[0].uuid = std::string(kMaxGpuUuidBytes + 1, 'u'); }},
      {"register.inventory.nodes[0].gpus[0].uuid",
       [](Cluster& c) { c.nodes[0].gpus[0].uuid = "GPU 1"; }},
      {"register.inventory.nodes[0].gpus[0].index",
       [](Cluster& c) { c.nodes[0].gpus[0].index = kMaxGpusPerNode; }},
      {"register.inventory.nodes[0].gpus[0].nvlink_domain",
       [](Cluster& c) {
         c.nodes[0].gpus[0].nvlink_domain = std::string(kMaxFabricIdBytes + 1, 'd');
       }},
      {"register.inventory.nodes[0].gpus[0].numa_node",
       [](Cluster& c) { c.nodes[0].gpus[0].numa_node = -1; }},
  };
  for (const Case& c : cases) {
    Cluster bad = base;
    c.mutate(bad);
    absl::Status s = ValidateInventory(bad.info, bad.nodes);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_THAT(std::string(s.message()), ::testing::StartsWith(absl::StrCat(c.field, ":"))) << s;
  }
}

// What every store refuses beyond ValidateInventory: figures that no int64 column holds.
TEST(ValidateStorableInventoryTest, RefusesFiguresBeyondInt64NamingTheField) {
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  Cluster c = testing::MakeCluster("dgx", 2, 2, "H100-80GB");
  c.nodes[1].cpu_millis = kMax;
  c.nodes[1].memory_mib = kMax;
  c.nodes[1].gpus[1].memory_mib = kMax;
  EXPECT_OK(ValidateStorableInventory(c.info, c.nodes));

  Cluster cpu = c;
  cpu.nodes[1].cpu_millis = kMax + 1;
  EXPECT_THAT(ValidateStorableInventory(cpu.info, cpu.nodes),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "register.inventory.nodes[1].cpu_millis: too large"));
  Cluster memory = c;
  memory.nodes[0].memory_mib = std::numeric_limits<uint64_t>::max();
  EXPECT_THAT(ValidateStorableInventory(memory.info, memory.nodes),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "register.inventory.nodes[0].memory_mib: too large"));
  Cluster gpu = c;
  gpu.nodes[1].gpus[1].memory_mib = kMax + 1;
  EXPECT_THAT(ValidateStorableInventory(gpu.info, gpu.nodes),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                "register.inventory.nodes[1].gpus[1].memory_mib: too large"));
  // The inventory rules come first.
  Cluster dup = cpu;
  dup.nodes[1].name = dup.nodes[0].name;
  EXPECT_EQ(ValidateStorableInventory(dup.info, dup.nodes).message(),
            ValidateInventory(dup.info, dup.nodes).message());
}

TEST(ValidateTransitionTest, NamesTheTransitionAndItsField) {
  Transition t;
  t.id = 7;
  t.from = WorkloadState::kPending;
  t.to = WorkloadState::kPlaced;
  t.assignment = Assignment{};
  t.assignment->cluster = "dgx";
  t.assignment->epoch = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  EXPECT_OK(ValidateTransition(t, 3));

  auto message = [](const Transition& bad) {
    return std::string(ValidateTransition(bad, 3).message());
  };
  Transition bad = t;
  bad.id = 0;
  EXPECT_EQ(message(bad), "transitions[3].id: required");
  bad = t;
  bad.from = WorkloadState::kUnspecified;
  EXPECT_EQ(message(bad), "transitions[3].from: required");
  bad = t;
  bad.to = WorkloadState::kUnspecified;
  EXPECT_EQ(message(bad), "transitions[3].to: required");
  bad = t;
  bad.to = WorkloadState::kPending;
  EXPECT_THAT(message(bad), HasSubstr("transitions[3].to: equals from"));
  bad = t;
  bad.assignment->cluster.clear();
  EXPECT_THAT(message(bad), HasSubstr("transitions[3].assignment: required"));
  bad = t;
  bad.assignment->epoch += 1;
  EXPECT_EQ(message(bad), "transitions[3].assignment.epoch: too large");
}

}  // namespace
}  // namespace gpufed
