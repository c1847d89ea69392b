#include "cli/enum_names.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "google/protobuf/descriptor.h"

namespace gpufed::cli {
namespace {

using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;

enum class Case { kLower, kUpper };

// How one proto enum is spelled for people.
struct Spelling {
  const EnumDescriptor* descriptor;
  absl::string_view prefix;  // stripped from value names, e.g. "WORKLOAD_CLASS_"
  Case letter_case;
  char separator;  // replaces '_'
};

std::string ShortName(const Spelling& s, const EnumValueDescriptor& value) {
  std::string name = value.name();
  if (absl::StartsWith(name, s.prefix)) name.erase(0, s.prefix.size());
  if (s.letter_case == Case::kLower) absl::AsciiStrToLower(&name);
  if (s.separator != '_') {
    name = absl::StrReplaceAll(name, {{"_", std::string(1, s.separator)}});
  }
  return name;
}

std::string Format(const Spelling& s, int number) {
  const EnumValueDescriptor* value = s.descriptor->FindValueByNumber(number);
  if (value == nullptr) return absl::StrCat(number);
  return ShortName(s, *value);
}

std::optional<int> Parse(const Spelling& s, absl::string_view name) {
  for (int i = 0; i < s.descriptor->value_count(); ++i) {
    const EnumValueDescriptor& value = *s.descriptor->value(i);
    if (value.number() == 0) continue;  // *_UNSPECIFIED is never something to ask for.
    if (absl::EqualsIgnoreCase(ShortName(s, value), name)) return value.number();
  }
  return std::nullopt;
}

std::vector<std::string> Names(const Spelling& s) {
  std::vector<std::string> names;
  for (int i = 0; i < s.descriptor->value_count(); ++i) {
    const EnumValueDescriptor& value = *s.descriptor->value(i);
    if (value.number() != 0) names.push_back(ShortName(s, value));
  }
  return names;
}

const Spelling& ClassSpelling() {
  static const Spelling s{v1::WorkloadClass_descriptor(), "WORKLOAD_CLASS_", Case::kLower, '_'};
  return s;
}
const Spelling& TopologySpelling() {
  static const Spelling s{v1::TopologyRequirement_descriptor(), "TOPOLOGY_REQUIREMENT_",
                          Case::kLower, '_'};
  return s;
}
const Spelling& RetryOnSpelling() {
  static const Spelling s{v1::RetryOn_descriptor(), "RETRY_ON_", Case::kLower, '_'};
  return s;
}
const Spelling& SimOutcomeSpelling() {
  static const Spelling s{v1::SimOutcome_descriptor(), "SIM_OUTCOME_", Case::kLower, '_'};
  return s;
}
const Spelling& StateSpelling() {
  static const Spelling s{v1::WorkloadState_descriptor(), "WORKLOAD_STATE_", Case::kUpper, '_'};
  return s;
}
const Spelling& ClusterStateSpelling() {
  static const Spelling s{v1::ClusterState_descriptor(), "CLUSTER_STATE_", Case::kLower, '_'};
  return s;
}
const Spelling& RoleSpelling() {
  static const Spelling s{v1::Role_descriptor(), "ROLE_", Case::kLower, '-'};
  return s;
}

const Spelling& CapacityTypeSpelling() {
  static const Spelling s{v1::CapacityType_descriptor(), "CAPACITY_TYPE_", Case::kLower, '-'};
  return s;
}
const Spelling& ObjectiveSpelling() {
  static const Spelling s{v1::Objective_descriptor(), "OBJECTIVE_", Case::kLower, '_'};
  return s;
}
const Spelling& DeclarationChangeSpelling() {
  static const Spelling s{v1::DeclarationChange_descriptor(), "DECLARATION_CHANGE_", Case::kLower,
                          '_'};
  return s;
}

template <typename Enum>
std::optional<Enum> ParseAs(const Spelling& s, absl::string_view name) {
  const std::optional<int> number = Parse(s, name);
  if (!number.has_value()) return std::nullopt;
  return static_cast<Enum>(*number);
}

}  // namespace

std::string WorkloadClassName(v1::WorkloadClass value) { return Format(ClassSpelling(), value); }
std::optional<v1::WorkloadClass> ParseWorkloadClass(absl::string_view name) {
  return ParseAs<v1::WorkloadClass>(ClassSpelling(), name);
}
std::vector<std::string> WorkloadClassNames() { return Names(ClassSpelling()); }

std::string TopologyName(v1::TopologyRequirement value) {
  return Format(TopologySpelling(), value);
}
std::optional<v1::TopologyRequirement> ParseTopology(absl::string_view name) {
  return ParseAs<v1::TopologyRequirement>(TopologySpelling(), name);
}
std::vector<std::string> TopologyNames() { return Names(TopologySpelling()); }

std::string RetryOnName(v1::RetryOn value) { return Format(RetryOnSpelling(), value); }
std::optional<v1::RetryOn> ParseRetryOn(absl::string_view name) {
  return ParseAs<v1::RetryOn>(RetryOnSpelling(), name);
}
std::vector<std::string> RetryOnNames() { return Names(RetryOnSpelling()); }

std::string SimOutcomeName(v1::SimOutcome value) { return Format(SimOutcomeSpelling(), value); }
std::optional<v1::SimOutcome> ParseSimOutcome(absl::string_view name) {
  return ParseAs<v1::SimOutcome>(SimOutcomeSpelling(), name);
}
std::vector<std::string> SimOutcomeNames() { return Names(SimOutcomeSpelling()); }

std::string WorkloadStateName(v1::WorkloadState value) { return Format(StateSpelling(), value); }
std::optional<v1::WorkloadState> ParseWorkloadState(absl::string_view name) {
  return ParseAs<v1::WorkloadState>(StateSpelling(), name);
}
std::vector<std::string> WorkloadStateNames() { return Names(StateSpelling()); }

bool IsTerminalState(v1::WorkloadState value) {
  return value == v1::WORKLOAD_STATE_SUCCEEDED || value == v1::WORKLOAD_STATE_FAILED ||
         value == v1::WORKLOAD_STATE_CANCELLED || value == v1::WORKLOAD_STATE_PREEMPTED ||
         value == v1::WORKLOAD_STATE_LOST;
}

std::string ClusterStateName(v1::ClusterState value) {
  return Format(ClusterStateSpelling(), value);
}

std::string RoleName(v1::Role value) { return Format(RoleSpelling(), value); }
std::optional<v1::Role> ParseRole(absl::string_view name) {
  return ParseAs<v1::Role>(RoleSpelling(), name);
}
std::vector<std::string> RoleNames() { return Names(RoleSpelling()); }

std::string CapacityTypeName(v1::CapacityType value) {
  return Format(CapacityTypeSpelling(), value);
}
std::optional<v1::CapacityType> ParseCapacityType(absl::string_view name) {
  return ParseAs<v1::CapacityType>(CapacityTypeSpelling(), name);
}
std::vector<std::string> CapacityTypeNames() { return Names(CapacityTypeSpelling()); }

std::string ObjectiveName(v1::Objective value) {
  // The server reads UNSPECIFIED as pack.
  if (value == v1::OBJECTIVE_UNSPECIFIED) value = v1::OBJECTIVE_PACK;
  return Format(ObjectiveSpelling(), value);
}
std::optional<v1::Objective> ParseObjective(absl::string_view name) {
  return ParseAs<v1::Objective>(ObjectiveSpelling(), name);
}
std::vector<std::string> ObjectiveNames() { return Names(ObjectiveSpelling()); }

std::string DeclarationChangeName(v1::DeclarationChange value) {
  return Format(DeclarationChangeSpelling(), value);
}

}  // namespace gpufed::cli
