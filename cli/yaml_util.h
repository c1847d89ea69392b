#ifndef GPUFED_CLI_YAML_UTIL_H_
#define GPUFED_CLI_YAML_UTIL_H_

// Typed reads from yaml-cpp nodes with errors a person can act on. Every error is
// INVALID_ARGUMENT with the message "<file>:<line>: <field>: <what was wrong>", e.g.
//   train.yaml:7: replicas: expected a non-negative integer, got "two"
// Shared by the workload format (workload_yaml.h) and the client config (config.h).
//
// Thread safety: stateless functions; safe to call concurrently on distinct nodes.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace gpufed::cli {

// A YAML value together with where it came from.
struct YamlField {
  absl::string_view file;  // as the user named it, e.g. "train.yaml"
  std::string field;       // dotted path, e.g. "run.env.EPOCHS"
  YAML::Node node;
};

// Every document of `text`, as YAML::LoadAll reads them; INVALID_ARGUMENT
// "<file>:<line>: invalid YAML: <what>" when it is not YAML. Unlike YAML::LoadAll of yaml-cpp
// 0.7, it also returns where the parser cannot get past a character where a document may start
// (a comma: "name: x\n---\n,"), on which LoadAll yields empty documents for ever.
absl::StatusOr<std::vector<YAML::Node>> LoadYamlDocuments(absl::string_view text,
                                                          absl::string_view file);

// 1-based line of `node`, or 0 when yaml-cpp recorded no position.
int YamlLine(const YAML::Node& node);

// INVALID_ARGUMENT "<file>:<line>: <field>: <message>".
absl::Status YamlError(const YamlField& f, absl::string_view message);

// How a value reads in "got ..." messages: `"two"`, `a list`, `a mapping`, `null`.
std::string DescribeYamlValue(const YAML::Node& node);

// Any scalar, as written (numbers and booleans are kept as their text).
absl::StatusOr<std::string> YamlString(const YamlField& f);

// A list of scalars; a single scalar reads as a one-element list.
absl::StatusOr<std::vector<std::string>> YamlStringList(const YamlField& f);

// Unquoted decimal integers within the type's range. Quoted numbers are strings in YAML and
// are rejected, as are fractions and numbers out of range.
absl::StatusOr<int32_t> YamlInt32(const YamlField& f);
absl::StatusOr<uint32_t> YamlUint32(const YamlField& f);
absl::StatusOr<uint64_t> YamlUint64(const YamlField& f);

// Unquoted true or false (YAML 1.2's spelling; yes/no/on/off are refused as ambiguous).
absl::StatusOr<bool> YamlBool(const YamlField& f);

// Visits each entry of the list `f.node` in order, with `field` "<f.field>[i]". Rejects a value
// that is not a list. The first error, from the check or from `visit`, is returned.
absl::Status ForEachYamlListEntry(const YamlField& f,
                                  const std::function<absl::Status(const YamlField& entry)>& visit);

// Visits each entry of the mapping `f.node` in file order. Rejects a value that is not a
// mapping, keys that are not scalars, duplicate keys, and keys outside `known` (unless
// `known` is empty, which allows any key). `visit` receives the key and a YamlField whose
// `field` is `f.field + "." + key` (just `key` at the top level, when f.field is empty).
// The first error, from the checks or from `visit`, is returned.
absl::Status ForEachYamlField(
    const YamlField& f, const std::vector<absl::string_view>& known,
    const std::function<absl::Status(absl::string_view key, const YamlField& value)>& visit);

// The closest of `candidates` to `word` by edit distance when it is a plausible typo
// (distance <= 2, or one is a prefix of the other); empty otherwise.
std::string SuggestName(absl::string_view word, const std::vector<absl::string_view>& candidates);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_YAML_UTIL_H_
