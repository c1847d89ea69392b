#include "api/cluster_service.h"

#include "api/convert.h"
#include "api/workload_service.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed::api {
namespace {

absl::Status CheckPoolViewer(const auth::Principal& who) {
  if (!who.CanViewPool()) return absl::PermissionDeniedError("permission denied");
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* ClusterServiceImpl::ListClusters(grpc::CallbackServerContext* context,
                                                           const v1::ListClustersRequest* request,
                                                           v1::ListClustersResponse* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    RETURN_IF_ERROR(CheckPoolViewer(who));
    ASSIGN_OR_RETURN(std::vector<Cluster> clusters,
                     ctx_.clusters->ListClusters(request->include_nodes()));
    std::shared_ptr<const Pool> pool = ctx_.scheduler->Snapshot();
    for (const Cluster& c : clusters) {
      *response->add_clusters() =
          ClusterToProto(c, pool->FindCluster(c.info.name), request->include_nodes());
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetCluster(grpc::CallbackServerContext* context,
                                                         const v1::GetClusterRequest* request,
                                                         v1::Cluster* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    RETURN_IF_ERROR(CheckPoolViewer(who));
    RETURN_IF_ERROR(ValidateName("name", request->name()));
    ASSIGN_OR_RETURN(Cluster c, ctx_.clusters->GetCluster(request->name()));
    std::shared_ptr<const Pool> pool = ctx_.scheduler->Snapshot();
    *response = ClusterToProto(c, pool->FindCluster(c.info.name), /*include_nodes=*/true);
    return absl::OkStatus();
  });
}

}  // namespace gpufed::api
