#include "api/convert.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "federation/status_macros.h"
#include "federation/validation.h"
#include "google/protobuf/util/time_util.h"

namespace gpufed::api {
namespace {

using ::google::protobuf::util::TimeUtil;

// A value added to one of these proto enums needs a domain value and a case in the conversions
// below; these fail the build until it has them.
static_assert(v1::WorkloadState_MAX == v1::WORKLOAD_STATE_LOST);
static_assert(v1::WorkloadClass_MAX == v1::WORKLOAD_CLASS_INTERACTIVE);
static_assert(v1::TopologyRequirement_MAX == v1::TOPOLOGY_REQUIREMENT_SAME_RACK);
static_assert(v1::SimOutcome_MAX == v1::SIM_OUTCOME_FAIL);
static_assert(v1::ClusterState_MAX == v1::CLUSTER_STATE_DRAINING);
static_assert(v1::Role_MAX == v1::ROLE_AGENT);
static_assert(v1::RetryOn_MAX == v1::RETRY_ON_NODE_FAILURE);
static_assert(v1::CapacityType_MAX == v1::CAPACITY_TYPE_COMMITTED && kCapacityTypes == 3);
static_assert(v1::Objective_MAX == v1::OBJECTIVE_BALANCED);
static_assert(v1::DeclarationChange_MAX == v1::DECLARATION_CHANGE_CHANGED);

absl::Status BadEnum(absl::string_view field, int value) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": unknown value ", value));
}

std::vector<MigInstance> MigLayoutFromProto(
    const google::protobuf::RepeatedPtrField<v1::MigInstance>& layout) {
  std::vector<MigInstance> out;
  out.reserve(layout.size());
  for (const v1::MigInstance& m : layout) {
    // Starts are at most 7; anything beyond int range is as invalid as 8 and must stay invalid.
    out.push_back(
        MigInstance{m.profile(), static_cast<int>(std::min<uint32_t>(m.start(), 1u << 30))});
  }
  return out;
}

void MigLayoutToProto(const std::vector<MigInstance>& layout,
                      google::protobuf::RepeatedPtrField<v1::MigInstance>* out) {
  for (const MigInstance& m : layout) {
    v1::MigInstance* p = out->Add();
    p->set_profile(m.profile);
    p->set_start(static_cast<uint32_t>(std::max(m.start, 0)));
  }
}

// Every workload on a GPU the caller may see, in holding order: whole-GPU or shared holders,
// then the owners of its MIG instances. "" when idle or held only by others.
std::string Holders(const GpuSlot& slot, absl::FunctionRef<bool(WorkloadId)> visible) {
  std::vector<WorkloadId> ids;
  const auto add = [&](WorkloadId id) {
    if (id != 0 && visible(id) && std::find(ids.begin(), ids.end(), id) == ids.end()) {
      ids.push_back(id);
    }
  };
  for (const GpuHold& h : slot.holders) add(h.id);
  for (WorkloadId id : slot.mig_owners) add(id);
  return absl::StrJoin(ids, ",");
}

}  // namespace

google::protobuf::Timestamp ToProto(Timestamp t) {
  google::protobuf::Timestamp out;
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  out.set_seconds(ns / 1000000000);
  out.set_nanos(static_cast<int32_t>(ns % 1000000000));
  if (out.nanos() < 0) {
    out.set_seconds(out.seconds() - 1);
    out.set_nanos(out.nanos() + 1000000000);
  }
  return out;
}

Timestamp FromProto(const google::protobuf::Timestamp& t) {
  return Timestamp(std::chrono::duration_cast<Timestamp::duration>(
      std::chrono::seconds(t.seconds()) + std::chrono::nanoseconds(t.nanos())));
}

absl::StatusOr<Timestamp> CheckedFromProto(absl::string_view field,
                                           const google::protobuf::Timestamp& t) {
  // A Timestamp counts nanoseconds in an int64: about 1677-09-21 to 2262-04-11. The whole
  // seconds strictly inside that range, so that adding the nanos cannot overflow either.
  constexpr int64_t kMaxSeconds =
      std::chrono::duration_cast<std::chrono::seconds>(Timestamp::duration::max()).count();
  constexpr int64_t kMinSeconds =
      std::chrono::duration_cast<std::chrono::seconds>(Timestamp::duration::min()).count();
  if (t.seconds() <= kMinSeconds || t.seconds() >= kMaxSeconds || t.nanos() < 0 ||
      t.nanos() > 999999999) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not a valid timestamp (years 1678 to 2262)"));
  }
  return FromProto(t);
}

namespace {

// A request's required [start_time, end_time), each checked (CheckedFromProto).
template <typename Request>
absl::Status WindowFromProto(const Request& request, Timestamp* from, Timestamp* to) {
  if (!request.has_start_time()) return absl::InvalidArgumentError("start_time: required");
  if (!request.has_end_time()) return absl::InvalidArgumentError("end_time: required");
  ASSIGN_OR_RETURN(*from, CheckedFromProto("start_time", request.start_time()));
  ASSIGN_OR_RETURN(*to, CheckedFromProto("end_time", request.end_time()));
  return absl::OkStatus();
}

// The defaults are the proto's: max_attempts 0 is 1, or 3 when `on` names events; `on` empty
// with more than one attempt retries on every event. The range is the domain's to check.
absl::StatusOr<RetryPolicy> RetryPolicyFromProto(const v1::RetryPolicy& p) {
  RetryPolicy r;
  for (int i = 0; i < p.on_size(); ++i) {
    const std::string field = absl::StrCat("spec.retry.on[", i, "]");
    bool* flag = nullptr;
    switch (p.on(i)) {
      case v1::RETRY_ON_CLUSTER_LOST:
        flag = &r.on_cluster_lost;
        break;
      case v1::RETRY_ON_PREEMPTION:
        flag = &r.on_preemption;
        break;
      case v1::RETRY_ON_NODE_FAILURE:
        flag = &r.on_node_failure;
        break;
      default:
        return BadEnum(field, p.on(i));
    }
    if (*flag) return absl::InvalidArgumentError(absl::StrCat(field, ": given twice"));
    *flag = true;
  }
  r.max_attempts = p.max_attempts() != 0 ? p.max_attempts() : (p.on().empty() ? 1 : 3);
  if (p.on().empty() && r.max_attempts > 1) {
    r.on_cluster_lost = r.on_preemption = r.on_node_failure = true;
  }
  return r;
}

v1::RetryOn RetryOnToProto(AttemptEnd why) {
  switch (why) {
    case AttemptEnd::kClusterLost:
      return v1::RETRY_ON_CLUSTER_LOST;
    case AttemptEnd::kPreempted:
      return v1::RETRY_ON_PREEMPTION;
    case AttemptEnd::kNodeFailure:
      return v1::RETRY_ON_NODE_FAILURE;
  }
  return v1::RETRY_ON_UNSPECIFIED;
}

// A spec's duration field in milliseconds: 0..1 year, normalised.
absl::StatusOr<int64_t> SpecDurationMs(absl::string_view field,
                                       const google::protobuf::Duration& d) {
  // duration.proto makes nanos of a non-negative Duration 0..999999999; 10^9 nanos is not
  // another spelling of one second but an invalid Duration, which other runtimes reject.
  if (d.nanos() < 0 || d.nanos() >= 1000000000) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".nanos: must be 0..999999999, got ", d.nanos()));
  }
  if (d.seconds() < 0)
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not be negative"));
  if (d.seconds() > kMaxEstimatedDurationSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must be at most one year"));
  }
  return d.seconds() * 1000 + d.nanos() / 1000000;
}

}  // namespace

