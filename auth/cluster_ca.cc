#include "auth/cluster_ca.h"

#include <algorithm>
#include <ctime>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "openssl/bn.h"
#include "openssl/err.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/rand.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace gpufed::auth {
namespace {

constexpr absl::string_view kClusterUriPrefix = "spiffe://gpufed/cluster/";
constexpr size_t kMaxClusterName = 63;
// Issued certificates start this long before "now": an agent whose clock is a little behind the
// server's must not see a certificate that is not yet valid.
constexpr std::chrono::minutes kBackdate{5};

struct Free {
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_REQ* p) const { X509_REQ_free(p); }
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
  void operator()(GENERAL_NAMES* p) const { GENERAL_NAMES_free(p); }
  void operator()(char* p) const { OPENSSL_free(p); }
};
using BioPtr = std::unique_ptr<BIO, Free>;
using CertPtr = std::unique_ptr<X509, Free>;
using CsrPtr = std::unique_ptr<X509_REQ, Free>;
using KeyPtr = std::unique_ptr<EVP_PKEY, Free>;
using BnPtr = std::unique_ptr<BIGNUM, Free>;
using NamesPtr = std::unique_ptr<GENERAL_NAMES, Free>;
using OsslString = std::unique_ptr<char, Free>;

absl::Status OpenSslFailure(absl::string_view what) {
  ERR_clear_error();
  return absl::InternalError(absl::StrCat("cluster CA: ", what, " failed"));
}

BioPtr ReadBio(absl::string_view pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);  // NOLINT(google-runtime-int): OpenSSL's type
  return std::string(data, static_cast<size_t>(size));
}

bool IsClusterName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxClusterName) return false;
  if (name.front() < 'a' || name.front() > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

absl::StatusOr<std::chrono::system_clock::time_point> TimeOf(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError("certificate: unreadable validity time");
  }
  return std::chrono::system_clock::from_time_t(timegm(&tm));
}

std::string SerialOf(X509* cert) {
  BnPtr bn(ASN1_INTEGER_to_BN(X509_get0_serialNumber(cert), nullptr));
  if (bn == nullptr) return "";
  OsslString hex(BN_bn2hex(bn.get()));
  return hex != nullptr ? std::string(hex.get()) : "";
}

absl::StatusOr<ClusterCertificateInfo> InfoOf(X509* cert) {
  NamesPtr names(
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr)));
  ClusterCertificateInfo info;
  int found = 0;
  for (int i = 0; names != nullptr && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (name->type != GEN_URI) continue;
    const ASN1_IA5STRING* uri = name->d.uniformResourceIdentifier;
    const absl::string_view text(reinterpret_cast<const char*>(ASN1_STRING_get0_data(uri)),
                                 static_cast<size_t>(ASN1_STRING_length(uri)));
    if (!absl::StartsWith(text, kClusterUriPrefix)) continue;
    ++found;
    info.cluster = std::string(text.substr(kClusterUriPrefix.size()));
  }
  if (found != 1 || !IsClusterName(info.cluster)) {
    return absl::InvalidArgumentError("certificate: does not name exactly one cluster");
  }
  info.serial = SerialOf(cert);
  if (info.serial.empty()) return absl::InvalidArgumentError("certificate: unreadable serial");
  auto not_before = TimeOf(X509_get0_notBefore(cert));
  if (!not_before.ok()) return not_before.status();
  auto not_after = TimeOf(X509_get0_notAfter(cert));
  if (!not_after.ok()) return not_after.status();
  info.not_before = *not_before;
  info.not_after = *not_after;
  return info;
}

// A random positive 127-bit serial: unique without a counter to keep (RFC 5280 allows 20 bytes).
absl::Status SetRandomSerial(X509* cert) {
  unsigned char bytes[16];
  if (RAND_bytes(bytes, sizeof bytes) != 1) return OpenSslFailure("RAND_bytes");
  bytes[0] &= 0x7f;
  bytes[0] |= 0x40;  // never a short serial, so every serial prints as 32 hex digits
  BnPtr bn(BN_bin2bn(bytes, sizeof bytes, nullptr));
  if (bn == nullptr || BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert)) == nullptr) {
    return OpenSslFailure("serial");
  }
  return absl::OkStatus();
}

