// The agent-facing use cases of ControlPlane (control_plane.h).

#include <functional>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "auth/policy.h"
#include "federation/control_plane.h"
#include "federation/failover.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed {
namespace {

std::vector<WorkloadId> IdsOf(const std::vector<Workload>& workloads) {
  std::vector<WorkloadId> ids;
  ids.reserve(workloads.size());
  for (const Workload& w : workloads) ids.push_back(w.id);
  return ids;
}

// What a connection that no longer speaks for its cluster is told: register again. UNAVAILABLE,
// so the agent redials at once (ABORTED would tell it another agent took the cluster over).
absl::Status NotCurrent(const AgentLink& link) {
  return absl::UnavailableError(absl::StrCat(
      "cluster ", link.cluster(),
      ": this connection no longer speaks for it (silent past the heartbeat timeout, or "
      "replaced); register again"));
}

}  // namespace

absl::StatusOr<std::shared_ptr<AgentLink>> ControlPlane::RegisterAgentUnaudited(
    const auth::Principal& who, const ClusterInfo& info, const std::vector<NodeInfo>& nodes,
    const std::vector<AgentReport>& known, std::shared_ptr<AgentChannel> channel,
    const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateName("register.cluster", info.name));
  if (!auth::MaySpeakFor(who, info.name)) {
    return absl::PermissionDeniedError("permission denied: this token may not speak for cluster");
  }
  RETURN_IF_ERROR(ValidateInventory(info, nodes));
  ASSIGN_OR_RETURN(const Cluster stored, ports_.clusters->RegisterCluster(info, nodes, record));
  // Waking the loop before the link is attached is safe: a placement committed before the
  // attach is in the active set read below.
  AfterClusterCommit(std::cref(stored));
  Cluster cluster = stored;
  cluster.nodes.clear();  // the link needs the name, info and epoch only
  auto link = std::make_shared<AgentLink>(cluster, std::move(channel), who.token_id);
  link->channel().SendRegistered(cluster);
  // Attach before reading the active set: a placement committed after the read is dispatched to
  // this link, one committed before it is in the set. Duplicates are harmless.
  ports_.agents->Attach(link);
  if (!who.certificate_serial.empty() && ports_.certificates != nullptr) {
    // Looked at again once attached: a revocation that committed after the agent authenticated
    // and closed the cluster's connection before this one was attached is seen here.
    absl::Status live =
        ports_.certificates->LookupClusterCertificate(who.certificate_serial, info.name).status();
    if (!live.ok()) {
      ports_.agents->Detach(link.get());
      if (absl::IsNotFound(live)) return absl::UnauthenticatedError("certificate revoked");
      return live;
    }
  }

  ASSIGN_OR_RETURN(std::vector<Workload> active, ports_.workloads->ListActive(info.name));
  link->Expect(IdsOf(active));
  // What the agent says it still runs or finished while the two were apart.
  RETURN_IF_ERROR(ApplyReports(*link, known));
  // Re-send every assignment the cluster holds; the agent ignores those it already has.
  ASSIGN_OR_RETURN(active, ports_.workloads->ListActive(info.name));
  // Hardware the agent no longer reports (or reports failed) takes its work with it. The stop
  // goes out with the other cancels below, after the assignments: a restarted agent that got
  // a cancel before the assignment it names would start that work.
  ASSIGN_OR_RETURN(std::vector<Workload> marked,
                   MarkEvictions(FailedHardwareEvictions(stored, active)));
  absl::flat_hash_set<WorkloadId> marked_ids;
  for (const Workload& w : marked) marked_ids.insert(w.id);
  std::vector<WorkloadId> cancels;
  absl::flat_hash_set<WorkloadId> active_ids;
  for (const Workload& w : active) {
    active_ids.insert(w.id);
    if (w.cancel_requested || w.evicting || marked_ids.contains(w.id)) cancels.push_back(w.id);
  }
  // Work the agent runs that the server no longer wants on this cluster must stop.
  for (const AgentReport& r : known) {
    if (!active_ids.contains(r.id) && !IsTerminal(r.state)) cancels.push_back(r.id);
  }
  link->Assign(active);
  link->Cancel(cancels);
  return link;
}

