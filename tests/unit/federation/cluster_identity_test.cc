// The cluster-identity use cases (ControlPlane::EnrollCluster, RevokeCluster) on the in-memory
// store with a fake CA: who may enrol, what is recorded, and that revoking a cluster revokes its
// certificates and agent tokens and closes its connection at once, and only its.

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "auth/token.h"
#include "federation/control_plane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/unit/federation/plane_test_base.h"
#include "tests/unit/federation/test_pools.h"

namespace gpufed {
namespace {

using ::gpufed::testing::Admin;
using ::gpufed::testing::AgentOf;
using ::gpufed::testing::FakeChannel;
using ::gpufed::testing::StatusIs;
using ::gpufed::testing::User;
using ::testing::ElementsAre;
using ::testing::StartsWith;

// Issues certificates with consecutive serials, valid for a day from `now`; remembers the CSR.
class FakeIssuer final : public ClusterCertificateIssuer {
 public:
  absl::StatusOr<IssuedClusterCertificate> Issue(const std::string& cluster,
                                                 const std::string& csr_pem,
                                                 Timestamp now) override {
    if (csr_pem == "bad") return absl::InvalidArgumentError("csr_pem: not a CSR");
    IssuedClusterCertificate out;
    out.cert_pem = "cert of " + cluster;
    out.key_pem = csr_pem.empty() ? "key" : "";
    out.ca_cert_pem = "ca";
    out.certificate.serial = absl::StrCat("A", ++issued_);
    out.certificate.cluster = cluster;
    out.certificate.not_before = now;
    out.certificate.not_after = now + std::chrono::hours(24);
    return out;
  }
  int issued_ = 0;
};

class ClusterIdentityTest : public testing::PlaneLoopTestBase {
 protected:
  ClusterIdentityTest() : with_ca_(PortsWithIssuer()) {}

  ControlPlanePorts PortsWithIssuer() {
    ControlPlanePorts ports = Ports();
    ports.issuer = &issuer_;
    return ports;
  }

  // The agent of `cluster` as a certificate with `serial` authenticates it.
  static auth::Principal CertificateAgent(const std::string& cluster, const std::string& serial) {
    auth::Principal who = AgentOf(cluster);
    who.certificate_serial = serial;
    return who;
  }

  absl::StatusOr<std::shared_ptr<AgentLink>> RegisterAs(const auth::Principal& who,
                                                        const std::string& cluster,
                                                        std::shared_ptr<FakeChannel> channel) {
    Cluster c = testing::MakeCluster(cluster, 1, 8, "H100-80GB");
    return with_ca_.RegisterAgent(who, c.info, c.nodes, {}, std::move(channel));
  }

  FakeIssuer issuer_;
  ControlPlane with_ca_;
};

TEST_F(ClusterIdentityTest, OnlyAPlatformAdminEnrolsAndOnlyWithACa) {
  EXPECT_THAT(plane_.EnrollCluster(Admin(), "c1", ""),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(with_ca_.EnrollCluster(User("acme"), "c1", ""),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(with_ca_.EnrollCluster(AgentOf("c1"), "c1", ""),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(with_ca_.EnrollCluster(Admin(), "C 1", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("cluster:")));
  EXPECT_THAT(with_ca_.EnrollCluster(Admin(), "c1", "bad"),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("csr_pem:")));
  EXPECT_EQ(issuer_.issued_, 0);  // nothing was issued
  EXPECT_THAT(with_ca_.RevokeCluster(User("acme"), "c1"),
              StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(ClusterIdentityTest, AnEnrolledCertificateIsRecordedAndSpeaksForItsClusterOnly) {
  ASSERT_OK_AND_ASSIGN(IssuedClusterCertificate issued, with_ca_.EnrollCluster(Admin(), "c1", ""));
  EXPECT_EQ(issued.key_pem, "key");
  ASSERT_OK_AND_ASSIGN(ClusterCertificate stored,
                       store_.LookupClusterCertificate(issued.certificate.serial, "c1"));
  EXPECT_EQ(stored.cluster, "c1");
  EXPECT_EQ(stored.not_after, issued.certificate.not_after);

  auto channel = std::make_shared<FakeChannel>();
  EXPECT_OK(RegisterAs(CertificateAgent("c1", issued.certificate.serial), "c1", channel));
  EXPECT_THAT(RegisterAs(CertificateAgent("c1", issued.certificate.serial), "c2",
                         std::make_shared<FakeChannel>()),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(store_.GetCluster("c2"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ClusterIdentityTest, RevokingAClusterCutsOffEveryCredentialAndItsConnectionOnly) {
  ASSERT_OK_AND_ASSIGN(IssuedClusterCertificate first, with_ca_.EnrollCluster(Admin(), "c1", ""));
  ASSERT_OK_AND_ASSIGN(IssuedClusterCertificate second,
                       with_ca_.EnrollCluster(Admin(), "c1", "csr"));
  ASSERT_OK_AND_ASSIGN(IssuedClusterCertificate other, with_ca_.EnrollCluster(Admin(), "c2", ""));
  ASSERT_OK_AND_ASSIGN(
      CreatedToken token,
      with_ca_.CreateToken(
          Admin(),
          {.subject = "agent-c1", .role = auth::Role::kAgent, .tenant = "", .cluster = "c1"}));
  auto c1 = std::make_shared<FakeChannel>();
  auto c2 = std::make_shared<FakeChannel>();
  ASSERT_OK(RegisterAs(CertificateAgent("c1", first.certificate.serial), "c1", c1));
  ASSERT_OK(RegisterAs(CertificateAgent("c2", other.certificate.serial), "c2", c2));

  // Two certificates and one agent token.
  EXPECT_THAT(with_ca_.RevokeCluster(Admin(), "c1"), testing::IsOkAndHolds(3));
  EXPECT_TRUE(c1->closed);
  EXPECT_THAT(c1->close_reasons, ElementsAre(AgentChannel::CloseReason::kRevoked));
  EXPECT_FALSE(c2->closed);
  for (const auto& serial : {first.certificate.serial, second.certificate.serial}) {
    EXPECT_THAT(store_.LookupClusterCertificate(serial, "c1"),
                StatusIs(absl::StatusCode::kNotFound));
  }
  EXPECT_THAT(store_.LookupToken(auth::HashToken(token.secret)),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_OK(store_.LookupClusterCertificate(other.certificate.serial, "c2"));

  // A stream that authenticated before the revocation does not get to stay attached.
  auto late = std::make_shared<FakeChannel>();
  EXPECT_THAT(RegisterAs(CertificateAgent("c1", first.certificate.serial), "c1", late),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(with_ca_.RevokeCluster(Admin(), "c1"), testing::IsOkAndHolds(0));
}

}  // namespace
}  // namespace gpufed