absl::StatusOr<WorkloadSpec> SpecFromProto(const v1::WorkloadSpec& p) {
  WorkloadSpec s;
  s.tenant = p.tenant();
  s.project = p.project();
  s.name = p.name();
  s.idempotency_key = p.idempotency_key();
  switch (p.workload_class()) {
    case v1::WORKLOAD_CLASS_UNSPECIFIED:
      s.workload_class = WorkloadClass::kBatch;
      break;
    case v1::WORKLOAD_CLASS_TRAINING:
      s.workload_class = WorkloadClass::kTraining;
      break;
    case v1::WORKLOAD_CLASS_INFERENCE:
      s.workload_class = WorkloadClass::kInference;
      break;
    case v1::WORKLOAD_CLASS_BATCH:
      s.workload_class = WorkloadClass::kBatch;
      break;
    case v1::WORKLOAD_CLASS_INTERACTIVE:
      s.workload_class = WorkloadClass::kInteractive;
      break;
    default:
      return BadEnum("spec.workload_class", p.workload_class());
  }
  s.priority = p.priority();
  s.replicas = p.replicas() == 0 ? 1 : p.replicas();
  switch (p.per_replica().kind_case()) {
    case v1::ReplicaResources::kGpus:
      s.gpus_per_replica = p.per_replica().gpus();
      break;
    case v1::ReplicaResources::kMigProfile:
      // A MIG instance lives on one GPU.
      s.gpus_per_replica = 1;
      s.mig_profile = p.per_replica().mig_profile();
      if (s.mig_profile.empty()) {
        return absl::InvalidArgumentError("spec.per_replica.mig_profile: must not be empty");
      }
      break;
    case v1::ReplicaResources::kGpuMilli:
      s.gpus_per_replica = 1;
      s.gpu_milli = p.per_replica().gpu_milli();
      if (s.gpu_milli == 0) {
        return absl::InvalidArgumentError("spec.per_replica.gpu_milli: must be 1..999, got 0");
      }
      break;
    case v1::ReplicaResources::KIND_NOT_SET:
      return absl::InvalidArgumentError(
          "spec.per_replica: must say what each replica needs (gpus, mig_profile or gpu_milli)");
  }
  s.cpu_millis = p.per_replica().cpu_millis();
  s.memory_mib = p.per_replica().memory_mib();
  s.gpu_models.assign(p.gpu_models().begin(), p.gpu_models().end());
  s.min_gpu_memory_mib = p.min_gpu_memory_mib();
  switch (p.topology()) {
    case v1::TOPOLOGY_REQUIREMENT_UNSPECIFIED:
    case v1::TOPOLOGY_REQUIREMENT_NONE:
      s.topology = Topology::kNone;
      break;
    case v1::TOPOLOGY_REQUIREMENT_SAME_NODE:
      s.topology = Topology::kSameNode;
      break;
    case v1::TOPOLOGY_REQUIREMENT_SAME_NVLINK_DOMAIN:
      s.topology = Topology::kSameNvlinkDomain;
      break;
    case v1::TOPOLOGY_REQUIREMENT_SAME_RACK:
      s.topology = Topology::kSameRack;
      break;
    default:
      return BadEnum("spec.topology", p.topology());
  }
  ASSIGN_OR_RETURN(s.estimated_duration_ms,
                   SpecDurationMs("spec.estimated_duration", p.estimated_duration()));
  ASSIGN_OR_RETURN(s.checkpoint_interval_ms,
                   SpecDurationMs("spec.checkpoint_interval", p.checkpoint_interval()));
  s.run.image = p.run().image();
  s.run.command.assign(p.run().command().begin(), p.run().command().end());
  s.run.env.insert(p.run().env().begin(), p.run().env().end());
  switch (p.run().sim_outcome()) {
    case v1::SIM_OUTCOME_UNSPECIFIED:
    case v1::SIM_OUTCOME_SUCCEED:
      s.run.sim_outcome = SimOutcome::kSucceed;
      break;
    case v1::SIM_OUTCOME_FAIL:
      s.run.sim_outcome = SimOutcome::kFail;
      break;
    default:
      return BadEnum("spec.run.sim_outcome", p.run().sim_outcome());
  }
  s.run.sim_exit_code = p.run().sim_exit_code();
  ASSIGN_OR_RETURN(s.retry, RetryPolicyFromProto(p.retry()));
  ASSIGN_OR_RETURN(s.placement, PlacementFromProto("spec.placement", p.placement()));
  return s;
}

v1::WorkloadSpec SpecToProto(const WorkloadSpec& s) {
  v1::WorkloadSpec p;
  p.set_tenant(s.tenant);
  p.set_project(s.project);
  p.set_name(s.name);
  p.set_idempotency_key(s.idempotency_key);
  switch (s.workload_class) {
    case WorkloadClass::kUnspecified:
      p.set_workload_class(v1::WORKLOAD_CLASS_UNSPECIFIED);
      break;
    case WorkloadClass::kTraining:
      p.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
      break;
    case WorkloadClass::kInference:
      p.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
      break;
    case WorkloadClass::kBatch:
      p.set_workload_class(v1::WORKLOAD_CLASS_BATCH);
      break;
    case WorkloadClass::kInteractive:
      p.set_workload_class(v1::WORKLOAD_CLASS_INTERACTIVE);
      break;
  }
  p.set_priority(s.priority);
  p.set_replicas(s.replicas);
  auto* per_replica = p.mutable_per_replica();
  if (!s.mig_profile.empty()) {
    per_replica->set_mig_profile(s.mig_profile);
  } else if (s.gpu_milli > 0) {
    per_replica->set_gpu_milli(s.gpu_milli);
  } else {
    per_replica->set_gpus(s.gpus_per_replica);
  }
  per_replica->set_cpu_millis(s.cpu_millis);
  per_replica->set_memory_mib(s.memory_mib);
  for (const auto& m : s.gpu_models) p.add_gpu_models(m);
  p.set_min_gpu_memory_mib(s.min_gpu_memory_mib);
  switch (s.topology) {
    case Topology::kNone:
      p.set_topology(v1::TOPOLOGY_REQUIREMENT_NONE);
      break;
    case Topology::kSameNode:
      p.set_topology(v1::TOPOLOGY_REQUIREMENT_SAME_NODE);
      break;
    case Topology::kSameNvlinkDomain:
      p.set_topology(v1::TOPOLOGY_REQUIREMENT_SAME_NVLINK_DOMAIN);
      break;
    case Topology::kSameRack:
      p.set_topology(v1::TOPOLOGY_REQUIREMENT_SAME_RACK);
      break;
  }
  *p.mutable_estimated_duration() = TimeUtil::MillisecondsToDuration(s.estimated_duration_ms);
  if (s.checkpoint_interval_ms > 0) {
    *p.mutable_checkpoint_interval() = TimeUtil::MillisecondsToDuration(s.checkpoint_interval_ms);
  }
  auto* run = p.mutable_run();
  run->set_image(s.run.image);
  for (const auto& c : s.run.command) run->add_command(c);
  for (const auto& [k, v] : s.run.env) (*run->mutable_env())[k] = v;
  run->set_sim_outcome(s.run.sim_outcome == SimOutcome::kFail ? v1::SIM_OUTCOME_FAIL
                                                              : v1::SIM_OUTCOME_SUCCEED);
  run->set_sim_exit_code(s.run.sim_exit_code);
  if (s.retry != RetryPolicy{}) {
    v1::RetryPolicy* retry = p.mutable_retry();
    retry->set_max_attempts(s.retry.max_attempts);
    if (s.retry.on_cluster_lost) retry->add_on(v1::RETRY_ON_CLUSTER_LOST);
    if (s.retry.on_preemption) retry->add_on(v1::RETRY_ON_PREEMPTION);
    if (s.retry.on_node_failure) retry->add_on(v1::RETRY_ON_NODE_FAILURE);
  }
  if (!s.placement.empty()) *p.mutable_placement() = PlacementToProto(s.placement);
  return p;
}

v1::Assignment AssignmentToProto(const Assignment& a) {
  v1::Assignment p;
  p.set_cluster(a.cluster);
  p.set_epoch(a.epoch);
  for (const ReplicaAssignment& r : a.replicas) {
    auto* pr = p.add_replicas();
    pr->set_node(r.node);
    for (const auto& u : r.gpu_uuids) pr->add_gpu_uuids(u);
    for (uint32_t i : r.gpu_indices) pr->add_gpu_indices(i);
    pr->set_gpu_milli(r.gpu_milli);
    if (!r.mig_profile.empty()) {
      pr->set_mig_profile(r.mig_profile);
      pr->set_mig_start(static_cast<uint32_t>(std::max(r.mig_start, 0)));
    }
  }
  for (const Repartition& r : a.repartitions) {
    auto* pr = p.add_repartitions();
    pr->set_node(r.node);
    pr->set_gpu_uuid(r.gpu_uuid);
    pr->set_mig_enabled(r.mig_enabled);
    MigLayoutToProto(r.layout, pr->mutable_layout());
    pr->set_reason(r.reason);
  }
  return p;
}

