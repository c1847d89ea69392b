#include "cli/workload_yaml.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed::cli {
namespace {

using ::gpufed::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::string ExamplePath(const std::string& name) {
  return std::string(GPUFED_SOURCE_DIR) + "/examples/" + name;
}

// The message of a failed parse; fails the test when the parse succeeded.
std::string ParseError(const std::string& yaml, const std::string& file = "train.yaml") {
  absl::StatusOr<std::vector<WorkloadDocument>> docs = ParseWorkloadYaml(yaml, file);
  EXPECT_THAT(docs, StatusIs(absl::StatusCode::kInvalidArgument)) << "parsed:\n" << yaml;
  return std::string(docs.status().message());
}

TEST(WorkloadYamlTest, ParsesEveryFieldOfTheInterfaceExample) {
  // The example of docs/interfaces.md, verbatim.
  const std::string yaml = R"(name: train-llm
tenant: demo            # optional: config default
project: research       # optional: config default
class: training         # training, inference, batch, interactive
priority: 10
replicas: 2
gpus_per_replica: 8
gpu_models: [H100-80GB]
min_gpu_memory_mib: 0
topology: same_node
duration: 20s           # estimated duration; sim runs exactly this long
checkpoint_every: 15m   # optional: checkpointable, saves this often
idempotency_key: train-llm-2026-11-21
retry:                  # optional: may it run again elsewhere after its cluster is lost?
  max_attempts: 3       # placements in all, 1..100 (unset: 1, never restarted)
  on: [cluster_lost]    # cluster_lost, preemption, node_failure (unset: all of them)
run:
  image: registry/llm:1
  command: [python, train.py]
  env: {EPOCHS: "3"}
  sim_outcome: succeed  # succeed | fail
  sim_exit_code: 0
)";
  absl::StatusOr<std::vector<WorkloadDocument>> docs = ParseWorkloadYaml(yaml, "train.yaml");
  ASSERT_OK(docs);
  ASSERT_EQ(docs->size(), 1u);
  const v1::WorkloadSpec& spec = (*docs)[0].spec;
  EXPECT_EQ((*docs)[0].origin, "train.yaml:1");
  EXPECT_EQ(spec.name(), "train-llm");
  EXPECT_EQ(spec.tenant(), "demo");
  EXPECT_EQ(spec.project(), "research");
  EXPECT_EQ(spec.workload_class(), v1::WORKLOAD_CLASS_TRAINING);
  EXPECT_EQ(spec.priority(), 10);
  EXPECT_EQ(spec.replicas(), 2u);
  EXPECT_EQ(spec.per_replica().gpus(), 8u);
  EXPECT_THAT(spec.gpu_models(), ElementsAre("H100-80GB"));
  EXPECT_EQ(spec.min_gpu_memory_mib(), 0u);
  EXPECT_EQ(spec.topology(), v1::TOPOLOGY_REQUIREMENT_SAME_NODE);
  EXPECT_EQ(spec.estimated_duration().seconds(), 20);
  EXPECT_EQ(spec.estimated_duration().nanos(), 0);
  EXPECT_EQ(spec.checkpoint_interval().seconds(), 15 * 60);
  EXPECT_EQ(spec.idempotency_key(), "train-llm-2026-11-21");
  EXPECT_EQ(spec.run().image(), "registry/llm:1");
  EXPECT_THAT(spec.run().command(), ElementsAre("python", "train.py"));
  EXPECT_THAT(spec.run().env(), UnorderedElementsAre(Pair("EPOCHS", "3")));
  EXPECT_EQ(spec.run().sim_outcome(), v1::SIM_OUTCOME_SUCCEED);
  EXPECT_EQ(spec.run().sim_exit_code(), 0);
  EXPECT_EQ(spec.retry().max_attempts(), 3u);
  EXPECT_THAT(spec.retry().on(), ElementsAre(v1::RETRY_ON_CLUSTER_LOST));
}

TEST(WorkloadYamlTest, AnUnknownRetryEventNamesTheFieldAndTheChoices) {
  const std::string message = ParseError("name: a\nretry: {on: [cluster_gone]}\n");
  EXPECT_THAT(message, HasSubstr("retry.on"));
  EXPECT_THAT(message, HasSubstr("cluster_lost"));
}

