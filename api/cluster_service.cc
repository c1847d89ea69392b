#include "api/cluster_service.h"

#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "api/workload_service.h"
#include "federation/status_macros.h"

namespace gpufed::api {
namespace {

// The workloads a listing lets its caller see named on GPUs.
auto Visible(const ClusterListing& listing) {
  return [&listing](WorkloadId id) { return listing.Visible(id); };
}

}  // namespace

grpc::ServerUnaryReactor* ClusterServiceImpl::ListClusters(grpc::CallbackServerContext* context,
                                                           const v1::ListClustersRequest* request,
                                                           v1::ListClustersResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(ClusterListing listing,
                                  ctx_.plane->ListClusters(who, request->include_nodes()));
                 for (const Cluster& c : listing.clusters) {
                   *response->add_clusters() =
                       ClusterToProto(c, listing.pool->FindCluster(c.info.name),
                                      request->include_nodes(), Visible(listing));
                 }
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::GetCluster(grpc::CallbackServerContext* context,
                                                         const v1::GetClusterRequest* request,
                                                         v1::Cluster* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(ClusterListing listing,
                                  ctx_.plane->GetCluster(who, request->name()));
                 const Cluster& c = listing.clusters.front();
                 *response = ClusterToProto(c, listing.pool->FindCluster(c.info.name),
                                            /*include_nodes=*/true, Visible(listing));
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::Cordon(grpc::CallbackServerContext* context,
                                                     const v1::CordonRequest* request,
                                                     v1::Cluster* response) {
  return SetCordon(context, request, response, true);
}

grpc::ServerUnaryReactor* ClusterServiceImpl::Uncordon(grpc::CallbackServerContext* context,
                                                       const v1::CordonRequest* request,
                                                       v1::Cluster* response) {
  return SetCordon(context, request, response, false);
}

grpc::ServerUnaryReactor* ClusterServiceImpl::SetCordon(grpc::CallbackServerContext* context,
                                                        const v1::CordonRequest* request,
                                                        v1::Cluster* response, bool cordoned) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [=, this](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(
                     ClusterListing listing,
                     ctx_.plane->Cordon(who, request->name(), request->node(), cordoned));
                 const Cluster& c = listing.clusters.front();
                 *response = ClusterToProto(c, listing.pool->FindCluster(c.info.name),
                                            /*include_nodes=*/true, Visible(listing));
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::DeleteCluster(
    grpc::CallbackServerContext* context, const v1::DeleteClusterRequest* request,
    v1::DeleteClusterResponse* /*response*/) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request](const auth::Principal& who) -> absl::Status {
                 return ctx_.plane->DeleteCluster(who, request->name());
               });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::Drain(grpc::CallbackServerContext* context,
                                                    const v1::DrainRequest* request,
                                                    v1::DrainResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [=, this](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(
                     DrainResult drained,
                     ctx_.plane->Drain(who, request->name(), request->node(), request->evict()));
                 const Cluster& c = drained.listing.clusters.front();
                 *response->mutable_cluster() =
                     ClusterToProto(c, drained.listing.pool->FindCluster(c.info.name),
                                    /*include_nodes=*/true, Visible(drained.listing));
                 for (WorkloadId id : drained.evicted)
                   response->add_evicted_workload_ids(absl::StrCat(id));
                 for (WorkloadId id : drained.staying)
                   response->add_staying_workload_ids(absl::StrCat(id));
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ApplyClusters(grpc::CallbackServerContext* context,
                                                            const v1::ApplyClustersRequest* request,
                                                            v1::ApplyClustersResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [=, this](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(std::vector<ClusterDeclaration> declarations,
                                  DeclarationsFromProto(*request));
                 ASSIGN_OR_RETURN(std::vector<DeclarationDiff> diffs,
                                  ctx_.plane->ApplyDeclarations(who, std::move(declarations),
                                                                request->dry_run()));
                 *response = DiffsToProto(diffs, request->dry_run());
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::ListDeclarations(
    grpc::CallbackServerContext* context, const v1::ListDeclarationsRequest* request,
    v1::ListDeclarationsResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [=, this](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(std::vector<ClusterDeclaration> declarations,
                                  ctx_.plane->ListDeclarations(who));
                 *response = DeclarationsToProto(declarations);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::EnrollCluster(grpc::CallbackServerContext* context,
                                                            const v1::EnrollClusterRequest* request,
                                                            v1::EnrollClusterResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(
                     IssuedClusterCertificate issued,
                     ctx_.plane->EnrollCluster(who, request->cluster(), request->csr_pem()));
                 response->set_cert_pem(issued.cert_pem);
                 response->set_key_pem(issued.key_pem);
                 response->set_ca_cert_pem(issued.ca_cert_pem);
                 response->set_serial(issued.certificate.serial);
                 *response->mutable_not_before() = ToProto(issued.certificate.not_before);
                 *response->mutable_not_after() = ToProto(issued.certificate.not_after);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* ClusterServiceImpl::RevokeCluster(grpc::CallbackServerContext* context,
                                                            const v1::RevokeClusterRequest* request,
                                                            v1::RevokeClusterResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(int revoked, ctx_.plane->RevokeCluster(who, request->cluster()));
                 response->set_revoked(revoked);
                 return absl::OkStatus();
               });
}

}  // namespace gpufed::api
