#ifndef GPUFED_API_CLUSTER_SERVICE_H_
#define GPUFED_API_CLUSTER_SERVICE_H_

#include "api/context.h"
#include "gpufed/v1/cluster_service.grpc.pb.h"

namespace gpufed::api {

// gpufed.v1.ClusterService: clusters from the store, allocation and free capacity from the
// scheduler's latest pool snapshot. Any authenticated person may look at the pool; agents may not.
// Platform admins may cordon a cluster or a node, and declare clusters' attributes, price books and
// round-trip times (ApplyClusters), and issue and revoke clusters' certificates.
class ClusterServiceImpl final : public v1::ClusterService::CallbackService {
 public:
  explicit ClusterServiceImpl(ApiContext context) : ctx_(context) {}

  grpc::ServerUnaryReactor* ListClusters(grpc::CallbackServerContext* context,
                                         const v1::ListClustersRequest* request,
                                         v1::ListClustersResponse* response) override;
  grpc::ServerUnaryReactor* GetCluster(grpc::CallbackServerContext* context,
                                       const v1::GetClusterRequest* request,
                                       v1::Cluster* response) override;
  grpc::ServerUnaryReactor* Cordon(grpc::CallbackServerContext* context,
                                   const v1::CordonRequest* request,
                                   v1::Cluster* response) override;
  grpc::ServerUnaryReactor* Uncordon(grpc::CallbackServerContext* context,
                                     const v1::CordonRequest* request,
                                     v1::Cluster* response) override;
  grpc::ServerUnaryReactor* DeleteCluster(grpc::CallbackServerContext* context,
                                          const v1::DeleteClusterRequest* request,
                                          v1::DeleteClusterResponse* response) override;
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override;
  grpc::ServerUnaryReactor* ApplyClusters(grpc::CallbackServerContext* context,
                                          const v1::ApplyClustersRequest* request,
                                          v1::ApplyClustersResponse* response) override;
  grpc::ServerUnaryReactor* ListDeclarations(grpc::CallbackServerContext* context,
                                             const v1::ListDeclarationsRequest* request,
                                             v1::ListDeclarationsResponse* response) override;
  grpc::ServerUnaryReactor* EnrollCluster(grpc::CallbackServerContext* context,
                                          const v1::EnrollClusterRequest* request,
                                          v1::EnrollClusterResponse* response) override;
  grpc::ServerUnaryReactor* RevokeCluster(grpc::CallbackServerContext* context,
                                          const v1::RevokeClusterRequest* request,
                                          v1::RevokeClusterResponse* response) override;

 private:
  grpc::ServerUnaryReactor* SetCordon(grpc::CallbackServerContext* context,
                                      const v1::CordonRequest* request, v1::Cluster* response,
                                      bool cordoned);
  ApiContext ctx_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_CLUSTER_SERVICE_H_