Assignment AssignmentFromProto(const v1::Assignment& p) {
  Assignment a;
  a.cluster = p.cluster();
  a.epoch = p.epoch();
  for (const auto& pr : p.replicas()) {
    ReplicaAssignment r;
    r.node = pr.node();
    r.gpu_uuids.assign(pr.gpu_uuids().begin(), pr.gpu_uuids().end());
    r.gpu_indices.assign(pr.gpu_indices().begin(), pr.gpu_indices().end());
    r.gpu_milli = pr.gpu_milli();
    r.mig_profile = pr.mig_profile();
    r.mig_start = r.mig_profile.empty()
                      ? -1
                      : static_cast<int32_t>(std::min<uint32_t>(pr.mig_start(), 1u << 30));
    a.replicas.push_back(std::move(r));
  }
  for (const auto& pr : p.repartitions()) {
    Repartition r;
    r.node = pr.node();
    r.gpu_uuid = pr.gpu_uuid();
    r.mig_enabled = pr.mig_enabled();
    r.layout = MigLayoutFromProto(pr.layout());
    r.reason = pr.reason();
    a.repartitions.push_back(std::move(r));
  }
  return a;
}

absl::StatusOr<WorkloadId> WorkloadIdFromProto(absl::string_view field, absl::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  // Only the canonical spelling the server hands out: SimpleAtoi would also take "+1", " 1" and
  // "1\n", so one workload would have many ids.
  const bool canonical = text.size() <= 19 && text.front() != '0' &&
                         std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
  WorkloadId id = 0;
  if (!canonical || !absl::SimpleAtoi(text, &id) || id <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ": not a workload id (expected 1..9223372036854775807 in decimal "
                     "digits, got \"",
                     absl::CHexEscape(text.substr(0, 40)), "\")"));
  }
  return id;
}

v1::WorkloadState StateToProto(WorkloadState s) {
  switch (s) {
    case WorkloadState::kUnspecified:
      return v1::WORKLOAD_STATE_UNSPECIFIED;
    case WorkloadState::kPending:
      return v1::WORKLOAD_STATE_PENDING;
    case WorkloadState::kAdmitted:
      return v1::WORKLOAD_STATE_ADMITTED;
    case WorkloadState::kPlaced:
      return v1::WORKLOAD_STATE_PLACED;
    case WorkloadState::kRunning:
      return v1::WORKLOAD_STATE_RUNNING;
    case WorkloadState::kSucceeded:
      return v1::WORKLOAD_STATE_SUCCEEDED;
    case WorkloadState::kFailed:
      return v1::WORKLOAD_STATE_FAILED;
    case WorkloadState::kCancelled:
      return v1::WORKLOAD_STATE_CANCELLED;
    case WorkloadState::kPreempted:
      return v1::WORKLOAD_STATE_PREEMPTED;
    case WorkloadState::kLost:
      return v1::WORKLOAD_STATE_LOST;
  }
  return v1::WORKLOAD_STATE_UNSPECIFIED;
}

absl::StatusOr<WorkloadState> StateFromProto(v1::WorkloadState s, absl::string_view field) {
  switch (s) {
    case v1::WORKLOAD_STATE_PENDING:
      return WorkloadState::kPending;
    case v1::WORKLOAD_STATE_ADMITTED:
      return WorkloadState::kAdmitted;
    case v1::WORKLOAD_STATE_PLACED:
      return WorkloadState::kPlaced;
    case v1::WORKLOAD_STATE_RUNNING:
      return WorkloadState::kRunning;
    case v1::WORKLOAD_STATE_SUCCEEDED:
      return WorkloadState::kSucceeded;
    case v1::WORKLOAD_STATE_FAILED:
      return WorkloadState::kFailed;
    case v1::WORKLOAD_STATE_CANCELLED:
      return WorkloadState::kCancelled;
    case v1::WORKLOAD_STATE_PREEMPTED:
      return WorkloadState::kPreempted;
    case v1::WORKLOAD_STATE_LOST:
      return WorkloadState::kLost;
    default:  // UNSPECIFIED, and numbers this server does not know
      return BadEnum(field, s);
  }
}

absl::StatusOr<auth::Role> RoleFromProto(v1::Role role, absl::string_view field) {
  switch (role) {
    case v1::ROLE_PLATFORM_ADMIN:
      return auth::Role::kPlatformAdmin;
    case v1::ROLE_TENANT_ADMIN:
      return auth::Role::kTenantAdmin;
    case v1::ROLE_TENANT_USER:
      return auth::Role::kTenantUser;
    case v1::ROLE_VIEWER:
      return auth::Role::kViewer;
    case v1::ROLE_AGENT:
      return auth::Role::kAgent;
    default:  // UNSPECIFIED, and numbers this server does not know
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be set (got ", static_cast<int>(role), ")"));
  }
}

v1::Role RoleToProto(auth::Role role) {
  switch (role) {
    case auth::Role::kPlatformAdmin:
      return v1::ROLE_PLATFORM_ADMIN;
    case auth::Role::kTenantAdmin:
      return v1::ROLE_TENANT_ADMIN;
    case auth::Role::kTenantUser:
      return v1::ROLE_TENANT_USER;
    case auth::Role::kViewer:
      return v1::ROLE_VIEWER;
    case auth::Role::kAgent:
      return v1::ROLE_AGENT;
  }
  return v1::ROLE_UNSPECIFIED;
}

absl::StatusOr<std::chrono::seconds> SecondsFromProto(absl::string_view field,
                                                      const google::protobuf::Duration& d) {
  if (d.nanos() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": whole seconds only"));
  }
  return std::chrono::seconds(d.seconds());
}

v1::TokenInfo TokenToProto(const TokenRecord& t) {
  v1::TokenInfo out;
  out.set_id(t.id);
  out.set_subject(t.subject);
  out.set_role(RoleToProto(t.role));
  out.set_tenant(t.tenant);
  out.set_project(t.project);
  out.set_cluster(t.cluster);
  *out.mutable_create_time() = ToProto(t.create_time);
  if (t.expire_time) *out.mutable_expire_time() = ToProto(*t.expire_time);
  if (t.last_used_time) *out.mutable_last_used_time() = ToProto(*t.last_used_time);
  if (t.revoke_time) *out.mutable_revoke_time() = ToProto(*t.revoke_time);
  return out;
}

v1::RoleBinding RoleBindingToProto(const RoleBinding& b) {
  v1::RoleBinding out;
  out.set_subject(b.subject);
  out.set_role(RoleToProto(b.role));
  out.set_tenant(b.tenant);
  out.set_project(b.project);
  *out.mutable_create_time() = ToProto(b.create_time);
  *out.mutable_update_time() = ToProto(b.update_time);
  return out;
}

absl::StatusOr<RoleBinding> RoleBindingFromProto(const v1::RoleBinding& b) {
  RoleBinding out;
  out.subject = b.subject();
  ASSIGN_OR_RETURN(out.role, RoleFromProto(b.role(), "binding.role"));
  out.tenant = b.tenant();
  out.project = b.project();
  return out;
}

v1::Workload WorkloadToProto(const Workload& w) {
  v1::Workload p;
  p.set_id(absl::StrCat(w.id));
  *p.mutable_spec() = SpecToProto(w.spec);
  p.set_state(StateToProto(w.state));
  p.set_pending_reason(RenderReason(w.pending_reason));
  p.set_pending_reason_code(std::string(ReasonCodeName(w.pending_reason.code)));
  if (!w.assignment.empty()) *p.mutable_assignment() = AssignmentToProto(w.assignment);
  p.set_cancel_requested(w.cancel_requested);
  p.set_exit_code(w.exit_code);
  p.set_message(w.message);
  *p.mutable_create_time() = ToProto(w.create_time);
  *p.mutable_update_time() = ToProto(w.update_time);
  if (w.start_time) *p.mutable_start_time() = ToProto(*w.start_time);
  if (w.end_time) *p.mutable_end_time() = ToProto(*w.end_time);
  p.set_version(w.version);
  p.set_attempts(w.attempts);
  if (w.evicting) p.set_evicting(RetryOnToProto(*w.evicting));
  return p;
}

