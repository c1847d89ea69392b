// Mutual TLS for agents (issue #12, point 2), through a real server and real gRPC channels with
// certificates made at test time. A server given a cluster CA asks every client for a
// certificate: one from another CA, expired or not yet valid fails the handshake (no call is
// answered); a client without one still works with its bearer token. EnrollCluster issues a
// cluster its certificate (naming the cluster whatever a CSR says; platform admins only); with
// it the agent registers its cluster, and only its cluster, and gets its work. RevokeCluster
// ends the live stream at once and the certificate is refused from then on. A cluster
// certificate is no credential on the user API. A cluster CA that does not load, or whose key
// other users may read, stops the server at start.

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "auth/cluster_ca.h"
#include "cli/app.h"
#include "gmock/gmock.h"
#include "gpufed/v1/agent_service.grpc.pb.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/service/fake_agent.h"
#include "tests/service/in_process_server.h"
#include "tests/service/raw_calls.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_certs.h"

namespace gpufed {
namespace {

using ::gpufed::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A client key pair; empty: the client presents no certificate.
struct ClientPair {
  std::string cert_pem;
  std::string key_pem;
};

class MtlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(server_ca_, testing::MakeTestCa(dir_.path(), "server"));
    ASSERT_OK_AND_ASSIGN(cluster_ca_, testing::MakeTestCa(dir_.path(), "clusters"));
    ASSERT_OK_AND_ASSIGN(other_ca_, testing::MakeTestCa(dir_.path(), "other"));
    ASSERT_OK_AND_ASSIGN(server_cert_,
                         testing::IssueCertificate(server_ca_, dir_.path(), "server"));
    ca_key_file_ = dir_.path() + "/clusters-ca.key";
    ASSERT_OK(testing::WriteFileAtomically(ca_key_file_, cluster_ca_.key_pem));

    server::ServerConfig config;
    config.tls_cert_file = server_cert_.cert_file;
    config.tls_key_file = server_cert_.key_file;
    config.cluster_ca_cert_file = cluster_ca_.cert_file;
    config.cluster_ca_key_file = ca_key_file_;
    Configure(config);
    ASSERT_OK_AND_ASSIGN(started_, testing::StartInProcessServer(dir_.path() + "/data", config));
  }
  void TearDown() override {
    if (started_.server) started_.server->Shutdown();
  }
  // What a test fixture derived from this one changes in the server's configuration.
  virtual void Configure(server::ServerConfig& /*config*/) {}

  // A new connection (its own subchannel) trusting the server's CA, presenting `pair`.
  [[nodiscard]] std::shared_ptr<grpc::Channel> Channel(const ClientPair& pair) const {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = server_ca_.cert_pem;
    options.pem_cert_chain = pair.cert_pem;
    options.pem_private_key = pair.key_pem;
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(started_.address, grpc::SslCredentials(options), args);
  }

  // ListTenants over a new connection presenting `pair`, with `token` (empty: none).
  grpc::Status ListTenants(const ClientPair& pair, const std::string& token,
                           v1::ListTenantsResponse* out) const {
    auto stub = v1::TenantService::NewStub(Channel(pair));
    grpc::ClientContext ctx;
    if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return stub->ListTenants(&ctx, v1::ListTenantsRequest(), out);
  }

  // A certificate `ca` signed naming cluster `name`, valid per `spec`.
  ClientPair Signed(const testing::TestCa& ca, const std::string& name,
                    testing::CertificateSpec spec) {
    spec.common_name = name;
    spec.dns_names.clear();
    spec.ip_addresses.clear();
    spec.uris = {auth::ClusterUri(name)};
    absl::StatusOr<testing::TestCertificate> cert =
        testing::IssueCertificate(ca, dir_.path(), name + "-" + ca.name, spec);
    EXPECT_OK(cert.status());
    if (!cert.ok()) return {};
    return {cert->cert_pem, cert->key_pem};
  }

  // A unary call of "Service/Method" with `token` over a new connection presenting `pair`.
  template <typename Response>
  grpc::Status Call(const std::string& method, const google::protobuf::Message& request,
                    Response* response, const std::string& token, const ClientPair& pair = {}) {
    std::string bytes;
    grpc::Status s = testing::RawUnaryCall(Channel(pair), token, "/gpufed.v1." + method,
                                           request.SerializeAsString(), &bytes);
    if (s.ok()) response->ParseFromString(bytes);
    return s;
  }