absl::Status ControlPlane::UpdateInventory(const AgentLink& link,
                                           const std::vector<NodeInfo>& nodes) {
  if (!ports_.agents->IsCurrent(link)) return NotCurrent(link);
  RETURN_IF_ERROR(ValidateInventory(link.info(), nodes));
  ports_.agents->Heard(link.cluster());
  ASSIGN_OR_RETURN(Cluster cluster, ports_.clusters->RegisterCluster(link.info(), nodes));
  AfterClusterCommit(std::cref(cluster));
  ASSIGN_OR_RETURN(std::vector<Workload> held, ports_.workloads->ListActive(link.cluster()));
  return Evict(FailedHardwareEvictions(cluster, held)).status();
}

absl::Status ControlPlane::Heartbeat(AgentLink& link) {
  if (!ports_.agents->IsCurrent(link)) return NotCurrent(link);
  ports_.agents->Heard(link.cluster());
  if (link.HeartbeatWriteDue(ports_.clock->Monotonic(), options_.heartbeat_write_interval)) {
    return ports_.clusters->RecordHeartbeat(link.cluster(), ports_.clock->Now());
  }
  return absl::OkStatus();
}

absl::Status ControlPlane::ApplyAgentReports(AgentLink& link,
                                             const std::vector<AgentReport>& reports) {
  // Reports from a connection fenced off (an old epoch) change nothing.
  if (!ports_.agents->IsCurrent(link)) return NotCurrent(link);
  ports_.agents->Heard(link.cluster());
  return ApplyReports(link, reports);
}

absl::Status ControlPlane::ApplyTelemetry(const AgentLink& link,
                                          const std::vector<TelemetryMinute>& minutes) {
  if (!ports_.agents->IsCurrent(link)) return NotCurrent(link);
  RETURN_IF_ERROR(ValidateTelemetry(minutes));
  if (ports_.metering == nullptr || minutes.empty()) return absl::OkStatus();
  const Timestamp now = ports_.clock->Now();
  std::vector<TelemetryMinute> fresh;
  fresh.reserve(minutes.size());
  for (const TelemetryMinute& m : minutes) {
    if (m.minute >= now - kTelemetryMaxAge && m.minute <= now + kTelemetryMaxAhead) {
      fresh.push_back(m);
    }
  }
  int kept = 0;
  if (!fresh.empty()) {
    ASSIGN_OR_RETURN(kept, ports_.metering->RecordTelemetry(link.cluster(), fresh));
  }
  metrics_->TelemetryMinutes(static_cast<size_t>(kept), minutes.size() - static_cast<size_t>(kept));
  return absl::OkStatus();
}

void ControlPlane::AgentDisconnected(const AgentLink& link) { ports_.agents->Detach(&link); }