TEST(WorkloadYamlTest, EveryExampleFileParses) {
  for (const char* name : {"train-gang.yaml", "inference-small.yaml", "batch.yaml"}) {
    absl::StatusOr<std::vector<WorkloadDocument>> docs = LoadWorkloadFile(ExamplePath(name));
    ASSERT_OK(docs);
    for (const WorkloadDocument& doc : *docs) {
      EXPECT_FALSE(doc.spec.name().empty()) << doc.origin;
      EXPECT_GT(doc.spec.per_replica().gpus(), 0u) << doc.origin;
      // The demo must finish quickly: a few seconds each.
      EXPECT_GT(doc.spec.estimated_duration().seconds(), 0) << doc.origin;
      EXPECT_LE(doc.spec.estimated_duration().seconds(), 15) << doc.origin;
    }
  }
}

TEST(WorkloadYamlTest, ExamplesAskForWhatTheirNamesSay) {
  absl::StatusOr<std::vector<WorkloadDocument>> gang =
      LoadWorkloadFile(ExamplePath("train-gang.yaml"));
  ASSERT_OK(gang);
  ASSERT_EQ(gang->size(), 1u);
  const v1::WorkloadSpec& g = (*gang)[0].spec;
  EXPECT_EQ(g.replicas(), 2u);
  EXPECT_EQ(g.per_replica().gpus(), 8u);
  EXPECT_THAT(g.gpu_models(), ElementsAre("H100-80GB"));
  EXPECT_EQ(g.topology(), v1::TOPOLOGY_REQUIREMENT_NONE);
  EXPECT_EQ(g.workload_class(), v1::WORKLOAD_CLASS_TRAINING);

  absl::StatusOr<std::vector<WorkloadDocument>> inference =
      LoadWorkloadFile(ExamplePath("inference-small.yaml"));
  ASSERT_OK(inference);
  ASSERT_EQ(inference->size(), 1u);
  EXPECT_EQ((*inference)[0].spec.per_replica().gpus(), 1u);
  EXPECT_THAT((*inference)[0].spec.gpu_models(), ElementsAre("L4"));
  EXPECT_EQ((*inference)[0].spec.workload_class(), v1::WORKLOAD_CLASS_INFERENCE);

  absl::StatusOr<std::vector<WorkloadDocument>> batch = LoadWorkloadFile(ExamplePath("batch.yaml"));
  ASSERT_OK(batch);
  EXPECT_GE(batch->size(), 2u);
  for (const WorkloadDocument& doc : *batch) {
    EXPECT_EQ(doc.spec.per_replica().gpus(), 1u) << doc.origin;
    EXPECT_EQ(doc.spec.workload_class(), v1::WORKLOAD_CLASS_BATCH) << doc.origin;
  }
}

TEST(WorkloadYamlTest, PlacementRulesOfTheEuExample) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs =
      LoadWorkloadFile(ExamplePath("inference-eu.yaml"));
  ASSERT_OK(docs);
  ASSERT_EQ(docs->size(), 1u);
  const v1::WorkloadSpec& spec = (*docs)[0].spec;
  EXPECT_EQ(spec.per_replica().mig_profile(), "3g.40gb");
  ASSERT_TRUE(spec.has_placement());
  const v1::PlacementConstraints& p = spec.placement();
  EXPECT_THAT(p.jurisdictions(), ElementsAre("eu", "de"));
  EXPECT_THAT(p.compliance_labels(), ElementsAre("gdpr"));
  EXPECT_THAT(p.denied_clusters(), ElementsAre("edge-l4"));
  EXPECT_TRUE(p.clusters().empty());
  EXPECT_EQ(p.max_price_per_gpu_hour_micros(), 4'000'000);
  EXPECT_TRUE(p.spot_tolerated());
  EXPECT_EQ(p.objective(), v1::OBJECTIVE_LATENCY);
  EXPECT_EQ(p.client_region(), "eu-west");
  EXPECT_EQ(p.max_rtt().seconds(), 0);
  EXPECT_EQ(p.max_rtt().nanos(), 30'000'000);
}

