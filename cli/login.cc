#include "cli/login.h"

#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cli/config.h"
#include "gpufed/v1/tenant_service.grpc.pb.h"
#include "grpcpp/client_context.h"

namespace gpufed::cli {

absl::StatusOr<std::string> ReadTokenFromStream(std::istream& in) {
  std::ostringstream text;
  text << in.rdbuf();
  absl::StatusOr<std::string> token = CleanToken(text.str(), "stdin");
  if (!token.ok()) return token.status();
  if (token->empty()) return absl::InvalidArgumentError("token from stdin: empty");
  return token;
}

absl::StatusOr<std::string> ReadTokenFromTerminal(std::ostream& prompt) {
  termios saved{};
  if (::isatty(STDIN_FILENO) == 0 || ::tcgetattr(STDIN_FILENO, &saved) != 0) {
    return absl::FailedPreconditionError(
        "no terminal to ask for the token on: pipe it in with --token-stdin");
  }
  termios quiet = saved;
  quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
  quiet.c_lflag |= ECHONL;
  prompt << "Token: " << std::flush;
  ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &quiet);
  std::string line;
  std::getline(std::cin, line);
  ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
  absl::StatusOr<std::string> token = CleanToken(line, "the terminal");
  if (!token.ok()) return token.status();
  if (token->empty()) return absl::InvalidArgumentError("no token given");
  return token;
}

absl::Status VerifyToken(const std::shared_ptr<grpc::ChannelInterface>& channel,
                         const std::string& server, const std::string& token,
                         absl::Duration timeout) {
  std::unique_ptr<v1::TenantService::Stub> tenants = v1::TenantService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
  context.AddMetadata("authorization", "Bearer " + token);
  v1::ListTenantsRequest request;
  v1::ListTenantsResponse response;
  const grpc::Status status = tenants->ListTenants(&context, request, &response);
  if (status.ok() || status.error_code() == grpc::StatusCode::PERMISSION_DENIED) {
    return absl::OkStatus();
  }
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return absl::UnauthenticatedError(absl::StrCat("the server rejected the token (",
                                                   status.error_message(), "); nothing was saved"));
  }
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("could not check the token with ", server, ": ",
                                   status.error_message(), "; nothing was saved"));
}

}  // namespace gpufed::cli
