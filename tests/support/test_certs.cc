#include "tests/support/test_certs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "openssl/err.h"
#include "openssl/evp.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "openssl/x509v3.h"

namespace gpufed::testing {
namespace {

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_REQ* p) const { X509_REQ_free(p); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, Free>;
using CertPtr = std::unique_ptr<X509, Free>;
using BioPtr = std::unique_ptr<BIO, Free>;
using CsrPtr = std::unique_ptr<X509_REQ, Free>;

absl::Status OpenSslError(absl::string_view what) {
  const unsigned long code = ERR_get_error();  // NOLINT(google-runtime-int): OpenSSL's type
  ERR_clear_error();
  const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
  return absl::InternalError(absl::StrCat(what, ": ", reason != nullptr ? reason : "failed"));
}

std::string BioText(BIO* bio) {
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);  // NOLINT(google-runtime-int): OpenSSL's type
  return std::string(data, static_cast<size_t>(size));
}

absl::StatusOr<std::string> KeyPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslError("PEM_write_bio_PrivateKey");
  }
  return BioText(bio.get());
}

absl::StatusOr<std::string> CertPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_X509(bio.get(), cert) != 1) return OpenSslError("PEM_write_bio_X509");
  return BioText(bio.get());
}

absl::Status AddExtension(X509* cert, X509V3_CTX* ctx, int nid, const std::string& value) {
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, ctx, nid, value.c_str());
  if (ext == nullptr) return OpenSslError(absl::StrCat("extension ", value));
  const int added = X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
  if (added != 1) return OpenSslError("X509_add_ext");
  return absl::OkStatus();
}