// Constant extension values only: the cluster's name never goes through OpenSSL's config parser.
absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const char* value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value);
  if (ext == nullptr) return OpenSslFailure(value);
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return OpenSslFailure("X509_add_ext");
  return absl::OkStatus();
}

absl::Status AddClusterUri(X509* cert, absl::string_view cluster) {
  const std::string uri = ClusterUri(cluster);
  NamesPtr names(sk_GENERAL_NAME_new_null());
  GENERAL_NAME* name = GENERAL_NAME_new();
  ASN1_IA5STRING* text = ASN1_IA5STRING_new();
  if (names == nullptr || name == nullptr || text == nullptr ||
      ASN1_STRING_set(text, uri.data(), static_cast<int>(uri.size())) != 1) {
    GENERAL_NAME_free(name);
    ASN1_IA5STRING_free(text);
    return OpenSslFailure("subjectAltName");
  }
  GENERAL_NAME_set0_value(name, GEN_URI, text);
  if (sk_GENERAL_NAME_push(names.get(), name) == 0) {
    GENERAL_NAME_free(name);
    return OpenSslFailure("subjectAltName");
  }
  if (X509_add1_ext_i2d(cert, NID_subject_alt_name, names.get(), 0, X509V3_ADD_DEFAULT) != 1) {
    return OpenSslFailure("subjectAltName");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) return OpenSslFailure("PEM");
  return BioText(bio.get());
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslFailure("PEM");
  }
  return BioText(bio.get());
}

// The public key of `csr_pem`, once its signature (made with the matching private key) verifies.
absl::StatusOr<KeyPtr> CsrPublicKey(absl::string_view csr_pem) {
  if (csr_pem.size() > ClusterCa::kMaxCsrBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("csr_pem: at most ", ClusterCa::kMaxCsrBytes, " bytes"));
  }
  BioPtr bio = ReadBio(csr_pem);
  CsrPtr csr(PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr));
  if (csr == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("csr_pem: not a PEM certificate signing request");
  }
  EVP_PKEY* key = X509_REQ_get_pubkey(csr.get());
  if (key == nullptr || X509_REQ_verify(csr.get(), key) != 1) {
    EVP_PKEY_free(key);
    ERR_clear_error();
    return absl::InvalidArgumentError("csr_pem: signature does not verify");
  }
  return KeyPtr(key);
}

}  // namespace

std::string ClusterUri(absl::string_view cluster) {
  return absl::StrCat(kClusterUriPrefix, cluster);
}

absl::StatusOr<ClusterCertificateInfo> ReadClusterCertificate(absl::string_view cert_pem) {
  BioPtr bio = ReadBio(cert_pem);
  CertPtr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (cert == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError("certificate: not a PEM certificate");
  }
  return InfoOf(cert.get());
}

struct ClusterCa::Keys {
  CertPtr cert;
  KeyPtr key;
  std::chrono::system_clock::time_point not_after;
};

ClusterCa::ClusterCa(std::unique_ptr<Keys> keys, std::string cert_pem)
    : keys_(std::move(keys)), cert_pem_(std::move(cert_pem)) {}

ClusterCa::~ClusterCa() = default;

