#include "cli/config.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "auth/secret_file.h"
#include "cli/read_file.h"
#include "cli/yaml_util.h"
#include "federation/status_macros.h"

namespace gpufed::cli {
namespace {

std::optional<std::string> NonEmpty(std::optional<std::string> value) {
  if (value.has_value() && value->empty()) return std::nullopt;
  return value;
}

// Where a level of the precedence chain put the token: as a value, or as a file to read.
void SetToken(ClientConfig& config, std::optional<std::string> token,
              std::optional<std::string> file) {
  if (!token.has_value() && !file.has_value()) return;
  config.token = std::move(token).value_or("");
  config.token_file = std::move(file).value_or("");
}

}  // namespace

// Tokens are pasted and read from files, so surrounding whitespace is an accident; anything
// else that is not printable ASCII would be rejected by gRPC only at call time, with a worse
// message.
absl::StatusOr<std::string> CleanToken(absl::string_view token, absl::string_view source) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(token);
  for (const char c : trimmed) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("token from ", source, ": must be printable ASCII without spaces"));
    }
  }
  return std::string(trimmed);
}

EnvLookup ProcessEnv() {
  return [](absl::string_view name) -> std::optional<std::string> {
    // Nothing in gpufedctl calls setenv, so reading the environment cannot race.
    const char* value = std::getenv(std::string(name).c_str());  // NOLINT(concurrency-mt-unsafe)
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

absl::StatusOr<ClientConfig> ParseClientConfig(absl::string_view text, absl::string_view file_name,
                                               ClientConfig base) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    const std::string where =
        e.mark.is_null() ? std::string(file_name) : absl::StrCat(file_name, ":", e.mark.line + 1);
    return absl::InvalidArgumentError(absl::StrCat(where, ": invalid YAML: ", e.msg));
  }
  if (root.IsNull()) return base;  // An empty file configures nothing.
  static const std::vector<absl::string_view> kKeys = {
      "server", "token", "token_file", "tenant", "project", "ca_file", "insecure_plaintext"};
  if (root.IsMap() && root["token"] && root["token_file"]) {
    return absl::InvalidArgumentError(
        absl::StrCat(file_name, ": token and token_file are both set; give one"));
  }
  RETURN_IF_ERROR(ForEachYamlField(
      YamlField{file_name, "", root}, kKeys, [&](absl::string_view key, const YamlField& value) {
        if (key == "insecure_plaintext") {
          ASSIGN_OR_RETURN(base.insecure_plaintext, YamlBool(value));
          return absl::OkStatus();
        }
        ASSIGN_OR_RETURN(std::string str, YamlString(value));
        if (key == "ca_file") {
          base.ca_file = std::move(str);
        } else if (key == "server") {
          base.server = std::move(str);
        } else if (key == "token") {
          absl::StatusOr<std::string> token = CleanToken(str, file_name);
          if (!token.ok()) return YamlError(value, "must be printable ASCII without spaces");
          SetToken(base, *std::move(token), std::nullopt);
        } else if (key == "token_file") {
          std::filesystem::path path(str);
          if (path.is_relative()) {
            path = std::filesystem::path(std::string(file_name)).parent_path() / path;
          }
          SetToken(base, std::nullopt, path.string());
        } else if (key == "tenant") {
          base.tenant = std::move(str);
        } else if (key == "project") {
          base.project = std::move(str);
        }
        return absl::OkStatus();
      }));
  return base;
}

std::optional<ConfigPath> FindConfigFile(const ConfigFlags& flags, const EnvLookup& env) {
  if (flags.config_file.has_value()) return ConfigPath{*flags.config_file, true};
  if (std::optional<std::string> path = NonEmpty(env("GPUFED_CONFIG"))) {
    return ConfigPath{*std::move(path), true};
  }
  if (std::optional<std::string> home = NonEmpty(env("HOME"))) {
    return ConfigPath{absl::StrCat(*home, "/.config/gpufed/config.yaml"), false};
  }
  return std::nullopt;
}

