// TLS on both listeners (issue #12, point 1), with certificates made at test time: a client that
// trusts the server's CA gets through on gRPC and HTTPS, a plaintext client or one trusting
// another CA does not, and a certificate pair replaced on disk is what new connections see,
// without a restart. A server with no certificate and no explicit plaintext flag, or with a
// broken pair, does not start.

#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cli/app.h"
#include "gmock/gmock.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "server/server.h"
#include "tests/service/in_process_server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_certs.h"

namespace gpufed {
namespace {

using ::gpufed::testing::StatusIs;
using ::testing::HasSubstr;

// How long a refused handshake is given to succeed after all, and how long a replaced
// certificate may take to be served (gRPC looks at the files every second here).
constexpr absl::Duration kRefusedWithin = absl::Seconds(2);
constexpr absl::Duration kReloadWithin = absl::Seconds(30);

std::shared_ptr<grpc::ChannelCredentials> Trusting(const testing::TestCa& ca) {
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = ca.cert_pem;
  return grpc::SslCredentials(options);
}

// A new connection (no subchannel shared with earlier ones) with `credentials`; true when it is
// established within `wait`, TLS handshake included.
bool GrpcConnects(const std::string& address,
                  const std::shared_ptr<grpc::ChannelCredentials>& credentials,
                  absl::Duration wait) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  std::shared_ptr<grpc::Channel> channel = grpc::CreateCustomChannel(address, credentials, args);
  return channel->WaitForConnected(absl::ToChronoTime(absl::Now() + wait));
}

// GET /healthz over HTTPS trusting `ca`; the status, or nullopt when no answer came.
std::optional<int> HttpsHealth(int port, const testing::TestCa& ca) {
  httplib::SSLClient client("127.0.0.1", port);
  client.set_ca_cert_path(ca.cert_file.c_str());
  client.enable_server_certificate_verification(true);
  client.set_connection_timeout(2);
  client.set_read_timeout(2);
  httplib::Result res = client.Get("/healthz");
  if (!res) return std::nullopt;
  return res->status;
}

// Polls `ok` until it holds or `within` passed.
template <typename Fn>
bool Eventually(Fn ok, absl::Duration within) {
  const absl::Time deadline = absl::Now() + within;
  while (!ok()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return true;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(ca_, testing::MakeTestCa(dir_.path(), "first"));
    ASSERT_OK_AND_ASSIGN(other_ca_, testing::MakeTestCa(dir_.path(), "other"));
    ASSERT_OK_AND_ASSIGN(cert_, testing::IssueCertificate(ca_, dir_.path(), "server"));
    server::ServerConfig config;
    config.tls_cert_file = cert_.cert_file;
    config.tls_key_file = cert_.key_file;
    config.tls_reload_interval_seconds = 1;
    ASSERT_OK_AND_ASSIGN(started_, testing::StartInProcessServer(dir_.path() + "/data", config));
  }
  void TearDown() override {
    if (started_.server) started_.server->Shutdown();
  }

  int http_port() const { return started_.server->http_port(); }

  // gpufedctl (in-process) as the admin with `flags` before the command; returns the exit code.
  int RunCli(std::vector<std::string> flags, const std::vector<std::string>& command) {
    err_.str("");
    flags.insert(flags.begin(), {"gpufedctl", "--server", started_.address, "--token",
                                 started_.admin_token, "--timeout", "3s"});
    flags.insert(flags.end(), command.begin(), command.end());
    std::vector<const char*> argv;
    argv.reserve(flags.size());
    for (const std::string& a : flags) argv.push_back(a.c_str());
    std::ostringstream out;
    cli::CliIo io;
    io.out = &out;
    io.err = &err_;
    io.env = [this](absl::string_view name) -> std::optional<std::string> {
      if (name == "HOME") return dir_.path();
      return std::nullopt;
    };
    io.retry.initial_backoff = absl::Milliseconds(10);
    io.retry.max_backoff = absl::Milliseconds(50);
    return cli::RunCli(static_cast<int>(argv.size()), argv.data(), io);
  }

  testing::TempDir dir_{"gpufed-tls"};
  testing::TestCa ca_;
  testing::TestCa other_ca_;
  testing::TestCertificate cert_;
  testing::InProcessServer started_;
  std::ostringstream err_;
};

TEST_F(TlsTest, AClientTrustingTheCaGetsThroughOnGrpcAndHttps) {
  grpc::ChannelArguments args;
  auto stub =
      v1::TenantService::NewStub(grpc::CreateCustomChannel(started_.address, Trusting(ca_), args));
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer " + started_.admin_token);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::ListTenantsResponse tenants;
  const grpc::Status status = stub->ListTenants(&ctx, v1::ListTenantsRequest(), &tenants);
  EXPECT_TRUE(status.ok()) << status.error_message();

  EXPECT_EQ(HttpsHealth(http_port(), ca_), 200);
}

TEST_F(TlsTest, APlaintextClientIsRefusedOnGrpcAndHttp) {
  EXPECT_FALSE(GrpcConnects(started_.address, grpc::InsecureChannelCredentials(), kRefusedWithin));

  httplib::Client http("127.0.0.1", http_port());
  http.set_connection_timeout(2);
  http.set_read_timeout(2);
  httplib::Result res = http.Get("/healthz");
  EXPECT_FALSE(res && res->status == 200);
}

TEST_F(TlsTest, AClientTrustingAnotherCaIsRefusedOnGrpcAndHttps) {
  EXPECT_TRUE(GrpcConnects(started_.address, Trusting(ca_), absl::Seconds(10)));
  EXPECT_FALSE(GrpcConnects(started_.address, Trusting(other_ca_), kRefusedWithin));
  EXPECT_EQ(HttpsHealth(http_port(), other_ca_), std::nullopt);
}

TEST_F(TlsTest, ANewCertificateOnDiskIsServedWithoutARestart) {
  ASSERT_TRUE(GrpcConnects(started_.address, Trusting(ca_), absl::Seconds(10)));
  ASSERT_EQ(HttpsHealth(http_port(), ca_), 200);

  // Rotated to a pair from another CA, in place.
  testing::CertificateSpec spec;
  spec.serial = 2;
  ASSERT_OK(testing::IssueCertificate(other_ca_, dir_.path(), "server", spec).status());

  EXPECT_TRUE(Eventually(
      [&] { return GrpcConnects(started_.address, Trusting(other_ca_), absl::Seconds(1)); },
      kReloadWithin));
  EXPECT_TRUE(
      Eventually([&] { return HttpsHealth(http_port(), other_ca_) == 200; }, kReloadWithin));
  // New connections no longer see the old certificate.
  EXPECT_FALSE(GrpcConnects(started_.address, Trusting(ca_), kRefusedWithin));
  EXPECT_EQ(HttpsHealth(http_port(), ca_), std::nullopt);
}

TEST_F(TlsTest, AHalfReplacedPairKeepsTheHttpsCertificateServing) {
  // A new certificate whose key has not arrived: the old pair is still served.
  ASSERT_OK_AND_ASSIGN(testing::TestCertificate next,
                       testing::IssueCertificate(other_ca_, dir_.path(), "next"));
  ASSERT_OK(testing::WriteFileAtomically(cert_.cert_file, next.cert_pem));
  EXPECT_EQ(HttpsHealth(http_port(), ca_), 200);
  // Its key arrives: the new pair is served.
  ASSERT_OK(testing::WriteFileAtomically(cert_.key_file, next.key_pem));
  EXPECT_TRUE(
      Eventually([&] { return HttpsHealth(http_port(), other_ca_) == 200; }, kReloadWithin));
}

// A rotated key file that others may read is refused as one was at start-up: the listener keeps
// the previous pair until the key is private again.
TEST_F(TlsTest, ARotatedKeyOthersMayReadIsNotServedOnHttps) {
  ASSERT_OK_AND_ASSIGN(testing::TestCertificate next,
                       testing::IssueCertificate(other_ca_, dir_.path(), "next"));
  ASSERT_OK(testing::WriteFileAtomically(cert_.key_file, next.key_pem));
  ASSERT_EQ(::chmod(cert_.key_file.c_str(), 0644), 0);
  ASSERT_OK(testing::WriteFileAtomically(cert_.cert_file, next.cert_pem));
  EXPECT_EQ(HttpsHealth(http_port(), ca_), 200);
  EXPECT_EQ(HttpsHealth(http_port(), other_ca_), std::nullopt);
  ASSERT_EQ(::chmod(cert_.key_file.c_str(), 0600), 0);
  EXPECT_TRUE(
      Eventually([&] { return HttpsHealth(http_port(), other_ca_) == 200; }, kReloadWithin));
}

TEST_F(TlsTest, GpufedctlVerifiesTheServerAgainstItsCaFile) {
  EXPECT_EQ(RunCli({"--ca-file", ca_.cert_file}, {"tenants", "list"}), 0) << err_.str();
  EXPECT_NE(RunCli({"--ca-file", other_ca_.cert_file}, {"tenants", "list"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("UNAVAILABLE"));
  EXPECT_NE(RunCli({"--insecure-plaintext"}, {"tenants", "list"}), 0);
  EXPECT_NE(RunCli({"--insecure-plaintext", "--ca-file", ca_.cert_file}, {"tenants", "list"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("give one"));
}

// Server::Create before anything starts (no database is touched).
absl::StatusOr<std::unique_ptr<server::Server>> CreateServer(const std::string& dir,
                                                             const std::string& cert,
                                                             const std::string& key) {
  server::ServerConfig config;
  config.data_dir = dir;
  config.grpc_listen = "127.0.0.1:0";
  config.http_listen = "127.0.0.1:0";
  config.tls_cert_file = cert;
  config.tls_key_file = key;
  return server::Server::Create(config);
}

TEST(TlsStartTest, NoCertificateAndNoPlaintextFlagRefusesToStart) {
  testing::TempDir dir("gpufed-tls-start");
  EXPECT_THAT(CreateServer(dir.path(), "", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--insecure-plaintext")));
}

TEST(TlsStartTest, AMissingOrMismatchedPairRefusesToStartNamingTheFile) {
  testing::TempDir dir("gpufed-tls-start");
  ASSERT_OK_AND_ASSIGN(testing::TestCa ca, testing::MakeTestCa(dir.path(), "ca"));
  ASSERT_OK_AND_ASSIGN(testing::TestCertificate a, testing::IssueCertificate(ca, dir.path(), "a"));
  ASSERT_OK_AND_ASSIGN(testing::TestCertificate b, testing::IssueCertificate(ca, dir.path(), "b"));
  EXPECT_THAT(CreateServer(dir.path(), a.cert_file, b.key_file),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not the key of")));
  EXPECT_THAT(CreateServer(dir.path(), dir.path() + "/missing.crt", a.key_file),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing.crt")));
  EXPECT_THAT(CreateServer(dir.path(), a.key_file, a.key_file),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no PEM certificate")));
}

}  // namespace
}  // namespace gpufed
