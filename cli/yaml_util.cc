#include "cli/yaml_util.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "yaml-cpp/eventhandler.h"

namespace gpufed::cli {
namespace {

// Notes where the last document started; ignores everything else.
class DocumentStarts final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { last = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  YAML::Mark last;
};

// yaml-cpp tags plain scalars "?" and quoted ones "!" unless the document gave a tag.
bool IsQuoted(const YAML::Node& node) { return node.Tag() == "!"; }

// Checks the shape shared by all integer reads and returns the digits.
absl::StatusOr<std::string> IntegerText(const YamlField& f, absl::string_view expected) {
  if (!f.node.IsScalar() || IsQuoted(f.node)) {
    return YamlError(f, absl::StrCat("expected ", expected, ", got ", DescribeYamlValue(f.node)));
  }
  return f.node.Scalar();
}

template <typename Int>
absl::StatusOr<Int> ParseSigned(const YamlField& f) {
  constexpr absl::string_view kExpected = "an integer";
  auto text = IntegerText(f, kExpected);
  if (!text.ok()) return text.status();
  int64_t value = 0;
  if (!absl::SimpleAtoi(*text, &value)) {
    return YamlError(f, absl::StrCat("expected ", kExpected, ", got ", DescribeYamlValue(f.node)));
  }
  if (value < std::numeric_limits<Int>::min() || value > std::numeric_limits<Int>::max()) {
    return YamlError(f, absl::StrCat(*text, " is out of range [", std::numeric_limits<Int>::min(),
                                     ", ", std::numeric_limits<Int>::max(), "]"));
  }
  return static_cast<Int>(value);
}

template <typename Uint>
absl::StatusOr<Uint> ParseUnsigned(const YamlField& f) {
  constexpr absl::string_view kExpected = "a non-negative integer";
  auto text = IntegerText(f, kExpected);
  if (!text.ok()) return text.status();
  uint64_t value = 0;
  // SimpleAtoi into an unsigned type rejects a minus sign, which is the message we want too.
  if (!absl::SimpleAtoi(*text, &value)) {
    return YamlError(f, absl::StrCat("expected ", kExpected, ", got ", DescribeYamlValue(f.node)));
  }
  if (value > std::numeric_limits<Uint>::max()) {
    return YamlError(f, absl::StrCat(*text, " is out of range (at most ",
                                     std::numeric_limits<Uint>::max(), ")"));
  }
  return static_cast<Uint>(value);
}

size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

}  // namespace

absl::StatusOr<std::vector<YAML::Node>> LoadYamlDocuments(absl::string_view text,
                                                          absl::string_view file) {
  const std::string copy(text);
  try {
    // A first pass over the parser's events alone: where yaml-cpp 0.7 cannot get past a
    // character, every further document starts at that same place, empty, and LoadAll never
    // returns. Documents that make progress start further on.
    std::istringstream in(copy);
    YAML::Parser parser(in);
    DocumentStarts starts;
    std::optional<int> previous;
    while (parser.HandleNextDocument(starts)) {
      const YAML::Mark& m = starts.last;
      if (previous == m.pos) {
        const std::string c = m.pos >= 0 && static_cast<size_t>(m.pos) < copy.size()
                                  ? absl::CHexEscape(copy.substr(m.pos, 1))
                                  : "";
        return absl::InvalidArgumentError(absl::StrCat(file, ":", m.line + 1,
                                                       ": invalid YAML: unexpected \"", c,
                                                       "\" at column ", m.column + 1));
      }
      previous = m.pos;
    }
    return YAML::LoadAll(copy);
  } catch (const YAML::Exception& e) {
    const std::string where =
        e.mark.is_null() ? std::string(file) : absl::StrCat(file, ":", e.mark.line + 1);
    return absl::InvalidArgumentError(absl::StrCat(where, ": invalid YAML: ", e.msg));
  }
}

int YamlLine(const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  return mark.is_null() ? 0 : mark.line + 1;
}

absl::Status YamlError(const YamlField& f, absl::string_view message) {
  const int line = YamlLine(f.node);
  const std::string where = line > 0 ? absl::StrCat(f.file, ":", line) : std::string(f.file);
  if (f.field.empty()) return absl::InvalidArgumentError(absl::StrCat(where, ": ", message));
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", f.field, ": ", message));
}

std::string DescribeYamlValue(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "null";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      break;
  }
  std::string text = node.Scalar();
  constexpr size_t kMaxShown = 60;
  if (text.size() > kMaxShown) text = absl::StrCat(text.substr(0, kMaxShown), "...");
  return absl::StrCat("\"", absl::CEscape(text), "\"");
}