  grpc::Status Enroll(const std::string& cluster, const std::string& csr_pem,
                      v1::EnrollClusterResponse* response, const std::string& token) {
    v1::EnrollClusterRequest request;
    request.set_cluster(cluster);
    request.set_csr_pem(csr_pem);
    return Call("ClusterService/EnrollCluster", request, response, token);
  }

  // What `gpufedctl clusters enroll NAME` hands an agent: a key pair from the server's CA.
  ClientPair Enrolled(const std::string& name) {
    v1::EnrollClusterResponse enrolled;
    const grpc::Status status = Enroll(name, "", &enrolled, started_.admin_token);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {enrolled.cert_pem(), enrolled.key_pem()};
  }

  // An agent stream presenting `pair` (no token) that sent a registration of `cluster`.
  std::unique_ptr<FakeAgentStream> AgentFor(const ClientPair& pair, const std::string& cluster) {
    auto agent = std::make_unique<FakeAgentStream>(Channel(pair), "");
    EXPECT_TRUE(agent->Write(Registration(cluster, 1, 2, "H100-80GB")));
    return agent;
  }

  // A platform-admin RPC: does `cluster` exist in the store?
  grpc::StatusCode ClusterLookup(const std::string& cluster) {
    v1::GetClusterRequest request;
    request.set_name(cluster);
    v1::Cluster found;
    return Call("ClusterService/GetCluster", request, &found, started_.admin_token).error_code();
  }

  testing::TempDir dir_{"gpufed-mtls"};
  testing::TestCa server_ca_;
  testing::TestCa cluster_ca_;
  testing::TestCa other_ca_;
  testing::TestCertificate server_cert_;
  std::string ca_key_file_;
  testing::InProcessServer started_;
};

TEST_F(MtlsTest, AClientWithoutACertificateStillWorksWithItsToken) {
  v1::ListTenantsResponse tenants;
  const grpc::Status status = ListTenants({}, started_.admin_token, &tenants);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OK) << status.error_message();
}

TEST_F(MtlsTest, AnEnrolledCertificateGetsThroughTheHandshake) {
  v1::ListTenantsResponse tenants;
  const grpc::Status status = ListTenants(Enrolled("gpu-east"), started_.admin_token, &tenants);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::OK) << status.error_message();
}

// Each refusal below is the handshake's: even the admin's token gets no answer through it.
TEST_F(MtlsTest, ACertificateFromAnotherCaIsRefused) {
  v1::ListTenantsResponse tenants;
  const grpc::Status status =
      ListTenants(Signed(other_ca_, "gpu-east", {}), started_.admin_token, &tenants);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  EXPECT_EQ(tenants.tenants_size(), 0);
}