TEST(WorkloadYamlTest, PlacementReadsEveryRule) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs = ParseWorkloadYaml(
      "name: x\n"
      "placement:\n"
      "  jurisdictions: eu\n"
      "  compliance_labels: [gdpr, iso27001]\n"
      "  providers: [onprem, aws]\n"
      "  regions: [eu-west-1]\n"
      "  clusters: [a, b]\n"
      "  denied_clusters: [c]\n"
      "  max_price_per_gpu_hour: 19.99\n"
      "  spot_tolerated: false\n"
      "  objective: BALANCED\n"
      "  client_region: eu-west\n"
      "  max_rtt: 1.5ms\n"
      "  min_driver_version: \"550.54\"\n"
      "  min_cuda_version: 12.4\n",
      "x.yaml");
  ASSERT_OK(docs);
  const v1::PlacementConstraints& p = (*docs)[0].spec.placement();
  EXPECT_THAT(p.jurisdictions(), ElementsAre("eu"));
  EXPECT_THAT(p.compliance_labels(), ElementsAre("gdpr", "iso27001"));
  EXPECT_THAT(p.providers(), ElementsAre("onprem", "aws"));
  EXPECT_THAT(p.regions(), ElementsAre("eu-west-1"));
  EXPECT_THAT(p.clusters(), ElementsAre("a", "b"));
  EXPECT_THAT(p.denied_clusters(), ElementsAre("c"));
  // Exact: 19.99 as a double is 19.98999...
  EXPECT_EQ(p.max_price_per_gpu_hour_micros(), 19'990'000);
  EXPECT_FALSE(p.spot_tolerated());
  EXPECT_EQ(p.objective(), v1::OBJECTIVE_BALANCED);
  EXPECT_EQ(p.max_rtt().nanos(), 1'500'000);
  EXPECT_EQ(p.min_driver_version(), "550.54");
  EXPECT_EQ(p.min_cuda_version(), "12.4");

  // No placement block: no rules (the server places anywhere, objective pack).
  docs = ParseWorkloadYaml("name: x\n", "x.yaml");
  ASSERT_OK(docs);
  EXPECT_FALSE((*docs)[0].spec.has_placement());
}

TEST(WorkloadYamlTest, BadPlacementRulesNameTheLineAndTheField) {
  EXPECT_EQ(ParseError("name: x\nplacement:\n  objective: cheapest\n"),
            "train.yaml:3: placement.objective: expected one of pack, cost, latency, balanced, "
            "got \"cheapest\"");
  EXPECT_EQ(ParseError("name: x\nplacement:\n  jurisdiction: [eu]\n"),
            "train.yaml:3: placement.jurisdiction: unknown field; did you mean "
            "\"jurisdictions\"?");
  EXPECT_EQ(ParseError("name: x\nplacement:\n  max_price_per_gpu_hour: 3.2.1\n"),
            "train.yaml:3: placement.max_price_per_gpu_hour: expected a price such as 3.20 or "
            "0.45, got \"3.2.1\"");
  EXPECT_EQ(ParseError("name: x\nplacement:\n  spot_tolerated: yes\n"),
            "train.yaml:3: placement.spot_tolerated: expected true or false, got \"yes\"");
  EXPECT_EQ(ParseError("name: x\nplacement:\n  spot_tolerated: \"true\"\n"),
            "train.yaml:3: placement.spot_tolerated: expected true or false, got \"true\"");
  EXPECT_EQ(ParseError("name: x\nplacement:\n  max_rtt: fast\n"),
            "train.yaml:3: placement.max_rtt: expected a duration such as 30s, 5m, 1h30m or "
            "250ms, got \"fast\"");
  EXPECT_EQ(ParseError("name: x\nplacement:\n  max_rtt: 10ns\n"),
            "train.yaml:3: placement.max_rtt: must be a whole number of microseconds");
  EXPECT_EQ(ParseError("name: x\nplacement:\n  regions: {a: b}\n"),
            "train.yaml:3: placement.regions: expected a list of strings, got a mapping");
  EXPECT_EQ(ParseError("name: x\nplacement: [eu]\n"),
            "train.yaml:2: placement: expected a mapping, got a list");
  // Which names exist, and whether latency needs a client region, are the server's to judge.
  absl::StatusOr<std::vector<WorkloadDocument>> docs =
      ParseWorkloadYaml("name: x\nplacement:\n  objective: latency\n", "x.yaml");
  ASSERT_OK(docs);
  EXPECT_EQ((*docs)[0].spec.placement().objective(), v1::OBJECTIVE_LATENCY);
}

TEST(WorkloadYamlTest, MultipleDocumentsKeepTheirOrderAndLines) {
  const std::string yaml =
      "name: a\n"
      "---\n"
      "# a comment-only document is skipped\n"
      "---\n"
      "name: b\n"
      "gpus_per_replica: 2\n"
      "---\n";
  absl::StatusOr<std::vector<WorkloadDocument>> docs = ParseWorkloadYaml(yaml, "multi.yaml");
  ASSERT_OK(docs);
  ASSERT_EQ(docs->size(), 2u);
  EXPECT_EQ((*docs)[0].spec.name(), "a");
  EXPECT_EQ((*docs)[0].origin, "multi.yaml:1");
  EXPECT_EQ((*docs)[1].spec.name(), "b");
  EXPECT_EQ((*docs)[1].origin, "multi.yaml:5");
  EXPECT_EQ((*docs)[1].spec.per_replica().gpus(), 2u);
}