v1::WorkloadEvent EventToProto(const WorkloadEvent& e) {
  v1::WorkloadEvent p;
  *p.mutable_workload() = WorkloadToProto(e.workload);
  p.set_from_state(StateToProto(e.from));
  p.set_to_state(StateToProto(e.to));
  *p.mutable_time() = ToProto(e.time);
  return p;
}

absl::StatusOr<ClusterInfo> ClusterInfoFromProto(absl::string_view name, const v1::ClusterInfo& p) {
  ClusterInfo info;
  info.name = std::string(name);
  info.provider = p.provider();
  info.region = p.region();
  info.zone = p.zone();
  info.jurisdiction = p.jurisdiction();
  info.compliance_labels.assign(p.compliance_labels().begin(), p.compliance_labels().end());
  return info;
}

std::vector<NodeInfo> NodesFromProto(const v1::Inventory& p) {
  std::vector<NodeInfo> nodes;
  nodes.reserve(p.nodes_size());
  for (const v1::Node& pn : p.nodes()) {
    NodeInfo n;
    n.name = pn.name();
    n.rack = pn.rack();
    n.block = pn.block();
    n.cpu_millis = pn.cpu_millis();
    n.memory_mib = pn.memory_mib();
    n.labels.insert(pn.labels().begin(), pn.labels().end());
    n.schedulable = pn.schedulable();
    for (const v1::Gpu& pg : pn.gpus()) {
      GpuInfo g;
      g.uuid = pg.uuid();
      g.index = pg.index();
      g.model = pg.model();
      g.memory_mib = pg.memory_mib();
      g.nvlink_domain = pg.nvlink_domain();
      g.numa_node = pg.numa_node();
      g.pcie_switch = pg.pcie_switch();
      g.mig_capable = pg.mig_capable();
      g.healthy = pg.healthy();
      g.mig_enabled = pg.mig_enabled();
      g.mig_layout = MigLayoutFromProto(pg.mig_layout());
      n.gpus.push_back(std::move(g));
    }
    nodes.push_back(std::move(n));
  }
  return nodes;
}

namespace {

v1::ClusterInfo ClusterInfoToProto(const ClusterInfo& info) {
  v1::ClusterInfo p;
  p.set_provider(info.provider);
  p.set_region(info.region);
  p.set_zone(info.zone);
  p.set_jurisdiction(info.jurisdiction);
  for (const auto& l : info.compliance_labels) p.add_compliance_labels(l);
  return p;
}

}  // namespace

v1::ClusterState ClusterStateToProto(ClusterState s) {
  switch (s) {
    case ClusterState::kUnspecified:
      return v1::CLUSTER_STATE_UNSPECIFIED;
    case ClusterState::kReady:
      return v1::CLUSTER_STATE_READY;
    case ClusterState::kDegraded:
      return v1::CLUSTER_STATE_DEGRADED;
    case ClusterState::kUnreachable:
      return v1::CLUSTER_STATE_UNREACHABLE;
    case ClusterState::kDraining:
      return v1::CLUSTER_STATE_DRAINING;
  }
  return v1::CLUSTER_STATE_UNSPECIFIED;
}

v1::Cluster ClusterToProto(const Cluster& c, const ClusterSlots* slots, bool include_nodes,
                           absl::FunctionRef<bool(WorkloadId)> visible) {
  v1::Cluster p;
  p.set_name(c.info.name);
  *p.mutable_info() = ClusterInfoToProto(EffectiveInfo(c.info, c.declared));
  *p.mutable_reported_info() = ClusterInfoToProto(c.info);
  if (!c.declared.cluster.empty()) *p.mutable_declaration() = DeclarationToProto(c.declared);
  p.set_state(ClusterStateToProto(c.state));
  p.set_epoch(c.epoch);
  p.set_cordoned(c.cordoned);
  if (c.last_heartbeat) *p.mutable_last_heartbeat_time() = ToProto(*c.last_heartbeat);
  if (slots != nullptr) {
    ClusterCapacity cap = Pool::CapacityOf(*slots);
    p.set_gpus_total(cap.total);
    p.set_gpus_free(cap.free);
    for (const auto& [model, count] : cap.by_model) {
      auto* mc = p.add_capacity();
      mc->set_model(model);
      mc->set_total(count.total);
      mc->set_free(count.free);
    }
  }
  if (!include_nodes) return p;
  for (const NodeInfo& node : c.nodes) {
    auto* pn = p.add_nodes();
    pn->set_name(node.name);
    pn->set_rack(node.rack);
    pn->set_block(node.block);
    pn->set_cpu_millis(node.cpu_millis);
    pn->set_memory_mib(node.memory_mib);
    for (const auto& [k, v] : node.labels) (*pn->mutable_labels())[k] = v;
    pn->set_schedulable(node.schedulable);
    pn->set_cordoned(node.cordoned);
    const NodeSlots* node_slots = slots != nullptr ? slots->FindNode(node.name) : nullptr;
    for (const GpuInfo& g : node.gpus) {
      auto* pg = pn->add_gpus();
      pg->set_uuid(g.uuid);
      pg->set_index(g.index);
      pg->set_model(g.model);
      pg->set_memory_mib(g.memory_mib);
      pg->set_nvlink_domain(g.nvlink_domain);
      pg->set_numa_node(g.numa_node);
      pg->set_pcie_switch(g.pcie_switch);
      pg->set_mig_capable(g.mig_capable);
      pg->set_healthy(g.healthy);
      pg->set_mig_enabled(g.mig_enabled);
      MigLayoutToProto(g.mig_layout, pg->mutable_mig_layout());
      if (node_slots != nullptr) {
        const int i = node_slots->FindGpu(g.uuid);
        if (i >= 0) {
          pg->set_allocated(!node_slots->gpus[i].Idle());
          pg->set_allocated_to(Holders(node_slots->gpus[i], visible));
        }
      }
    }
  }
  return p;
}

// ---- Routing ----------------------------------------------------------------------------------

namespace {

// The latest effective_from accepted: far enough for any price book, well inside what a
// Timestamp (nanoseconds since 1970 in an int64) holds.
constexpr int64_t kMaxEffectiveFromSeconds = 7'258'118'400;  // 2200-01-01T00:00:00Z

// A round-trip time in microseconds: a normalised, non-negative Duration of whole microseconds.
// The range (0..10 s) is the domain's to check; this only keeps the arithmetic in bounds.
absl::StatusOr<int64_t> RttMicros(absl::string_view field, const google::protobuf::Duration& d) {
  if (d.nanos() < 0 || d.nanos() >= 1000000000) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".nanos: must be 0..999999999, got ", d.nanos()));
  }
  if (d.seconds() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not be negative"));
  }
  if (d.seconds() > TimeUtil::kDurationMaxSeconds) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": out of range"));
  }
  if (d.nanos() % 1000 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(field,
                                                   ": must be a whole number of microseconds, got ",
                                                   d.nanos(), " nanoseconds past the second"));
  }
  return TimeUtil::DurationToMicroseconds(d);
}

absl::StatusOr<Objective> ObjectiveFromProto(v1::Objective o, absl::string_view field) {
  switch (o) {
    case v1::OBJECTIVE_UNSPECIFIED:
    case v1::OBJECTIVE_PACK:
      return Objective::kPack;
    case v1::OBJECTIVE_COST:
      return Objective::kCost;
    case v1::OBJECTIVE_LATENCY:
      return Objective::kLatency;
    case v1::OBJECTIVE_BALANCED:
      return Objective::kBalanced;
    default:
      return BadEnum(field, o);
  }
}

