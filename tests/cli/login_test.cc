// gpufedctl login (cli/login.h) in-process against the fake server: the token comes from stdin,
// is checked with the server before it is kept, and lands in the config file gpufedctl reads,
// mode 0600, beside the file's other keys.

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/app.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/fake_gpufed_server.h"
#include "yaml-cpp/yaml.h"

namespace gpufed::cli {
namespace {

using ::gpufed::cli::testing::FakeGpufedServer;
using ::testing::HasSubstr;
using ::testing::Not;

class LoginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = FakeGpufedServer::Start();
    ASSERT_NE(server_, nullptr);
    server_->RequireToken("gpf_good");
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("gpufed-cli-login-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "home");
    env_["HOME"] = (dir_ / "home").string();
    config_ = (dir_ / "home/.config/gpufed/config.yaml").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void WriteConfig(const std::string& text, mode_t mode) {
    std::filesystem::create_directories(std::filesystem::path(config_).parent_path());
    std::ofstream(config_) << text;
    chmod(config_.c_str(), mode);
  }
  std::string ReadConfig() const {
    std::ifstream in(config_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  mode_t ConfigMode() const {
    struct stat st {};
    EXPECT_EQ(stat(config_.c_str(), &st), 0);
    return st.st_mode & 0777;
  }

  int Run(std::vector<std::string> args, const std::string& stdin_text) {
    out_.str("");
    err_.str("");
    in_.clear();
    in_.str(stdin_text);
    args.insert(args.begin(), {"gpufedctl", "--insecure-plaintext"});
    std::vector<const char*> argv;
    argv.reserve(args.size());
    for (const std::string& a : args) argv.push_back(a.c_str());
    CliIo io;
    io.out = &out_;
    io.err = &err_;
    io.in = &in_;
    io.env = [this](absl::string_view name) -> std::optional<std::string> {
      auto it = env_.find(std::string(name));
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    return RunCli(static_cast<int>(argv.size()), argv.data(), io);
  }

  std::unique_ptr<FakeGpufedServer> server_;
  std::filesystem::path dir_;
  std::string config_;
  std::map<std::string, std::string> env_;
  std::ostringstream out_;
  std::ostringstream err_;
  std::istringstream in_;
};

TEST_F(LoginTest, KeepsACheckedTokenInTheDefaultFileBesideItsOtherKeys) {
  WriteConfig("server: " + server_->address() + "\ntenant: demo\nproject: research\n", 0644);
  ASSERT_EQ(Run({"login", "--token-stdin"}, "  gpf_good\n"), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr(config_));
  EXPECT_EQ(ConfigMode(), 0600);  // it was 0644: rewritten 0600
  const YAML::Node saved = YAML::Load(ReadConfig());
  EXPECT_EQ(saved["token"].as<std::string>(), "gpf_good");
  EXPECT_EQ(saved["server"].as<std::string>(), server_->address());
  EXPECT_EQ(saved["tenant"].as<std::string>(), "demo");
  EXPECT_EQ(saved["project"].as<std::string>(), "research");
  // The next command uses it.
  EXPECT_EQ(Run({"tenants", "list"}, ""), 0) << err_.str();
}

TEST_F(LoginTest, CreatesTheFile0600WhenThereIsNone) {
  const std::string file = (dir_ / "new/config.yaml").string();
  ASSERT_EQ(
      Run({"login", "--token-stdin", "--config", file, "--server", server_->address()}, "gpf_good"),
      0)
      << err_.str();
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  EXPECT_EQ(YAML::LoadFile(file)["token"].as<std::string>(), "gpf_good");
}

TEST_F(LoginTest, ATokenTheServerRejectsIsNotSavedNorEchoed) {
  const std::string before = "server: " + server_->address() + "\ntoken: gpf_old\n";
  WriteConfig(before, 0600);
  EXPECT_EQ(Run({"login", "--token-stdin"}, "gpf_wrong_secret\n"), 1);
  EXPECT_THAT(err_.str(), HasSubstr("UNAUTHENTICATED"));
  EXPECT_THAT(err_.str(), Not(HasSubstr("gpf_wrong_secret")));
  EXPECT_EQ(ReadConfig(), before);
}

TEST_F(LoginTest, TheTokenNeverComesFromTheCommandLine) {
  WriteConfig("server: " + server_->address() + "\n", 0600);
  EXPECT_EQ(Run({"login", "--token", "gpf_good"}, ""), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--token-stdin"));
  // Without --token-stdin it asks on a terminal; a test's stdin is none.
  EXPECT_EQ(Run({"login"}, "gpf_good\n"), 1);
  EXPECT_THAT(err_.str(), HasSubstr("--token-stdin"));
  EXPECT_THAT(ReadConfig(), Not(HasSubstr("gpf_good")));
}

TEST_F(LoginTest, ABadTokenInTheConfigIsNotEchoed) {
  WriteConfig("server: " + server_->address() + "\ntoken: \"gpf_se cret\"\n", 0600);
  EXPECT_EQ(Run({"tenants", "list"}, ""), 1);
  EXPECT_THAT(err_.str(), HasSubstr("token"));
  EXPECT_THAT(err_.str(), Not(HasSubstr("cret")));
}

TEST_F(LoginTest, TheTokenMayComeFromAFile) {
  const std::string token_file = (dir_ / "token").string();
  std::ofstream(token_file) << "gpf_good\n";
  WriteConfig("server: " + server_->address() + "\ntoken_file: " + token_file + "\n", 0600);
  // Others may read it: refused (the server's and the agent's rule for secret files).
  ::chmod(token_file.c_str(), 0644);
  EXPECT_EQ(Run({"tenants", "list"}, ""), 1);
  EXPECT_THAT(err_.str(), HasSubstr("chmod 600"));
  ::chmod(token_file.c_str(), 0600);
  EXPECT_EQ(Run({"tenants", "list"}, ""), 0) << err_.str();
  env_["GPUFED_TOKEN_FILE"] = (dir_ / "missing").string();
  EXPECT_EQ(Run({"tenants", "list"}, ""), 1);
  EXPECT_THAT(err_.str(), HasSubstr("token_file"));
  EXPECT_EQ(Run({"tenants", "list", "--token-file", token_file}, ""), 0) << err_.str();
}

}  // namespace
}  // namespace gpufed::cli
