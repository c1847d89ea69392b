#ifndef GPUFED_AUTH_CLUSTER_CA_H_
#define GPUFED_AUTH_CLUSTER_CA_H_

// The cluster CA: issues the client certificates agents present on mutual TLS, and reads back
// which cluster a certificate names (docs/security.md#cluster-identity-mutual-tls).
//
// A cluster certificate names its cluster twice: the subject's common name is NAME and the only
// URI subject alternative name is spiffe://gpufed/cluster/NAME. The URI is what counts; the
// common name is for people reading the certificate. Certificates are ECDSA P-256 or whatever
// key a CSR carries, signed with SHA-256, for client authentication only.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace gpufed::auth {

// "spiffe://gpufed/cluster/" + cluster.
std::string ClusterUri(absl::string_view cluster);

// What a cluster certificate says about itself.
struct ClusterCertificateInfo {
  std::string cluster;  // the name in its URI
  std::string serial;   // upper-case hexadecimal, whole bytes (OpenSSL's BN_bn2hex)
  std::chrono::system_clock::time_point not_before;
  std::chrono::system_clock::time_point not_after;
};

// A certificate issued for a cluster.
struct IssuedCertificate {
  std::string cert_pem;
  // The private key, PEM (PKCS#8), when the CA made the key pair; empty when issued for a CSR.
  std::string key_pem;
  ClusterCertificateInfo info;
};

// Reads a PEM certificate as a cluster certificate. It does not check who signed it or when it
// is valid (the TLS handshake has): only what it names. INVALID_ARGUMENT when `cert_pem` is not
// one certificate, or it does not carry exactly one spiffe://gpufed/cluster/ URI naming a valid
// cluster name.
absl::StatusOr<ClusterCertificateInfo> ReadClusterCertificate(absl::string_view cert_pem);

// A CA certificate and its key. Thread-safe.
class ClusterCa {
 public:
  // A CSR is a few hundred bytes; anything much bigger is not one.
  static constexpr size_t kMaxCsrBytes = size_t{16} * 1024;

  // INVALID_ARGUMENT naming the part ("cluster CA certificate", "cluster CA key") that does not
  // parse, a certificate that is not a CA (basicConstraints CA:TRUE), or a key that does not
  // belong to the certificate.
  static absl::StatusOr<std::unique_ptr<ClusterCa>> Create(absl::string_view cert_pem,
                                                           absl::string_view key_pem);
  ~ClusterCa();
  ClusterCa(const ClusterCa&) = delete;
  ClusterCa& operator=(const ClusterCa&) = delete;

  // The CA's certificate, PEM: what an agent trusts the server's chain with, and what the server
  // verifies agents' certificates against.
  const std::string& cert_pem() const { return cert_pem_; }

  // Issues a certificate naming `cluster`, valid from a little before `now` (clocks drift) until
  // `now + lifetime`, capped at the CA's own expiry. With `csr_pem`, for the CSR's public key:
  // its signature must verify; its subject and extensions are ignored. Without, for a new
  // ECDSA P-256 key pair, returned once in key_pem. INVALID_ARGUMENT naming "cluster" for a name
  // that is not a-z, 0-9 and '-' (at most 63, a letter first), "csr_pem" for a CSR that is too
  // big, does not parse or whose signature does not verify, "lifetime" for one not positive;
  // FAILED_PRECONDITION once the CA's own certificate has expired; INTERNAL when OpenSSL fails.
  absl::StatusOr<IssuedCertificate> Issue(absl::string_view cluster, absl::string_view csr_pem,
                                          std::chrono::system_clock::time_point now,
                                          std::chrono::seconds lifetime) const;

 private:
  struct Keys;
  ClusterCa(std::unique_ptr<Keys> keys, std::string cert_pem);

  // OpenSSL's signing objects are safe to share for reading, but one issuance at a time keeps
  // the reasoning simple: enrolment is rare.
  mutable absl::Mutex mu_;
  const std::unique_ptr<Keys> keys_ ABSL_PT_GUARDED_BY(mu_);
  const std::string cert_pem_;
};

}  // namespace gpufed::auth

#endif  // GPUFED_AUTH_CLUSTER_CA_H_
