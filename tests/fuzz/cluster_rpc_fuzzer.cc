// gpufed.v1.ClusterService: every RPC's request as the handler (api/cluster_service.cc) and the
// use case before its store call (federation/control_plane.cc) convert and check it.

#include <cstddef>
#include <cstdint>

#include "federation/validation.h"
#include "gpufed/v1/cluster_service.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_checks.h"
#include "tests/fuzz/rpc_harness.h"

namespace gpufed::fuzz {
namespace {

// Cordon, Uncordon and Drain (ControlPlane::Cordon).
void CheckClusterAndNode(const std::string& cluster, const std::string& node) {
  if (!OkOrInvalid(ValidateName("name", cluster), "name")) return;
  if (!node.empty()) OkOrInvalid(ValidateLabel("node", node), "node");
}

const RpcTable& Table() {
  static const RpcTable* table = [] {
    std::vector<Rpc> rpcs;
    // Nothing in these requests is converted or checked: a flag, or nothing at all.
    rpcs.push_back(Unary<v1::ListClustersRequest>("ListClusters", [](const auto&) {}));
    rpcs.push_back(Unary<v1::ListDeclarationsRequest>("ListDeclarations", [](const auto&) {}));
    rpcs.push_back(Unary<v1::GetClusterRequest>("GetCluster", [](const v1::GetClusterRequest& r) {
      OkOrInvalid(ValidateName("name", r.name()), "name");
    }));
    rpcs.push_back(Unary<v1::CordonRequest>(
        "Cordon", [](const v1::CordonRequest& r) { CheckClusterAndNode(r.name(), r.node()); }));
    rpcs.push_back(Unary<v1::CordonRequest>(
        "Uncordon", [](const v1::CordonRequest& r) { CheckClusterAndNode(r.name(), r.node()); }));
    rpcs.push_back(Unary<v1::DrainRequest>(
        "Drain", [](const v1::DrainRequest& r) { CheckClusterAndNode(r.name(), r.node()); }));
    // ControlPlane::DeleteCluster: the name before its store call.
    rpcs.push_back(Unary<v1::DeleteClusterRequest>("DeleteCluster", [](const auto& r) {
      OkOrInvalid(ValidateName("name", r.name()), "name");
    }));
    rpcs.push_back(Unary<v1::ApplyClustersRequest>(
        "ApplyClusters", [](const v1::ApplyClustersRequest& r) { (void)CheckApplyClusters(r); }));
    // ControlPlane::EnrollCluster checks the name before the CA reads the CSR (auth/cluster_ca.h,
    // whose CSR parsing tests/unit/auth/cluster_ca_test.cc covers with real and forged CSRs).
    rpcs.push_back(
        Unary<v1::EnrollClusterRequest>("EnrollCluster", [](const v1::EnrollClusterRequest& r) {
          OkOrInvalid(ValidateName("cluster", r.cluster()), "cluster");
        }));
    rpcs.push_back(
        Unary<v1::RevokeClusterRequest>("RevokeCluster", [](const v1::RevokeClusterRequest& r) {
          OkOrInvalid(ValidateName("cluster", r.cluster()), "cluster");
        }));
    return new RpcTable("gpufed.v1.ClusterService", std::move(rpcs));
  }();
  return *table;
}

}  // namespace
}  // namespace gpufed::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  gpufed::fuzz::Table();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpufed::fuzz::Table().Run(data, size);
  return 0;
}
