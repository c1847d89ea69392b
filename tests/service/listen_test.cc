// The server's listening ports are its own: gRPC and HTTP on one port, or a port another
// process (or another gpufed-server) already serves, are refused at start rather than shared
// (SO_REUSEPORT, which gRPC and cpp-httplib both set by default, would let every one of them
// bind and split the connections between them).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/server.h"
#include "tests/service/in_process_server.h"
#include "tests/support/process_harness.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using ::gpufed::testing::StatusIs;

// A loopback port that was free a moment ago.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

server::ServerConfig Listening(const std::string& grpc, const std::string& http) {
  server::ServerConfig config;
  config.grpc_listen = grpc;
  config.http_listen = http;
  return config;
}

TEST(ListenTest, OnePortForGrpcAndHttpIsRefused) {
  testing::TempDir dir("gpufed-listen");
  const int port = FreePort();
  ASSERT_NE(port, 0);
  const std::string both = absl::StrCat("127.0.0.1:", port);
  EXPECT_THAT(testing::StartInProcessServer(dir.path(), Listening(both, both), true),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ListenTest, APortAnotherServerServesIsRefused) {
  testing::TempDir first_dir("gpufed-listen");
  ASSERT_OK_AND_ASSIGN(testing::InProcessServer first,
                       testing::StartInProcessServer(first_dir.path()));
  const std::string taken_grpc = absl::StrCat("127.0.0.1:", first.server->grpc_port());
  const std::string taken_http = absl::StrCat("127.0.0.1:", first.server->http_port());

  testing::TempDir second_dir("gpufed-listen");
  EXPECT_THAT(
      testing::StartInProcessServer(second_dir.path(), Listening(taken_grpc, "127.0.0.1:0"), true),
      StatusIs(absl::StatusCode::kUnavailable));
  testing::TempDir third_dir("gpufed-listen");
  EXPECT_THAT(
      testing::StartInProcessServer(third_dir.path(), Listening("127.0.0.1:0", taken_http), true),
      StatusIs(absl::StatusCode::kUnavailable));
  first.server->Shutdown();
}

}  // namespace
}  // namespace gpufed