// A certificate for `key` named `common_name`, signed by `issuer` with `issuer_key` (itself when
// both are null).
absl::StatusOr<CertPtr> MakeCertificate(EVP_PKEY* key, const std::string& common_name,
                                        int64_t serial, absl::Duration valid_from,
                                        absl::Duration valid_for, bool is_ca,
                                        const std::string& alt_names, X509* issuer,
                                        EVP_PKEY* issuer_key) {
  CertPtr cert(X509_new());
  X509_set_version(cert.get(), 2);  // v3
  ASN1_INTEGER_set_int64(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), absl::ToInt64Seconds(valid_from));
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), absl::ToInt64Seconds(valid_from + valid_for));
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  if (issuer == nullptr) {
    issuer = cert.get();
    issuer_key = key;
  }
  X509_set_issuer_name(cert.get(), X509_get_subject_name(issuer));
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert.get(), nullptr, nullptr, 0);
  absl::Status s = AddExtension(cert.get(), &ctx, NID_basic_constraints,
                                is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
  if (s.ok()) {
    s = AddExtension(cert.get(), &ctx, NID_key_usage,
                     is_ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
  }
  if (s.ok()) s = AddExtension(cert.get(), &ctx, NID_subject_key_identifier, "hash");
  if (s.ok() && !is_ca) {
    s = AddExtension(cert.get(), &ctx, NID_ext_key_usage, "serverAuth,clientAuth");
    if (s.ok()) s = AddExtension(cert.get(), &ctx, NID_authority_key_identifier, "keyid:always");
    if (s.ok() && !alt_names.empty()) {
      s = AddExtension(cert.get(), &ctx, NID_subject_alt_name, alt_names);
    }
  }
  if (!s.ok()) return s;
  if (X509_sign(cert.get(), issuer_key, EVP_sha256()) == 0) return OpenSslError("X509_sign");
  return cert;
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       ::fsync(fd) == 0;
  ::close(fd);
  if (!written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<TestCa> MakeTestCa(const std::string& dir, const std::string& name) {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("EVP_EC_gen");
  absl::StatusOr<CertPtr> cert =
      MakeCertificate(key.get(), absl::StrCat(name, " test CA"), 1, absl::Hours(-1),
                      absl::Hours(24 * 30), /*is_ca=*/true, "", nullptr, nullptr);
  if (!cert.ok()) return cert.status();
  TestCa ca;
  ca.name = name;
  ca.cert_file = absl::StrCat(dir, "/", name, "-ca.crt");
  absl::StatusOr<std::string> cert_pem = CertPem(cert->get());
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = KeyPem(key.get());
  if (!key_pem.ok()) return key_pem.status();
  ca.cert_pem = *std::move(cert_pem);
  ca.key_pem = *std::move(key_pem);
  if (absl::Status s = WriteFileAtomically(ca.cert_file, ca.cert_pem); !s.ok()) return s;
  return ca;
}

absl::StatusOr<TestCertificate> IssueCertificate(const TestCa& ca, const std::string& dir,
                                                 const std::string& file_stem,
                                                 const CertificateSpec& spec) {
  BioPtr ca_cert_bio(BIO_new_mem_buf(ca.cert_pem.data(), static_cast<int>(ca.cert_pem.size())));
  CertPtr ca_cert(PEM_read_bio_X509(ca_cert_bio.get(), nullptr, nullptr, nullptr));
  BioPtr ca_key_bio(BIO_new_mem_buf(ca.key_pem.data(), static_cast<int>(ca.key_pem.size())));
  KeyPtr ca_key(PEM_read_bio_PrivateKey(ca_key_bio.get(), nullptr, nullptr, nullptr));
  if (ca_cert == nullptr || ca_key == nullptr) return OpenSslError("reading the CA");
  KeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("EVP_EC_gen");
  std::vector<std::string> alt_names;
  for (const std::string& dns : spec.dns_names) alt_names.push_back("DNS:" + dns);
  for (const std::string& ip : spec.ip_addresses) alt_names.push_back("IP:" + ip);
  for (const std::string& uri : spec.uris) alt_names.push_back("URI:" + uri);
  absl::StatusOr<CertPtr> cert =
      MakeCertificate(key.get(), spec.common_name, spec.serial, spec.valid_from, spec.valid_for,
                      /*is_ca=*/false, absl::StrJoin(alt_names, ","), ca_cert.get(), ca_key.get());
  if (!cert.ok()) return cert.status();
  TestCertificate out;
  out.cert_file = absl::StrCat(dir, "/", file_stem, ".crt");
  out.key_file = absl::StrCat(dir, "/", file_stem, ".key");
  absl::StatusOr<std::string> cert_pem = CertPem(cert->get());
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = KeyPem(key.get());
  if (!key_pem.ok()) return key_pem.status();
  out.cert_pem = *std::move(cert_pem);
  out.key_pem = *std::move(key_pem);
  // The key first: a reader that sees the new certificate finds its key already there.
  if (absl::Status s = WriteFileAtomically(out.key_file, out.key_pem); !s.ok()) return s;
  if (absl::Status s = WriteFileAtomically(out.cert_file, out.cert_pem); !s.ok()) return s;
  return out;
}

absl::StatusOr<TestCsr> MakeCsr(const std::string& common_name,
                                const std::vector<std::string>& uris) {
  KeyPtr key(EVP_EC_gen("P-256"));
  if (key == nullptr) return OpenSslError("EVP_EC_gen");
  CsrPtr csr(X509_REQ_new());
  X509_REQ_set_version(csr.get(), 0);
  X509_REQ_set_pubkey(csr.get(), key.get());
  X509_NAME* name = X509_REQ_get_subject_name(csr.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  if (!uris.empty()) {
    std::vector<std::string> alt_names;
    alt_names.reserve(uris.size());
    for (const std::string& uri : uris) alt_names.push_back("URI:" + uri);
    STACK_OF(X509_EXTENSION)* exts = sk_X509_EXTENSION_new_null();
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name,
                                              absl::StrJoin(alt_names, ",").c_str());
    if (ext == nullptr) return OpenSslError("CSR extension");
    sk_X509_EXTENSION_push(exts, ext);
    const int added = X509_REQ_add_extensions(csr.get(), exts);
    sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
    if (added != 1) return OpenSslError("X509_REQ_add_extensions");
  }
  if (X509_REQ_sign(csr.get(), key.get(), EVP_sha256()) == 0) return OpenSslError("X509_REQ_sign");
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (PEM_write_bio_X509_REQ(bio.get(), csr.get()) != 1) return OpenSslError("PEM_write_bio");
  TestCsr out;
  out.csr_pem = BioText(bio.get());
  absl::StatusOr<std::string> key_pem = KeyPem(key.get());
  if (!key_pem.ok()) return key_pem.status();
  out.key_pem = *std::move(key_pem);
  return out;
}

}  // namespace gpufed::testing
