// The cluster-identity use cases of ControlPlane (control_plane.h): issuing a cluster its
// certificate and cutting a cluster off.

#include "absl/strings/str_cat.h"
#include "federation/authorization.h"
#include "federation/control_plane.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {

using auth::Permission;

absl::StatusOr<IssuedClusterCertificate> ControlPlane::EnrollClusterUnaudited(
    const auth::Principal& who, const std::string& cluster, const std::string& csr_pem,
    AuditEvent record) {
  RETURN_IF_ERROR(Require(who, Permission::kPoolAdmin, {}));
  RETURN_IF_ERROR(ValidateName("cluster", cluster));
  if (ports_.issuer == nullptr || ports_.certificates == nullptr) {
    return absl::FailedPreconditionError(
        "cluster: this server has no cluster CA (cluster_ca_cert_file, cluster_ca_key_file)");
  }
  ASSIGN_OR_RETURN(IssuedClusterCertificate issued,
                   ports_.issuer->Issue(cluster, csr_pem, ports_.clock->Now()));
  // Recorded before it is handed out: a certificate nobody recorded would speak for nothing.
  // The audit row names its serial and validity, never the key made for it.
  if (!record.action.empty()) {
    absl::StrAppend(&record.detail, "; serial: ", issued.certificate.serial, "; not_after: ",
                    absl::FormatTime(absl::FromChrono(issued.certificate.not_after)));
  }
  ASSIGN_OR_RETURN(issued.certificate,
                   ports_.certificates->AddClusterCertificate(issued.certificate, record));
  return issued;
}

absl::StatusOr<int> ControlPlane::RevokeClusterUnaudited(const auth::Principal& who,
                                                         const std::string& cluster,
                                                         const AuditEvent& record) {
  RETURN_IF_ERROR(Require(who, Permission::kPoolAdmin, {}));
  RETURN_IF_ERROR(ValidateName("cluster", cluster));
  if (ports_.certificates == nullptr) {
    return absl::FailedPreconditionError("cluster: this server keeps no cluster certificates");
  }
  // Its certificates and its agent tokens, every one, together: a cluster cut off must not come
  // back with another credential.
  ASSIGN_OR_RETURN(ClusterCertificateStore::ClusterRevocation revocation,
                   ports_.certificates->RevokeCluster(cluster, record));
  int revoked = revocation.certificates;
  for (int64_t id : revocation.tokens) {
    ++revoked;
    ports_.agents->CloseCredential(id);
    if (ports_.credentials != nullptr) ports_.credentials->Revoked(id);
  }
  // Committed: the live connection ends now, not at its next registration.
  ports_.agents->CloseCluster(cluster);
  return revoked;
}

}  // namespace gpufed