absl::Status ControlPlane::ApplyReports(AgentLink& link, const std::vector<AgentReport>& reports) {
  if (reports.empty()) return absl::OkStatus();
  metrics_->AgentReports(reports.size());
  std::vector<Transition> transitions;
  std::vector<const AgentReport*> lost;
  const std::string actor = absl::StrCat("agent:", link.cluster());
  for (const AgentReport& r : reports) {
    const bool valid = r.state == WorkloadState::kRunning || r.state == WorkloadState::kSucceeded ||
                       r.state == WorkloadState::kFailed || r.state == WorkloadState::kCancelled ||
                       r.state == WorkloadState::kLost;
    if (!valid) {
      return absl::InvalidArgumentError(
          absl::StrCat("status.updates.state: agents report RUNNING, SUCCEEDED, FAILED, "
                       "CANCELLED or LOST, got ",
                       StateName(r.state)));
    }
    // An agent speaks only for work handed to its connection; anything else is ignored (and
    // acknowledged by the caller, so that it is not re-sent forever).
    if (!link.IsAssigned(r.id)) continue;
    if (r.state == WorkloadState::kLost) {
      lost.push_back(&r);
      continue;
    }
    Transition t;
    t.id = r.id;
    t.from = r.state == WorkloadState::kRunning ? WorkloadState::kPlaced : WorkloadState::kRunning;
    t.to = r.state;
    t.actor = actor;
    t.reason = r.state == WorkloadState::kRunning ? "started" : r.message;
    if (IsTerminal(r.state)) t.exit_code = r.exit_code;
    // A stop the server asked for to evict the workload ends its attempt instead (below).
    t.unless_evicting = r.state == WorkloadState::kCancelled;
    t.message = r.message;
    t.time = r.time;
    // A report about an earlier attempt (the workload was requeued and placed here again)
    // must not move the current one.
    t.on_cluster = link.cluster();
    t.at_attempt = r.attempt;
    transitions.push_back(std::move(t));
  }
  ASSIGN_OR_RETURN(std::vector<TransitionResult> results,
                   ports_.workloads->ApplyTransitions(transitions));
  // A terminal report for work the store still has as PLACED (its RUNNING was never recorded):
  // apply it from PLACED. A confirmed stop of an eviction: end the attempt by its cause.
  std::vector<Transition> retry;
  for (size_t i = 0; i < results.size(); ++i) {
    const TransitionResult& r = results[i];
    if (!r.applied && r.current && r.current->evicting && transitions[i].unless_evicting &&
        HoldsCapacity(r.current->state) && r.current->assignment.cluster == link.cluster() &&
        (transitions[i].at_attempt == 0 || transitions[i].at_attempt == r.current->attempts)) {
      const AttemptEnded end{*r.current->evicting, link.cluster(),
                             transitions[i].time.value_or(ports_.clock->Now()), r.current->message,
                             actor};
      retry.push_back(EndAttempt(*r.current, end));
      continue;
    }
    if (!r.applied && r.current && r.current->state == WorkloadState::kPlaced &&
        transitions[i].from == WorkloadState::kRunning && IsTerminal(transitions[i].to)) {
      Transition t = transitions[i];
      t.from = WorkloadState::kPlaced;
      retry.push_back(std::move(t));
    }
  }
  if (!retry.empty()) {
    ASSIGN_OR_RETURN(std::vector<TransitionResult> more, ports_.workloads->ApplyTransitions(retry));
    results.insert(results.end(), more.begin(), more.end());
  }
  // Ends come after the other reports are committed: a RUNNING of the same batch is then the
  // state the end is guarded by.
  if (!lost.empty()) {
    ASSIGN_OR_RETURN(std::vector<Transition> ends, LeaseEnds(link, lost));
    ASSIGN_OR_RETURN(std::vector<TransitionResult> more, ports_.workloads->ApplyTransitions(ends));
    results.insert(results.end(), more.begin(), more.end());
  }
  std::vector<WorkloadEvent> events;
  for (const TransitionResult& r : results) {
    if (r.applied && r.event) events.push_back(*r.event);
  }
  AfterCommit(events);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Transition>> ControlPlane::LeaseEnds(
    const AgentLink& link, const std::vector<const AgentReport*>& lost) {
  std::vector<Transition> out;
  if (lost.empty()) return out;
  // Rare (a lease ran out) and bounded by what this connection was handed: one read each.
  for (const AgentReport* r : lost) {
    absl::StatusOr<Workload> w = ports_.workloads->Get(r->id);
    if (absl::IsNotFound(w.status())) continue;
    RETURN_IF_ERROR(w.status());
    if (!HoldsCapacity(w->state) || w->assignment.cluster != link.cluster()) continue;
    if (r->attempt != 0 && r->attempt != w->attempts) continue;
    const AttemptEnded end{AttemptEnd::kClusterLost, link.cluster(),
                           r->time.value_or(ports_.clock->Now()),
                           r->message.empty() ? "its agent's lease ran out" : r->message,
                           absl::StrCat("agent:", link.cluster())};
    // Guarded by the state, cluster and attempt read here: a change in between skips it.
    out.push_back(EndAttempt(*w, end));
  }
  return out;
}

}  // namespace gpufed
