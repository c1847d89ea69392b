#include "cli/clusters_yaml.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "cli/duration.h"
#include "cli/enum_names.h"
#include "cli/money.h"
#include "cli/read_file.h"
#include "cli/yaml_util.h"
#include "federation/status_macros.h"

namespace gpufed::cli {
namespace {

const std::vector<absl::string_view>& ClusterFields() {
  static const auto* fields = new std::vector<absl::string_view>{
      "name",         "provider",          "region",           "zone",
      "jurisdiction", "compliance_labels", "default_capacity", "prices",
      "latency"};
  return *fields;
}

const std::vector<absl::string_view>& PriceFields() {
  static const auto* fields = new std::vector<absl::string_view>{"model", "mig_profile", "capacity",
                                                                 "per_hour", "effective_from"};
  return *fields;
}

// "<file>:<line>", or the file alone when yaml-cpp recorded no position.
std::string Where(const YamlField& f) {
  const int line = YamlLine(f.node);
  return line > 0 ? absl::StrCat(f.file, ":", line) : std::string(f.file);
}

absl::StatusOr<v1::CapacityType> YamlCapacity(const YamlField& f) {
  ASSIGN_OR_RETURN(const std::string text, YamlString(f));
  const std::optional<v1::CapacityType> value = ParseCapacityType(text);
  if (!value.has_value()) {
    return YamlError(f, absl::StrCat("expected one of ", absl::StrJoin(CapacityTypeNames(), ", "),
                                     ", got ", DescribeYamlValue(f.node)));
  }
  return *value;
}

// "3.20" or 3.20: the decimal text, read exactly (money.h).
absl::StatusOr<int64_t> YamlPrice(const YamlField& f) {
  ASSIGN_OR_RETURN(const std::string text, YamlString(f));
  absl::StatusOr<int64_t> micros = ParseMicros(text);
  if (!micros.ok()) return YamlError(f, micros.status().message());
  return *micros;
}

absl::StatusOr<google::protobuf::Timestamp> YamlTimestamp(const YamlField& f) {
  ASSIGN_OR_RETURN(const std::string text, YamlString(f));
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return YamlError(f, absl::StrCat("expected an RFC 3339 time such as 2026-12-01T00:00:00Z, got ",
                                     DescribeYamlValue(f.node)));
  }
  google::protobuf::Timestamp out;
  const int64_t seconds = absl::ToUnixSeconds(t);
  out.set_seconds(seconds);
  out.set_nanos(static_cast<int32_t>(absl::ToInt64Nanoseconds(t - absl::FromUnixSeconds(seconds))));
  return out;
}

// "12ms": a round-trip time, in whole microseconds as the API carries it.
absl::StatusOr<google::protobuf::Duration> YamlRtt(const YamlField& f) {
  ASSIGN_OR_RETURN(const std::string text, YamlString(f));
  absl::StatusOr<absl::Duration> d = ParseDuration(text);
  if (!d.ok()) return YamlError(f, d.status().message());
  if (*d % absl::Microseconds(1) != absl::ZeroDuration()) {
    return YamlError(f, "must be a whole number of microseconds");
  }
  absl::StatusOr<google::protobuf::Duration> proto = DurationToProto(*d);
  if (!proto.ok()) return YamlError(f, proto.status().message());
  return *std::move(proto);
}

absl::Status Missing(const YamlField& entry, absl::string_view key, absl::string_view why) {
  return YamlError(YamlField{entry.file, absl::StrCat(entry.field, ".", key), entry.node},
                   absl::StrCat("missing; ", why));
}

class Parser {
 public:
  explicit Parser(ClustersFile& out) : out_(out) {}

