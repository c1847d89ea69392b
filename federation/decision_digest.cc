#include "federation/decision_digest.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace gpufed {

std::string DecisionText(const PlacementDecision& decision) {
  if (!decision.assignment) return decision.reason.never_fits() ? "never" : "wait";
  const Assignment& a = *decision.assignment;
  std::string text = absl::StrCat("fit ", a.cluster, " ", a.epoch);
  for (const ReplicaAssignment& r : a.replicas) {
    absl::StrAppend(&text, " | ", r.node, " ", absl::StrJoin(r.gpu_uuids, ","), " ", r.gpu_milli,
                    " ",
                    r.mig_profile.empty() ? "-" : absl::StrCat(r.mig_profile, "@", r.mig_start));
  }
  for (const Repartition& p : a.repartitions) {
    absl::StrAppend(&text, " | mig ", p.node, " ", p.gpu_uuid, p.mig_enabled ? " on " : " off ",
                    absl::StrJoin(p.layout, ",", [](std::string* out, const MigInstance& i) {
                      absl::StrAppend(out, i.profile, "@", i.start);
                    }));
  }
  return text;
}

void DecisionDigest::Add(const PlacementDecision& decision) {
  AddBytes(DecisionText(decision));
  AddBytes("\n");
}

void DecisionDigest::AddBytes(absl::string_view bytes) {
  for (const char c : bytes) {
    value_ ^= static_cast<uint8_t>(c);
    value_ *= kPrime;
  }
}

std::string DecisionDigest::Hex() const { return absl::StrFormat("%016x", value_); }

}  // namespace gpufed
