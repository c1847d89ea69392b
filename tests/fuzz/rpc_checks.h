#ifndef GPUFED_TESTS_FUZZ_RPC_CHECKS_H_
#define GPUFED_TESTS_FUZZ_RPC_CHECKS_H_

// What the server does with a request before its domain call touches a store, for the requests
// more than one fuzz target produces: the RPC targets decode them from bytes, the file targets
// from what gpufedctl and the agent read (a workload YAML becomes a Submit, a clusters file an
// ApplyClusters, a topology a Register). Each step is the server's own function; where a check
// sits in a use case behind authorisation (federation/control_plane.cc and friends), the same
// validation functions are called in the same order. Any refusal must be INVALID_ARGUMENT
// (fuzz_check.h); what is accepted must convert back to the same value.

#include "absl/status/status.h"
#include "gpufed/v1/agent_service.pb.h"
#include "gpufed/v1/cluster_service.pb.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::fuzz {

// Submit and WhatIf: SpecFromProto, then ControlPlane::Submit's checks (the caller's tenant
// "fuzz" when the spec names none; ValidateName, ValidateSpec). An accepted spec converts to a
// proto and back to itself, and to the Workload the response carries.
void CheckSpec(const v1::WorkloadSpec& proto);

// ApplyClusters: DeclarationsFromProto, then ControlPlane::ApplyDeclarations' checks (count,
// ValidateDeclaration, a cluster declared twice). Accepted declarations convert back to
// themselves. Returns the refusal, for callers that map it to a file (clusters_yaml.h).
absl::Status CheckApplyClusters(const v1::ApplyClustersRequest& request);

// An agent's Register: ClusterInfoFromProto, NodesFromProto, AgentReportFromProto for each known
// workload, then ControlPlane::RegisterAgent's checks and the stores' (ValidateName,
// ValidateStorableInventory). Returns the refusal.
absl::Status CheckRegister(const v1::Register& r);

}  // namespace gpufed::fuzz

#endif  // GPUFED_TESTS_FUZZ_RPC_CHECKS_H_