TEST(WorkloadYamlTest, AnErrorInALaterDocumentNamesItsLine) {
  const std::string yaml =
      "name: a\n"
      "---\n"
      "name: b\n"
      "replicas: two\n";
  EXPECT_EQ(ParseError(yaml, "batch.yaml"),
            "batch.yaml:4: replicas: expected a non-negative integer, got \"two\"");
}

TEST(WorkloadYamlTest, DefaultsWhatTheApiNeeds) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs = ParseWorkloadYaml("name: x\n", "x.yaml");
  ASSERT_OK(docs);
  const v1::WorkloadSpec& spec = (*docs)[0].spec;
  EXPECT_EQ(spec.per_replica().gpus(), 1u);
  EXPECT_EQ(spec.replicas(), 0u);  // The server reads 0 as 1.
  EXPECT_TRUE(spec.tenant().empty());
  EXPECT_TRUE(spec.idempotency_key().empty());
  EXPECT_FALSE(spec.has_estimated_duration());
}

TEST(WorkloadYamlTest, MigProfileGpuShareAndHostResources) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs = ParseWorkloadYaml(
      "name: a\nreplicas: 2\nmig_profile: 3g.40gb\ncpu_millis: 8000\nmemory_mib: 65536\n"
      "---\nname: b\ngpus_per_replica: 1\ngpu_milli: 250\n"
      "---\nname: c\ngpus_per_replica: 4\ncpu_millis: 500\n",
      "x.yaml");
  ASSERT_OK(docs);
  ASSERT_EQ(docs->size(), 3u);
  const v1::ReplicaResources& a = (*docs)[0].spec.per_replica();
  EXPECT_EQ(a.kind_case(), v1::ReplicaResources::kMigProfile);
  EXPECT_EQ(a.mig_profile(), "3g.40gb");
  EXPECT_EQ(a.cpu_millis(), 8000u);
  EXPECT_EQ(a.memory_mib(), 65536u);
  const v1::ReplicaResources& b = (*docs)[1].spec.per_replica();
  EXPECT_EQ(b.kind_case(), v1::ReplicaResources::kGpuMilli);
  EXPECT_EQ(b.gpu_milli(), 250u);
  const v1::ReplicaResources& c = (*docs)[2].spec.per_replica();
  EXPECT_EQ(c.kind_case(), v1::ReplicaResources::kGpus);
  EXPECT_EQ(c.gpus(), 4u);
  EXPECT_EQ(c.cpu_millis(), 500u);
}

TEST(WorkloadYamlTest, GpuShareClashesNameTheField) {
  EXPECT_EQ(ParseError("name: x\nmig_profile: 1g.10gb\ngpu_milli: 100\n"),
            "train.yaml:3: gpu_milli: give either mig_profile or gpu_milli, not both");
  EXPECT_EQ(ParseError("name: x\ngpus_per_replica: 2\nmig_profile: 1g.10gb\n"),
            "train.yaml:2: gpus_per_replica: must be 1 (or left out) with mig_profile: a replica "
            "takes part of one GPU");
  EXPECT_EQ(ParseError("name: x\ngpu_milli: 0.5\n"),
            "train.yaml:2: gpu_milli: expected a non-negative integer, got \"0.5\"");
  EXPECT_EQ(ParseError("name: x\nmemory_mib: -1\n"),
            "train.yaml:2: memory_mib: expected a non-negative integer, got \"-1\"");
  // The range of gpu_milli and the profile's existence are the server's to judge.
  absl::StatusOr<std::vector<WorkloadDocument>> docs =
      ParseWorkloadYaml("name: x\ngpu_milli: 5000\n", "x.yaml");
  ASSERT_OK(docs);
  EXPECT_EQ((*docs)[0].spec.per_replica().gpu_milli(), 5000u);
}

