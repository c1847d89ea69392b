// Writes the seed inputs of the RPC fuzz targets (tests/fuzz/corpus/*_rpc/) from the project's
// own examples: every workload of examples/*.yaml as a Submit and a WhatIf, examples/clusters.yaml
// as an ApplyClusters, every topology of deploy/topologies/ as an agent's Register and inventory
// update, and one ordinary request for each other RPC. Each file is the selector byte (the
// method's index in its service) followed by the serialised request, as the targets read them.
//
// Usage: make_seeds SOURCE_DIR CORPUS_DIR   (tests/fuzz/make_corpus.sh runs it)

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/topology.h"
#include "cli/clusters_yaml.h"
#include "cli/workload_yaml.h"
#include "gpufed/v1/agent_service.pb.h"
#include "gpufed/v1/audit_service.pb.h"
#include "gpufed/v1/cluster_service.pb.h"
#include "gpufed/v1/quota_service.pb.h"
#include "gpufed/v1/report_service.pb.h"
#include "gpufed/v1/tenant_service.pb.h"
#include "gpufed/v1/workload_service.pb.h"

namespace fs = std::filesystem;

namespace gpufed::fuzz {
namespace {

[[noreturn]] void Fail(const std::string& what) {
  std::cerr << "make_seeds: " << what << "\n";
  std::exit(1);
}

const google::protobuf::ServiceDescriptor& Service(const std::string& name) {
  const google::protobuf::ServiceDescriptor* s =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
  if (s == nullptr) Fail("no service " + name);
  return *s;
}

template <typename T>
T OrDie(absl::StatusOr<T> v) {
  if (!v.ok()) Fail(v.status().ToString());
  return *std::move(v);
}

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  out << bytes;
  if (!out) Fail("cannot write " + (dir / name).string());
}

// A request to method `method` of `service`, as the RPC targets read it.
void WriteRpc(const fs::path& corpus, const std::string& target,
              const google::protobuf::ServiceDescriptor& service, const std::string& method,
              const google::protobuf::Message& request, const std::string& suffix = "") {
  const google::protobuf::MethodDescriptor* m = service.FindMethodByName(method);
  if (m == nullptr) Fail(service.full_name() + " has no method " + method);
  std::string bytes(1, static_cast<char>(m->index()));
  bytes += request.SerializeAsString();
  Write(corpus / target, absl::StrCat(method, suffix.empty() ? "" : "-", suffix), bytes);
}

std::vector<fs::path> Yamls(const fs::path& dir) {
  std::vector<fs::path> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void WorkloadSeeds(const fs::path& src, const fs::path& corpus) {
  const auto& service = Service("gpufed.v1.WorkloadService");
  for (const fs::path& file : Yamls(src / "examples")) {
    if (file.filename() == "clusters.yaml") continue;
    int n = 0;
    for (cli::WorkloadDocument& doc : OrDie(cli::LoadWorkloadFile(file.string()))) {
      v1::SubmitRequest r;
      *r.mutable_spec() = doc.spec;
      r.mutable_spec()->set_tenant("demo");
      if (r.spec().project().empty()) r.mutable_spec()->set_project("research");
      r.mutable_spec()->set_idempotency_key(absl::StrCat(file.stem().string(), "-", n));
      const std::string suffix = absl::StrCat(file.stem().string(), "-", n++);
      WriteRpc(corpus, "workload_rpc", service, "Submit", r, suffix);
      WriteRpc(corpus, "workload_rpc", service, "WhatIf", r, suffix);
    }
  }
  v1::GetWorkloadRequest get;
  get.set_id("42");
  WriteRpc(corpus, "workload_rpc", service, "Get", get);
  v1::ExplainRequest explain;
  explain.set_id("9223372036854775807");
  WriteRpc(corpus, "workload_rpc", service, "Explain", explain);
  v1::CancelRequest cancel;
  cancel.set_id("42");
  cancel.set_reason("superseded by run 43\n");
  WriteRpc(corpus, "workload_rpc", service, "Cancel", cancel);
  v1::ListWorkloadsRequest list;
  list.set_tenant("demo");
  list.set_project("research");
  list.add_states(v1::WORKLOAD_STATE_RUNNING);
  list.add_states(v1::WORKLOAD_STATE_PENDING);
  list.set_cluster("onprem-dgx");
  list.set_page_size(50);
  list.set_page_token("1000");
  WriteRpc(corpus, "workload_rpc", service, "List", list);
  v1::WatchRequest watch;
  watch.set_workload_id("42");
  watch.set_after_version(3);
  WriteRpc(corpus, "workload_rpc", service, "Watch", watch, "one");
  v1::WatchRequest resume;
  resume.mutable_resume_after()->set_seconds(1767225600);
  resume.mutable_resume_after()->set_nanos(500000000);
  WriteRpc(corpus, "workload_rpc", service, "Watch", resume, "resume");
}

void ClusterSeeds(const fs::path& src, const fs::path& corpus) {
  const auto& service = Service("gpufed.v1.ClusterService");
  v1::ApplyClustersRequest apply;
  for (const v1::ClusterDeclaration& d :
       OrDie(cli::LoadClustersFile((src / "examples/clusters.yaml").string())).declarations) {
    *apply.add_declarations() = d;
  }
  WriteRpc(corpus, "cluster_rpc", service, "ApplyClusters", apply);
  apply.set_dry_run(true);
  WriteRpc(corpus, "cluster_rpc", service, "ApplyClusters", apply, "dry-run");
  v1::ListClustersRequest list;
  list.set_include_nodes(true);
  WriteRpc(corpus, "cluster_rpc", service, "ListClusters", list);
  v1::GetClusterRequest get;
  get.set_name("onprem-dgx");
  WriteRpc(corpus, "cluster_rpc", service, "GetCluster", get);
  v1::CordonRequest cordon;
  cordon.set_name("onprem-dgx");
  cordon.set_node("dgx-03");
  WriteRpc(corpus, "cluster_rpc", service, "Cordon", cordon);
  WriteRpc(corpus, "cluster_rpc", service, "Uncordon", cordon);
  v1::DrainRequest drain;
  drain.set_name("cloud-a100");
  drain.set_evict(true);
  WriteRpc(corpus, "cluster_rpc", service, "Drain", drain);
  WriteRpc(corpus, "cluster_rpc", service, "ListDeclarations", v1::ListDeclarationsRequest());
  v1::EnrollClusterRequest enroll;
  enroll.set_cluster("onprem-dgx");
  WriteRpc(corpus, "cluster_rpc", service, "EnrollCluster", enroll);
  v1::RevokeClusterRequest revoke;
  revoke.set_cluster("onprem-dgx");
  WriteRpc(corpus, "cluster_rpc", service, "RevokeCluster", revoke);
}

void TenantSeeds(const fs::path& corpus) {
  const auto& service = Service("gpufed.v1.TenantService");
  v1::CreateTenantRequest tenant;
  tenant.set_name("acme");
  tenant.set_display_name("ACME Research");
  WriteRpc(corpus, "tenant_rpc", service, "CreateTenant", tenant);
  WriteRpc(corpus, "tenant_rpc", service, "ListTenants", v1::ListTenantsRequest());
  v1::CreateProjectRequest project;
  project.set_tenant("acme");
  project.set_name("vision");
  WriteRpc(corpus, "tenant_rpc", service, "CreateProject", project);
  v1::ListProjectsRequest projects;
  projects.set_tenant("acme");
  WriteRpc(corpus, "tenant_rpc", service, "ListProjects", projects);
  v1::DeleteProjectRequest delete_project;
  delete_project.set_tenant("acme");
  delete_project.set_name("vision");
  WriteRpc(corpus, "tenant_rpc", service, "DeleteProject", delete_project);
  v1::DeleteTenantRequest delete_tenant;
  delete_tenant.set_name("acme");
  WriteRpc(corpus, "tenant_rpc", service, "DeleteTenant", delete_tenant);
  v1::CreateTokenRequest user;
  user.set_subject("alice@acme");
  user.set_role(v1::ROLE_TENANT_ADMIN);
  user.set_tenant("acme");
  WriteRpc(corpus, "tenant_rpc", service, "CreateToken", user, "tenant-admin");
  v1::CreateTokenRequest agent;
  agent.set_subject("onprem-dgx");
  agent.set_role(v1::ROLE_AGENT);
  agent.set_cluster("onprem-dgx");
  WriteRpc(corpus, "tenant_rpc", service, "CreateToken", agent, "agent");
  v1::RevokeTokenRequest revoke;
  revoke.set_token_id(17);
  WriteRpc(corpus, "tenant_rpc", service, "RevokeToken", revoke);
  v1::SetRoleBindingRequest bind;
  bind.mutable_binding()->set_subject("bob@acme");
  bind.mutable_binding()->set_role(v1::ROLE_TENANT_USER);
  bind.mutable_binding()->set_tenant("acme");
  bind.mutable_binding()->set_project("vision");
  WriteRpc(corpus, "tenant_rpc", service, "SetRoleBinding", bind);
  v1::DeleteRoleBindingRequest unbind;
  unbind.set_subject("bob@acme");
  unbind.set_tenant("acme");
  WriteRpc(corpus, "tenant_rpc", service, "DeleteRoleBinding", unbind);
}

void AuditSeeds(const fs::path& corpus) {
  const auto& service = Service("gpufed.v1.AuditService");
  v1::ListAuditEventsRequest list;
  list.set_tenant("acme");
  list.set_actor("user:alice@acme");
  list.set_object("workload/17");
  list.mutable_since()->set_seconds(1764151200);
  list.set_page_size(50);
  list.set_page_token("120");
  WriteRpc(corpus, "audit_rpc", service, "ListAuditEvents", list);
  WriteRpc(corpus, "audit_rpc", service, "VerifyAudit", v1::VerifyAuditRequest());
}

void ReportSeeds(const fs::path& corpus) {
  const auto& service = Service("gpufed.v1.ReportService");
  v1::GetUsageReportRequest by_tenant;
  by_tenant.mutable_start_time()->set_seconds(1764547200);  // 2025-12-01T00:00:00Z
  by_tenant.mutable_end_time()->set_seconds(1767225600);    // 2026-01-01T00:00:00Z
  by_tenant.set_period(v1::REPORT_PERIOD_DAY);
  by_tenant.add_group_by(v1::REPORT_DIMENSION_TENANT);
  by_tenant.add_group_by(v1::REPORT_DIMENSION_GPU_MODEL);
  WriteRpc(corpus, "report_rpc", service, "GetUsageReport", by_tenant, "by-tenant");
  v1::GetUsageReportRequest one_project;
  one_project.mutable_start_time()->set_seconds(1764547200);
  one_project.mutable_end_time()->set_seconds(1765152000);
  one_project.set_period(v1::REPORT_PERIOD_WEEK);
  one_project.set_tenant("acme");
  one_project.set_project("vision");
  one_project.set_cluster("dgx-east");
  one_project.add_group_by(v1::REPORT_DIMENSION_MIG_PROFILE);
  one_project.add_group_by(v1::REPORT_DIMENSION_CAPACITY);
  WriteRpc(corpus, "report_rpc", service, "GetUsageReport", one_project, "one-project");
  v1::ListWorkloadTelemetryRequest telemetry;
  telemetry.set_workload_id("42");
  telemetry.mutable_start_time()->set_seconds(1767225600);
  telemetry.mutable_end_time()->set_seconds(1767229200);
  telemetry.set_page_size(500);
  WriteRpc(corpus, "report_rpc", service, "ListWorkloadTelemetry", telemetry, "one-hour");
  v1::GetCostAllocationRequest cost;
  cost.mutable_start_time()->set_seconds(1764547200);
  cost.mutable_end_time()->set_seconds(1767225600);
  cost.set_cluster("dgx-east");
  cost.set_idle_policy(v1::IDLE_POLICY_SPREAD);
  WriteRpc(corpus, "report_rpc", service, "GetCostAllocation", cost, "month-spread");
}

void QuotaSeeds(const fs::path& corpus) {
  const auto& service = Service("gpufed.v1.QuotaService");
  v1::SetQuotaRequest set;
  set.mutable_quota()->set_tenant("acme");
  set.mutable_quota()->set_resource("H100-80GB");
  set.mutable_quota()->set_guaranteed_milli(32000);
  set.mutable_quota()->set_limit_milli(48000);
  WriteRpc(corpus, "quota_rpc", service, "SetQuota", set, "model");
  v1::SetQuotaRequest mig;
  mig.mutable_quota()->set_tenant("acme");
  mig.mutable_quota()->set_project("vision");
  mig.mutable_quota()->set_resource("3g.40gb");
  mig.mutable_quota()->set_guaranteed_milli(4000);
  mig.set_overcommit(true);
  WriteRpc(corpus, "quota_rpc", service, "SetQuota", mig, "mig");
  v1::DeleteQuotaRequest del;
  del.set_tenant("acme");
  del.set_project("vision");
  del.set_resource("gpu");
  WriteRpc(corpus, "quota_rpc", service, "DeleteQuota", del);
  v1::ListQuotasRequest list;
  list.set_tenant("acme");
  WriteRpc(corpus, "quota_rpc", service, "ListQuotas", list);
  v1::GetQuotaUsageRequest usage;
  usage.set_tenant("acme");
  WriteRpc(corpus, "quota_rpc", service, "GetQuotaUsage", usage);
  v1::ListPreemptionsRequest preemptions;
  preemptions.set_tenant("acme");
  preemptions.set_page_size(20);
  preemptions.set_page_token("120");
  WriteRpc(corpus, "quota_rpc", service, "ListPreemptions", preemptions);
  v1::SetShareWeightRequest weight;
  weight.mutable_weight()->set_tenant("acme");
  weight.mutable_weight()->set_project("vision");
  weight.mutable_weight()->set_weight(2);
  WriteRpc(corpus, "quota_rpc", service, "SetShareWeight", weight);
}

// The agent target reads one AgentMessage, without a selector byte.
void AgentSeeds(const fs::path& src, const fs::path& corpus) {
  for (const fs::path& file : Yamls(src / "deploy/topologies")) {
    agent::ClusterTopology t = OrDie(agent::LoadClusterTopology(file.string()));
    v1::AgentMessage reg;
    reg.set_seq(1);
    v1::Register* r = reg.mutable_register_();
    r->set_cluster(t.cluster);
    *r->mutable_info() = t.info;
    *r->mutable_inventory() = t.inventory;
    r->set_agent_version("0.1.0");
    v1::WorkloadStatus* known = r->add_known_workloads();
    known->set_workload_id("42");
    known->set_state(v1::WORKLOAD_STATE_RUNNING);
    known->set_attempt(1);
    Write(corpus / "agent_rpc", "register-" + file.stem().string(), reg.SerializeAsString());
    v1::AgentMessage inventory;
    inventory.set_seq(7);
    inventory.set_epoch(1);
    *inventory.mutable_inventory()->mutable_inventory() = t.inventory;
    Write(corpus / "agent_rpc", "inventory-" + file.stem().string(), inventory.SerializeAsString());
  }
  v1::AgentMessage heartbeat;
  heartbeat.set_seq(2);
  heartbeat.set_epoch(1);
  heartbeat.mutable_heartbeat()->set_running(3);
  Write(corpus / "agent_rpc", "heartbeat", heartbeat.SerializeAsString());
  v1::AgentMessage status;
  status.set_seq(3);
  status.set_epoch(1);
  v1::WorkloadStatus* done = status.mutable_status()->add_updates();
  done->set_workload_id("42");
  done->set_state(v1::WORKLOAD_STATE_FAILED);
  done->set_exit_code(137);
  done->set_message("OOM-killed");
  done->mutable_time()->set_seconds(1767225600);
  done->set_epoch(1);
  done->set_attempt(2);
  v1::WorkloadStatus* running = status.mutable_status()->add_updates();
  running->set_workload_id("43");
  running->set_state(v1::WORKLOAD_STATE_RUNNING);
  Write(corpus / "agent_rpc", "status", status.SerializeAsString());
  v1::AgentMessage telemetry;
  telemetry.set_seq(4);
  telemetry.set_epoch(1);
  v1::GpuMinute* whole = telemetry.mutable_telemetry()->add_minutes();
  whole->set_gpu_uuid("GPU-dgx-0-0");
  whole->mutable_minute()->set_seconds(1767225600);
  whole->set_covered_seconds(60);
  whole->set_workload_id("42");
  whole->set_attempt(2);
  whole->set_sm_active(0.81);
  whole->set_gr_engine_active(0.95);
  whole->set_pipe_tensor_active(0.52);
  whole->set_gpu_util(99);
  whole->set_fb_used_mib(69000);
  whole->set_power_watts(610);
  whole->set_gpu_temp_celsius(71);
  v1::GpuMinute* slice = telemetry.mutable_telemetry()->add_minutes();
  slice->set_gpu_uuid("GPU-dgx-0-1");
  slice->set_mig_profile("1g.10gb");
  slice->set_mig_start(3);
  slice->mutable_minute()->set_seconds(1767225600);
  slice->set_covered_seconds(50);
  slice->set_workload_id("43");
  slice->set_attempt(1);
  slice->set_sm_active(1.12);
  slice->set_gr_engine_active(0.14);
  Write(corpus / "agent_rpc", "telemetry", telemetry.SerializeAsString());
}

}  // namespace
}  // namespace gpufed::fuzz

int main(int argc, char** argv) {
  if (argc != 3) gpufed::fuzz::Fail("usage: make_seeds SOURCE_DIR CORPUS_DIR");
  const fs::path src = argv[1];
  const fs::path corpus = argv[2];
  gpufed::fuzz::WorkloadSeeds(src, corpus);
  gpufed::fuzz::ClusterSeeds(src, corpus);
  gpufed::fuzz::TenantSeeds(corpus);
  gpufed::fuzz::QuotaSeeds(corpus);
  gpufed::fuzz::AuditSeeds(corpus);
  gpufed::fuzz::ReportSeeds(corpus);
  gpufed::fuzz::AgentSeeds(src, corpus);
  return 0;
}
