#include "federation/preemption.h"

namespace gpufed {
namespace {

struct CauseName {
  PreemptionCause cause;
  absl::string_view name;
};

constexpr CauseName kCauseNames[] = {
    {PreemptionCause::kGuaranteeReclaim, "guarantee_reclaim"},
    {PreemptionCause::kFairShare, "fair_share"},
    {PreemptionCause::kPriority, "priority"},
};

}  // namespace

absl::string_view PreemptionCauseName(PreemptionCause cause) {
  for (const CauseName& c : kCauseNames) {
    if (c.cause == cause) return c.name;
  }
  return "";
}

std::optional<PreemptionCause> ParsePreemptionCause(absl::string_view name) {
  for (const CauseName& c : kCauseNames) {
    if (c.name == name) return c.cause;
  }
  return std::nullopt;
}

}  // namespace gpufed
