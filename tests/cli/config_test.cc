#include "cli/config.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed::cli {
namespace {

using ::testing::HasSubstr;

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("gpufed-cli-config-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& relative, const std::string& text) {
    const std::filesystem::path path = dir_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path) << text;
    // Private, as a file holding a token must be (SecretFilesOthersMayReadAreRefused).
    std::filesystem::permissions(
        path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    return path.string();
  }

  [[nodiscard]] EnvLookup Env() const {
    return [this](absl::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
  }

  std::filesystem::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(ConfigTest, DefaultsWithoutAnyFile) {
  env_["HOME"] = (dir_ / "home").string();  // No config under it.
  absl::StatusOr<ClientConfig> c = ResolveClientConfig({}, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "127.0.0.1:50051");
  EXPECT_EQ(c->token, "");
  EXPECT_EQ(c->tenant, "");
  EXPECT_EQ(c->project, "");
}

TEST_F(ConfigTest, ReadsTheHomeFile) {
  env_["HOME"] = (dir_ / "home").string();
  Write("home/.config/gpufed/config.yaml",
        "server: home:1\ntoken: gpf_home\ntenant: demo\nproject: default\n");
  absl::StatusOr<ClientConfig> c = ResolveClientConfig({}, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "home:1");
  EXPECT_EQ(c->token, "gpf_home");
  EXPECT_EQ(c->tenant, "demo");
  EXPECT_EQ(c->project, "default");
}

TEST_F(ConfigTest, EnvFileBeatsHomeFileAndFlagFileBeatsBoth) {
  env_["HOME"] = (dir_ / "home").string();
  Write("home/.config/gpufed/config.yaml", "server: home:1\ntenant: home-tenant\n");
  env_["GPUFED_CONFIG"] = Write("env.yaml", "server: env-file:2\n");
  absl::StatusOr<ClientConfig> c = ResolveClientConfig({}, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "env-file:2");
  EXPECT_EQ(c->tenant, "");  // Only one file is read.

  ConfigFlags flags;
  flags.config_file = Write("flag.yaml", "server: flag-file:3\n");
  c = ResolveClientConfig(flags, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "flag-file:3");
}

TEST_F(ConfigTest, EnvironmentBeatsFileAndFlagsBeatEnvironment) {
  ConfigFlags flags;
  flags.config_file = Write("c.yaml", "server: file:1\ntoken: gpf_file\ntenant: t\nproject: p\n");
  env_["GPUFED_SERVER"] = "env:2";
  env_["GPUFED_TOKEN"] = "gpf_env";
  absl::StatusOr<ClientConfig> c = ResolveClientConfig(flags, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "env:2");
  EXPECT_EQ(c->token, "gpf_env");
  EXPECT_EQ(c->tenant, "t");  // The environment does not touch what it does not name.

  flags.server = "flag:3";
  flags.token = "gpf_flag";
  c = ResolveClientConfig(flags, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "flag:3");
  EXPECT_EQ(c->token, "gpf_flag");
}

TEST_F(ConfigTest, EmptyEnvironmentVariablesAreUnset) {
  ConfigFlags flags;
  flags.config_file = Write("c.yaml", "server: file:1\ntoken: gpf_file\n");
  env_["GPUFED_SERVER"] = "";
  env_["GPUFED_TOKEN"] = "";
  absl::StatusOr<ClientConfig> c = ResolveClientConfig(flags, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "file:1");
  EXPECT_EQ(c->token, "gpf_file");
}

TEST_F(ConfigTest, ExplicitlyNamedFileMustExist) {
  ConfigFlags flags;
  flags.config_file = (dir_ / "missing.yaml").string();
  absl::StatusOr<ClientConfig> c = ResolveClientConfig(flags, Env());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(c.status().message(), HasSubstr("missing.yaml"));

  env_["GPUFED_CONFIG"] = (dir_ / "also-missing.yaml").string();
  c = ResolveClientConfig({}, Env());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ConfigTest, UnknownKeysAndBadTypesNameFileAndLine) {
  ConfigFlags flags;
  flags.config_file = Write("c.yaml", "server: a:1\ntoekn: x\n");
  absl::StatusOr<ClientConfig> c = ResolveClientConfig(flags, Env());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(c.status().message(),
            flags.config_file.value() + ":2: toekn: unknown field; did you mean \"token\"?");

  flags.config_file = Write("d.yaml", "server: [a, b]\n");
  c = ResolveClientConfig(flags, Env());
  EXPECT_EQ(c.status().message(),
            flags.config_file.value() + ":1: server: expected a string, got a list");
}

TEST_F(ConfigTest, TokensAreTrimmedAndMustBePrintable) {
  absl::StatusOr<ClientConfig> c = ParseClientConfig("token: \"  gpf_x \\n\"\n", "c.yaml");
  ASSERT_OK(c);
  EXPECT_EQ(c->token, "gpf_x");

  c = ParseClientConfig("token: \"gpf x\"\n", "c.yaml");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("c.yaml:1: token:"));

  ConfigFlags flags;
  flags.token = "bad\x01token";
  env_["HOME"] = dir_.string();
  EXPECT_EQ(ResolveClientConfig(flags, Env()).status().code(), absl::StatusCode::kInvalidArgument);
}

// A config file holding a token, or a token file, that others may read is refused (the rule the
// server and the agent apply to their secret files); a config file without a token may be.
TEST_F(ConfigTest, SecretFilesOthersMayReadAreRefused) {
  const auto open_up = [](const std::string& path) {
    std::filesystem::permissions(
        path, std::filesystem::perms::group_read | std::filesystem::perms::others_read,
        std::filesystem::perm_options::add);
  };
  ConfigFlags flags;
  flags.config_file = Write("c.yaml", "server: s:1\ntoken: gpf_file\n");
  open_up(*flags.config_file);
  EXPECT_THAT(ResolveClientConfig(flags, Env()),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));

