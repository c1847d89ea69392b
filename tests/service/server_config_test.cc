// gpufed-server's configuration (server/config.cc): the placement keys from the YAML file and
// their flags, the TLS settings, and the clear errors for bad values. Needs nothing running.

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/config.h"
#include "server/server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed::server {
namespace {

using ::gpufed::testing::IsOk;
using ::gpufed::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

class ServerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The environment variables the parser reads must not leak in from the caller.
    for (const char* name :
         {"GPUFED_SERVER_CONFIG", "GPUFED_PLACEMENT_POLICY", "GPUFED_TLS_CERT_FILE",
          "GPUFED_TLS_KEY_FILE", "GPUFED_CLUSTER_CA_CERT_FILE", "GPUFED_CLUSTER_CA_KEY_FILE",
          "GPUFED_JWT_JWKS_FILE", "GPUFED_JWT_ISSUER", "GPUFED_JWT_AUDIENCE"}) {
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

TEST_F(ServerConfigTest, MeteringKeysFromTheFileOrAFlagAndTheirRange) {
  absl::StatusOr<ServerConfig> config = Load({});
  ASSERT_OK(config);
  EXPECT_EQ(config->mig_basis, "compute");
  EXPECT_EQ(config->meter_interval_seconds, 60);
  config = Load({"--config", WriteConfig("mig_basis: larger\nmeter_interval_seconds: 0\n")});
  ASSERT_OK(config);
  EXPECT_EQ(config->mig_basis, "larger");
  EXPECT_EQ(config->meter_interval_seconds, 0);
  config = Load({"--mig-basis", "memory", "--meter-interval-seconds", "600"});
  ASSERT_OK(config);
  EXPECT_EQ(config->mig_basis, "memory");
  EXPECT_EQ(config->meter_interval_seconds, 600);
  EXPECT_THAT(Load({"--config", WriteConfig("mig_basis: slices\n")}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Load({"--mig-basis", "slices"}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(Load({"--config", WriteConfig("meter_interval_seconds: 3601\n")}),
              StatusIs(absl::StatusCode::kInvalidArgument));
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
    argv.reserve(args.size());
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

namespace gpufed::server {
namespace {

// Secrets (docs/operations.md#secrets): every secret can come from a file, a file holding one
// must not be open to other users, and none is repeated in an error.
class SecretsConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name :
         {"GPUFED_SERVER_CONFIG", "GPUFED_DATABASE_URL", "GPUFED_DATABASE_URL_FILE",
          "GPUFED_TLS_CERT_FILE", "GPUFED_TLS_KEY_FILE"}) {
      unsetenv(name);
    }
  }
  static absl::StatusOr<ServerConfig> Load(std::vector<std::string> args) {
    args.insert(args.begin(), "gpufed-server");
    std::vector<char*> argv;
    argv.reserve(args.size());
    for (std::string& a : args) argv.push_back(a.data());
    return LoadServerConfig(static_cast<int>(argv.size()), argv.data());
  }
  std::string WriteFile(const std::string& name, const std::string& text, mode_t mode) {
    std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }
  ServerConfig Plaintext(const std::string& database_url) {
    ServerConfig config;
    config.grpc_listen = "127.0.0.1:0";
    config.http_listen = "127.0.0.1:0";
    config.data_dir = dir_.path() + "/data";
    config.insecure_plaintext = true;
    config.database_url = database_url;
    return config;
  }
  gpufed::testing::TempDir dir_{"gpufed-secrets-config"};
};

TEST_F(SecretsConfigTest, TheDatabaseUrlComesFromAFile) {
  const std::string file =
      WriteFile("db.url", "host=db.internal dbname=gpufed password=hunter2\n", 0600);
  absl::StatusOr<ServerConfig> config = Load({"--insecure-plaintext", "--database-url-file", file});
  ASSERT_OK(config);
  EXPECT_EQ(config->database_url, "host=db.internal dbname=gpufed password=hunter2");
  config = Load(
      {"--config", WriteFile("server.yaml",
                             "insecure_plaintext: true\ndatabase_url_file: " + file + "\n", 0600)});
  ASSERT_OK(config);
  EXPECT_EQ(config->database_url, "host=db.internal dbname=gpufed password=hunter2");
  EXPECT_THAT(Load({"--insecure-plaintext", "--database-url-file", file, "--database-url", "x"}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("database_url_file")));
}

TEST_F(SecretsConfigTest, ASecretFileOthersCanReadIsRefusedNamingItAndTheFix) {
  const std::string file = WriteFile("db.url", "host=db.internal password=hunter2\n", 0644);
  absl::StatusOr<ServerConfig> config = Load({"--insecure-plaintext", "--database-url-file", file});
  EXPECT_THAT(config,
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(StartsWith("database_url_file: " + file), HasSubstr("chmod 600"))));
  EXPECT_THAT(config.status().message(), Not(HasSubstr("hunter2")));
}

TEST_F(SecretsConfigTest, ATlsKeyFileOthersCanReadStopsTheServer) {
  ServerConfig config = Plaintext("");
  config.insecure_plaintext = false;
  config.tls_cert_file = WriteFile("server.crt", "not read\n", 0644);
  config.tls_key_file = WriteFile("server.key", "not read\n", 0644);
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(config);
  EXPECT_THAT(server.status(), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        AllOf(StartsWith("tls_key_file: " + config.tls_key_file),
                                              HasSubstr("chmod 600"))));
  chmod(config.tls_key_file.c_str(), 0620);  // writable by the group: refused too
  EXPECT_THAT(Server::Create(config).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("chmod 600")));
}

TEST_F(SecretsConfigTest, TheDatabasePasswordIsNotInTheStartUpError) {
  // libpq quotes a malformed part of a URL in its message; the password must not come back.
  for (const std::string url : {"postgresql://gpufed:S3cret%zzPw@127.0.0.1:1/gpufed",
                                "postgresql://gpufed:S3cretPw@127.0.0.1:1/gpufed",
                                "host=127.0.0.1 port=1 password=S3cretPw S3cretPw",
                                "host=127.0.0.1 port=1 user=gpufed password=S3cretPw"}) {
    absl::StatusOr<std::unique_ptr<Server>> server = Server::Create(Plaintext(url));
    ASSERT_FALSE(server.ok()) << url;
    EXPECT_THAT(server.status().message(), Not(HasSubstr("S3cret"))) << url;
  }
}

TEST_F(ServerConfigTest, ClusterCaFilesComeInPairsAndTheLifetimeIsBounded) {
  absl::StatusOr<ServerConfig> config =
      Load({"--config", WriteConfig("cluster_ca_cert_file: /etc/gpufed/cluster-ca.crt\n"
                                    "cluster_ca_key_file: /etc/gpufed/cluster-ca.key\n"
                                    "cluster_cert_lifetime_days: 30\n")});
  ASSERT_OK(config);
  EXPECT_EQ(config->cluster_ca_cert_file, "/etc/gpufed/cluster-ca.crt");
  EXPECT_EQ(config->cluster_ca_key_file, "/etc/gpufed/cluster-ca.key");
  EXPECT_EQ(config->cluster_cert_lifetime_days, 30);
  config = Load({});
  ASSERT_OK(config);
  EXPECT_EQ(config->cluster_cert_lifetime_days, 90);

  EXPECT_THAT(Load({"--cluster-ca-cert-file", "ca.crt"}),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("cluster_ca_key_file")));
  EXPECT_THAT(Load({"--cluster-ca-key-file", "ca.key"}),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("cluster_ca_cert_file")));
  // Requiring agent certificates needs a CA to issue and check them.
  EXPECT_THAT(
      Load({"--require-agent-certificates"}),
      StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("require_agent_certificates")));
  config = Load({"--config", WriteConfig("cluster_ca_cert_file: /etc/gpufed/cluster-ca.crt\n"
                                         "cluster_ca_key_file: /etc/gpufed/cluster-ca.key\n"
                                         "require_agent_certificates: true\n")});
  ASSERT_OK(config);
  EXPECT_TRUE(config->require_agent_certificates);
  EXPECT_THAT(
      Load({"--config", WriteConfig("cluster_cert_lifetime_days: 0\n")}),
      StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("cluster_cert_lifetime_days")));
  EXPECT_THAT(Load({"--cluster-cert-lifetime-days", "367"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ServerConfigTest, JwtSettingsFromTheFileOrFlagsAndTheyHangTogether) {
  absl::StatusOr<ServerConfig> config =
      Load({"--config",
            WriteConfig("jwt_jwks_file: /etc/gpufed/idp-jwks.json\n"
                        "jwt_issuer: https://idp.example.com\n"
                        "jwt_audience: gpufed\n"
                        "jwt_role_claim: gpufed_role\n"
                        "jwt_tenant_claim: gpufed_tenant\n"
                        "jwt_project_claim: gpufed_project\n"),
            "--jwt-subject-claim", "email"});
  ASSERT_OK(config);
  EXPECT_EQ(config->jwt_jwks_file, "/etc/gpufed/idp-jwks.json");
  EXPECT_EQ(config->jwt_issuer, "https://idp.example.com");
  EXPECT_EQ(config->jwt_audience, "gpufed");
  EXPECT_EQ(config->jwt_subject_claim, "email");
  EXPECT_EQ(config->jwt_role_claim, "gpufed_role");
  EXPECT_EQ(config->jwt_tenant_claim, "gpufed_tenant");
  EXPECT_EQ(config->jwt_project_claim, "gpufed_project");
  config = Load({});
  ASSERT_OK(config);
  EXPECT_EQ(config->jwt_jwks_file, "");
  EXPECT_EQ(config->jwt_subject_claim, "sub");

  EXPECT_THAT(Load({"--jwt-jwks-file", "jwks.json", "--jwt-audience", "gpufed"}),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("jwt_issuer")));
  EXPECT_THAT(Load({"--jwt-jwks-file", "jwks.json", "--jwt-issuer", "https://idp"}),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("jwt_audience")));
  EXPECT_THAT(Load({"--jwt-issuer", "https://idp"}),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("jwt_issuer")));
  EXPECT_THAT(Load({"--jwt-jwks-file", "jwks.json", "--jwt-issuer", "https://idp", "--jwt-audience",
                    "gpufed", "--jwt-subject-claim", ""}),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("jwt_subject_claim")));
  EXPECT_THAT(Load({"--jwt-jwks-file", "jwks.json", "--jwt-issuer", "https://idp", "--jwt-audience",
                    "gpufed", "--jwt-project-claim", "project"}),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("jwt_project_claim")));
}

}  // namespace
}  // namespace gpufed::server
