#ifndef GPUFED_CLI_CONFIG_H_
#define GPUFED_CLI_CONFIG_H_

// gpufedctl's client configuration (docs/interfaces.md, "gpufedctl").
//
// Precedence, lowest to highest:
//   1. built-in defaults (server 127.0.0.1:50051, no token, no tenant or project);
//   2. the YAML file: --config FILE, else $GPUFED_CONFIG, else ~/.config/gpufed/config.yaml;
//   3. the environment: $GPUFED_SERVER, $GPUFED_TOKEN;
//   4. flags: --server, --token.
// A missing default file (~/.config/...) means "no file"; a file named by --config or
// $GPUFED_CONFIG must exist, because a typo there should not quietly talk to another server.
// Empty environment variables count as unset.
//
// Config file keys: server, token, tenant, project (strings). Unknown keys are errors.
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
  // Default tenant for submit and list; default project for submit.
  std::string tenant;
  std::string project;
};

// Values given on the command line; nullopt when the flag was not given.
struct ConfigFlags {
  std::optional<std::string> config_file;
  std::optional<std::string> server;
  std::optional<std::string> token;
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
// characters that cannot travel in gRPC metadata (or an empty server address).
absl::StatusOr<ClientConfig> ResolveClientConfig(const ConfigFlags& flags, const EnvLookup& env);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_CONFIG_H_