v1::Objective ObjectiveToProto(Objective o) {
  switch (o) {
    case Objective::kPack:
      return v1::OBJECTIVE_PACK;
    case Objective::kCost:
      return v1::OBJECTIVE_COST;
    case Objective::kLatency:
      return v1::OBJECTIVE_LATENCY;
    case Objective::kBalanced:
      return v1::OBJECTIVE_BALANCED;
  }
  return v1::OBJECTIVE_UNSPECIFIED;
}

v1::DeclarationChange DiffKindToProto(DeclarationDiff::Kind kind) {
  switch (kind) {
    case DeclarationDiff::Kind::kUnchanged:
      return v1::DECLARATION_CHANGE_UNCHANGED;
    case DeclarationDiff::Kind::kAdded:
      return v1::DECLARATION_CHANGE_ADDED;
    case DeclarationDiff::Kind::kChanged:
      return v1::DECLARATION_CHANGE_CHANGED;
  }
  return v1::DECLARATION_CHANGE_UNSPECIFIED;
}

template <typename Repeated>
std::vector<std::string> Strings(const Repeated& r) {
  return std::vector<std::string>(r.begin(), r.end());
}

absl::StatusOr<PriceEntry> PriceFromProto(absl::string_view field, const v1::PriceEntry& p) {
  PriceEntry e;
  e.gpu_model = p.gpu_model();
  e.mig_profile = p.mig_profile();
  ASSIGN_OR_RETURN(e.capacity,
                   CapacityTypeFromProto(p.capacity_type(), absl::StrCat(field, ".capacity_type"),
                                         /*unspecified=*/std::nullopt));
  e.micros_per_hour = p.price_per_hour_micros();
  const std::string from = absl::StrCat(field, ".effective_from");
  if (!p.has_effective_from()) {
    return absl::InvalidArgumentError(absl::StrCat(from, ": must be set"));
  }
  const google::protobuf::Timestamp& t = p.effective_from();
  if (t.nanos() < 0 || t.nanos() >= 1000000000) {
    return absl::InvalidArgumentError(
        absl::StrCat(from, ".nanos: must be 0..999999999, got ", t.nanos()));
  }
  if (t.seconds() <= 0 || t.seconds() >= kMaxEffectiveFromSeconds) {
    return absl::InvalidArgumentError(
        absl::StrCat(from, ": must be after 1970-01-01 and before 2200-01-01, got ", t.seconds(),
                     " seconds since 1970"));
  }
  e.effective_from = FromProto(t);
  return e;
}

v1::PriceEntry PriceToProto(const PriceEntry& e) {
  v1::PriceEntry p;
  p.set_gpu_model(e.gpu_model);
  p.set_mig_profile(e.mig_profile);
  p.set_capacity_type(CapacityTypeToProto(e.capacity));
  p.set_price_per_hour_micros(e.micros_per_hour);
  *p.mutable_effective_from() = ToProto(e.effective_from);
  return p;
}

}  // namespace

absl::StatusOr<PlacementConstraints> PlacementFromProto(absl::string_view field,
                                                        const v1::PlacementConstraints& p) {
  PlacementConstraints c;
  c.jurisdictions = Strings(p.jurisdictions());
  c.compliance_labels = Strings(p.compliance_labels());
  c.providers = Strings(p.providers());
  c.regions = Strings(p.regions());
  c.clusters = Strings(p.clusters());
  c.denied_clusters = Strings(p.denied_clusters());
  c.max_price_per_gpu_hour_micros = p.max_price_per_gpu_hour_micros();
  c.spot_tolerated = p.spot_tolerated();
  ASSIGN_OR_RETURN(c.objective,
                   ObjectiveFromProto(p.objective(), absl::StrCat(field, ".objective")));
  c.client_region = p.client_region();
  ASSIGN_OR_RETURN(c.max_rtt_micros, RttMicros(absl::StrCat(field, ".max_rtt"), p.max_rtt()));
  c.min_driver_version = p.min_driver_version();
  c.min_cuda_version = p.min_cuda_version();
  return c;
}

v1::PlacementConstraints PlacementToProto(const PlacementConstraints& c) {
  v1::PlacementConstraints p;
  p.mutable_jurisdictions()->Assign(c.jurisdictions.begin(), c.jurisdictions.end());
  p.mutable_compliance_labels()->Assign(c.compliance_labels.begin(), c.compliance_labels.end());
  p.mutable_providers()->Assign(c.providers.begin(), c.providers.end());
  p.mutable_regions()->Assign(c.regions.begin(), c.regions.end());
  p.mutable_clusters()->Assign(c.clusters.begin(), c.clusters.end());
  p.mutable_denied_clusters()->Assign(c.denied_clusters.begin(), c.denied_clusters.end());
  p.set_max_price_per_gpu_hour_micros(c.max_price_per_gpu_hour_micros);
  p.set_spot_tolerated(c.spot_tolerated);
  p.set_objective(ObjectiveToProto(c.objective));
  p.set_client_region(c.client_region);
  p.set_min_driver_version(c.min_driver_version);
  p.set_min_cuda_version(c.min_cuda_version);
  if (c.max_rtt_micros > 0) {
    *p.mutable_max_rtt() = TimeUtil::MicrosecondsToDuration(c.max_rtt_micros);
  }
  return p;
}

v1::CapacityType CapacityTypeToProto(CapacityType t) {
  switch (t) {
    case CapacityType::kOnDemand:
      return v1::CAPACITY_TYPE_ON_DEMAND;
    case CapacityType::kSpot:
      return v1::CAPACITY_TYPE_SPOT;
    case CapacityType::kCommitted:
      return v1::CAPACITY_TYPE_COMMITTED;
  }
  return v1::CAPACITY_TYPE_UNSPECIFIED;
}

absl::StatusOr<CapacityType> CapacityTypeFromProto(v1::CapacityType t, absl::string_view field,
                                                   std::optional<CapacityType> unspecified) {
  switch (t) {
    case v1::CAPACITY_TYPE_UNSPECIFIED:
      if (unspecified.has_value()) return *unspecified;
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be set (ON_DEMAND, SPOT or COMMITTED)"));
    case v1::CAPACITY_TYPE_ON_DEMAND:
      return CapacityType::kOnDemand;
    case v1::CAPACITY_TYPE_SPOT:
      return CapacityType::kSpot;
    case v1::CAPACITY_TYPE_COMMITTED:
      return CapacityType::kCommitted;
    default:
      return BadEnum(field, t);
  }
}

absl::StatusOr<ClusterDeclaration> DeclarationFromProto(absl::string_view field,
                                                        const v1::ClusterDeclaration& p) {
  ClusterDeclaration d;
  d.cluster = p.cluster();
  d.provider = p.provider();
  d.region = p.region();
  d.zone = p.zone();
  d.jurisdiction = p.jurisdiction();
  if (p.has_compliance_labels()) d.compliance_labels = Strings(p.compliance_labels().labels());
  ASSIGN_OR_RETURN(
      d.default_capacity,
      CapacityTypeFromProto(p.default_capacity(), absl::StrCat(field, ".default_capacity"),
                            /*unspecified=*/CapacityType::kOnDemand));
  d.prices.reserve(p.prices_size());
  for (int i = 0; i < p.prices_size(); ++i) {
    ASSIGN_OR_RETURN(PriceEntry e,
                     PriceFromProto(absl::StrCat(field, ".prices[", i, "]"), p.prices(i)));
    d.prices.push_back(std::move(e));
  }
  for (const auto& [region, rtt] : p.client_rtts()) {
    ASSIGN_OR_RETURN(
        d.rtt_micros[region],
        RttMicros(absl::StrCat(field, ".client_rtts[", absl::CHexEscape(region), "]"), rtt));
  }
  return d;
}

v1::ClusterDeclaration DeclarationToProto(const ClusterDeclaration& d) {
  v1::ClusterDeclaration p;
  p.set_cluster(d.cluster);
  p.set_provider(d.provider);
  p.set_region(d.region);
  p.set_zone(d.zone);
  p.set_jurisdiction(d.jurisdiction);
  if (d.compliance_labels.has_value()) {
    p.mutable_compliance_labels()->mutable_labels()->Assign(d.compliance_labels->begin(),
                                                            d.compliance_labels->end());
  }
  p.set_default_capacity(CapacityTypeToProto(d.default_capacity));
  for (const PriceEntry& e : d.prices) *p.add_prices() = PriceToProto(e);
  for (const auto& [region, micros] : d.rtt_micros) {
    (*p.mutable_client_rtts())[region] = TimeUtil::MicrosecondsToDuration(micros);
  }
  return p;
}

