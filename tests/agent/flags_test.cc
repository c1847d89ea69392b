#include "agent/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>  // NOLINT(modernize-deprecated-headers): POSIX mkdtemp, setenv
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace gpufed::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kEnv[] = {
    "GPUFED_AGENT_CONFIG",       "GPUFED_SERVER",           "GPUFED_AGENT_TOKEN",
    "GPUFED_AGENT_TOKEN_FILE",   "GPUFED_TOPOLOGY",         "GPUFED_BACKEND",
    "GPUFED_LOG_LEVEL",          "GPUFED_WORK_DIR",         "GPUFED_KILL_GRACE",
    "GPUFED_SPOT_RECLAIM_EVERY", "GPUFED_SPOT_RECLAIM_FOR", "GPUFED_DISCOVER",
    "GPUFED_NVIDIA_SMI",         "GPUFED_CA_FILE",          "GPUFED_AGENT_CERT_FILE",
    "GPUFED_AGENT_KEY_FILE",     "GPUFED_DCGM_EXPORTER_URL"};

class FlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kEnv) unsetenv(v);
    std::string templ =
        (std::filesystem::temp_directory_path() / "gpufed-flags-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    for (const char* v : kEnv) unsetenv(v);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string Write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    chmod(path.c_str(), 0600);  // token files must be; the other files do not mind
    return path;
  }

  static FlagsOutcome Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "gpufed-agent");
    std::vector<const char*> argv;
    argv.reserve(args.size());
    for (const std::string& a : args) argv.push_back(a.c_str());
    return ParseAgentFlags(static_cast<int>(argv.size()), argv.data());
  }

  // A failure: exit 2 and exactly one line naming the problem.
  static void ExpectError(const FlagsOutcome& o, const std::string& needle) {
    EXPECT_FALSE(o.flags.has_value());
    EXPECT_EQ(o.exit_code, 2);
    EXPECT_THAT(o.err, HasSubstr(needle));
    EXPECT_THAT(o.err, Not(HasSubstr("\n")));
  }

  std::string dir_;
};

