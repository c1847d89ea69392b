#ifndef GPUFED_TESTS_SERVICE_IN_PROCESS_SERVER_H_
#define GPUFED_TESTS_SERVICE_IN_PROCESS_SERVER_H_

// A real gpufed-server in the test's process, on 127.0.0.1 port 0 and a fresh empty database of
// the test binary's PostgreSQL (the server applies the migrations itself, as in production).

#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "server/server.h"
#include "tests/support/postgres_harness.h"

namespace gpufed::testing {

struct InProcessServer {
  std::unique_ptr<server::Server> server;
  std::string address;      // 127.0.0.1:PORT of its gRPC side
  std::string admin_token;  // the platform-admin token it wrote on first start
  std::string dsn;          // its database, for tests that check what was stored
};

// `config` keeps what the caller set (heartbeats, policy, ...); database, data folder, token file
// and log level are set here (and plaintext unless `config` names a certificate), and the listen
// addresses (127.0.0.1 port 0) unless
// `keep_listen_addresses`.
inline absl::StatusOr<InProcessServer> StartInProcessServer(const std::string& data_dir,
                                                            server::ServerConfig config = {},
                                                            bool keep_listen_addresses = false) {
  if (!keep_listen_addresses) {
    config.grpc_listen = "127.0.0.1:0";
    config.http_listen = "127.0.0.1:0";
  }
  absl::StatusOr<TestPostgres*> pg = TestPostgres::Get();
  if (!pg.ok()) return pg.status();
  absl::StatusOr<std::string> dsn = (*pg)->CreateEmptyDatabase();
  if (!dsn.ok()) return dsn.status();
  config.database_url = *dsn;
  config.data_dir = data_dir;
  config.admin_token_file = data_dir + "/admin.token";
  config.log_level = "warn";
  // Plaintext unless the test brings a certificate.
  if (config.tls_cert_file.empty()) config.insecure_plaintext = true;
  absl::StatusOr<std::unique_ptr<server::Server>> server = server::Server::Create(config);
  if (!server.ok()) return server.status();
  InProcessServer out;
  out.server = *std::move(server);
  out.address = absl::StrCat("127.0.0.1:", out.server->grpc_port());
  out.dsn = *dsn;
  std::ifstream(config.admin_token_file) >> out.admin_token;
  if (out.admin_token.empty()) {
    return absl::InternalError(absl::StrCat("no admin token in ", config.admin_token_file));
  }
  return out;
}

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SERVICE_IN_PROCESS_SERVER_H_
