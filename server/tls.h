#ifndef GPUFED_SERVER_TLS_H_
#define GPUFED_SERVER_TLS_H_

// TLS for the server's two listeners (docs/operations.md#tls). Both serve the certificate and key
// named in the configuration and pick up new files without a restart:
//   - gRPC through gRPC's own FileWatcherCertificateProvider, which re-reads the files every
//     refresh interval;
//   - HTTP through cpp-httplib's SSLServer, whose SSL_CTX gets an OpenSSL certificate callback
//     that hands each new connection the current pair from an HttpCertificate, which re-reads the
//     files when their inode, size or modification time changed.
// On HTTPS a pair that does not load, whose key does not match its certificate, or whose key file
// others may read (auth::CheckSecretFileMode) is not taken: the listener keeps serving the
// previous one. gRPC's provider keeps its last pair while a file
// cannot be read; files replaced by rename, key first, keep it from reading half a rotation.

#include <sys/stat.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "openssl/ssl.h"

namespace grpc {
class ServerCredentials;
}

namespace gpufed::server {

struct TlsFiles {
  std::string cert_file;  // PEM: the server's certificate, then any intermediate certificates
  std::string key_file;   // PEM: its private key
  // PEM: the CA clients' certificates must chain to (the cluster CA); empty: none is asked for.
  std::string client_ca_file;
};

// gRPC server credentials serving `files`, re-read every `refresh_seconds` (at least 1). With a
// client_ca_file every client is asked for a certificate: one presented must chain to that CA and
// be within its validity, or the handshake fails; a client without one is let through (it
// authenticates with a bearer token). The CA file is re-read like the others.
std::shared_ptr<grpc::ServerCredentials> GrpcServerCredentials(const TlsFiles& files,
                                                               int refresh_seconds);

// The HTTP listener's certificate and key, re-read when the files change. Thread-safe: OpenSSL
// calls it from every connection's thread.
class HttpCertificate {
 public:
  // Loads both files. INVALID_ARGUMENT naming the file when one cannot be read or parsed, or the
  // key does not belong to the certificate.
  static absl::StatusOr<std::unique_ptr<HttpCertificate>> Create(TlsFiles files);
  ~HttpCertificate();

  // Prepares `ctx` (TLS 1.2 or later) to ask this object for the certificate at every handshake;
  // for httplib::SSLServer's set-up callback. This object must outlive `ctx`.
  bool SetUp(SSL_CTX& ctx);

 private:
  struct KeyPair;
  // Where and what the two files were when last looked at; a change means "read them again".
  struct Stamp {
    ino_t cert_inode = 0, key_inode = 0;
    off_t cert_size = 0, key_size = 0;
    timespec cert_mtime{}, key_mtime{};
    mode_t key_mode = 0;  // a key made private again (chmod) is tried again
    bool operator==(const Stamp& other) const;
  };

  explicit HttpCertificate(TlsFiles files);
  static absl::StatusOr<std::shared_ptr<const KeyPair>> Load(const TlsFiles& files);
  [[nodiscard]] Stamp Look() const;
  // The pair to serve now, re-read first when the files changed since the last look.
  std::shared_ptr<const KeyPair> Current();
  static int OnHandshake(SSL* ssl, void* self);

  const TlsFiles files_;
  absl::Mutex mu_;
  std::shared_ptr<const KeyPair> pair_ ABSL_GUARDED_BY(mu_);
  Stamp stamp_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpufed::server

#endif  // GPUFED_SERVER_TLS_H_
