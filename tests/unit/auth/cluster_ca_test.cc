// The cluster CA with real certificates made at test time: what it issues chains to it, is for
// client authentication, names the cluster it was asked for whatever a CSR says, and lives as
// long as asked (never past the CA); bad input is INVALID_ARGUMENT naming the field.

#include "auth/cluster_ca.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "openssl/x509_vfy.h"
#include "openssl/x509v3.h"
#include "tests/support/status_matchers.h"
#include "tests/support/test_certs.h"

namespace gpufed::auth {
namespace {

using ::gpufed::testing::StatusIs;
using std::chrono::system_clock;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct Free {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_REQ* p) const { X509_REQ_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
};

std::unique_ptr<X509, Free> ParseCert(const std::string& pem) {
  std::unique_ptr<BIO, Free> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return std::unique_ptr<X509, Free>(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
}

std::unique_ptr<EVP_PKEY, Free> ParseKey(const std::string& pem) {
  std::unique_ptr<BIO, Free> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return std::unique_ptr<EVP_PKEY, Free>(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

// Whether `cert_pem` verifies against `ca_pem` as a TLS client certificate at its issue time.
bool VerifiesAsClient(const std::string& ca_pem, const std::string& cert_pem) {
  auto ca = ParseCert(ca_pem);
  auto cert = ParseCert(cert_pem);
  std::unique_ptr<X509_STORE, Free> store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca.get());
  std::unique_ptr<X509_STORE_CTX, Free> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  return X509_verify_cert(ctx.get()) == 1;
}

std::string CommonName(X509* cert) {
  char cn[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return cn;
}

class ClusterCaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // A folder of its own: ctest runs these tests in parallel, each writing its CA's files.
    std::string pattern = ::testing::TempDir() + "cluster-ca-unit-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    ASSERT_OK_AND_ASSIGN(test_ca_, testing::MakeTestCa(dir_, "cluster-ca-unit"));
    ASSERT_OK_AND_ASSIGN(ca_, ClusterCa::Create(test_ca_.cert_pem, test_ca_.key_pem));
  }

  // Whole seconds: certificates carry no fractions.
  const system_clock::time_point now_ =
      std::chrono::time_point_cast<std::chrono::seconds>(system_clock::now());
  void TearDown() override {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string dir_;
  testing::TestCa test_ca_;
  std::unique_ptr<ClusterCa> ca_;
};

TEST_F(ClusterCaTest, WithoutCsrMakesAKeyPairAndACertificateNamingTheCluster) {
  ASSERT_OK_AND_ASSIGN(IssuedCertificate issued,
                       ca_->Issue("gpu-east", "", now_, std::chrono::hours(24)));
  EXPECT_EQ(issued.info.cluster, "gpu-east");
  EXPECT_EQ(issued.info.not_before, now_ - std::chrono::minutes(5));
  EXPECT_EQ(issued.info.not_after, now_ + std::chrono::hours(24));
  EXPECT_EQ(issued.info.serial.size(), 32u);
  EXPECT_TRUE(VerifiesAsClient(ca_->cert_pem(), issued.cert_pem));

  auto cert = ParseCert(issued.cert_pem);
  auto key = ParseKey(issued.key_pem);
  ASSERT_NE(cert, nullptr);
  ASSERT_NE(key, nullptr);
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  EXPECT_EQ(CommonName(cert.get()), "gpu-east");
  EXPECT_EQ(X509_check_ca(cert.get()), 0);

  ASSERT_OK_AND_ASSIGN(ClusterCertificateInfo read, ReadClusterCertificate(issued.cert_pem));
  EXPECT_EQ(read.cluster, "gpu-east");
  EXPECT_EQ(read.serial, issued.info.serial);
  EXPECT_EQ(read.not_after, issued.info.not_after);
}

TEST_F(ClusterCaTest, EachCertificateHasItsOwnSerial) {
  ASSERT_OK_AND_ASSIGN(IssuedCertificate a,
                       ca_->Issue("gpu-east", "", now_, std::chrono::hours(1)));
  ASSERT_OK_AND_ASSIGN(IssuedCertificate b,
                       ca_->Issue("gpu-east", "", now_, std::chrono::hours(1)));
  EXPECT_NE(a.info.serial, b.info.serial);
}

TEST_F(ClusterCaTest, WithCsrNamesTheClusterAskedForWhateverTheCsrSays) {
  ASSERT_OK_AND_ASSIGN(testing::TestCsr csr,
                       testing::MakeCsr("gpu-west", {ClusterUri("gpu-west"), ClusterUri("x")}));
  ASSERT_OK_AND_ASSIGN(IssuedCertificate issued,
                       ca_->Issue("gpu-east", csr.csr_pem, now_, std::chrono::hours(24)));
  EXPECT_TRUE(issued.key_pem.empty());
  EXPECT_EQ(issued.info.cluster, "gpu-east");
  EXPECT_TRUE(VerifiesAsClient(ca_->cert_pem(), issued.cert_pem));
  auto cert = ParseCert(issued.cert_pem);
  EXPECT_EQ(CommonName(cert.get()), "gpu-east");
  // For the CSR's key: the agent that made it keeps the private half.
  auto key = ParseKey(csr.key_pem);
  EXPECT_EQ(X509_check_private_key(cert.get(), key.get()), 1);
  ASSERT_OK_AND_ASSIGN(ClusterCertificateInfo read, ReadClusterCertificate(issued.cert_pem));
  EXPECT_EQ(read.cluster, "gpu-east");
}

TEST_F(ClusterCaTest, ACsrWhoseSignatureDoesNotVerifyIsRefused) {
  ASSERT_OK_AND_ASSIGN(testing::TestCsr csr, testing::MakeCsr("gpu-east"));
  std::unique_ptr<BIO, Free> in(
      BIO_new_mem_buf(csr.csr_pem.data(), static_cast<int>(csr.csr_pem.size())));
  std::unique_ptr<X509_REQ, Free> req(PEM_read_bio_X509_REQ(in.get(), nullptr, nullptr, nullptr));
  ASSERT_NE(req, nullptr);
  // Another key in the request than the one that signed it.
  ASSERT_OK_AND_ASSIGN(testing::TestCsr other, testing::MakeCsr("other"));
  auto other_key = ParseKey(other.key_pem);
  ASSERT_EQ(X509_REQ_set_pubkey(req.get(), other_key.get()), 1);
  std::unique_ptr<BIO, Free> out(BIO_new(BIO_s_mem()));
  ASSERT_EQ(PEM_write_bio_X509_REQ(out.get(), req.get()), 1);
  char* data = nullptr;
  const long size = BIO_get_mem_data(out.get(), &data);  // NOLINT(google-runtime-int)
  const std::string forged(data, static_cast<size_t>(size));

  EXPECT_THAT(ca_->Issue("gpu-east", forged, now_, std::chrono::hours(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("csr_pem:")));
}

TEST_F(ClusterCaTest, BadInputIsInvalidArgumentNamingTheField) {
  EXPECT_THAT(ca_->Issue("gpu-east", "not a csr", now_, std::chrono::hours(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("csr_pem:")));
  EXPECT_THAT(ca_->Issue("gpu-east", std::string(ClusterCa::kMaxCsrBytes + 1, 'x'), now_,
                         std::chrono::hours(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("csr_pem:")));
  for (const std::string& name :
       {std::string(""), std::string("GPU"), std::string("1gpu"), std::string(64, 'a'),
        std::string("a,URI:spiffe://gpufed/cluster/b"), std::string("a/b")}) {
    EXPECT_THAT(ca_->Issue(name, "", now_, std::chrono::hours(1)),
                StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("cluster:")))
        << name;
  }
  EXPECT_THAT(ca_->Issue("gpu-east", "", now_, std::chrono::seconds(0)),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("lifetime:")));
}

TEST_F(ClusterCaTest, NoCertificateOutlivesTheCa) {
  auto ca_cert = ParseCert(ca_->cert_pem());
  std::tm tm{};
  ASSERT_EQ(ASN1_TIME_to_tm(X509_get0_notAfter(ca_cert.get()), &tm), 1);
  const system_clock::time_point ca_not_after = system_clock::from_time_t(timegm(&tm));
  ASSERT_LT(ca_not_after, now_ + std::chrono::hours(24 * 90));  // the test CA lives 30 days

  ASSERT_OK_AND_ASSIGN(IssuedCertificate issued,
                       ca_->Issue("gpu-east", "", now_, std::chrono::hours(24 * 90)));
  EXPECT_EQ(issued.info.not_after, ca_not_after);
  EXPECT_THAT(
      ca_->Issue("gpu-east", "", ca_not_after + std::chrono::seconds(1), std::chrono::hours(1)),
      StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(ClusterCaTest, CreateRefusesALeafCertificateAndAKeyOfAnotherCa) {
  ASSERT_OK_AND_ASSIGN(testing::TestCertificate leaf,
                       testing::IssueCertificate(test_ca_, dir_, "cluster-ca-unit-leaf"));
  EXPECT_THAT(ClusterCa::Create(leaf.cert_pem, leaf.key_pem),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a CA")));
  ASSERT_OK_AND_ASSIGN(testing::TestCa other, testing::MakeTestCa(dir_, "cluster-ca-unit-other"));
  EXPECT_THAT(ClusterCa::Create(test_ca_.cert_pem, other.key_pem),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("cluster CA key:")));
  EXPECT_THAT(ClusterCa::Create("", test_ca_.key_pem),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("cluster CA certificate:")));
}

TEST_F(ClusterCaTest, ACertificateNamesOneClusterOrNone) {
  testing::CertificateSpec server;  // DNS and IP names, no cluster
  ASSERT_OK_AND_ASSIGN(testing::TestCertificate plain,
                       testing::IssueCertificate(test_ca_, dir_, "cluster-ca-unit-plain", server));
  EXPECT_THAT(ReadClusterCertificate(plain.cert_pem), StatusIs(absl::StatusCode::kInvalidArgument));

  testing::CertificateSpec two;
  two.uris = {ClusterUri("gpu-east"), ClusterUri("gpu-west")};
  ASSERT_OK_AND_ASSIGN(testing::TestCertificate both,
                       testing::IssueCertificate(test_ca_, dir_, "cluster-ca-unit-two", two));
  EXPECT_THAT(ReadClusterCertificate(both.cert_pem), StatusIs(absl::StatusCode::kInvalidArgument));

  testing::CertificateSpec one;
  one.uris = {"https://example.com/", ClusterUri("gpu-west")};
  ASSERT_OK_AND_ASSIGN(testing::TestCertificate named,
                       testing::IssueCertificate(test_ca_, dir_, "cluster-ca-unit-one", one));
  ASSERT_OK_AND_ASSIGN(ClusterCertificateInfo info, ReadClusterCertificate(named.cert_pem));
  EXPECT_EQ(info.cluster, "gpu-west");
  EXPECT_EQ(info.serial, "01");

  EXPECT_THAT(ReadClusterCertificate("junk"), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace gpufed::auth
