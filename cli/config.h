#ifndef GPUFED_CLI_CONFIG_H_
#define GPUFED_CLI_CONFIG_H_

// gpufedctl's client configuration (docs/interfaces.md, "gpufedctl").
//
// Precedence, lowest to highest:
//   1. built-in defaults (server 127.0.0.1:50051, no token, no tenant or project);
//   2. the YAML file: --config FILE, else $GPUFED_CONFIG, else ~/.config/gpufed/config.yaml;
//   3. the environment: $GPUFED_SERVER, $GPUFED_TOKEN or $GPUFED_TOKEN_FILE, $GPUFED_CA_FILE;
//   4. flags: --server, --token or --token-file, --ca-file, --insecure-plaintext.
// token and token_file are one setting: a level that gives either replaces both from the levels
// below; one level giving both is an error. The token file is read once resolved (whitespace
// trimmed). No error repeats a token.
// A missing default file (~/.config/...) means "no file"; a file named by --config or
// $GPUFED_CONFIG must exist, because a typo there should not quietly talk to another server.
// Empty environment variables count as unset.
//
// Config file keys: server, token, token_file, tenant, project, ca_file (strings) and
// insecure_plaintext (boolean); a relative token_file is relative to the config file's folder.
// Unknown keys are errors. The connection is TLS, verifying the server against ca_file (or the
// system's roots without it); plaintext only with insecure_plaintext, and never with both set.
//
// Thread safety: stateless functions.

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gpufed::cli {

inline constexpr absl::string_view kDefaultServer = "127.0.0.1:50051";

struct ClientConfig {
  std::string server{kDefaultServer};
  // Bearer token; empty sends no authorization metadata.
  std::string token;
  // The file the token was read from (ResolveClientConfig), or to read it from (after
  // ParseClientConfig); empty when the token came as a value.
  std::string token_file;
  // Default tenant for submit and list; default project for submit.
  std::string tenant;
  std::string project;
  // PEM file of the CA(s) that signed the server's certificate; empty: the system's roots.
  std::string ca_file;
  // No TLS: for a development server started with --insecure-plaintext.
  bool insecure_plaintext = false;
};

// Values given on the command line; nullopt when the flag was not given.
struct ConfigFlags {
  std::optional<std::string> config_file;
  std::optional<std::string> server;
  std::optional<std::string> token;
  std::optional<std::string> token_file;
  std::optional<std::string> ca_file;
  std::optional<bool> insecure_plaintext;
  // An explicitly named config file that does not exist means "no file" (gpufedctl login,
  // which creates it).
  bool missing_file_ok = false;
};

// Looks up an environment variable; nullopt when unset. Injected so tests need not touch the
// process environment.
using EnvLookup = std::function<std::optional<std::string>(absl::string_view name)>;

// The process environment.
EnvLookup ProcessEnv();

// Parses a config file's text onto `base` (keys present in the file replace base's values).
// INVALID_ARGUMENT "<file>:<line>: <key>: ..." for bad YAML, non-string values or unknown keys.
absl::StatusOr<ClientConfig> ParseClientConfig(absl::string_view text, absl::string_view file_name,
                                               ClientConfig base = {});

// Which file to read, per the precedence above; nullopt when none applies (no flag, no
// $GPUFED_CONFIG and no $HOME). `explicitly_named` is set when the flag or variable chose it.
struct ConfigPath {
  std::string path;
  bool explicitly_named = false;
};
std::optional<ConfigPath> FindConfigFile(const ConfigFlags& flags, const EnvLookup& env);

// Resolves the whole precedence chain. Errors: NOT_FOUND for an explicitly named file that does
// not exist, errors from reading or parsing the file, and INVALID_ARGUMENT for a token holding
// characters that cannot travel in gRPC metadata (or an empty server address), or for ca_file
// and insecure_plaintext both set.
absl::StatusOr<ClientConfig> ResolveClientConfig(const ConfigFlags& flags, const EnvLookup& env);

// Sets `token` in the config file at `path`, keeping its other keys (a token_file key is
// dropped: the token replaces it), creating the file and its folder (0700) when missing. The
// new text goes to a temporary file created 0600 with O_EXCL and is renamed over `path`, so the
// file is 0600 afterwards whatever it was, and a reader never sees half of it. YAML comments in
// the old file are not kept. INVALID_ARGUMENT when the existing file is not a YAML mapping;
// INTERNAL naming the path when it cannot be written.
absl::Status SaveTokenInConfigFile(const std::string& path, absl::string_view token);

// `token` trimmed; INVALID_ARGUMENT "token from <source>: must be printable ASCII without
// spaces" (never the token itself) when anything else is left.
absl::StatusOr<std::string> CleanToken(absl::string_view token, absl::string_view source);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_CONFIG_H_
