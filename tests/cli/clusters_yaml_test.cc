// The clusters file of `gpufedctl apply -f` (cli/clusters_yaml.h): what it reads, that prices are
// exact, and that a bad file is refused naming the line and the field.

#include "cli/clusters_yaml.h"

#include <set>
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
std::string ParseError(const std::string& yaml) {
  absl::StatusOr<ClustersFile> file = ParseClustersYaml(yaml, "clusters.yaml");
  EXPECT_THAT(file, StatusIs(absl::StatusCode::kInvalidArgument)) << "parsed:\n" << yaml;
  return std::string(file.status().message());
}

// One cluster with one price line whose fields are given as YAML lines (indented by the caller).
std::string OnePrice(const std::string& price_lines) {
  return "clusters:\n"
         "  - name: c1\n"
         "    prices:\n"
         "      - model: H100-80GB\n" +
         price_lines;
}

TEST(ClustersYamlTest, TheExampleDeclaresFourClustersInThreeJurisdictions) {
  absl::StatusOr<ClustersFile> file = LoadClustersFile(ExamplePath("clusters.yaml"));
  ASSERT_OK(file);
  std::vector<std::string> names;
  std::set<std::string> jurisdictions;
  for (const v1::ClusterDeclaration& d : file->declarations) {
    names.push_back(d.cluster());
    jurisdictions.insert(d.jurisdiction());
    EXPECT_FALSE(d.prices().empty()) << d.cluster();
    // Every cluster has a round-trip time from both client regions.
    EXPECT_EQ(d.client_rtts().count("eu-west"), 1u) << d.cluster();
    EXPECT_EQ(d.client_rtts().count("us-east"), 1u) << d.cluster();
    for (const v1::PriceEntry& p : d.prices()) {
      EXPECT_NE(p.capacity_type(), v1::CAPACITY_TYPE_UNSPECIFIED) << d.cluster();
      EXPECT_GT(p.effective_from().seconds(), 0) << d.cluster();
    }
  }
  EXPECT_THAT(names, ElementsAre("onprem-dgx-fra", "cloud-eu-a100", "cloud-us-h100", "edge-l4"));
  EXPECT_THAT(jurisdictions, UnorderedElementsAre("de", "eu", "us"));

  // The on-prem DGX site: owned H100s, committed capacity at no price, in Germany.
  const v1::ClusterDeclaration& dgx = file->declarations[0];
  EXPECT_EQ(dgx.provider(), "onprem");
  EXPECT_EQ(dgx.default_capacity(), v1::CAPACITY_TYPE_COMMITTED);
  EXPECT_THAT(dgx.compliance_labels().labels(), ElementsAre("gdpr", "sovereign"));
  EXPECT_EQ(dgx.prices(0).gpu_model(), "H100-80GB");
  EXPECT_EQ(dgx.prices(0).capacity_type(), v1::CAPACITY_TYPE_COMMITTED);
  EXPECT_EQ(dgx.prices(0).price_per_hour_micros(), 0);
  EXPECT_EQ(dgx.prices(1).mig_profile(), "3g.40gb");
  EXPECT_EQ(dgx.client_rtts().at("eu-west").nanos(), 14'000'000);

  // The EU cloud: on-demand (with its history) and spot A100s.
  const v1::ClusterDeclaration& eu = file->declarations[1];
  EXPECT_EQ(eu.default_capacity(), v1::CAPACITY_TYPE_ON_DEMAND);
  ASSERT_EQ(eu.prices_size(), 4);
  EXPECT_EQ(eu.prices(0).price_per_hour_micros(), 4'100'000);
  EXPECT_EQ(eu.prices(1).price_per_hour_micros(), 3'900'000);
  EXPECT_EQ(eu.prices(1).effective_from().seconds(), 1782864000);  // 2026-07-01T00:00:00Z
  EXPECT_EQ(eu.prices(2).capacity_type(), v1::CAPACITY_TYPE_SPOT);
  EXPECT_EQ(eu.prices(2).price_per_hour_micros(), 1'640'000);

  // The edge site declares that it has no compliance labels (not "left to the agent").
  const v1::ClusterDeclaration& edge = file->declarations[3];
  EXPECT_EQ(edge.prices(0).gpu_model(), "L4");
  EXPECT_TRUE(edge.has_compliance_labels());
  EXPECT_TRUE(edge.compliance_labels().labels().empty());
  EXPECT_EQ(edge.client_rtts().at("eu-west").nanos(), 145'000'000);

  // Where each part is, by the server's names.
  EXPECT_EQ(file->origins.at("declarations[0]"), ExamplePath("clusters.yaml") + ":9");
  EXPECT_EQ(file->origins.at("declarations[1].prices[2]"), ExamplePath("clusters.yaml") + ":48");
}

