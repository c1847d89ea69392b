#include "server/tls.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "auth/secret_file.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "spdlog/spdlog.h"

namespace gpufed::server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

// OpenSSL's reason for the last failure, for a message that says more than "cannot load".
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();  // NOLINT(google-runtime-int): OpenSSL's type
  ERR_clear_error();
  if (code == 0) return "no PEM data";
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? reason : "unknown error";
}

}  // namespace

std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsFiles& files,
                                                               int refresh_seconds) {
  const auto refresh = static_cast<unsigned int>(std::max(1, refresh_seconds));
  if (files.client_ca_file.empty()) {
    auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        files.key_file, files.cert_file, refresh);
    grpc::experimental::TlsServerCredentialsOptions options(provider);
    options.watch_identity_key_cert_pairs();
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    return grpc::experimental::TlsServerCredentials(options);
  }
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      files.key_file, files.cert_file, files.client_ca_file, refresh);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  options.watch_root_certs();
  // Asked, not required: people and programs on the same port hold bearer tokens, not
  // certificates. A certificate that is presented is verified in full (chain and validity).
  options.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

struct HttpCertificate::KeyPair {
  X509* cert = nullptr;
  STACK_OF(X509) * chain = nullptr;  // intermediates after the certificate in the file
  EVP_PKEY* key = nullptr;
  ~KeyPair() {
    X509_free(cert);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
  }
};

bool HttpCertificate::Stamp::operator==(const Stamp& other) const {
  auto same = [](const timespec& a, const timespec& b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
  };
  return cert_inode == other.cert_inode && key_inode == other.key_inode &&
         cert_size == other.cert_size && key_size == other.key_size &&
         same(cert_mtime, other.cert_mtime) && same(key_mtime, other.key_mtime) &&
         key_mode == other.key_mode;
}

HttpCertificate::HttpCertificate(TlsFiles files) : files_(std::move(files)) {}

HttpCertificate::~HttpCertificate() = default;

absl::StatusOr<std::unique_ptr<HttpCertificate>> HttpCertificate::Create(TlsFiles files) {
  std::unique_ptr<HttpCertificate> self(new HttpCertificate(std::move(files)));
  // Looked at before reading, so that a file replaced during the read is read again later.
  const Stamp stamp = self->Look();
  absl::StatusOr<std::shared_ptr<const KeyPair>> pair = Load(self->files_);
  if (!pair.ok()) return pair.status();
  absl::MutexLock lock(&self->mu_);
  self->pair_ = *std::move(pair);
  self->stamp_ = stamp;
  return self;
}

absl::StatusOr<std::shared_ptr<const HttpCertificate::KeyPair>> HttpCertificate::Load(
    const TlsFiles& files) {
  auto pair = std::make_shared<KeyPair>();
  BioPtr cert_bio(BIO_new_file(files.cert_file.c_str(), "r"));
  if (cert_bio == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("tls_cert_file: cannot read ", files.cert_file));
  }
  pair->cert = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr);
  if (pair->cert == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls_cert_file: ", files.cert_file, " holds no PEM certificate (", OpenSslReason(), ")"));
  }
  pair->chain = sk_X509_new_null();
  while (X509* next = PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(pair->chain, next);
  }
  ERR_clear_error();  // the end of the file reads as "no start line"
  // The rule the server applied at start-up holds for every pair it takes later: a rotated key
  // that others may read is not served.
  if (absl::Status mode = auth::CheckSecretFileMode("tls_key_file", files.key_file); !mode.ok()) {
    return mode;
  }
  BioPtr key_bio(BIO_new_file(files.key_file.c_str(), "r"));
  if (key_bio == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("tls_key_file: cannot read ", files.key_file));
  }
  pair->key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
  if (pair->key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls_key_file: ", files.key_file, " holds no PEM private key (", OpenSslReason(), ")"));
  }
  if (X509_check_private_key(pair->cert, pair->key) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("tls_key_file: ", files.key_file, " is not the key of ", files.cert_file));
  }
  return std::shared_ptr<const KeyPair>(std::move(pair));
}

HttpCertificate::Stamp HttpCertificate::Look() const {
  Stamp stamp;
  struct stat st {};
  if (::stat(files_.cert_file.c_str(), &st) == 0) {
    stamp.cert_inode = st.st_ino;
    stamp.cert_size = st.st_size;
    stamp.cert_mtime = st.st_mtim;
  }
  if (::stat(files_.key_file.c_str(), &st) == 0) {
    stamp.key_inode = st.st_ino;
    stamp.key_size = st.st_size;
    stamp.key_mtime = st.st_mtim;
    stamp.key_mode = st.st_mode;
  }
  return stamp;
}

std::shared_ptr<const HttpCertificate::KeyPair> HttpCertificate::Current() {
  // Two stat() calls per new connection: cheap next to the handshake, and a replaced pair is
  // served from the very next connection.
  const Stamp stamp = Look();
  absl::MutexLock lock(&mu_);
  if (stamp == stamp_) return pair_;
  stamp_ = stamp;
  absl::StatusOr<std::shared_ptr<const KeyPair>> pair = Load(files_);
  if (!pair.ok()) {
    // Often a pair caught half-replaced (the certificate written, the key not yet): the next
    // change of either file brings another try.
    spdlog::warn("HTTPS: keeping the previous certificate: {}",
                 std::string(pair.status().message()));
    return pair_;
  }
  pair_ = *std::move(pair);
  spdlog::info("HTTPS: serving the new certificate in {}", files_.cert_file);
  return pair_;
}

int HttpCertificate::OnHandshake(SSL* ssl, void* self) {
  const std::shared_ptr<const KeyPair> pair = static_cast<HttpCertificate*>(self)->Current();
  // The connection takes its own references: a later reload cannot pull the pair from under it.
  return SSL_use_cert_and_key(ssl, pair->cert, pair->key, pair->chain, /*override=*/1) == 1 ? 1 : 0;
}

bool HttpCertificate::SetUp(SSL_CTX& ctx) {
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_cert_cb(&ctx, &HttpCertificate::OnHandshake, this);
  return true;
}

}  // namespace gpufed::server