absl::StatusOr<std::unique_ptr<ClusterCa>> ClusterCa::Create(absl::string_view cert_pem,
                                                             absl::string_view key_pem) {
  auto keys = std::make_unique<Keys>();
  BioPtr cert_bio = ReadBio(cert_pem);
  keys->cert.reset(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  BioPtr key_bio = ReadBio(key_pem);
  keys->key.reset(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  if (keys->cert == nullptr) {
    return absl::InvalidArgumentError("cluster CA certificate: not a PEM certificate");
  }
  if (X509_check_ca(keys->cert.get()) != 1) {
    return absl::InvalidArgumentError(
        "cluster CA certificate: not a CA certificate (basicConstraints CA:TRUE)");
  }
  if (keys->key == nullptr) return absl::InvalidArgumentError("cluster CA key: not a PEM key");
  if (X509_check_private_key(keys->cert.get(), keys->key.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        "cluster CA key: does not belong to the cluster CA certificate");
  }
  auto not_after = TimeOf(X509_get0_notAfter(keys->cert.get()));
  if (!not_after.ok()) {
    return absl::InvalidArgumentError("cluster CA certificate: unreadable expiry");
  }
  keys->not_after = *not_after;
  absl::StatusOr<std::string> pem = CertPem(keys->cert.get());
  if (!pem.ok()) return pem.status();
  return std::unique_ptr<ClusterCa>(new ClusterCa(std::move(keys), *std::move(pem)));
}

absl::StatusOr<IssuedCertificate> ClusterCa::Issue(absl::string_view cluster,
                                                   absl::string_view csr_pem,
                                                   std::chrono::system_clock::time_point now,
                                                   std::chrono::seconds lifetime) const {
  if (!IsClusterName(cluster)) {
    return absl::InvalidArgumentError(
        "cluster: may contain only a-z, 0-9 and '-', at most 63 characters, a letter first");
  }
  if (lifetime <= std::chrono::seconds::zero()) {
    return absl::InvalidArgumentError("lifetime: must be positive");
  }
  IssuedCertificate out;
  KeyPtr key;
  if (!csr_pem.empty()) {
    absl::StatusOr<KeyPtr> from_csr = CsrPublicKey(csr_pem);
    if (!from_csr.ok()) return from_csr.status();
    key = *std::move(from_csr);
  } else {
    key.reset(EVP_EC_gen("P-256"));
    if (key == nullptr) return OpenSslFailure("EVP_EC_gen");
    absl::StatusOr<std::string> key_pem = KeyPem(key.get());
    if (!key_pem.ok()) return key_pem.status();
    out.key_pem = *std::move(key_pem);
  }

  absl::MutexLock lock(&mu_);
  if (keys_->not_after <= now) {
    return absl::FailedPreconditionError("cluster CA certificate: expired; replace it");
  }
  const std::time_t not_before = std::chrono::system_clock::to_time_t(now - kBackdate);
  const std::time_t not_after =
      std::chrono::system_clock::to_time_t(std::min(now + lifetime, keys_->not_after));
  CertPtr cert(X509_new());
  if (cert == nullptr) return OpenSslFailure("X509_new");
  const std::string cn(cluster);
  if (X509_set_version(cert.get(), 2) != 1 ||  // v3
      ASN1_TIME_set(X509_getm_notBefore(cert.get()), not_before) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert.get()), not_after) == nullptr ||
      X509_set_pubkey(cert.get(), key.get()) != 1 ||
      X509_NAME_add_entry_by_txt(X509_get_subject_name(cert.get()), "CN", MBSTRING_ASC,
                                 reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(cert.get(), X509_get_subject_name(keys_->cert.get())) != 1) {
    return OpenSslFailure("building the certificate");
  }
  if (absl::Status s = SetRandomSerial(cert.get()); !s.ok()) return s;
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, keys_->cert.get(), cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] :
       std::vector<std::pair<int, const char*>>{{NID_basic_constraints, "critical,CA:FALSE"},
                                                {NID_key_usage, "critical,digitalSignature"},
                                                {NID_ext_key_usage, "clientAuth"},
                                                {NID_subject_key_identifier, "hash"},
                                                {NID_authority_key_identifier, "keyid:always"}}) {
    if (absl::Status s = AddExtension(cert.get(), &ctx, nid, value); !s.ok()) return s;
  }
  if (absl::Status s = AddClusterUri(cert.get(), cluster); !s.ok()) return s;
  if (X509_sign(cert.get(), keys_->key.get(), EVP_sha256()) == 0) return OpenSslFailure("signing");

  absl::StatusOr<std::string> cert_pem = CertPem(cert.get());
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<ClusterCertificateInfo> info = InfoOf(cert.get());
  if (!info.ok()) return info.status();
  out.cert_pem = *std::move(cert_pem);
  out.info = *std::move(info);
  return out;
}

}  // namespace gpufed::auth