TEST(ClustersYamlTest, PricesAreReadExactlyQuotedOrNot) {
  for (const auto& [text, micros] : std::vector<std::pair<std::string, int64_t>>{
           {"3.20", 3'200'000},
           {"\"3.20\"", 3'200'000},
           {"19.99", 19'990'000},  // 19.99 as a double is 19.989999...
           {"0.000001", 1},
           {"12", 12'000'000},
           {"'0.1'", 100'000}}) {
    absl::StatusOr<ClustersFile> file =
        ParseClustersYaml(OnePrice("        capacity: spot\n        per_hour: " + text +
                                   "\n        effective_from: 2026-12-01T00:00:00Z\n"),
                          "clusters.yaml");
    ASSERT_OK(file) << text;
    EXPECT_EQ(file->declarations[0].prices(0).price_per_hour_micros(), micros) << text;
  }
}

TEST(ClustersYamlTest, LeftOutMeansNotDeclared) {
  absl::StatusOr<ClustersFile> file =
      ParseClustersYaml("clusters:\n  - name: c1\n    jurisdiction: eu\n", "clusters.yaml");
  ASSERT_OK(file);
  ASSERT_EQ(file->declarations.size(), 1u);
  const v1::ClusterDeclaration& d = file->declarations[0];
  EXPECT_EQ(d.jurisdiction(), "eu");
  EXPECT_TRUE(d.provider().empty());
  EXPECT_FALSE(d.has_compliance_labels()) << "left to the agent's report";
  EXPECT_EQ(d.default_capacity(), v1::CAPACITY_TYPE_UNSPECIFIED);
  EXPECT_TRUE(d.prices().empty());
}

TEST(ClustersYamlTest, TimesAreRfc3339WithOffsets) {
  absl::StatusOr<ClustersFile> file =
      ParseClustersYaml(OnePrice("        capacity: on-demand\n        per_hour: 1\n"
                                 "        effective_from: 2026-12-01T02:00:00.5+02:00\n"),
                        "clusters.yaml");
  ASSERT_OK(file);
  const google::protobuf::Timestamp& t = file->declarations[0].prices(0).effective_from();
  EXPECT_EQ(t.seconds(), 1796083200);  // 2026-12-01T00:00:00Z
  EXPECT_EQ(t.nanos(), 500'000'000);
}

TEST(ClustersYamlTest, BadValuesNameTheLineAndTheField) {
  EXPECT_EQ(ParseError(OnePrice("        capacity: reserved\n")),
            "clusters.yaml:5: clusters[0].prices[0].capacity: expected one of on-demand, spot, "
            "committed, got \"reserved\"");
  EXPECT_EQ(
      ParseError(OnePrice("        capacity: spot\n        per_hour: 3,20\n")),
      "clusters.yaml:6: clusters[0].prices[0].per_hour: expected a price such as 3.20 or 0.45, "
      "got \"3,20\"");
  EXPECT_THAT(ParseError(OnePrice("        capacity: spot\n        per_hour: 0.0000001\n")),
              HasSubstr("clusters.yaml:6: clusters[0].prices[0].per_hour: "));
  EXPECT_EQ(ParseError(OnePrice("        capacity: spot\n        per_hour: -1\n")),
            "clusters.yaml:6: clusters[0].prices[0].per_hour: expected a price such as 3.20 or "
            "0.45, got \"-1\"");
  EXPECT_EQ(ParseError(OnePrice("        capacity: spot\n        per_hour: 1\n"
                                "        effective_from: December 1st\n")),
            "clusters.yaml:7: clusters[0].prices[0].effective_from: expected an RFC 3339 time "
            "such as 2026-12-01T00:00:00Z, got \"December 1st\"");
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n    latency:\n      eu-west: soon\n"),
            "clusters.yaml:4: clusters[0].latency.eu-west: expected a duration such as 30s, 5m, "
            "1h30m or 250ms, got \"soon\"");
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n    latency: {eu-west: 1500ns}\n"),
            "clusters.yaml:3: clusters[0].latency.eu-west: must be a whole number of "
            "microseconds");
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n    default_capacity: cheap\n"),
            "clusters.yaml:3: clusters[0].default_capacity: expected one of on-demand, spot, "
            "committed, got \"cheap\"");
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n    compliance_labels: {a: b}\n"),
            "clusters.yaml:3: clusters[0].compliance_labels: expected a list of strings, got a "
            "mapping");
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n    prices: {model: L4}\n"),
            "clusters.yaml:3: clusters[0].prices: expected a list, got a mapping");
  EXPECT_EQ(ParseError("clusters: c1\n"), "clusters.yaml:1: clusters: expected a list, got \"c1\"");
}

TEST(ClustersYamlTest, UnknownAndDuplicateKeysAreRefused) {
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n    latncy: {eu-west: 1ms}\n"),
            "clusters.yaml:3: clusters[0].latncy: unknown field; did you mean \"latency\"?");
  EXPECT_EQ(ParseError(OnePrice("        capacity: spot\n        cost: 1\n")),
            "clusters.yaml:6: clusters[0].prices[0].cost: unknown field; expected one of: model, "
            "mig_profile, capacity, per_hour, effective_from");
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n    region: a\n    region: b\n"),
            "clusters.yaml:4: clusters[0].region: duplicate field");
  EXPECT_THAT(ParseError("cluster:\n  - name: c1\n"),
              HasSubstr("clusters.yaml:1: cluster: unknown field; did you mean \"clusters\"?"));
}