TEST(WorkloadYamlTest, BadTypeNamesFileLineAndField) {
  EXPECT_EQ(ParseError("name: x\nreplicas: two\n"),
            "train.yaml:2: replicas: expected a non-negative integer, got \"two\"");
  EXPECT_EQ(ParseError("name: x\npriority: high\n"),
            "train.yaml:2: priority: expected an integer, got \"high\"");
  EXPECT_EQ(ParseError("name: [a, b]\n"), "train.yaml:1: name: expected a string, got a list");
  EXPECT_EQ(ParseError("name: x\ngpu_models: {a: b}\n"),
            "train.yaml:2: gpu_models: expected a list of strings, got a mapping");
  EXPECT_EQ(ParseError("name: x\nrun:\n  command: [a, [b]]\n"),
            "train.yaml:3: run.command[1]: expected a string, got a list");
  EXPECT_EQ(ParseError("name: x\nrun:\n  env: {A: [1]}\n"),
            "train.yaml:3: run.env.A: expected a string, got a list");
  EXPECT_EQ(ParseError("name: x\nrun: python\n"),
            "train.yaml:2: run: expected a mapping, got \"python\"");
  EXPECT_EQ(ParseError("- name: x\n"), "train.yaml:1: expected a mapping, got a list");
}

TEST(WorkloadYamlTest, QuotedNumbersAreStrings) {
  EXPECT_EQ(ParseError("name: x\nreplicas: \"2\"\n"),
            "train.yaml:2: replicas: expected a non-negative integer, got \"2\"");
}

TEST(WorkloadYamlTest, FractionsAndOverflowAreRejected) {
  EXPECT_EQ(ParseError("name: x\ngpus_per_replica: 1.5\n"),
            "train.yaml:2: gpus_per_replica: expected a non-negative integer, got \"1.5\"");
  EXPECT_EQ(ParseError("name: x\nreplicas: 4294967296\n"),
            "train.yaml:2: replicas: 4294967296 is out of range (at most 4294967295)");
  EXPECT_EQ(ParseError("name: x\npriority: 3000000000\n"),
            "train.yaml:2: priority: 3000000000 is out of range [-2147483648, 2147483647]");
}

TEST(WorkloadYamlTest, NegativeCountsAreRejected) {
  EXPECT_EQ(ParseError("name: x\nreplicas: -2\n"),
            "train.yaml:2: replicas: expected a non-negative integer, got \"-2\"");
  EXPECT_EQ(ParseError("name: x\ngpus_per_replica: -1\n"),
            "train.yaml:2: gpus_per_replica: expected a non-negative integer, got \"-1\"");
  EXPECT_EQ(ParseError("name: x\nmin_gpu_memory_mib: -1\n"),
            "train.yaml:2: min_gpu_memory_mib: expected a non-negative integer, got \"-1\"");
}

TEST(WorkloadYamlTest, NegativeSignedValuesAreKept) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs =
      ParseWorkloadYaml("name: x\npriority: -5\nrun:\n  sim_exit_code: -1\n", "x.yaml");
  ASSERT_OK(docs);
  EXPECT_EQ((*docs)[0].spec.priority(), -5);
  EXPECT_EQ((*docs)[0].spec.run().sim_exit_code(), -1);
}

TEST(WorkloadYamlTest, SemanticChecksAreLeftToTheServer) {
  // Zero replicas, an unknown GPU model and a bad name are representable: the server judges.
  absl::StatusOr<std::vector<WorkloadDocument>> docs = ParseWorkloadYaml(
      "name: Not A Valid Name!\nreplicas: 0\ngpu_models: [NoSuchGPU]\npriority: 99999\n", "x.yaml");
  ASSERT_OK(docs);
  EXPECT_EQ((*docs)[0].spec.name(), "Not A Valid Name!");
}

TEST(WorkloadYamlTest, UnknownKeysAreErrors) {
  EXPECT_EQ(ParseError("name: x\ngpus: 8\n"),
            "train.yaml:2: gpus: unknown field; did you mean \"gpus_per_replica\"?");
  EXPECT_EQ(ParseError("name: x\nreplica: 2\n"),
            "train.yaml:2: replica: unknown field; did you mean \"replicas\"?");
  EXPECT_THAT(ParseError("name: x\nzzz: 1\n"),
              HasSubstr("train.yaml:2: zzz: unknown field; expected one of: name, tenant"));
  EXPECT_EQ(ParseError("name: x\nrun:\n  imgae: foo\n"),
            "train.yaml:3: run.imgae: unknown field; did you mean \"image\"?");
}

TEST(WorkloadYamlTest, DuplicateKeysAreErrors) {
  EXPECT_EQ(ParseError("name: x\nreplicas: 1\nreplicas: 2\n"),
            "train.yaml:3: replicas: duplicate field");
}