absl::StatusOr<ClientConfig> ResolveClientConfig(const ConfigFlags& flags, const EnvLookup& env) {
  ClientConfig config;
  if (std::optional<ConfigPath> file = FindConfigFile(flags, env)) {
    absl::StatusOr<std::string> text = ReadTextFile(file->path);
    if (text.ok()) {
      ASSIGN_OR_RETURN(config, ParseClientConfig(*text, file->path, std::move(config)));
      // A file holding a token is a secret: the rule the server and agent apply to theirs.
      if (!config.token.empty()) {
        RETURN_IF_ERROR(auth::CheckSecretFileMode("config file (it holds a token)", file->path));
      }
    } else if (!(absl::IsNotFound(text.status()) &&
                 (!file->explicitly_named || flags.missing_file_ok))) {
      return absl::Status(text.status().code(),
                          absl::StrCat("config file ", text.status().message()));
    }
  }
  if (std::optional<std::string> server = NonEmpty(env("GPUFED_SERVER"))) config.server = *server;
  {
    std::optional<std::string> token = NonEmpty(env("GPUFED_TOKEN"));
    std::optional<std::string> file = NonEmpty(env("GPUFED_TOKEN_FILE"));
    if (token.has_value() && file.has_value()) {
      return absl::InvalidArgumentError(
          "$GPUFED_TOKEN and $GPUFED_TOKEN_FILE are both set; give one");
    }
    if (token.has_value()) {
      ASSIGN_OR_RETURN(std::string clean, CleanToken(*token, "$GPUFED_TOKEN"));
      token = std::move(clean);
    }
    SetToken(config, std::move(token), std::move(file));
  }
  if (std::optional<std::string> ca = NonEmpty(env("GPUFED_CA_FILE"))) config.ca_file = *ca;
  if (flags.server.has_value()) config.server = *flags.server;
  if (flags.ca_file.has_value()) config.ca_file = *flags.ca_file;
  if (flags.insecure_plaintext.has_value()) config.insecure_plaintext = *flags.insecure_plaintext;
  if (flags.token.has_value() && flags.token_file.has_value()) {
    return absl::InvalidArgumentError("--token and --token-file are both given; give one");
  }
  if (flags.token.has_value()) {
    ASSIGN_OR_RETURN(std::string clean, CleanToken(*flags.token, "--token"));
    SetToken(config, std::move(clean), std::nullopt);
  }
  if (flags.token_file.has_value()) SetToken(config, std::nullopt, *flags.token_file);
  if (!config.token_file.empty()) {
    RETURN_IF_ERROR(auth::CheckSecretFileMode("token_file", config.token_file));
    absl::StatusOr<std::string> text = ReadTextFile(config.token_file);
    if (!text.ok()) {
      return absl::Status(text.status().code(),
                          absl::StrCat("token_file: ", text.status().message()));
    }
    ASSIGN_OR_RETURN(config.token, CleanToken(*text, config.token_file));
    if (config.token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_file: ", config.token_file, " is empty"));
    }
  }
  if (config.insecure_plaintext && !config.ca_file.empty()) {
    return absl::InvalidArgumentError(
        "insecure_plaintext: a CA file is set too (ca_file, --ca-file or $GPUFED_CA_FILE); TLS or "
        "plaintext, give one");
  }
  if (config.server.empty()) {
    return absl::InvalidArgumentError("server: the address is empty (use --server HOST:PORT)");
  }
  return config;
}

absl::Status SaveTokenInConfigFile(const std::string& path, absl::string_view token) {
  YAML::Node root(YAML::NodeType::Map);
  absl::StatusOr<std::string> text = ReadTextFile(path);
  if (text.ok()) {
    try {
      root = YAML::Load(*text);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": invalid YAML: ", e.msg));
    }
    if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    if (!root.IsMap()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": expected a mapping"));
    }
  } else if (!absl::IsNotFound(text.status())) {
    return text.status();
  }
  root.remove("token_file");
  root["token"] = std::string(token);
  YAML::Emitter emitter;
  emitter << root;
  const std::string content = absl::StrCat(emitter.c_str(), "\n");

  const std::filesystem::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    if (!std::filesystem::exists(target.parent_path(), ec)) {
      std::filesystem::create_directories(target.parent_path(), ec);
      if (!ec) ::chmod(target.parent_path().c_str(), 0700);
    }
  }
  return ReplaceFile(path, content, 0600);
}

}  // namespace gpufed::cli
