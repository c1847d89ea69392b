#ifndef GPUFED_TESTS_SUPPORT_TEST_CERTS_H_
#define GPUFED_TESTS_SUPPORT_TEST_CERTS_H_

// Real X.509 certificates made at test time with OpenSSL's C API: a certificate authority, and
// certificates it signs, written as PEM files into a folder the test owns. ECDSA P-256 keys,
// SHA-256 signatures.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gpufed::testing {

// A CA: its certificate (PEM, also in cert_file) and its private key (PEM, kept in memory only).
struct TestCa {
  std::string name;
  std::string cert_file;
  std::string cert_pem;
  std::string key_pem;
};

// A certificate a TestCa signed, and its key; both also written to files.
struct TestCertificate {
  std::string cert_file;
  std::string key_file;
  std::string cert_pem;
  std::string key_pem;
};

struct CertificateSpec {
  std::string common_name = "gpufed-server";
  // Subject alternative names; a TLS client checks the host it dialled against them.
  std::vector<std::string> dns_names = {"localhost"};
  std::vector<std::string> ip_addresses = {"127.0.0.1"};
  // URI names, e.g. a cluster's spiffe://gpufed/cluster/NAME.
  std::vector<std::string> uris;
  int64_t serial = 1;
  // Validity, from now: [now + valid_from, now + valid_from + valid_for].
  absl::Duration valid_from = absl::Hours(-1);
  absl::Duration valid_for = absl::Hours(24);
};

// A self-signed CA named `name`, its certificate written to DIR/NAME-ca.crt.
absl::StatusOr<TestCa> MakeTestCa(const std::string& dir, const std::string& name);

// A leaf certificate (server and client use) for `spec`, signed by `ca`, written to
// DIR/FILE_STEM.crt and DIR/FILE_STEM.key (0600); each file replaced atomically (written aside,
// then renamed over), as an operator rotating certificates should.
absl::StatusOr<TestCertificate> IssueCertificate(const TestCa& ca, const std::string& dir,
                                                 const std::string& file_stem,
                                                 const CertificateSpec& spec = {});

// A certificate signing request for a new P-256 key: subject CN=`common_name`, and the URI names
// `uris` as requested subject alternative names (which a CA is free to ignore).
struct TestCsr {
  std::string csr_pem;
  std::string key_pem;
};
absl::StatusOr<TestCsr> MakeCsr(const std::string& common_name,
                                const std::vector<std::string>& uris = {});

// Writes `text` to `path` through a temporary file renamed over it, mode 0600.
absl::Status WriteFileAtomically(const std::string& path, const std::string& text);

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_TEST_CERTS_H_