  flags.config_file = Write("plain.yaml", "server: s:1\n");
  open_up(*flags.config_file);
  EXPECT_OK(ResolveClientConfig(flags, Env()));

  flags.token_file = Write("token", "gpf_x\n");
  EXPECT_OK(ResolveClientConfig(flags, Env()));
  open_up(*flags.token_file);
  EXPECT_THAT(ResolveClientConfig(flags, Env()),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ConfigTest, EmptyFileConfiguresNothing) {
  ConfigFlags flags;
  flags.config_file = Write("empty.yaml", "# nothing\n");
  absl::StatusOr<ClientConfig> c = ResolveClientConfig(flags, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->server, "127.0.0.1:50051");
}

TEST_F(ConfigTest, CaFileAndPlaintextFromFileEnvironmentAndFlags) {
  env_["HOME"] = (dir_ / "home").string();
  absl::StatusOr<ClientConfig> c = ResolveClientConfig({}, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->ca_file, "");
  EXPECT_FALSE(c->insecure_plaintext);

  Write("home/.config/gpufed/config.yaml", "ca_file: /file/ca.crt\n");
  c = ResolveClientConfig({}, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->ca_file, "/file/ca.crt");
  env_["GPUFED_CA_FILE"] = "/env/ca.crt";
  c = ResolveClientConfig({}, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->ca_file, "/env/ca.crt");
  ConfigFlags flags;
  flags.ca_file = "/flag/ca.crt";
  c = ResolveClientConfig(flags, Env());
  ASSERT_OK(c);
  EXPECT_EQ(c->ca_file, "/flag/ca.crt");

  env_.erase("GPUFED_CA_FILE");
  Write("home/.config/gpufed/config.yaml", "insecure_plaintext: true\n");
  c = ResolveClientConfig({}, Env());
  ASSERT_OK(c);
  EXPECT_TRUE(c->insecure_plaintext);
  flags = {};
  flags.insecure_plaintext = false;
  c = ResolveClientConfig(flags, Env());
  ASSERT_OK(c);
  EXPECT_FALSE(c->insecure_plaintext);
}

TEST_F(ConfigTest, CaFileAndPlaintextTogetherOrABadValueAreRefused) {
  env_["HOME"] = (dir_ / "home").string();
  Write("home/.config/gpufed/config.yaml", "insecure_plaintext: true\nca_file: /ca.crt\n");
  EXPECT_THAT(ResolveClientConfig({}, Env()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("give one")));
  Write("home/.config/gpufed/config.yaml", "insecure_plaintext: sometimes\n");
  EXPECT_THAT(ResolveClientConfig({}, Env()),
              testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(":1:")));
}

}  // namespace
}  // namespace gpufed::cli