absl::StatusOr<std::vector<ClusterDeclaration>> DeclarationsFromProto(
    const v1::ApplyClustersRequest& request) {
  std::vector<ClusterDeclaration> out;
  out.reserve(request.declarations_size());
  for (int i = 0; i < request.declarations_size(); ++i) {
    ASSIGN_OR_RETURN(
        ClusterDeclaration d,
        DeclarationFromProto(absl::StrCat("declarations[", i, "]"), request.declarations(i)));
    out.push_back(std::move(d));
  }
  return out;
}

v1::ApplyClustersResponse DiffsToProto(const std::vector<DeclarationDiff>& diffs, bool dry_run) {
  v1::ApplyClustersResponse response;
  for (const DeclarationDiff& diff : diffs) {
    v1::DeclarationDiff* p = response.add_diffs();
    p->set_cluster(diff.cluster);
    p->set_kind(DiffKindToProto(diff.kind));
    p->mutable_changes()->Assign(diff.changes.begin(), diff.changes.end());
  }
  response.set_dry_run(dry_run);
  return response;
}

v1::ListDeclarationsResponse DeclarationsToProto(
    const std::vector<ClusterDeclaration>& declarations) {
  v1::ListDeclarationsResponse response;
  for (const ClusterDeclaration& d : declarations) {
    *response.add_declarations() = DeclarationToProto(d);
  }
  return response;
}

v1::Tenant TenantToProto(const Tenant& t) {
  v1::Tenant p;
  p.set_name(t.name);
  p.set_display_name(t.display_name);
  *p.mutable_create_time() = ToProto(t.create_time);
  return p;
}

v1::Project ProjectToProto(const Project& pr) {
  v1::Project p;
  p.set_tenant(pr.tenant);
  p.set_name(pr.name);
  *p.mutable_create_time() = ToProto(pr.create_time);
  return p;
}

v1::Quota QuotaToProto(const Quota& q) {
  v1::Quota out;
  out.set_tenant(q.key.tenant);
  out.set_project(q.key.project);
  out.set_resource(q.key.resource);
  out.set_guaranteed_milli(q.guaranteed_milli);
  if (q.limit_milli.has_value()) out.set_limit_milli(*q.limit_milli);
  out.set_overcommitted(q.overcommitted);
  *out.mutable_update_time() = ToProto(q.update_time);
  return out;
}

v1::QuotaUsage QuotaUsageToProto(const QuotaUsage& u) {
  v1::QuotaUsage out;
  out.set_tenant(u.key.tenant);
  out.set_project(u.key.project);
  out.set_resource(u.key.resource);
  if (u.quota) *out.mutable_quota() = QuotaToProto(*u.quota);
  out.set_used_milli(u.used_milli);
  out.set_borrowed_milli(u.borrowed_milli);
  return out;
}

Quota QuotaFromProto(const v1::Quota& q) {
  Quota out;
  out.key = QuotaKey{q.tenant(), q.project(), q.resource()};
  out.guaranteed_milli = q.guaranteed_milli();
  if (q.has_limit_milli()) out.limit_milli = q.limit_milli();
  return out;
}

// ---- Use-case inputs and outputs --------------------------------------------------------------

namespace {

constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;

std::string EncodePageToken(WorkloadId before_id) {
  return absl::WebSafeBase64Escape(absl::StrCat("v1:", before_id));
}

absl::StatusOr<WorkloadId> DecodePageToken(absl::string_view token) {
  std::string raw;
  if (!absl::WebSafeBase64Unescape(token, &raw) || raw.rfind("v1:", 0) != 0) {
    return absl::InvalidArgumentError("page_token: not a token from a previous List response");
  }
  absl::StatusOr<WorkloadId> id =
      WorkloadIdFromProto("page_token", absl::string_view(raw).substr(3));
  if (!id.ok()) {
    return absl::InvalidArgumentError("page_token: not a token from a previous List response");
  }
  return id;
}

}  // namespace

absl::StatusOr<ListFilter> ListFilterFromProto(const v1::ListWorkloadsRequest& request) {
  ListFilter filter;
  if (!request.tenant().empty()) RETURN_IF_ERROR(ValidateName("tenant", request.tenant()));
  if (!request.project().empty()) RETURN_IF_ERROR(ValidateName("project", request.project()));
  if (!request.cluster().empty()) RETURN_IF_ERROR(ValidateName("cluster", request.cluster()));
  filter.tenant = request.tenant();
  filter.project = request.project();
  filter.cluster = request.cluster();
  for (int i = 0; i < request.states_size(); ++i) {
    ASSIGN_OR_RETURN(WorkloadState s,
                     StateFromProto(request.states(i), absl::StrCat("states[", i, "]")));
    filter.states.push_back(s);
  }
  if (request.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be at most ", kMaxPageSize, ", got ", request.page_size()));
  }
  filter.page_size =
      request.page_size() == 0 ? kDefaultPageSize : static_cast<int>(request.page_size());
  if (!request.page_token().empty()) {
    ASSIGN_OR_RETURN(filter.before_id, DecodePageToken(request.page_token()));
  }
  return filter;
}

v1::ListWorkloadsResponse WorkloadPageToProto(const WorkloadPage& page, size_t max_bytes) {
  v1::ListWorkloadsResponse response;
  size_t bytes = 0;
  for (const Workload& w : page.workloads) {
    v1::Workload p = WorkloadToProto(w);
    const size_t size = p.ByteSizeLong() + 8;  // + the field's tag and length
    if (response.workloads_size() > 0 && bytes + size > max_bytes) {
      // The page is cut short here; the next one starts after the last workload sent (pages go
      // newest first: ids below it).
      response.set_next_page_token(EncodePageToken(w.id + 1));
      return response;
    }
    bytes += size;
    *response.add_workloads() = std::move(p);
  }
  if (page.next_before_id != 0) {
    response.set_next_page_token(EncodePageToken(page.next_before_id));
  }
  return response;
}

v1::ExplainResponse ExplanationToProto(const Explanation& e) {
  v1::ExplainResponse response;
  *response.mutable_workload() = WorkloadToProto(e.workload);
  response.set_explanation(e.text);
  response.set_never_fits(e.never_fits);
  response.set_fits_now_on(e.fits_now_on);
  response.set_reason_code(std::string(ReasonCodeName(e.reason.code)));
  if (e.routing) {
    response.set_objective(ObjectiveToProto(e.routing->objective));
    for (const ClusterCandidate& c : e.routing->candidates) {
      *response.add_candidates() = CandidateToProto(c);
    }
  } else {
    response.set_objective(ObjectiveToProto(e.workload.spec.placement.objective));
  }
  return response;
}

v1::ClusterCandidate CandidateToProto(const ClusterCandidate& c) {
  v1::ClusterCandidate p;
  p.set_cluster(c.cluster);
  for (const RuleCheck& r : c.rules) {
    v1::RuleCheck& rule = *p.add_rules();
    rule.set_rule(r.rule);
    rule.set_passed(r.passed);
    rule.set_detail(r.detail);
  }
  for (const OfferCheck& o : c.offers) {
    v1::OfferCheck& offer = *p.add_offers();
    offer.set_gpu_model(o.model);
    offer.set_capacity_type(CapacityTypeToProto(o.capacity));
    if (o.replica_price) offer.set_price_per_hour_micros(*o.replica_price);
    if (o.rtt_micros) *offer.mutable_rtt() = TimeUtil::MicrosecondsToDuration(*o.rtt_micros);
    offer.set_key(o.key);
    offer.set_refused(o.refused);
    offer.set_fits_now(o.fits_now);
  }
  p.set_allowed(c.allowed);
  p.set_chosen(c.chosen);
  return p;
}

