// gpufed-server's configuration (server/config.cc): the placement keys from the YAML file and
// their flags, the TLS settings, and the clear errors for bad values. Needs nothing running.

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/config.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed::server {
namespace {

using ::gpufed::testing::IsOk;
using ::gpufed::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class ServerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The environment variables the parser reads must not leak in from the caller.
    for (const char* name : {"GPUFED_SERVER_CONFIG", "GPUFED_PLACEMENT_POLICY",
                             "GPUFED_TLS_CERT_FILE", "GPUFED_TLS_KEY_FILE"}) {
      unsetenv(name);
    }
  }
  void TearDown() override { unsetenv("GPUFED_PLACEMENT_POLICY"); }

  std::string WriteConfig(const std::string& text) {
    std::string path = dir_.path() + "/server.yaml";
    std::ofstream(path) << text;
    return path;
  }

  // Plaintext unless the test gives TLS settings of its own.
  static absl::StatusOr<ServerConfig> Load(std::vector<std::string> args, bool plaintext = true) {
    if (plaintext) args.insert(args.begin(), "--insecure-plaintext");
    args.insert(args.begin(), "gpufed-server");
    std::vector<char*> argv;
    argv.reserve(args.size());
    for (std::string& a : args) argv.push_back(a.data());
    return LoadServerConfig(static_cast<int>(argv.size()), argv.data());
  }

  gpufed::testing::TempDir dir_{"gpufed-server-config"};
};

TEST_F(ServerConfigTest, PlacementDefaults) {
  absl::StatusOr<ServerConfig> config = Load({});
  ASSERT_OK(config);
  EXPECT_EQ(config->placement_policy, "gpufed");
  EXPECT_EQ(config->placement_seed, 1);
  EXPECT_TRUE(config->mig_partitioning);
}

TEST_F(ServerConfigTest, PlacementKeysFromTheFileAndFlagsWin) {
  const std::string file =
      WriteConfig("placement_policy: fgd\nplacement_seed: 42\nmig_partitioning: false\n");
  absl::StatusOr<ServerConfig> config = Load({"--config", file});
  ASSERT_OK(config);
  EXPECT_EQ(config->placement_policy, "fgd");
  EXPECT_EQ(config->placement_seed, 42);
  EXPECT_FALSE(config->mig_partitioning);

  config = Load({"--config", file, "--placement-policy", "best-fit", "--placement-seed", "7",
                 "--mig-partitioning", "true"});
  ASSERT_OK(config);
  EXPECT_EQ(config->placement_policy, "best-fit");
  EXPECT_EQ(config->placement_seed, 7);
  EXPECT_TRUE(config->mig_partitioning);

  setenv("GPUFED_PLACEMENT_POLICY", "gpu-packing", 1);
  config = Load({"--config", file});
  ASSERT_OK(config);
  EXPECT_EQ(config->placement_policy, "gpu-packing") << "the environment beats the file";
}

TEST_F(ServerConfigTest, ArchiveAfterHoursFromTheFileOrAFlagAndItsRange) {
  absl::StatusOr<ServerConfig> config = Load({});
  ASSERT_OK(config);
  EXPECT_EQ(config->archive_after_hours, 24 * 7);
  config = Load({"--config", WriteConfig("archive_after_hours: 0\n")});
  ASSERT_OK(config);
  EXPECT_EQ(config->archive_after_hours, 0);
  EXPECT_THAT(Load({"--config", WriteConfig("archive_after_hours: -1\n")}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Load({"--archive-after-hours", "-5"}), StatusIs(absl::StatusCode::kInvalidArgument));
  config = Load({"--archive-after-hours", "48"});
  ASSERT_OK(config);
  EXPECT_EQ(config->archive_after_hours, 48);
}

TEST_F(ServerConfigTest, EveryPolicyNameIsAccepted) {
  for (const char* policy :
       {"random", "first-fit", "best-fit", "dot-product", "gpu-packing", "fgd", "gpufed"}) {
    absl::StatusOr<ServerConfig> config = Load({"--placement-policy", policy});
    ASSERT_OK(config) << policy;
    EXPECT_EQ(config->placement_policy, policy);
  }
}

TEST_F(ServerConfigTest, UnknownPolicyInTheFileIsRejectedNamingTheKeyAndTheChoices) {
  absl::StatusOr<ServerConfig> config =
      Load({"--config", WriteConfig("placement_policy: tetris\n")});
  ASSERT_THAT(config, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(config.status().message()),
              StartsWith("placement_policy: unknown policy \"tetris\""));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("fgd"));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("gpufed"));
}

TEST_F(ServerConfigTest, UnknownPolicyFlagOrEnvironmentIsRejectedNamingTheFlag) {
  absl::StatusOr<ServerConfig> config = Load({"--placement-policy", "tetris"});
  ASSERT_THAT(config, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("--placement-policy"));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("tetris"));

  setenv("GPUFED_PLACEMENT_POLICY", "tetris", 1);
  config = Load({});
  ASSERT_THAT(config, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("tetris"));
}

TEST_F(ServerConfigTest, BadPlacementValuesInTheFileNameTheKeyAndLine) {
  absl::StatusOr<ServerConfig> config =
      Load({"--config", WriteConfig("log_level: info\nmig_partitioning: sometimes\n")});
  ASSERT_THAT(config, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(":2: mig_partitioning: "));

  config = Load({"--config", WriteConfig("placement_seed: lots\n")});
  ASSERT_THAT(config, Not(IsOk()));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(":1: placement_seed: "));

  config = Load({"--config", WriteConfig("placement: gpufed\n")});
  ASSERT_THAT(config, Not(IsOk()));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("unknown key \"placement\""));
}

