#ifndef GPUFED_CLI_LOGIN_H_
#define GPUFED_CLI_LOGIN_H_

// gpufedctl login: keeps a bearer token in the local config file (docs/cli.md#login).
//
// The token comes from stdin (--token-stdin) or from a prompt that does not echo, never from the
// command line (argv is visible to every user in ps). It is checked with one read call before it
// is saved, so a mistyped or revoked token is not kept.
//
// Thread safety: stateless functions; ReadTokenFromTerminal changes the terminal's settings
// while it reads.

#include <istream>
#include <memory>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/channel.h"

namespace gpufed::cli {

// The whole of `in`, trimmed. INVALID_ARGUMENT when empty or not printable ASCII (never
// repeating it).
absl::StatusOr<std::string> ReadTokenFromStream(std::istream& in);

// Prompts "Token: " on `prompt` and reads one line from standard input with echo off, restoring
// the terminal afterwards. FAILED_PRECONDITION when standard input is not a terminal.
absl::StatusOr<std::string> ReadTokenFromTerminal(std::ostream& prompt);

// One TenantService.ListTenants call with `token`. OK when the server knows the token (a
// PERMISSION_DENIED answer counts: the token is valid, its role just may not list tenants).
// UNAUTHENTICATED "the server rejected the token ..." when the server does not accept it; any
// other failure comes back with its code and a message saying the token could not be checked.
absl::Status VerifyToken(const std::shared_ptr<grpc::ChannelInterface>& channel,
                         const std::string& server, const std::string& token,
                         absl::Duration timeout);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_LOGIN_H_