v1::WhatIfResponse WhatIfToProto(const RoutingExplanation& e) {
  v1::WhatIfResponse response;
  if (e.decision.assignment) {
    *response.mutable_assignment() = AssignmentToProto(*e.decision.assignment);
  } else {
    response.set_explanation(RenderReason(e.decision.reason));
    response.set_reason_code(std::string(ReasonCodeName(e.decision.reason.code)));
    response.set_never_fits(e.decision.reason.never_fits());
  }
  if (e.price_per_hour) response.set_price_per_hour_micros(*e.price_per_hour);
  if (e.estimated_cost) response.set_estimated_cost_micros(*e.estimated_cost);
  response.set_estimated_hours(e.estimated_hours);
  response.set_objective(ObjectiveToProto(e.objective));
  for (const ClusterCandidate& c : e.candidates) *response.add_candidates() = CandidateToProto(c);
  return response;
}

// ---- The agent protocol ----------------------------------------------------------------------

absl::StatusOr<AgentReport> AgentReportFromProto(const v1::WorkloadStatus& status) {
  AgentReport report;
  ASSIGN_OR_RETURN(report.id,
                   WorkloadIdFromProto("status.updates.workload_id", status.workload_id()));
  ASSIGN_OR_RETURN(report.state, StateFromProto(status.state(), "status.updates.state"));
  report.exit_code = status.exit_code();
  report.message = status.message();
  if (status.has_time()) {
    // Bounded as a price line's effective_from: outside them the nanoseconds since 1970 that a
    // Timestamp holds would overflow.
    const google::protobuf::Timestamp& t = status.time();
    if (t.nanos() < 0 || t.nanos() >= 1000000000 || t.seconds() < 0 ||
        t.seconds() >= kMaxEffectiveFromSeconds) {
      return absl::InvalidArgumentError(
          absl::StrCat("status.updates.time: must be from 1970-01-01 and before 2200-01-01 (nanos "
                       "0..999999999), got ",
                       t.seconds(), " seconds and ", t.nanos(), " nanos since 1970"));
    }
    report.time = FromProto(t);
  }
  report.attempt = status.attempt();
  return report;
}

std::vector<v1::ServerMessage> AssignMessages(const std::vector<Workload>& workloads,
                                              size_t max_bytes) {
  std::vector<v1::ServerMessage> messages;
  size_t bytes = 0;
  for (const Workload& w : workloads) {
    v1::WorkAssignment a;
    a.set_workload_id(absl::StrCat(w.id));
    *a.mutable_spec() = SpecToProto(w.spec);
    *a.mutable_assignment() = AssignmentToProto(w.assignment);
    a.set_attempt(w.attempts);
    a.set_stop_when_lease_expires(w.MayRetry(AttemptEnd::kClusterLost));
    const size_t size = a.ByteSizeLong() + 8;  // + the field's tag and length
    if (messages.empty() || (bytes + size > max_bytes && bytes > 0)) {
      messages.emplace_back();
      bytes = 0;
    }
    *messages.back().mutable_assign()->add_assignments() = std::move(a);
    bytes += size;
  }
  return messages;
}

std::vector<v1::ServerMessage> CancelMessages(const std::vector<WorkloadId>& ids, size_t max_ids) {
  std::vector<v1::ServerMessage> messages;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i % max_ids == 0) messages.emplace_back();
    messages.back().mutable_cancel()->add_workload_ids(absl::StrCat(ids[i]));
  }
  return messages;
}

v1::Preemption PreemptionToProto(const PreemptionRecord& r) {
  v1::Preemption out;
  out.set_id(r.id);
  *out.mutable_time() = ToProto(r.time);
  switch (r.cause) {
    case PreemptionCause::kGuaranteeReclaim:
      out.set_reason(v1::PREEMPTION_REASON_GUARANTEE_RECLAIM);
      break;
    case PreemptionCause::kFairShare:
      out.set_reason(v1::PREEMPTION_REASON_FAIR_SHARE);
      break;
    case PreemptionCause::kPriority:
      out.set_reason(v1::PREEMPTION_REASON_PRIORITY);
      break;
  }
  if (r.preemptor > 0) out.set_preemptor_workload_id(absl::StrCat(r.preemptor));
  out.set_tenant(r.tenant);
  out.set_project(r.project);
  out.set_resource(r.resource);
  out.set_cluster(r.cluster);
  out.set_needed_milli(r.needed_milli);
  out.set_evicted_milli(r.evicted_milli);
  out.set_gpu_seconds_lost(r.gpu_seconds_lost);
  for (const PreemptionVictim& v : r.victims) {
    v1::PreemptionVictim* p = out.add_victims();
    if (v.id > 0) p->set_workload_id(absl::StrCat(v.id));
    p->set_tenant(v.tenant);
    p->set_project(v.project);
    p->set_gpu_milli(v.gpu_milli);
  }
  for (const TenantShare& s : r.shares) {
    v1::TenantShare* p = out.add_shares();
    p->set_tenant(s.tenant);
    p->set_before_milli(s.before_milli);
    p->set_after_milli(s.after_milli);
  }
  return out;
}

v1::FairShare FairShareToProto(const FairShare& f) {
  v1::FairShare out;
  out.set_tenant(f.tenant);
  out.set_project(f.project);
  out.set_weight(f.weight);
  out.set_share(f.share);
  out.set_held_milli(f.held_milli);
  out.set_decayed_gpu_hours(f.decayed_gpu_hours);
  out.set_waiting(static_cast<int64_t>(f.waiting));
  return out;
}

v1::ShareWeight ShareWeightToProto(const ShareWeight& w) {
  v1::ShareWeight out;
  out.set_tenant(w.tenant);
  out.set_project(w.project);
  out.set_weight(w.weight);
  return out;
}

ShareWeight ShareWeightFromProto(const v1::ShareWeight& w) {
  return ShareWeight{w.tenant(), w.project(), w.weight()};
}

absl::StatusOr<UsageQuery> UsageQueryFromProto(const v1::GetUsageReportRequest& request) {
  UsageQuery query;
  RETURN_IF_ERROR(WindowFromProto(request, &query.from, &query.to));
  switch (request.period()) {
    case v1::REPORT_PERIOD_UNSPECIFIED:
      query.period = ReportPeriod::kWhole;
      break;
    case v1::REPORT_PERIOD_DAY:
      query.period = ReportPeriod::kDay;
      break;
    case v1::REPORT_PERIOD_WEEK:
      query.period = ReportPeriod::kWeek;
      break;
    case v1::REPORT_PERIOD_MONTH:
      query.period = ReportPeriod::kMonth;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("period: unknown value ", static_cast<int>(request.period())));
  }
  if (request.group_by_size() > kReportDimensions) {
    return absl::InvalidArgumentError(
        absl::StrCat("group_by: at most ", kReportDimensions, " dimensions"));
  }
  for (int i = 0; i < request.group_by_size(); ++i) {
    const int d = request.group_by(i);
    if (d < v1::REPORT_DIMENSION_TENANT || d > v1::REPORT_DIMENSION_CAPACITY) {
      return absl::InvalidArgumentError(absl::StrCat("group_by[", i, "]: unknown dimension ", d));
    }
    // The proto's numbering is the domain's, plus one (0 is UNSPECIFIED).
    query.group_by.push_back(static_cast<ReportDimension>(d - 1));
  }
  query.tenant = request.tenant();
  query.project = request.project();
  query.cluster = request.cluster();
  return query;
}

absl::StatusOr<TelemetryWindow> TelemetryWindowFromProto(
    const v1::ListWorkloadTelemetryRequest& request) {
  TelemetryWindow w;
  ASSIGN_OR_RETURN(w.workload, WorkloadIdFromProto("workload_id", request.workload_id()));
  RETURN_IF_ERROR(WindowFromProto(request, &w.from, &w.to));
  if (w.to <= w.from) return absl::InvalidArgumentError("end_time: must be after start_time");
  if (request.page_size() < 0 || request.page_size() > 10000) {
    return absl::InvalidArgumentError("page_size: must be 0..10000");
  }
  w.limit = request.page_size() == 0 ? 1000 : request.page_size();
  return w;
}

