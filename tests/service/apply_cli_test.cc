// `gpufedctl apply` against the real server in-process (issue #11): the example clusters file
// passes the server's rules, a dry run stores nothing, applying twice changes nothing the second
// time, and the declarations read back as written. The CLI's own parsing and output are tested
// against a fake server (tests/cli); this is the two together.

#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/service/in_process_server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ApplyCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(started_, testing::StartInProcessServer(dir_.path()));
  }
  void TearDown() override {
    if (started_.server) started_.server->Shutdown();
  }

  // Runs gpufedctl with the admin token (or `token`) and no config file; returns the exit code.
  int Run(std::vector<std::string> args, const std::string& token = "") {
    out_.str("");
    err_.str("");
    args.insert(args.begin(), {"gpufedctl", "--insecure-plaintext", "--server", started_.address,
                               "--token", token.empty() ? started_.admin_token : token});
    std::vector<const char*> argv;
    argv.reserve(args.size());
    for (const std::string& a : args) argv.push_back(a.c_str());
    cli::CliIo io;
    io.out = &out_;
    io.err = &err_;
    io.env = [this](absl::string_view name) -> std::optional<std::string> {
      if (name == "HOME") return dir_.path();
      return std::nullopt;
    };
    return cli::RunCli(static_cast<int>(argv.size()), argv.data(), io);
  }

  testing::TempDir dir_{"gpufed-apply-cli"};
  testing::InProcessServer started_;
  std::ostringstream out_;
  std::ostringstream err_;
};

const std::string kExample = std::string(GPUFED_SOURCE_DIR) + "/examples/clusters.yaml";

TEST_F(ApplyCliTest, TheExampleAppliesOnceAndThenChangesNothing) {
  ASSERT_EQ(Run({"apply", "-f", kExample, "--dry-run"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("4 cluster(s): 4 added (dry run: nothing was stored)\n"));
  ASSERT_EQ(Run({"clusters", "declarations", "-o", "json"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "{\"declarations\":[]}\n");

  ASSERT_EQ(Run({"apply", "-f", kExample}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("onprem-dgx-fra"));
  EXPECT_THAT(out_.str(), HasSubstr("\n4 cluster(s): 4 added\n"));

  ASSERT_EQ(Run({"apply", "-f", kExample}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\n4 cluster(s): 4 unchanged\n"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("added")));

  ASSERT_EQ(Run({"clusters", "declarations"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("onprem-dgx-fra   onprem"));
  EXPECT_THAT(out_.str(), HasSubstr("eu-west=14ms,us-east=92ms"));
  // Both on-demand lines of the EU cloud are kept (history), in the book's order.
  EXPECT_THAT(out_.str(), HasSubstr("on-demand   3.90       2026-07-01T00:00:00Z\n"));
  EXPECT_THAT(out_.str(), HasSubstr("on-demand   4.10       2026-01-01T00:00:00Z\n"));
}

TEST_F(ApplyCliTest, TheEuInferenceExampleIsAcceptedAndGetShowsItsRules) {
  absl::StatusOr<std::string> user =
      testing::BootstrapTenant(started_.address, started_.admin_token, "acme", "research");
  ASSERT_OK(user);
  ASSERT_EQ(Run({"submit", "-f", std::string(GPUFED_SOURCE_DIR) + "/examples/inference-eu.yaml",
                 "--tenant", "acme", "--project", "research"},
                *user),
            0)
      << err_.str();
  const std::string created = out_.str();  // "workload/ID inference-eu created"
  ASSERT_THAT(created, ::testing::StartsWith("workload/"));
  const std::string id = created.substr(9, created.find(' ') - 9);
  ASSERT_EQ(Run({"get", id}, *user), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("Jurisdictions:      eu, de\n"));
  EXPECT_THAT(out_.str(), HasSubstr("Max price:          4.00 per GPU-hour\n"));
  EXPECT_THAT(out_.str(),
              HasSubstr("Objective:          latency (clients in eu-west, max RTT 30ms)\n"));
}

TEST_F(ApplyCliTest, OnlyAPlatformAdminApplies) {
  absl::StatusOr<std::string> user =
      testing::BootstrapTenant(started_.address, started_.admin_token, "acme", "research");
  ASSERT_OK(user);
  EXPECT_EQ(Run({"apply", "-f", kExample}, *user), 1);
  EXPECT_THAT(err_.str(), HasSubstr("error: PERMISSION_DENIED"));
}

TEST_F(ApplyCliTest, AServerRefusalPointsAtTheLineOfTheFile) {
  const std::string path = dir_.path() + "/clusters.yaml";
  std::ofstream(path) << "clusters:\n"
                         "  - name: c1\n"
                         "    prices:\n"
                         "      - model: H100-80GB\n"
                         "        mig_profile: 9g.99gb\n"
                         "        capacity: spot\n"
                         "        per_hour: 1\n"
                         "        effective_from: 2026-01-01T00:00:00Z\n";
  EXPECT_EQ(Run({"apply", "-f", path}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("error: INVALID_ARGUMENT: " + path +
                                    ":5: declarations[0].prices[0].mig_profile"));
}

}  // namespace
}  // namespace gpufed