TEST(WorkloadYamlTest, BadDurationNamesFieldAndForms) {
  EXPECT_EQ(ParseError("name: x\nduration: 5 minutes\n"),
            "train.yaml:2: duration: expected a duration such as 30s, 5m, 1h30m or 250ms, got "
            "\"5 minutes\"");
  EXPECT_THAT(ParseError("name: x\nduration: 30\n"), HasSubstr("train.yaml:2: duration: "));
  EXPECT_THAT(ParseError("name: x\nduration: -5s\n"), HasSubstr("train.yaml:2: duration: "));
}

TEST(WorkloadYamlTest, EnumsByLowerCaseName) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs = ParseWorkloadYaml(
      "name: x\nclass: interactive\ntopology: same_nvlink_domain\nrun: {sim_outcome: fail}\n",
      "x.yaml");
  ASSERT_OK(docs);
  EXPECT_EQ((*docs)[0].spec.workload_class(), v1::WORKLOAD_CLASS_INTERACTIVE);
  EXPECT_EQ((*docs)[0].spec.topology(), v1::TOPOLOGY_REQUIREMENT_SAME_NVLINK_DOMAIN);
  EXPECT_EQ((*docs)[0].spec.run().sim_outcome(), v1::SIM_OUTCOME_FAIL);

  EXPECT_EQ(ParseError("name: x\nclass: train\n"),
            "train.yaml:2: class: expected one of training, inference, batch, interactive, got "
            "\"train\"");
  EXPECT_EQ(ParseError("name: x\ntopology: unspecified\n"),
            "train.yaml:2: topology: expected one of none, same_node, same_nvlink_domain, "
            "same_rack, got \"unspecified\"");
  EXPECT_EQ(ParseError("name: x\nrun: {sim_outcome: crash}\n"),
            "train.yaml:2: run.sim_outcome: expected one of succeed, fail, got \"crash\"");
}

TEST(WorkloadYamlTest, ScalarCommandAndUnquotedEnvValues) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs =
      ParseWorkloadYaml("name: x\nrun:\n  command: sleep 5\n  env: {N: 3, B: true}\n", "x.yaml");
  ASSERT_OK(docs);
  EXPECT_THAT((*docs)[0].spec.run().command(), ElementsAre("sleep 5"));
  EXPECT_THAT((*docs)[0].spec.run().env(), UnorderedElementsAre(Pair("N", "3"), Pair("B", "true")));
}

TEST(WorkloadYamlTest, KeyWithoutValueIsAbsent) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs =
      ParseWorkloadYaml("name: x\ntenant:\nreplicas:\n", "x.yaml");
  ASSERT_OK(docs);
  EXPECT_TRUE((*docs)[0].spec.tenant().empty());
  EXPECT_EQ((*docs)[0].spec.replicas(), 0u);
}

TEST(WorkloadYamlTest, SyntaxErrorsNameTheLine) {
  EXPECT_THAT(ParseError("name: x\nrun: [a\n"), HasSubstr("train.yaml:"));
  EXPECT_THAT(ParseError("name: x\nrun: [a\n"), HasSubstr("invalid YAML"));
}

// Found by fuzzing (tests/fuzz/workload_yaml_fuzzer.cc): on a comma where a document may start,
// yaml-cpp 0.7's LoadAll yields empty documents at that place for ever, so gpufedctl hung (its
// memory growing) on such a typo instead of naming the line.
TEST(WorkloadYamlTest, AStrayCommaIsAnErrorNotAHang) {
  EXPECT_EQ(ParseError("name: x\n---\n,\n"),
            "train.yaml:3: invalid YAML: unexpected \",\" at column 1");
  EXPECT_EQ(ParseError("# a comment\n  , name: x\n"),
            "train.yaml:2: invalid YAML: unexpected \",\" at column 3");
  EXPECT_THAT(ParseError("- name: x\n,"), HasSubstr("train.yaml:2: invalid YAML"));
}

TEST(WorkloadYamlTest, EmptyFileIsAnError) {
  EXPECT_EQ(ParseError("# nothing here\n", "empty.yaml"), "empty.yaml: no workload in the file");
}

TEST(WorkloadYamlTest, MissingFileIsNotFound) {
  absl::StatusOr<std::vector<WorkloadDocument>> docs = LoadWorkloadFile("/nonexistent/x.yaml");
  EXPECT_EQ(docs.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(docs.status().message(), HasSubstr("/nonexistent/x.yaml"));
}

}  // namespace
}  // namespace gpufed::cli