TEST_F(FlagsTest, Defaults) {
  FlagsOutcome o = Parse({"--topology", "t.yaml", "--token", "secret"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->server, "127.0.0.1:50051");
  EXPECT_EQ(o.flags->backend, "sim");
  EXPECT_EQ(o.flags->log_level, "info");
  EXPECT_EQ(o.flags->token, "secret");
  EXPECT_EQ(o.flags->topology, "t.yaml");
  EXPECT_EQ(o.flags->work_dir, "");
  EXPECT_EQ(o.flags->kill_grace_seconds, 10);
}

TEST_F(FlagsTest, HelpAndVersionExitZero) {
  FlagsOutcome help = Parse({"--help"});
  EXPECT_FALSE(help.flags.has_value());
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("--topology"));
  EXPECT_THAT(help.out, HasSubstr("GPUFED_SERVER"));
  FlagsOutcome version = Parse({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_FALSE(version.out.empty());
}

TEST_F(FlagsTest, BadFlagsAreOneLineAndExitTwo) {
  ExpectError(Parse({"--bogus"}), "--bogus");
  ExpectError(Parse({"--token", "t"}), "--topology is required");
  ExpectError(Parse({"--topology", "t.yaml"}), "an agent token or certificate is required");
  ExpectError(Parse({"--topology", "t", "--token", "t", "--backend", "gpu"}), "--backend");
  ExpectError(Parse({"--topology", "t", "--token", "t", "--log-level", "loud"}), "--log-level");
  ExpectError(Parse({"--topology", "t", "--token", "t", "--kill-grace", "-1"}), "--kill-grace");
  ExpectError(Parse({"--topology", "t", "--token", "t", "--token-file", "f"}),
              "--token and --token-file are both given");
  ExpectError(Parse({"--topology", "t", "--token-file", dir_ + "/missing"}),
              "--token-file: cannot read");
  ExpectError(Parse({"--topology", "t", "--token-file", Write("empty", " \n")}), "is empty");
}

TEST_F(FlagsTest, ATokenFileOtherUsersCanReadOrWriteIsRefused) {
  const std::string file = Write("agent.token", "gpf_secret_value\n");
  for (const mode_t mode : {0644, 0604, 0620, 0660}) {
    chmod(file.c_str(), mode);
    FlagsOutcome o = Parse({"--topology", "t", "--token-file", file});
    ExpectError(o, "--token-file: " + file);
    EXPECT_THAT(o.err, HasSubstr("chmod 600 " + file));
    EXPECT_THAT(o.err, Not(HasSubstr("gpf_secret_value")));
  }
  chmod(file.c_str(), 0400);
  FlagsOutcome o = Parse({"--topology", "t", "--token-file", file});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->token, "gpf_secret_value");
}

TEST_F(FlagsTest, Discovery) {
  FlagsOutcome o = Parse({"--topology", "t.yaml", "--token", "t"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->discover, "");
  EXPECT_EQ(o.flags->nvidia_smi, "nvidia-smi");
  o = Parse({"--topology", "t.yaml", "--token", "t", "--discover", "dgx-01", "--nvidia-smi",
             "/usr/bin/nvidia-smi"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->discover, "dgx-01");
  EXPECT_EQ(o.flags->nvidia_smi, "/usr/bin/nvidia-smi");
  setenv("GPUFED_DISCOVER", "gpu-07", 1);
  const std::string config = Write("agent.yaml", "nvidia_smi: /opt/nvidia/bin/nvidia-smi\n");
  o = Parse({"--topology", "t.yaml", "--token", "t", "--config", config});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->discover, "gpu-07");
  EXPECT_EQ(o.flags->nvidia_smi, "/opt/nvidia/bin/nvidia-smi");
  ExpectError(Parse({"--topology", "t", "--token", "t", "--discover", "DGX_01"}),
              "--discover: node name \"DGX_01\" must be 1..63 characters of [a-z0-9-]");
  ExpectError(Parse({"--topology", "t", "--token", "t", "--nvidia-smi", ""}),
              "--nvidia-smi: must not be empty");
}

TEST_F(FlagsTest, EnvironmentFillsInAndFlagsWin) {
  setenv("GPUFED_SERVER", "env-host:1", 1);
  setenv("GPUFED_TOPOLOGY", "env.yaml", 1);
  setenv("GPUFED_AGENT_TOKEN", "env-token", 1);
  setenv("GPUFED_BACKEND", "process", 1);
  FlagsOutcome o = Parse({"--server", "flag-host:2"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->server, "flag-host:2");
  EXPECT_EQ(o.flags->topology, "env.yaml");
  EXPECT_EQ(o.flags->token, "env-token");
  EXPECT_EQ(o.flags->backend, "process");

  // A token file given as a flag beats a token from the environment.
  FlagsOutcome f = Parse({"--token-file", Write("tok", "file-token\n")});
  ASSERT_TRUE(f.flags.has_value()) << f.err;
  EXPECT_EQ(f.flags->token, "file-token");
}

TEST_F(FlagsTest, ConfigFileMirrorsTheFlags) {
  Write("agent.token", "  cfg-token\n");
  const std::string config = Write("agent.yaml",
                                   "server: cfg-host:3\n"
                                   "token_file: agent.token\n"
                                   "topology: topo/edge.yaml\n"
                                   "backend: process\n"
                                   "log-level: debug\n"
                                   "work_dir: work\n"
                                   "kill_grace: 2.5\n");
  FlagsOutcome o = Parse({"--config", config});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->server, "cfg-host:3");
  EXPECT_EQ(o.flags->token, "cfg-token");
  // Relative paths are relative to the config file.
  EXPECT_EQ(o.flags->topology, dir_ + "/topo/edge.yaml");
  EXPECT_EQ(o.flags->work_dir, dir_ + "/work");
  EXPECT_EQ(o.flags->backend, "process");
  EXPECT_EQ(o.flags->log_level, "debug");
  EXPECT_EQ(o.flags->kill_grace_seconds, 2.5);
}

TEST_F(FlagsTest, FlagBeatsEnvironmentBeatsConfig) {
  Write("agent.token", "cfg-token\n");
  const std::string config = Write("agent.yaml",
                                   "server: cfg-host:3\n"
                                   "token_file: agent.token\n"
                                   "topology: /abs/topology.yaml\n"
                                   "log_level: warn\n");
  setenv("GPUFED_AGENT_CONFIG", config.c_str(), 1);
  setenv("GPUFED_SERVER", "env-host:1", 1);
  setenv("GPUFED_AGENT_TOKEN", "env-token", 1);
  FlagsOutcome o = Parse({"--log-level", "error"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->config_file, config);
  EXPECT_EQ(o.flags->server, "env-host:1");
  EXPECT_EQ(o.flags->token, "env-token");  // the config's token_file is the same setting
  EXPECT_EQ(o.flags->topology, "/abs/topology.yaml");
  EXPECT_EQ(o.flags->log_level, "error");
}

// Simulated spot reclaims: durations as people type them, from a flag, the environment or the
// config file; "for" must be shorter than "every", and needs it.
TEST_F(FlagsTest, SpotReclaimDurations) {
  FlagsOutcome none = Parse({"--topology", "t", "--token", "t"});
  ASSERT_TRUE(none.flags.has_value()) << none.err;
  EXPECT_EQ(none.flags->spot_reclaim_every, absl::ZeroDuration());
  EXPECT_EQ(none.flags->spot_reclaim_for, absl::ZeroDuration());

  FlagsOutcome o = Parse({"--topology", "t", "--token", "t", "--spot-reclaim-every", "1h30m",
                          "--spot-reclaim-for=90s"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->spot_reclaim_every, absl::Minutes(90));
  EXPECT_EQ(o.flags->spot_reclaim_for, absl::Seconds(90));

  setenv("GPUFED_SPOT_RECLAIM_EVERY", "10m", 1);
  FlagsOutcome env = Parse({"--config", Write("s.yaml",
                                              "topology: t\ntoken: t\nspot_reclaim_every: 1h\n"
                                              "spot-reclaim-for: 2m\n")});
  ASSERT_TRUE(env.flags.has_value()) << env.err;
  EXPECT_EQ(env.flags->spot_reclaim_every, absl::Minutes(10));  // the environment beats the file
  EXPECT_EQ(env.flags->spot_reclaim_for, absl::Minutes(2));
  unsetenv("GPUFED_SPOT_RECLAIM_EVERY");

  const std::vector<std::string> base = {"--topology", "t", "--token", "t"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), base.begin(), base.end());
    return Parse(extra);
  };
  ExpectError(with({"--spot-reclaim-every", "10"}),
              "--spot-reclaim-every: \"10\" is not a duration");
  ExpectError(with({"--spot-reclaim-every", "-5m", "--spot-reclaim-for", "1m"}),
              "--spot-reclaim-every");
  ExpectError(with({"--spot-reclaim-every", "inf", "--spot-reclaim-for", "1m"}),
              "--spot-reclaim-every");
  ExpectError(with({"--spot-reclaim-every", "10m"}),
              "--spot-reclaim-for: must be > 0 and shorter than --spot-reclaim-every");
  ExpectError(with({"--spot-reclaim-every", "10m", "--spot-reclaim-for", "10m"}),
              "--spot-reclaim-for: must be > 0 and shorter");
  ExpectError(with({"--spot-reclaim-for", "1m"}), "--spot-reclaim-for: needs --spot-reclaim-every");
  ExpectError(
      Parse({"--config", Write("bad.yaml", "topology: t\ntoken: t\nspot_reclaim_for: soon\n")}),
      "bad.yaml:3: spot-reclaim-for:");
}

// Real GPUs' telemetry from dcgm-exporter: a URL from a flag, the environment or the config file,
// checked at start-up.
TEST_F(FlagsTest, DcgmExporterUrl) {
  FlagsOutcome none = Parse({"--topology", "t", "--token", "t"});
  ASSERT_TRUE(none.flags.has_value()) << none.err;
  EXPECT_EQ(none.flags->dcgm_exporter_url, "");

  FlagsOutcome o = Parse(
      {"--topology", "t", "--token", "t", "--dcgm-exporter-url", "http://127.0.0.1:9400/metrics"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->dcgm_exporter_url, "http://127.0.0.1:9400/metrics");

  setenv("GPUFED_DCGM_EXPORTER_URL", "https://dcgm.gpu-07:9400/metrics", 1);
  const std::string config =
      Write("d.yaml", "topology: t\ntoken: t\ndcgm_exporter_url: http://file-host:9400/metrics\n");
  FlagsOutcome env = Parse({"--config", config});
  ASSERT_TRUE(env.flags.has_value()) << env.err;
  EXPECT_EQ(env.flags->dcgm_exporter_url, "https://dcgm.gpu-07:9400/metrics");  // env beats file
  FlagsOutcome flag = Parse({"--config", config, "--dcgm-exporter-url", "http://[::1]:9400"});
  ASSERT_TRUE(flag.flags.has_value()) << flag.err;
  EXPECT_EQ(flag.flags->dcgm_exporter_url, "http://[::1]:9400");
  unsetenv("GPUFED_DCGM_EXPORTER_URL");
  FlagsOutcome file = Parse({"--config", config});
  ASSERT_TRUE(file.flags.has_value()) << file.err;
  EXPECT_EQ(file.flags->dcgm_exporter_url, "http://file-host:9400/metrics");

  const std::vector<std::string> base = {"--topology", "t", "--token", "t"};
  auto with = [&](const std::string& url) {
    std::vector<std::string> args = base;
    args.emplace_back("--dcgm-exporter-url");
    args.push_back(url);
    return Parse(args);
  };
  ExpectError(with("127.0.0.1:9400"),
              "--dcgm-exporter-url: \"127.0.0.1:9400\" must start with http:// or https://");
  ExpectError(with("http:///metrics"), "--dcgm-exporter-url: \"http:///metrics\" names no host");
  ExpectError(with("http://h:99999/metrics"), "port that is not 1..65535");
  setenv("GPUFED_DCGM_EXPORTER_URL", "dcgm:9400", 1);
  ExpectError(Parse(base), "--dcgm-exporter-url: \"dcgm:9400\" must start with http://");
  unsetenv("GPUFED_DCGM_EXPORTER_URL");
  ExpectError(Parse({"--config", Write("e.yaml",
                                       "topology: t\ntoken: t\n"
                                       "dcgm-exporter-url: tcp://h:9400\n")}),
              "--dcgm-exporter-url: \"tcp://h:9400\"");
}

TEST_F(FlagsTest, BadConfigNamesFileLineAndKey) {
  ExpectError(Parse({"--config", Write("a.yaml", "server: x:1\nservr: y:2\n")}),
              "a.yaml:2: unknown key \"servr\"");
  ExpectError(Parse({"--config", Write("b.yaml", "topology: t\ntoken: t\nbackend: gpu\n")}),
              "b.yaml:3: backend:");
  ExpectError(Parse({"--config", Write("c.yaml", "server: [a, b]\n")}),
              "c.yaml:1: server: must be a single value");
  ExpectError(Parse({"--config", Write("d.yaml", "server: {a\n")}), "d.yaml:");
  ExpectError(Parse({"--config", Write("e.yaml", "- a\n- b\n")}), "must be a map");
  ExpectError(Parse({"--config", Write("f.yaml", "config: other.yaml\n")}),
              "unknown key \"config\"");
  ExpectError(Parse({"--config", dir_ + "/missing.yaml"}), "--config: cannot read");
  ExpectError(Parse({"--config", Write("g.yaml", "topology: t\ntoken: a\ntoken_file: b\n")}),
              "token and token_file are both set");
}

TEST_F(FlagsTest, TlsByDefaultACaFileFromFlagEnvOrConfigAndPlaintextOnlyWhenAsked) {
  const std::string pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
  Write("ca.crt", pem);
  FlagsOutcome o = Parse({"--topology", "t.yaml", "--token", "secret"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_FALSE(o.flags->insecure_plaintext);
  EXPECT_EQ(o.flags->ca_pem, "");  // TLS with the system's roots

  o = Parse({"--topology", "t.yaml", "--token", "secret", "--ca-file", dir_ + "/ca.crt"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->ca_pem, pem);

  setenv("GPUFED_CA_FILE", (dir_ + "/ca.crt").c_str(), 1);
  o = Parse({"--topology", "t.yaml", "--token", "secret"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->ca_pem, pem);
  unsetenv("GPUFED_CA_FILE");

  // Relative to the config file, like the other paths in it.
  const std::string config = Write("agent.yaml", "ca_file: ca.crt\ninsecure_plaintext: false\n");
  o = Parse({"--topology", "t.yaml", "--token", "secret", "--config", config});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->ca_file, dir_ + "/ca.crt");

  o = Parse({"--topology", "t.yaml", "--token", "secret", "--insecure-plaintext"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_TRUE(o.flags->insecure_plaintext);
}

TEST_F(FlagsTest, BadCaFileOrCaFileWithPlaintextIsOneLine) {
  ExpectError(Parse({"--topology", "t.yaml", "--token", "s", "--ca-file", dir_ + "/none.crt"}),
              "--ca-file: cannot read");
  ExpectError(
      Parse({"--topology", "t.yaml", "--token", "s", "--ca-file", Write("junk.crt", "junk\n")}),
      "holds no PEM certificate");
  ExpectError(Parse({"--topology", "t.yaml", "--token", "s", "--insecure-plaintext", "--ca-file",
                     Write("ca.crt", "-----BEGIN CERTIFICATE-----\n")}),
              "give one");
}

TEST_F(FlagsTest, ACertificateAndKeyStandInForTheToken) {
  const std::string cert = Write("east.crt", "-----BEGIN CERTIFICATE-----\nMIIB\n");
  const std::string key = Write("east.key", "-----BEGIN PRIVATE KEY-----\nMIIE\n");
  FlagsOutcome o = Parse({"--topology", "t.yaml", "--cert-file", cert, "--key-file", key});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->token, "");
  EXPECT_EQ(o.flags->cert_pem, "-----BEGIN CERTIFICATE-----\nMIIB\n");
  EXPECT_EQ(o.flags->key_pem, "-----BEGIN PRIVATE KEY-----\nMIIE\n");

  setenv("GPUFED_AGENT_CERT_FILE", cert.c_str(), 1);
  setenv("GPUFED_AGENT_KEY_FILE", key.c_str(), 1);
  o = Parse({"--topology", "t.yaml"});
  ASSERT_TRUE(o.flags.has_value()) << o.err;
  EXPECT_EQ(o.flags->cert_file, cert);
}

TEST_F(FlagsTest, ABadClientPairIsOneLine) {
  const std::string cert = Write("east.crt", "-----BEGIN CERTIFICATE-----\nMIIB\n");
  const std::string key = Write("east.key", "-----BEGIN PRIVATE KEY-----\nMIIE\n");
  ExpectError(Parse({"--topology", "t.yaml", "--cert-file", cert}), "--key-file: required");
  ExpectError(Parse({"--topology", "t.yaml", "--key-file", key}), "--cert-file: required");
  ExpectError(Parse({"--topology", "t.yaml", "--cert-file", key, "--key-file", key}),
              "--cert-file");
  ExpectError(Parse({"--topology", "t.yaml", "--cert-file", cert, "--key-file", cert}),
              "--key-file");
  ExpectError(Parse({"--topology", "t.yaml", "--cert-file", cert, "--key-file", key,
                     "--insecure-plaintext"}),
              "--insecure-plaintext");
  ASSERT_EQ(chmod(key.c_str(), 0644), 0);
  ExpectError(Parse({"--topology", "t.yaml", "--cert-file", cert, "--key-file", key}),
              "--key-file: " + key + " is readable by other users");
  // Neither a token nor a certificate.
  ExpectError(Parse({"--topology", "t.yaml"}), "token or certificate is required");
}

}  // namespace
}  // namespace gpufed::agent
