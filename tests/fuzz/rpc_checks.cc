#include "tests/fuzz/rpc_checks.h"

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "federation/status_macros.h"
#include "federation/validation.h"
#include "tests/fuzz/fuzz_check.h"

namespace gpufed::fuzz {

void CheckSpec(const v1::WorkloadSpec& proto) {
  absl::StatusOr<WorkloadSpec> spec = api::SpecFromProto(proto);
  if (!OkOrInvalid(spec.status(), "SpecFromProto")) return;
  if (spec->tenant.empty()) spec->tenant = "fuzz";  // the caller's own tenant
  if (!OkOrInvalid(ValidateName("spec.tenant", spec->tenant), "spec.tenant")) return;
  if (!OkOrInvalid(ValidateSpec(*spec), "ValidateSpec")) return;
  // An accepted spec is stored and sent back: it must survive the trip unchanged.
  const v1::WorkloadSpec back = api::SpecToProto(*spec);
  absl::StatusOr<WorkloadSpec> again = api::SpecFromProto(back);
  Check(again.ok(), absl::StrCat("SpecFromProto(SpecToProto(spec)) refused: ",
                                 again.status().ToString(), "\n", back.DebugString()));
  Check(*again == *spec,
        absl::StrCat("SpecFromProto(SpecToProto(spec)) != spec:\n", back.DebugString()));
  Workload w;
  w.id = 1;
  w.spec = *std::move(spec);
  (void)api::WorkloadToProto(w);
}

absl::Status CheckApplyClusters(const v1::ApplyClustersRequest& request) {
  absl::StatusOr<std::vector<ClusterDeclaration>> declarations =
      api::DeclarationsFromProto(request);
  if (!OkOrInvalid(declarations.status(), "DeclarationsFromProto")) return declarations.status();
  if (declarations->size() > kMaxDeclarationsPerApply) {
    return absl::InvalidArgumentError("declarations: too many");
  }
  std::set<std::string> named;
  for (size_t i = 0; i < declarations->size(); ++i) {
    const ClusterDeclaration& d = (*declarations)[i];
    const std::string field = absl::StrCat("declarations[", i, "]");
    absl::Status valid = ValidateDeclaration(field, d);
    if (!OkOrInvalid(valid, "ValidateDeclaration")) return valid;
    if (!named.insert(d.cluster).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".cluster: declared twice"));
    }
    // Stored, then listed (ListDeclarations) and diffed in the proto form.
    const v1::ClusterDeclaration back = api::DeclarationToProto(d);
    absl::StatusOr<ClusterDeclaration> again = api::DeclarationFromProto(field, back);
    Check(again.ok(), absl::StrCat("DeclarationFromProto(DeclarationToProto(d)) refused: ",
                                   again.status().ToString(), "\n", back.DebugString()));
    Check(*again == d,
          absl::StrCat("DeclarationFromProto(DeclarationToProto(d)) != d:\n", back.DebugString()));
  }
  return absl::OkStatus();
}

absl::Status CheckRegister(const v1::Register& r) {
  absl::StatusOr<ClusterInfo> info = api::ClusterInfoFromProto(r.cluster(), r.info());
  if (!OkOrInvalid(info.status(), "ClusterInfoFromProto")) return info.status();
  const std::vector<NodeInfo> nodes = api::NodesFromProto(r.inventory());
  for (const v1::WorkloadStatus& s : r.known_workloads()) {
    absl::StatusOr<AgentReport> report = api::AgentReportFromProto(s);
    if (!OkOrInvalid(report.status(), "AgentReportFromProto")) return report.status();
  }
  absl::Status valid = ValidateName("register.cluster", info->name);
  if (!OkOrInvalid(valid, "register.cluster")) return valid;
  valid = ValidateStorableInventory(*info, nodes);
  OkOrInvalid(valid, "ValidateStorableInventory");
  return valid;
}

}  // namespace gpufed::fuzz