absl::StatusOr<std::string> YamlString(const YamlField& f) {
  if (!f.node.IsScalar()) {
    return YamlError(f, absl::StrCat("expected a string, got ", DescribeYamlValue(f.node)));
  }
  return f.node.Scalar();
}

absl::StatusOr<std::vector<std::string>> YamlStringList(const YamlField& f) {
  std::vector<std::string> out;
  if (f.node.IsScalar()) {
    out.push_back(f.node.Scalar());
    return out;
  }
  if (!f.node.IsSequence()) {
    return YamlError(f,
                     absl::StrCat("expected a list of strings, got ", DescribeYamlValue(f.node)));
  }
  for (size_t i = 0; i < f.node.size(); ++i) {
    const YamlField item{f.file, absl::StrCat(f.field, "[", i, "]"), f.node[i]};
    auto value = YamlString(item);
    if (!value.ok()) return value.status();
    out.push_back(*std::move(value));
  }
  return out;
}

absl::StatusOr<int32_t> YamlInt32(const YamlField& f) { return ParseSigned<int32_t>(f); }
absl::StatusOr<uint32_t> YamlUint32(const YamlField& f) { return ParseUnsigned<uint32_t>(f); }
absl::StatusOr<uint64_t> YamlUint64(const YamlField& f) { return ParseUnsigned<uint64_t>(f); }

absl::StatusOr<bool> YamlBool(const YamlField& f) {
  if (f.node.IsScalar() && !IsQuoted(f.node)) {
    if (f.node.Scalar() == "true") return true;
    if (f.node.Scalar() == "false") return false;
  }
  return YamlError(f, absl::StrCat("expected true or false, got ", DescribeYamlValue(f.node)));
}

absl::Status ForEachYamlListEntry(
    const YamlField& f, const std::function<absl::Status(const YamlField& entry)>& visit) {
  if (!f.node.IsSequence()) {
    return YamlError(f, absl::StrCat("expected a list, got ", DescribeYamlValue(f.node)));
  }
  for (size_t i = 0; i < f.node.size(); ++i) {
    absl::Status status = visit(YamlField{f.file, absl::StrCat(f.field, "[", i, "]"), f.node[i]});
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status ForEachYamlField(
    const YamlField& f, const std::vector<absl::string_view>& known,
    const std::function<absl::Status(absl::string_view key, const YamlField& value)>& visit) {
  if (!f.node.IsMap()) {
    return YamlError(f, absl::StrCat("expected a mapping, got ", DescribeYamlValue(f.node)));
  }
  std::set<std::string, std::less<>> seen;
  for (const auto& entry : f.node) {
    const YAML::Node& key_node = entry.first;
    if (!key_node.IsScalar()) {
      return YamlError(
          {f.file, f.field, key_node},
          absl::StrCat("field names must be strings, got ", DescribeYamlValue(key_node)));
    }
    const std::string& key = key_node.Scalar();
    const std::string path = f.field.empty() ? key : absl::StrCat(f.field, ".", key);
    const YamlField key_field{f.file, path, key_node};
    if (!known.empty() && std::find(known.begin(), known.end(), key) == known.end()) {
      const std::string suggestion = SuggestName(key, known);
      if (!suggestion.empty()) {
        return YamlError(key_field,
                         absl::StrCat("unknown field; did you mean \"", suggestion, "\"?"));
      }
      return YamlError(
          key_field, absl::StrCat("unknown field; expected one of: ", absl::StrJoin(known, ", ")));
    }
    if (!seen.insert(key).second) return YamlError(key_field, "duplicate field");
    // A key without a value reads as absent, which is how people blank a field in YAML.
    if (entry.second.IsNull()) continue;
    absl::Status status = visit(key, YamlField{f.file, path, entry.second});
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

std::string SuggestName(absl::string_view word, const std::vector<absl::string_view>& candidates) {
  absl::string_view best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (absl::string_view candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    const bool plausible =
        distance <= 2 || (word.size() >= 3 &&
                          (absl::StartsWith(candidate, word) || absl::StartsWith(word, candidate)));
    if (plausible && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return std::string(best);
}

}  // namespace gpufed::cli