TEST(ClustersYamlTest, MissingRequiredFieldsNameTheEntry) {
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n  - region: eu-west-1\n"),
            "clusters.yaml:3: clusters[1].name: missing; every cluster needs its name");
  EXPECT_EQ(ParseError(OnePrice("        capacity: spot\n        per_hour: 1\n")),
            "clusters.yaml:4: clusters[0].prices[0].effective_from: missing; when the price takes "
            "effect, e.g. 2026-12-01T00:00:00Z (a line in force is never changed; a later line "
            "takes over)");
  EXPECT_THAT(ParseError(OnePrice("        per_hour: 1\n")),
              HasSubstr("clusters.yaml:4: clusters[0].prices[0].capacity: missing; one of "
                        "on-demand, spot, committed"));
  EXPECT_THAT(ParseError(OnePrice("        capacity: spot\n")),
              HasSubstr("clusters.yaml:4: clusters[0].prices[0].per_hour: missing"));
  EXPECT_THAT(ParseError("clusters:\n  - name: c1\n    prices:\n      - capacity: spot\n"),
              HasSubstr("clusters.yaml:4: clusters[0].prices[0].model: missing"));
}

TEST(ClustersYamlTest, AClusterDeclaredTwiceNamesBothLines) {
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n  - name: c2\n  - name: c1\n"),
            "clusters.yaml:4: clusters[2].name: cluster \"c1\" is already declared at "
            "clusters.yaml:2");
}

TEST(ClustersYamlTest, EmptyOrManyDocumentsOrBadYamlAreRefused) {
  EXPECT_EQ(ParseError(""), "clusters.yaml: no cluster in the file");
  EXPECT_EQ(ParseError("# nothing\n"), "clusters.yaml: no cluster in the file");
  EXPECT_THAT(ParseError("clusters: []\n"), HasSubstr("no cluster in the file"));
  EXPECT_THAT(ParseError("clusters:\n  - name: a\n---\nclusters:\n  - name: b\n"),
              HasSubstr("clusters.yaml:4: one YAML document expected"));
  EXPECT_THAT(ParseError("clusters:\n  - name: [a\n"), HasSubstr("invalid YAML"));
}

TEST(ClustersYamlTest, ServerErrorsPointAtTheLineOfWhatTheyName) {
  absl::StatusOr<ClustersFile> file = LoadClustersFile(ExamplePath("clusters.yaml"));
  ASSERT_OK(file);
  const std::string path = ExamplePath("clusters.yaml");
  const auto pointed = [&](absl::StatusCode code, const std::string& message) {
    return std::string(PointAtFile(*file, absl::Status(code, message)).message());
  };
  // The most precise part named: the field of a price line, the line, the cluster.
  EXPECT_EQ(pointed(absl::StatusCode::kInvalidArgument,
                    "declarations[1].prices[3].mig_profile: \"3g.40gb\" ..."),
            path + ":53: declarations[1].prices[3].mig_profile: \"3g.40gb\" ...");
  EXPECT_EQ(pointed(absl::StatusCode::kFailedPrecondition,
                    "declarations[1].prices[0]: 4.100000 is in force since ..."),
            path + ":40: declarations[1].prices[0]: 4.100000 is in force since ...");
  EXPECT_EQ(pointed(absl::StatusCode::kInvalidArgument, "declarations[2].zone[3]: bad"),
            path + ":65: declarations[2].zone[3]: bad");
  EXPECT_EQ(pointed(absl::StatusCode::kInvalidArgument, "declarations[0]: named twice"),
            path + ":9: declarations[0]: named twice");
  EXPECT_EQ(pointed(absl::StatusCode::kInvalidArgument,
                    "declarations[3].client_rtts[eu-west]: must be at most 10s"),
            path + ":96: declarations[3].client_rtts[eu-west]: must be at most 10s");
  // "declarations[1]" is not the start of "declarations[12]"; other messages are left alone.
  EXPECT_EQ(pointed(absl::StatusCode::kInvalidArgument, "declarations[12]: x"),
            "declarations[12]: x");
  EXPECT_EQ(pointed(absl::StatusCode::kPermissionDenied, "platform admins only"),
            "platform admins only");
  EXPECT_EQ(PointAtFile(*file, absl::PermissionDeniedError("x")).code(),
            absl::StatusCode::kPermissionDenied);
}

// Found by fuzzing (tests/fuzz/clusters_yaml_fuzzer.cc): yaml-cpp 0.7's LoadAll never returns on
// a comma where a document may start (see workload_yaml_test.cc); gpufedctl apply hung on it.
TEST(ClustersYamlTest, AStrayCommaIsAnErrorNotAHang) {
  EXPECT_EQ(ParseError("clusters:\n  - name: c1\n...\n,\n"),
            "clusters.yaml:4: invalid YAML: unexpected \",\" at column 1");
}

}  // namespace
}  // namespace gpufed::cli