v1::UsageReportLine UsageLineToProto(const UsageLine& line) {
  v1::UsageReportLine out;
  *out.mutable_period_start() = ToProto(line.period_start);
  for (const std::string& key : line.keys) out.add_keys(key);
  out.set_gpu_microseconds(line.gpu_microseconds);
  out.set_unpriced_gpu_microseconds(line.unpriced_gpu_microseconds);
  out.set_cost_micros(line.cost_micros);
  out.set_records(line.records);
  out.set_measured_gpu_microseconds(line.measured_gpu_microseconds);
  out.set_effective_gpu_microseconds(line.effective_gpu_microseconds);
  out.set_coarse_gpu_microseconds(line.coarse_gpu_microseconds);
  return out;
}

v1::GetUsageReportResponse UsageReportToProto(const UsageReportResult& report) {
  v1::GetUsageReportResponse out;
  for (const UsageLine& line : report.lines) *out.add_lines() = UsageLineToProto(line);
  for (const GuaranteeLine& g : report.guarantees) {
    v1::IdleGuaranteeLine* p = out.add_guarantees();
    *p->mutable_period_start() = ToProto(g.period_start);
    p->set_tenant(g.key.tenant);
    p->set_project(g.key.project);
    p->set_resource(g.key.resource);
    p->set_reserved_unit_microseconds(g.reserved_unit_us);
    p->set_idle_unit_microseconds(g.idle_unit_us);
  }
  return out;
}

absl::StatusOr<CostQuery> CostQueryFromProto(const v1::GetCostAllocationRequest& request) {
  CostQuery query;
  RETURN_IF_ERROR(WindowFromProto(request, &query.from, &query.to));
  query.cluster = request.cluster();
  switch (request.idle_policy()) {
    case v1::IDLE_POLICY_UNSPECIFIED:
      break;
    case v1::IDLE_POLICY_SEPARATE:
      query.policy = IdlePolicy::kSeparate;
      break;
    case v1::IDLE_POLICY_SPREAD:
      query.policy = IdlePolicy::kSpread;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("idle_policy: unknown value ", static_cast<int>(request.idle_policy())));
  }
  return query;
}

v1::GetCostAllocationResponse CostAllocationToProto(const CostReport& report) {
  v1::GetCostAllocationResponse out;
  out.set_idle_policy(report.policy == IdlePolicy::kSpread ? v1::IDLE_POLICY_SPREAD
                                                           : v1::IDLE_POLICY_SEPARATE);
  for (const ClusterCost& c : report.clusters) {
    v1::ClusterCostAllocation* p = out.add_clusters();
    p->set_cluster(c.cluster);
    p->set_capacity_cost_micros(c.allocation.total_micros);
    p->set_idle_micros(c.allocation.idle_micros);
    p->set_unallocated_micros(c.allocation.unallocated_micros);
    std::set<std::string> tenants;
    for (const auto& [t, v] : c.allocation.tenant_micros) tenants.insert(t);
    for (const auto& [t, v] : c.allocation.profile_premium_micros) tenants.insert(t);
    for (const std::string& t : tenants) {
      auto get = [&t](const std::map<std::string, int64_t>& m) {
        auto it = m.find(t);
        return it == m.end() ? int64_t{0} : it->second;
      };
      v1::TenantCharge* charge = p->add_tenants();
      charge->set_tenant(t);
      charge->set_charge_micros(get(c.allocation.tenant_micros));
      charge->set_idle_share_micros(get(c.allocation.idle_share_micros));
      charge->set_profile_premium_micros(get(c.allocation.profile_premium_micros));
    }
  }
  return out;
}

absl::StatusOr<std::vector<TelemetryMinute>> TelemetryFromProto(const v1::TelemetryReport& report) {
  if (report.minutes_size() > kMaxTelemetryMinutes) {
    return absl::InvalidArgumentError(
        absl::StrCat("telemetry.minutes: at most ", kMaxTelemetryMinutes, " per report"));
  }
  std::vector<TelemetryMinute> out;
  out.reserve(report.minutes_size());
  for (int i = 0; i < report.minutes_size(); ++i) {
    const v1::GpuMinute& g = report.minutes(i);
    const std::string at = absl::StrCat("telemetry.minutes[", i, "].");
    TelemetryMinute m;
    m.gpu_uuid = g.gpu_uuid();
    m.mig_profile = g.mig_profile();
    m.mig_start = g.mig_start();
    const google::protobuf::Timestamp& t = g.minute();
    if (!g.has_minute() || t.nanos() != 0 || t.seconds() < 0 ||
        t.seconds() >= kMaxEffectiveFromSeconds) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, "minute: required, a whole minute from 1970-01-01 and before 2200-01-01"));
    }
    m.minute = FromProto(t);
    if (g.covered_seconds() > 60) {
      return absl::InvalidArgumentError(absl::StrCat(at, "covered_seconds: must be 1..60"));
    }
    m.covered_seconds = static_cast<int32_t>(g.covered_seconds());
    ASSIGN_OR_RETURN(m.workload,
                     WorkloadIdFromProto(absl::StrCat(at, "workload_id"), g.workload_id()));
    m.attempt = g.attempt();
    GpuMetrics& x = m.metrics;
    if (g.has_gr_engine_active()) x.gr_engine_active = g.gr_engine_active();
    if (g.has_sm_active()) x.sm_active = g.sm_active();
    if (g.has_sm_occupancy()) x.sm_occupancy = g.sm_occupancy();
    if (g.has_pipe_tensor_active()) x.pipe_tensor_active = g.pipe_tensor_active();
    if (g.has_dram_active()) x.dram_active = g.dram_active();
    if (g.has_gpu_util()) x.gpu_util = g.gpu_util();
    if (g.has_fb_used_mib()) x.fb_used_mib = g.fb_used_mib();
    if (g.has_power_watts()) x.power_watts = g.power_watts();
    if (g.has_gpu_temp_celsius()) x.gpu_temp_celsius = g.gpu_temp_celsius();
    out.push_back(std::move(m));
  }
  if (absl::Status s = ValidateTelemetry(out); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("telemetry.", s.message()));
  }
  return out;
}

v1::GpuMinute GpuMinuteToProto(const TelemetryMinute& m) {
  v1::GpuMinute out;
  out.set_gpu_uuid(m.gpu_uuid);
  out.set_mig_profile(m.mig_profile);
  out.set_mig_start(m.mig_start);
  *out.mutable_minute() = ToProto(m.minute);
  out.set_covered_seconds(static_cast<uint32_t>(m.covered_seconds));
  out.set_workload_id(absl::StrCat(m.workload));
  out.set_attempt(m.attempt);
  const GpuMetrics& x = m.metrics;
  if (x.gr_engine_active) out.set_gr_engine_active(*x.gr_engine_active);
  if (x.sm_active) out.set_sm_active(*x.sm_active);
  if (x.sm_occupancy) out.set_sm_occupancy(*x.sm_occupancy);
  if (x.pipe_tensor_active) out.set_pipe_tensor_active(*x.pipe_tensor_active);
  if (x.dram_active) out.set_dram_active(*x.dram_active);
  if (x.gpu_util) out.set_gpu_util(*x.gpu_util);
  if (x.fb_used_mib) out.set_fb_used_mib(*x.fb_used_mib);
  if (x.power_watts) out.set_power_watts(*x.power_watts);
  if (x.gpu_temp_celsius) out.set_gpu_temp_celsius(*x.gpu_temp_celsius);
  return out;
}

v1::TelemetryMinuteView TelemetryRowToProto(const TelemetryRow& row) {
  v1::TelemetryMinuteView out;
  out.set_cluster(row.cluster);
  *out.mutable_minute() = GpuMinuteToProto(row.minute);
  out.set_activity(row.activity.value);
  out.set_activity_source(std::string(ActivitySourceName(row.activity.source)));
  out.set_measured_gpu_microseconds(row.measured_gpu_us);
  out.set_effective_gpu_microseconds(row.effective_gpu_us);
  out.set_coarse_gpu_microseconds(row.coarse_gpu_us);
  return out;
}

}  // namespace gpufed::api