TEST_F(ServerConfigTest, WithoutACertificateOrThePlaintextFlagTheServerDoesNotStart) {
  absl::StatusOr<ServerConfig> config = Load({}, /*plaintext=*/false);
  ASSERT_THAT(config, StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("--insecure-plaintext"));
  EXPECT_THAT(std::string(config.status().message()), HasSubstr("--tls-cert-file"));

  config = Load({}, /*plaintext=*/true);
  ASSERT_OK(config);
  EXPECT_TRUE(config->insecure_plaintext);
}

TEST_F(ServerConfigTest, TlsFilesFromTheFileTheEnvironmentOrFlags) {
  absl::StatusOr<ServerConfig> config =
      Load({"--config", WriteConfig("tls_cert_file: /etc/gpufed/tls.crt\n"
                                    "tls_key_file: /etc/gpufed/tls.key\n"
                                    "tls_reload_interval_seconds: 30\n")},
           /*plaintext=*/false);
  ASSERT_OK(config);
  EXPECT_EQ(config->tls_cert_file, "/etc/gpufed/tls.crt");
  EXPECT_EQ(config->tls_key_file, "/etc/gpufed/tls.key");
  EXPECT_EQ(config->tls_reload_interval_seconds, 30);
  EXPECT_FALSE(config->insecure_plaintext);

  setenv("GPUFED_TLS_CERT_FILE", "/env/tls.crt", 1);
  setenv("GPUFED_TLS_KEY_FILE", "/env/tls.key", 1);
  config = Load({}, /*plaintext=*/false);
  ASSERT_OK(config);
  EXPECT_EQ(config->tls_cert_file, "/env/tls.crt");
  config = Load({"--tls-cert-file", "/flag/tls.crt"}, /*plaintext=*/false);
  ASSERT_OK(config);
  EXPECT_EQ(config->tls_cert_file, "/flag/tls.crt");
  EXPECT_EQ(config->tls_key_file, "/env/tls.key");
  unsetenv("GPUFED_TLS_CERT_FILE");
  unsetenv("GPUFED_TLS_KEY_FILE");
}

TEST_F(ServerConfigTest, TlsAndPlaintextTogetherOrHalfAPairAreRefused) {
  EXPECT_THAT(Load({"--tls-cert-file", "a.crt", "--tls-key-file", "a.key"}, /*plaintext=*/true),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("give one")));
  EXPECT_THAT(Load({"--config", WriteConfig("insecure_plaintext: true\ntls_cert_file: a.crt\n")},
                   /*plaintext=*/false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("insecure_plaintext")));
  EXPECT_THAT(Load({"--tls-cert-file", "a.crt"}, /*plaintext=*/false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tls_key_file")));
  EXPECT_THAT(Load({"--tls-key-file", "a.key"}, /*plaintext=*/false),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tls_cert_file")));
  EXPECT_THAT(Load({"--config", WriteConfig("insecure_plaintext: true\n")}, /*plaintext=*/false),
              IsOk());
}

}  // namespace
}  // namespace gpufed::server

namespace gpufed::server {
namespace {

class LimitsConfigTest : public ::testing::Test {
 protected:
  static absl::StatusOr<ServerConfig> Load(std::vector<std::string> args) {
    args.insert(args.begin(), {"gpufed-server", "--insecure-plaintext"});
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    return LoadServerConfig(static_cast<int>(argv.size()), argv.data());
  }
  std::string WriteConfig(const std::string& text) {
    std::string path = dir_.path() + "/server.yaml";
    std::ofstream(path) << text;
    return path;
  }
  gpufed::testing::TempDir dir_{"gpufed-limits-config"};
};

TEST_F(LimitsConfigTest, DefaultsFileAndFlags) {
  unsetenv("GPUFED_SERVER_CONFIG");
  absl::StatusOr<ServerConfig> config = Load({});
  ASSERT_OK(config);
  EXPECT_EQ(config->write_rate_per_second, 1000);
  EXPECT_EQ(config->write_burst, 2000);
  EXPECT_EQ(config->max_watch_streams, 64);
  EXPECT_EQ(config->max_call_seconds, 60);

  const std::string file = WriteConfig(
      "write_rate_per_second: 2.5\nwrite_burst: 10\nmax_watch_streams: 8\nmax_call_seconds: 5\n");
  config = Load({"--config", file});
  ASSERT_OK(config);
  EXPECT_EQ(config->write_rate_per_second, 2.5);
  EXPECT_EQ(config->write_burst, 10);
  EXPECT_EQ(config->max_watch_streams, 8);
  EXPECT_EQ(config->max_call_seconds, 5);

  config = Load({"--config", file, "--write-rate", "0", "--write-burst", "3", "--max-watch-streams",
                 "2", "--max-call-seconds", "30"});
  ASSERT_OK(config);
  EXPECT_EQ(config->write_rate_per_second, 0);
  EXPECT_EQ(config->write_burst, 3);
  EXPECT_EQ(config->max_watch_streams, 2);
  EXPECT_EQ(config->max_call_seconds, 30);
}

TEST_F(LimitsConfigTest, OutOfRangeValuesFromTheFileAreRefusedNamingTheKey) {
  unsetenv("GPUFED_SERVER_CONFIG");
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"write_rate_per_second: -1\n", "write_rate_per_second"},
           {"write_burst: 0\n", "write_burst"},
           {"max_watch_streams: 0\n", "max_watch_streams"},
           {"max_call_seconds: 0\n", "max_call_seconds"},
           {"max_call_seconds: 100000\n", "max_call_seconds"}}) {
    EXPECT_THAT(Load({"--config", WriteConfig(text)}),
                StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(key)))
        << text;
  }
  EXPECT_THAT(Load({"--max-call-seconds", "0"}), Not(IsOk()));
}

}  // namespace
}  // namespace gpufed::server