TEST_F(MtlsTest, AnExpiredCertificateIsRefused) {
  testing::CertificateSpec expired;
  expired.valid_from = absl::Hours(-48);
  expired.valid_for = absl::Hours(24);
  v1::ListTenantsResponse tenants;
  const grpc::Status status =
      ListTenants(Signed(cluster_ca_, "gpu-east", expired), started_.admin_token, &tenants);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

// With require_agent_certificates, an agent token opens no agent stream; an enrolled
// certificate still does.
class MtlsRequiredTest : public MtlsTest {
 protected:
  void Configure(server::ServerConfig& config) override {
    config.require_agent_certificates = true;
  }
};

TEST_F(MtlsRequiredTest, AnAgentTokenIsRefusedAndACertificateRegisters) {
  v1::CreateTokenRequest request;
  request.set_subject("edge-agent");
  request.set_role(v1::ROLE_AGENT);
  request.set_cluster("edge");
  v1::CreateTokenResponse token;
  ASSERT_TRUE(Call("TenantService/CreateToken", request, &token, started_.admin_token).ok());
  auto by_token = std::make_unique<FakeAgentStream>(Channel({}), token.token());
  ASSERT_TRUE(by_token->Write(Registration("edge", 1, 2, "H100-80GB")));
  v1::ServerMessage m;
  EXPECT_FALSE(by_token->ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(by_token->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ClusterLookup("edge"), grpc::StatusCode::NOT_FOUND);

  auto by_certificate = AgentFor(Enrolled("edge"), "edge");
  EXPECT_TRUE(by_certificate->ReadUntil(v1::ServerMessage::kRegistered, &m));
}

TEST_F(MtlsTest, ACertificateNotYetValidIsRefused) {
  testing::CertificateSpec later;
  later.valid_from = absl::Hours(1);
  v1::ListTenantsResponse tenants;
  const grpc::Status status =
      ListTenants(Signed(cluster_ca_, "gpu-east", later), started_.admin_token, &tenants);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(MtlsTest, AClusterCertificateIsNoCredentialOnTheUserApi) {
  const ClientPair cluster = Enrolled("gpu-east");
  v1::ListTenantsResponse tenants;
  const grpc::Status status = ListTenants(cluster, "", &tenants);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  EXPECT_EQ(tenants.tenants_size(), 0);

  auto clusters = v1::ClusterService::NewStub(Channel(cluster));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::ListClustersResponse listed;
  EXPECT_EQ(clusters->ListClusters(&ctx, v1::ListClustersRequest(), &listed).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(listed.clusters_size(), 0);
}

TEST_F(MtlsTest, AnEnrolledClusterRegistersWithItsCertificateAndGetsItsWork) {
  const ClientPair east = Enrolled("gpu-east");
  ASSERT_FALSE(east.cert_pem.empty());
  auto agent = AgentFor(east, "gpu-east");
  v1::ServerMessage m;
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(m.registered().cluster(), "gpu-east");

  // Work for the cluster reaches the agent that speaks for it.
  v1::CreateTenantRequest tenant;
  tenant.set_name("acme");
  v1::Tenant made_tenant;
  ASSERT_TRUE(Call("TenantService/CreateTenant", tenant, &made_tenant, started_.admin_token).ok());
  v1::CreateProjectRequest project;
  project.set_tenant("acme");
  project.set_name("research");
  v1::Project made_project;
  ASSERT_TRUE(
      Call("TenantService/CreateProject", project, &made_project, started_.admin_token).ok());
  v1::SubmitRequest submit;
  v1::WorkloadSpec* spec = submit.mutable_spec();
  spec->set_tenant("acme");
  spec->set_project("research");
  spec->set_name("train");
  spec->set_replicas(1);
  spec->mutable_per_replica()->set_gpus(1);
  spec->set_workload_class(v1::WORKLOAD_CLASS_BATCH);
  v1::SubmitResponse submitted;
  const grpc::Status status =
      Call("WorkloadService/Submit", submit, &submitted, started_.admin_token);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kAssign, &m));
  ASSERT_EQ(m.assign().assignments_size(), 1);
  EXPECT_EQ(m.assign().assignments(0).workload_id(), submitted.workload().id());
}

TEST_F(MtlsTest, AClustersCertificateDoesNotSpeakForAnotherCluster) {
  const ClientPair east = Enrolled("gpu-east");
  auto agent = AgentFor(east, "gpu-west");
  v1::ServerMessage m;
  EXPECT_FALSE(agent->ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(agent->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  // Nothing was stored for the cluster it tried to speak for.
  EXPECT_EQ(ClusterLookup("gpu-west"), grpc::StatusCode::NOT_FOUND);
}

TEST_F(MtlsTest, ACertificateTheCaSignedButNeverEnrolledSpeaksForNothing) {
  // Signed by the cluster CA (the handshake passes) but not issued by the server: no record.
  const ClientPair forged = Signed(cluster_ca_, "gpu-east", {});
  auto agent = AgentFor(forged, "gpu-east");
  v1::ServerMessage m;
  EXPECT_FALSE(agent->ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(agent->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ClusterLookup("gpu-east"), grpc::StatusCode::NOT_FOUND);
}

TEST_F(MtlsTest, RevokingAClusterEndsItsLiveStreamAndRefusesItsCertificate) {
  const ClientPair east = Enrolled("gpu-east");
  const ClientPair west = Enrolled("gpu-west");
  auto agent = AgentFor(east, "gpu-east");
  auto other = AgentFor(west, "gpu-west");
  v1::ServerMessage m;
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kRegistered, &m));
  ASSERT_TRUE(other->ReadUntil(v1::ServerMessage::kRegistered, &m));

  v1::RevokeClusterRequest revoke;
  revoke.set_cluster("gpu-east");
  v1::RevokeClusterResponse revoked;
  ASSERT_TRUE(Call("ClusterService/RevokeCluster", revoke, &revoked, started_.admin_token).ok());
  EXPECT_EQ(revoked.revoked(), 1);

  // The live stream ends now (its 60 s deadline is far off).
  const auto before = std::chrono::steady_clock::now();
  EXPECT_FALSE(agent->ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(agent->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_LT(std::chrono::steady_clock::now() - before, std::chrono::seconds(30));
  // And the certificate is refused from then on.
  auto again = AgentFor(east, "gpu-east");
  EXPECT_FALSE(again->ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(again->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // Another cluster is not touched: its stream still answers its heartbeats.
  v1::AgentMessage heartbeat;
  heartbeat.mutable_heartbeat();
  ASSERT_TRUE(other->Write(heartbeat));
  EXPECT_TRUE(other->ReadUntil(v1::ServerMessage::kLease, &m));
}

TEST_F(MtlsTest, EnrollingWithACsrNamesTheClusterWhateverTheCsrSays) {
  ASSERT_OK_AND_ASSIGN(testing::TestCsr csr,
                       testing::MakeCsr("gpu-west", {auth::ClusterUri("gpu-west")}));
  v1::EnrollClusterResponse enrolled;
  const grpc::Status status = Enroll("gpu-east", csr.csr_pem, &enrolled, started_.admin_token);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(enrolled.key_pem().empty());  // the key stays with whoever made the CSR
  EXPECT_EQ(enrolled.ca_cert_pem(), cluster_ca_.cert_pem);
  ASSERT_OK_AND_ASSIGN(auth::ClusterCertificateInfo info,
                       auth::ReadClusterCertificate(enrolled.cert_pem()));
  EXPECT_EQ(info.cluster, "gpu-east");
  EXPECT_EQ(info.serial, enrolled.serial());

  const ClientPair pair{enrolled.cert_pem(), csr.key_pem};
  auto as_west = AgentFor(pair, "gpu-west");
  v1::ServerMessage m;
  EXPECT_FALSE(as_west->ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(as_west->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  auto as_east = AgentFor(pair, "gpu-east");
  EXPECT_TRUE(as_east->ReadUntil(v1::ServerMessage::kRegistered, &m));
}

TEST_F(MtlsTest, OnlyAPlatformAdminEnrollsAndABadRequestNamesTheField) {
  v1::CreateTokenRequest viewer;
  viewer.set_subject("finance");
  viewer.set_role(v1::ROLE_VIEWER);
  v1::CreateTokenResponse token;
  ASSERT_TRUE(Call("TenantService/CreateToken", viewer, &token, started_.admin_token).ok());
  v1::EnrollClusterResponse enrolled;
  EXPECT_EQ(Enroll("gpu-east", "", &enrolled, token.token()).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(enrolled.cert_pem().empty());
  v1::RevokeClusterRequest revoke;
  revoke.set_cluster("gpu-east");
  v1::RevokeClusterResponse revoked;
  EXPECT_EQ(Call("ClusterService/RevokeCluster", revoke, &revoked, token.token()).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);

  grpc::Status bad = Enroll("gpu-east", "not a CSR", &enrolled, started_.admin_token);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), StartsWith("csr_pem"));
  bad = Enroll("GPU East", "", &enrolled, started_.admin_token);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), StartsWith("cluster"));
}

TEST_F(MtlsTest, GpufedctlEnrollsIntoFilesAndRevokes) {
  const std::string out_dir = dir_.path() + "/enrolled";
  std::filesystem::create_directories(out_dir);
  // gpufedctl (in-process) as the platform admin; its exit code.
  auto run = [&](const std::vector<std::string>& command) {
    std::vector<std::string> args = {
        "gpufedctl", "--server",           started_.address, "--token", started_.admin_token,
        "--ca-file", server_ca_.cert_file, "--timeout",      "5s"};
    args.insert(args.end(), command.begin(), command.end());
    std::vector<const char*> argv;
    argv.reserve(args.size());
    for (const std::string& a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    cli::CliIo io;
    io.out = &out;
    io.err = &err;
    io.env = [this](absl::string_view name) -> std::optional<std::string> {
      if (name == "HOME") return dir_.path();
      return std::nullopt;
    };
    const int code = cli::RunCli(static_cast<int>(argv.size()), argv.data(), io);
    EXPECT_EQ(code, 0) << err.str();
    return code;
  };
  ASSERT_EQ(run({"clusters", "enroll", "gpu-east", "--out-dir", out_dir}), 0);

  struct stat key_stat {};
  ASSERT_EQ(::stat((out_dir + "/gpu-east.key").c_str(), &key_stat), 0);
  EXPECT_EQ(key_stat.st_mode & 0777, 0600u);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  EXPECT_EQ(read(out_dir + "/cluster-ca.crt"), cluster_ca_.cert_pem);
  const ClientPair pair{read(out_dir + "/gpu-east.crt"), read(out_dir + "/gpu-east.key")};
  ASSERT_OK_AND_ASSIGN(auth::ClusterCertificateInfo info,
                       auth::ReadClusterCertificate(pair.cert_pem));
  EXPECT_EQ(info.cluster, "gpu-east");
  auto agent = AgentFor(pair, "gpu-east");
  v1::ServerMessage m;
  ASSERT_TRUE(agent->ReadUntil(v1::ServerMessage::kRegistered, &m));

  ASSERT_EQ(run({"clusters", "revoke", "gpu-east"}), 0);
  EXPECT_FALSE(agent->ReadUntil(v1::ServerMessage::kRegistered, &m));
  EXPECT_EQ(agent->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// Server::Create with the cluster CA files given; fails before any database is touched.
absl::StatusOr<std::unique_ptr<server::Server>> CreateServer(const std::string& dir,
                                                             const testing::TestCertificate& tls,
                                                             const std::string& ca_cert,
                                                             const std::string& ca_key) {
  server::ServerConfig config;
  config.data_dir = dir;
  config.grpc_listen = "127.0.0.1:0";
  config.http_listen = "127.0.0.1:0";
  config.tls_cert_file = tls.cert_file;
  config.tls_key_file = tls.key_file;
  config.cluster_ca_cert_file = ca_cert;
  config.cluster_ca_key_file = ca_key;
  return server::Server::Create(config);
}

class MtlsStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(server_ca_, testing::MakeTestCa(dir_.path(), "server"));
    ASSERT_OK_AND_ASSIGN(tls_, testing::IssueCertificate(server_ca_, dir_.path(), "server"));
    ASSERT_OK_AND_ASSIGN(cluster_ca_, testing::MakeTestCa(dir_.path(), "clusters"));
    ca_key_file_ = dir_.path() + "/clusters-ca.key";
    ASSERT_OK(testing::WriteFileAtomically(ca_key_file_, cluster_ca_.key_pem));
  }

  testing::TempDir dir_{"gpufed-mtls-start"};
  testing::TestCa server_ca_;
  testing::TestCa cluster_ca_;
  testing::TestCertificate tls_;
  std::string ca_key_file_;
};

TEST_F(MtlsStartTest, ACaKeyOtherUsersMayReadRefusesToStart) {
  ASSERT_EQ(::chmod(ca_key_file_.c_str(), 0644), 0);
  EXPECT_THAT(CreateServer(dir_.path() + "/data", tls_, cluster_ca_.cert_file, ca_key_file_),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cluster_ca_key_file")));
}

TEST_F(MtlsStartTest, AKeyThatIsNotTheCasRefusesToStart) {
  ASSERT_OK(testing::WriteFileAtomically(ca_key_file_, server_ca_.key_pem));
  EXPECT_THAT(CreateServer(dir_.path() + "/data", tls_, cluster_ca_.cert_file, ca_key_file_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster CA key")));
}

TEST_F(MtlsStartTest, OneCaFileWithoutTheOtherRefusesToStart) {
  EXPECT_THAT(CreateServer(dir_.path() + "/data", tls_, cluster_ca_.cert_file, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster_ca_key_file")));
  EXPECT_THAT(CreateServer(dir_.path() + "/data", tls_, "", ca_key_file_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cluster_ca_cert_file")));
}

}  // namespace
}  // namespace gpufed