  absl::Status File(const YamlField& doc) {
    bool any = false;
    RETURN_IF_ERROR(
        ForEachYamlField(doc, {"clusters"}, [&](absl::string_view /*key*/, const YamlField& list) {
          any = true;
          return ForEachYamlListEntry(list, [&](const YamlField& entry) { return Cluster(entry); });
        }));
    if (!any || out_.declarations.empty()) {
      return YamlError(doc, "no cluster in the file (expected a list under \"clusters:\")");
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Cluster(const YamlField& entry) {
    const std::string server = absl::StrCat("declarations[", out_.declarations.size(), "]");
    v1::ClusterDeclaration d;
    std::optional<YamlField> name_field;
    RETURN_IF_ERROR(ForEachYamlField(
        entry, ClusterFields(), [&](absl::string_view key, const YamlField& value) {
          if (key == "name") {
            ASSIGN_OR_RETURN(*d.mutable_cluster(), YamlString(value));
            name_field = value;
            Remember(absl::StrCat(server, ".cluster"), value);
          } else if (key == "provider") {
            ASSIGN_OR_RETURN(*d.mutable_provider(), YamlString(value));
            Remember(absl::StrCat(server, ".provider"), value);
          } else if (key == "region") {
            ASSIGN_OR_RETURN(*d.mutable_region(), YamlString(value));
            Remember(absl::StrCat(server, ".region"), value);
          } else if (key == "zone") {
            ASSIGN_OR_RETURN(*d.mutable_zone(), YamlString(value));
            Remember(absl::StrCat(server, ".zone"), value);
          } else if (key == "jurisdiction") {
            ASSIGN_OR_RETURN(*d.mutable_jurisdiction(), YamlString(value));
            Remember(absl::StrCat(server, ".jurisdiction"), value);
          } else if (key == "compliance_labels") {
            ASSIGN_OR_RETURN(const std::vector<std::string> labels, YamlStringList(value));
            // Set even when empty: [] declares that the cluster has none.
            d.mutable_compliance_labels()->mutable_labels()->Assign(labels.begin(), labels.end());
            Remember(absl::StrCat(server, ".compliance_labels"), value);
          } else if (key == "default_capacity") {
            ASSIGN_OR_RETURN(const v1::CapacityType c, YamlCapacity(value));
            d.set_default_capacity(c);
            Remember(absl::StrCat(server, ".default_capacity"), value);
          } else if (key == "prices") {
            Remember(absl::StrCat(server, ".prices"), value);
            RETURN_IF_ERROR(ForEachYamlListEntry(value, [&](const YamlField& price) {
              const std::string name = absl::StrCat(server, ".prices[", d.prices_size(), "]");
              return Price(price, name, *d.add_prices());
            }));
          } else if (key == "latency") {
            Remember(absl::StrCat(server, ".client_rtts"), value);
            RETURN_IF_ERROR(ForEachYamlField(
                value, /*known=*/{}, [&](absl::string_view region, const YamlField& rtt) {
                  ASSIGN_OR_RETURN((*d.mutable_client_rtts())[std::string(region)], YamlRtt(rtt));
                  Remember(absl::StrCat(server, ".client_rtts[", region, "]"), rtt);
                  return absl::OkStatus();
                }));
          }
          return absl::OkStatus();
        }));
    if (!name_field.has_value() || d.cluster().empty()) {
      return Missing(entry, "name", "every cluster needs its name");
    }
    const auto [first, added] = names_.emplace(d.cluster(), Where(*name_field));
    if (!added) {
      return YamlError(*name_field, absl::StrCat("cluster \"", absl::CEscape(d.cluster()),
                                                 "\" is already declared at ", first->second));
    }
    Remember(server, entry);
    out_.declarations.push_back(std::move(d));
    return absl::OkStatus();
  }

  absl::Status Price(const YamlField& entry, const std::string& server, v1::PriceEntry& p) {
    bool has_capacity = false;
    bool has_price = false;
    RETURN_IF_ERROR(
        ForEachYamlField(entry, PriceFields(), [&](absl::string_view key, const YamlField& value) {
          if (key == "model") {
            ASSIGN_OR_RETURN(*p.mutable_gpu_model(), YamlString(value));
            Remember(absl::StrCat(server, ".gpu_model"), value);
          } else if (key == "mig_profile") {
            ASSIGN_OR_RETURN(*p.mutable_mig_profile(), YamlString(value));
            Remember(absl::StrCat(server, ".mig_profile"), value);
          } else if (key == "capacity") {
            ASSIGN_OR_RETURN(const v1::CapacityType c, YamlCapacity(value));
            p.set_capacity_type(c);
            has_capacity = true;
            Remember(absl::StrCat(server, ".capacity_type"), value);
          } else if (key == "per_hour") {
            ASSIGN_OR_RETURN(const int64_t micros, YamlPrice(value));
            p.set_price_per_hour_micros(micros);
            has_price = true;
            Remember(absl::StrCat(server, ".price_per_hour_micros"), value);
          } else if (key == "effective_from") {
            ASSIGN_OR_RETURN(*p.mutable_effective_from(), YamlTimestamp(value));
            Remember(absl::StrCat(server, ".effective_from"), value);
          }
          return absl::OkStatus();
        }));
    if (p.gpu_model().empty())
      return Missing(entry, "model", "the GPU model priced, e.g. H100-80GB");
    if (!has_capacity) {
      return Missing(entry, "capacity",
                     absl::StrCat("one of ", absl::StrJoin(CapacityTypeNames(), ", ")));
    }
    if (!has_price) return Missing(entry, "per_hour", "the price per hour, e.g. \"3.20\"");
    if (!p.has_effective_from()) {
      return Missing(entry, "effective_from",
                     "when the price takes effect, e.g. 2026-12-01T00:00:00Z (a line in force "
                     "is never changed; a later line takes over)");
    }
    Remember(server, entry);
    return absl::OkStatus();
  }

  void Remember(std::string server_name, const YamlField& f) {
    out_.origins[std::move(server_name)] = Where(f);
  }

  ClustersFile& out_;
  std::map<std::string, std::string> names_;  // cluster name -> where it was declared
};

}  // namespace

absl::StatusOr<ClustersFile> ParseClustersYaml(absl::string_view text,
                                               absl::string_view file_name) {
  ASSIGN_OR_RETURN(const std::vector<YAML::Node> nodes, LoadYamlDocuments(text, file_name));
  std::vector<YAML::Node> docs;
  for (const YAML::Node& node : nodes) {
    if (!node.IsNull()) docs.push_back(node);  // "---" alone, or only comments
  }
  if (docs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(file_name, ": no cluster in the file"));
  }
  if (docs.size() > 1) {
    return YamlError(YamlField{file_name, "", docs[1]},
                     "one YAML document expected (list every cluster under one \"clusters:\")");
  }
  ClustersFile out;
  Parser parser(out);
  RETURN_IF_ERROR(parser.File(YamlField{file_name, "", docs[0]}));
  return out;
}

absl::StatusOr<ClustersFile> LoadClustersFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  return ParseClustersYaml(text, path);
}

absl::Status PointAtFile(const ClustersFile& file, const absl::Status& status) {
  const absl::string_view message = status.message();
  // The longest name the message starts with, ending where the name does.
  const std::string* where = nullptr;
  size_t longest = 0;
  for (const auto& [name, origin] : file.origins) {
    if (name.size() <= longest || !absl::StartsWith(message, name)) continue;
    if (message.size() > name.size() &&
        absl::string_view(".:[ ").find(message[name.size()]) == absl::string_view::npos) {
      continue;  // "declarations[1]" is not the start of "declarations[12]"
    }
    where = &origin;
    longest = name.size();
  }
  if (where == nullptr) return status;
  return {status.code(), absl::StrCat(*where, ": ", message)};
}

}  // namespace gpufed::cli
