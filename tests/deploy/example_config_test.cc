// Checks deploy/server.example.yaml and deploy/agent.example.yaml against the contract in
// docs/interfaces.md: they parse (with the same yaml-cpp the programs use), hold exactly the
// documented keys, and every key names a flag the contract lists. Whether the programs accept
// the files is tested by running them (example_configs.sh).

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace gpufed {
namespace {

std::string SourcePath(absl::string_view relative) {
  return std::string(GPUFED_SOURCE_DIR) + "/" + std::string(relative);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Loads a YAML file that must be a map of scalars; fails the test otherwise.
YAML::Node LoadScalarMap(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    ADD_FAILURE() << path << ": " << e.what();
    return root;
  }
  EXPECT_TRUE(root.IsMap()) << path << " must be a map";
  for (const auto& entry : root) {
    EXPECT_TRUE(entry.second.IsScalar())
        << path << ": " << entry.first.as<std::string>() << " must be a scalar";
  }
  return root;
}

std::set<std::string> Keys(const YAML::Node& map) {
  std::set<std::string> keys;
  if (!map.IsMap()) return keys;
  for (const auto& entry : map) keys.insert(entry.first.as<std::string>());
  return keys;
}

// "host:port" with port 0..65535.
bool IsListenAddress(const std::string& value) {
  const size_t colon = value.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  int port = -1;
  return absl::SimpleAtoi(absl::string_view(value).substr(colon + 1), &port) && port >= 0 &&
         port <= 65535;
}

const std::set<std::string> kLogLevels = {"trace", "debug", "info", "warn", "error"};

// Every config key is a documented flag with '_' for '-' (heartbeat_timeout_seconds and
// tls_reload_interval_seconds are the ones whose flags drop the unit).
void ExpectKeysAreDocumentedFlags(const std::set<std::string>& keys) {
  const std::string contract = ReadFile(SourcePath("docs/interfaces.md"));
  ASSERT_FALSE(contract.empty()) << "docs/interfaces.md is missing";
  for (const std::string& key : keys) {
    if (key == "work_dir") continue;  // Config-file only; not a flag in the contract.
    std::string flag = "--" + absl::StrReplaceAll(key, {{"_", "-"}});
    if (key == "heartbeat_timeout_seconds") flag = "--heartbeat-timeout";
    if (key == "tls_reload_interval_seconds") flag = "--tls-reload-interval";
    EXPECT_NE(contract.find("`" + flag + " "), std::string::npos)
        << key << ": docs/interfaces.md documents no flag " << flag;
  }
}

TEST(ServerExampleConfigTest, HoldsExactlyTheDocumentedKeys) {
  const YAML::Node config = LoadScalarMap(SourcePath("deploy/server.example.yaml"));
  const std::set<std::string> expected = {"grpc_listen",
                                          "http_listen",
                                          "data_dir",
                                          "database_url",
                                          "admin_token_file",
                                          "log_level",
                                          "heartbeat_timeout_seconds",
                                          "heartbeat_interval_ms",
                                          "agent_lease_ms",
                                          "agent_register_timeout_ms",
                                          "archive_after_hours",
                                          "mig_basis",
                                          "meter_interval_seconds",
                                          "telemetry_retention_hours",
                                          "idle_cost_policy",
                                          "tls_cert_file",
                                          "tls_key_file",
                                          "tls_reload_interval_seconds"};
  EXPECT_EQ(Keys(config), expected);
  ExpectKeysAreDocumentedFlags(Keys(config));
}

TEST(ServerExampleConfigTest, ValuesAreUsable) {
  const YAML::Node config = LoadScalarMap(SourcePath("deploy/server.example.yaml"));
  ASSERT_TRUE(config.IsMap());
  EXPECT_TRUE(IsListenAddress(config["grpc_listen"].as<std::string>("")));
  EXPECT_TRUE(IsListenAddress(config["http_listen"].as<std::string>("")));
  EXPECT_EQ(kLogLevels.count(config["log_level"].as<std::string>("")), 1u);
  EXPECT_GT(config["heartbeat_timeout_seconds"].as<int>(0), 0);
  // The example documents the embedded default: no DSN.
  EXPECT_EQ(config["database_url"].as<std::string>("x"), "");
  // The systemd unit's StateDirectory is /var/lib/gpufed; the example must point there.
  EXPECT_EQ(config["data_dir"].as<std::string>(""), "/var/lib/gpufed");
}

// The placement keys are shown commented out with their defaults: uncommented, they are exactly
// the three documented keys, with the built-in defaults (server/config.h).
TEST(ServerExampleConfigTest, CommentedPlacementKeysShowTheDefaults) {
  std::istringstream file(ReadFile(SourcePath("deploy/server.example.yaml")));
  std::string uncommented;
  for (std::string line; std::getline(file, line);) {
    for (const char* key : {"placement_policy:", "placement_seed:", "mig_partitioning:"}) {
      if (line.rfind(std::string("# ") + key, 0) == 0) uncommented += line.substr(2) + "\n";
    }
  }
  YAML::Node keys;
  try {
    keys = YAML::Load(uncommented);
  } catch (const YAML::Exception& e) {
    FAIL() << e.what() << "\n" << uncommented;
  }
  EXPECT_EQ(Keys(keys),
            (std::set<std::string>{"placement_policy", "placement_seed", "mig_partitioning"}))
      << uncommented;
  ExpectKeysAreDocumentedFlags(Keys(keys));
  if (!keys.IsMap()) return;
  EXPECT_EQ(keys["placement_policy"].as<std::string>(""), "gpufed");
  EXPECT_EQ(keys["placement_seed"].as<int>(0), 1);
  EXPECT_TRUE(keys["mig_partitioning"].as<bool>(false));
}

// The JWT keys are shown commented out; uncommented, they are the seven documented keys, and
// the server's configuration accepts them (jwt_issuer and jwt_audience with jwt_jwks_file).
TEST(ServerExampleConfigTest, CommentedJwtKeysAreTheDocumentedOnes) {
  std::istringstream file(ReadFile(SourcePath("deploy/server.example.yaml")));
  std::string uncommented;
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("# jwt_", 0) == 0) uncommented += line.substr(2) + "\n";
  }
  YAML::Node keys;
  try {
    keys = YAML::Load(uncommented);
  } catch (const YAML::Exception& e) {
    FAIL() << e.what() << "\n" << uncommented;
  }
  EXPECT_EQ(Keys(keys), (std::set<std::string>{"jwt_jwks_file", "jwt_issuer", "jwt_audience",
                                               "jwt_subject_claim", "jwt_role_claim",
                                               "jwt_tenant_claim", "jwt_project_claim"}))
      << uncommented;
  ExpectKeysAreDocumentedFlags(Keys(keys));
  if (!keys.IsMap()) return;
  EXPECT_EQ(keys["jwt_subject_claim"].as<std::string>(""), "sub");  // the built-in default
}

TEST(AgentExampleConfigTest, HoldsExactlyTheDocumentedKeys) {
  const YAML::Node config = LoadScalarMap(SourcePath("deploy/agent.example.yaml"));
  const std::set<std::string> expected = {"server",  "ca_file",   "token_file", "topology",
                                          "backend", "log_level", "work_dir"};
  EXPECT_EQ(Keys(config), expected);
  ExpectKeysAreDocumentedFlags(Keys(config));
}

TEST(AgentExampleConfigTest, ValuesAreUsable) {
  const YAML::Node config = LoadScalarMap(SourcePath("deploy/agent.example.yaml"));
  ASSERT_TRUE(config.IsMap());
  EXPECT_TRUE(IsListenAddress(config["server"].as<std::string>("")));
  const auto backend = config["backend"].as<std::string>("");
  EXPECT_TRUE(backend == "sim" || backend == "process") << backend;
  EXPECT_EQ(kLogLevels.count(config["log_level"].as<std::string>("")), 1u);
  EXPECT_FALSE(config["topology"].as<std::string>("").empty());
  EXPECT_FALSE(config["token_file"].as<std::string>("").empty());
}

}  // namespace
}  // namespace gpufed
