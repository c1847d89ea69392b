#include "api/agent_service.h"

#include <atomic>
#include <deque>
#include <optional>
#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "api/status.h"
#include "federation/status_macros.h"
#include "federation/validation.h"
#include "spdlog/spdlog.h"

namespace gpufed::api {

// ---------------------------------------------------------------------------------------------
// AgentHub

void AgentHub::Seed(const std::vector<std::string>& clusters, Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  for (const std::string& c : clusters) {
    Entry& e = clusters_[c];
    if (e.last_heard == Clock::time_point{}) e.last_heard = now;
  }
}

void AgentHub::Attach(const std::string& cluster, const std::shared_ptr<AgentSession>& session) {
  std::shared_ptr<AgentSession> old;
  {
    absl::MutexLock lock(&mu_);
    Entry& e = clusters_[cluster];
    old = std::move(e.session);
    e.session = session;
    e.last_heard = Clock::now();
    e.reported_lost = false;
  }
  if (old && old != session) old->Close("another agent stream registered for this cluster");
}

void AgentHub::Detach(const std::string& cluster, const AgentSession* session) {
  absl::MutexLock lock(&mu_);
  auto it = clusters_.find(cluster);
  if (it != clusters_.end() && it->second.session.get() == session) it->second.session.reset();
}

void AgentHub::Heard(const std::string& cluster, Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  Entry& e = clusters_[cluster];
  e.last_heard = now;
  e.reported_lost = false;
}

void AgentHub::Dispatch(const std::vector<Workload>& placed) {
  absl::flat_hash_map<std::string, v1::ServerMessage> batches;
  for (const Workload& w : placed) {
    v1::ServerMessage& m = batches[w.assignment.cluster];
    v1::WorkAssignment* a = m.mutable_assign()->add_assignments();
    a->set_workload_id(absl::StrCat(w.id));
    *a->mutable_spec() = SpecToProto(w.spec);
    *a->mutable_assignment() = AssignmentToProto(w.assignment);
  }
  for (auto& [cluster, message] : batches) {
    std::shared_ptr<AgentSession> session;
    {
      absl::MutexLock lock(&mu_);
      auto it = clusters_.find(cluster);
      if (it != clusters_.end()) session = it->second.session;
    }
    if (session) session->Send(std::move(message));
  }
}

void AgentHub::SendCancel(const std::string& cluster, WorkloadId id) {
  std::shared_ptr<AgentSession> session;
  {
    absl::MutexLock lock(&mu_);
    auto it = clusters_.find(cluster);
    if (it != clusters_.end()) session = it->second.session;
  }
  if (!session) return;  // it learns of the cancel when it registers again
  v1::ServerMessage m;
  m.mutable_cancel()->add_workload_ids(absl::StrCat(id));
  session->Send(std::move(m));
}

std::vector<std::string> AgentHub::TakeTimedOut(Clock::time_point now, Clock::duration timeout) {
  std::vector<std::string> out;
  absl::MutexLock lock(&mu_);
  for (auto& [cluster, e] : clusters_) {
    if (!e.reported_lost && now - e.last_heard > timeout) {
      e.reported_lost = true;
      out.push_back(cluster);
    }
  }
  return out;
}

int AgentHub::connected() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [cluster, e] : clusters_) n += e.session ? 1 : 0;
  return n;
}

// ---------------------------------------------------------------------------------------------
// The stream

namespace {

class AgentStream;

// What the hub holds: forwards to the stream while it lives.
class SessionHandle final : public AgentSession {
 public:
  explicit SessionHandle(AgentStream* stream) : stream_(stream) {}
  void Send(v1::ServerMessage message) override;
  void Close(const std::string& why) override;
  void Forget() {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
  }

 private:
  AgentStream* Acquire();
  absl::Mutex mu_;
  AgentStream* stream_ ABSL_GUARDED_BY(mu_);
};

// One agent's stream. Reads are processed one at a time on the executor (in order, with
// backpressure: the next read starts when the previous message is handled). Writes are queued
// and go out one at a time. StartRead/StartWrite/Finish are called with no lock held because
// gRPC may run reactions inline. Reference-counted like the Watch reactor.
class AgentStream final : public grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage> {
 public:
  AgentStream(const ApiContext& ctx, grpc::CallbackServerContext* context,
              std::chrono::milliseconds heartbeat_interval)
      : ctx_(ctx), context_(context), heartbeat_interval_(heartbeat_interval) {
    handle_ = std::make_shared<SessionHandle>(this);
    ctx_.metrics->agents_connected.Increment();
    StartRead(&in_);
  }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Reading goes on while earlier messages are being committed; whatever arrived meanwhile is
  // handled together, with all its status updates in one transaction. Under load that turns one
  // commit per message into one commit per burst; without load nothing waits.
  void OnReadDone(bool ok) override {
    if (!ok) {
      FinishOnce(grpc::Status::OK);  // the agent closed its side
      return;
    }
    bool schedule = false;
    bool read_more = false;
    {
      absl::MutexLock lock(&mu_);
      inbox_.push_back(std::move(in_));
      if (!processing_) processing_ = schedule = true;
      if (inbox_.size() < kMaxInbox) {
        read_more = true;
      } else {
        reading_paused_ = true;  // backpressure: resume once the inbox is drained
      }
    }
    if (schedule) {
      Ref();
      if (!ctx_.executor->TrySubmit([this] {
            ProcessInbox();
            Unref();
          })) {
        Unref();
        FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server busy; reconnect"));
        return;
      }
    }
    if (read_more) StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (ok) write = TakeNextLocked();
    }
    if (!ok) return FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
    if (write) StartWrite(&current_);
  }

  void OnCancel() override { FinishOnce(grpc::Status::CANCELLED); }

  void OnDone() override {
    handle_->Forget();
    if (!cluster_.empty()) {
      ctx_.agents->Detach(cluster_, handle_.get());
      spdlog::info("agent for cluster {} disconnected", cluster_);
    }
    ctx_.metrics->agents_connected.Decrement();
    Unref();
  }

  void Send(v1::ServerMessage message) {
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      for (const v1::WorkAssignment& a : message.assign().assignments()) {
        if (absl::StatusOr<WorkloadId> id = WorkloadIdFromProto("workload_id", a.workload_id());
            id.ok()) {
          assigned_.insert(*id);
        }
      }
      message.set_seq(++out_seq_);
      message.set_epoch(epoch_);
      queue_.push_back(std::move(message));
      write = TakeNextLocked();
    }
    if (write) StartWrite(&current_);
  }

  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      finishing_ = true;
    }
    Finish(status);
  }

 private:
  bool IsAssigned(WorkloadId id) {
    absl::MutexLock lock(&mu_);
    return assigned_.contains(id);
  }

  bool TakeNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || queue_.empty()) return false;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    return true;
  }

  static constexpr size_t kMaxInbox = 256;

  void ProcessInbox() {
    for (;;) {
      std::vector<v1::AgentMessage> batch;
      bool resume = false;
      {
        absl::MutexLock lock(&mu_);
        if (inbox_.empty() || finishing_) {
          processing_ = false;
          return;
        }
        batch.swap(inbox_);
        resume = reading_paused_;
        reading_paused_ = false;
      }
      if (resume) StartRead(&in_);
      absl::Status status = HandleBatch(batch);
      if (!status.ok()) {
        spdlog::warn("agent stream {}: {}", cluster_.empty() ? "(unregistered)" : cluster_,
                     status.ToString());
        FinishOnce(ToGrpcStatus(status));
        absl::MutexLock lock(&mu_);
        processing_ = false;
        return;
      }
    }
  }

  // Messages in arrival order; consecutive status reports are applied together.
  absl::Status HandleBatch(std::vector<v1::AgentMessage>& batch) {
    google::protobuf::RepeatedPtrField<v1::WorkloadStatus> statuses;
    for (v1::AgentMessage& m : batch) {
      if (!cluster_.empty() && m.body_case() == v1::AgentMessage::kStatus) {
        for (v1::WorkloadStatus& u : *m.mutable_status()->mutable_updates()) {
          *statuses.Add() = std::move(u);
        }
        continue;
      }
      if (!statuses.empty()) {
        RETURN_IF_ERROR(HandleStatuses(statuses, /*during_register=*/false));
        statuses.Clear();
      }
      RETURN_IF_ERROR(Handle(m));
    }
    if (!statuses.empty()) {
      ctx_.agents->Heard(cluster_, std::chrono::steady_clock::now());
      RETURN_IF_ERROR(HandleStatuses(statuses, /*during_register=*/false));
    }
    return absl::OkStatus();
  }

  absl::Status Handle(const v1::AgentMessage& m) {
    if (cluster_.empty()) {
      if (m.body_case() != v1::AgentMessage::kRegister) {
        return absl::FailedPreconditionError("the first message on a stream must be register");
      }
      return HandleRegister(m.register_());
    }
    ctx_.agents->Heard(cluster_, std::chrono::steady_clock::now());
    switch (m.body_case()) {
      case v1::AgentMessage::kRegister:
        return absl::FailedPreconditionError("register: already registered on this stream");
      case v1::AgentMessage::kHeartbeat:
        return HandleHeartbeat();
      case v1::AgentMessage::kStatus:
        return HandleStatuses(m.status().updates(), /*during_register=*/false);
      case v1::AgentMessage::kInventory:
        return HandleInventory(m.inventory());
      case v1::AgentMessage::BODY_NOT_SET:
        return absl::InvalidArgumentError("body: empty agent message");
    }
    return absl::OkStatus();
  }

  absl::Status HandleRegister(const v1::Register& r) {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context_));
    RETURN_IF_ERROR(ValidateName("register.cluster", r.cluster()));
    if (!who.CanActForCluster(r.cluster())) {
      return absl::PermissionDeniedError("permission denied: this token may not speak for cluster");
    }
    ASSIGN_OR_RETURN(ClusterInfo info, ClusterInfoFromProto(r.cluster(), r.info()));
    std::vector<NodeInfo> nodes = NodesFromProto(r.inventory());
    RETURN_IF_ERROR(ValidateInventory(info, nodes));
    ASSIGN_OR_RETURN(Cluster cluster, ctx_.clusters->RegisterCluster(info, nodes));
    cluster_ = r.cluster();
    info_ = info;
    {
      absl::MutexLock lock(&mu_);
      epoch_ = cluster.epoch;
    }
    ctx_.scheduler->NotifyClusterChanged(cluster);
    // Attach before reading the active set: a placement committed after the read is dispatched
    // to this stream, one committed before it is in the set. Duplicates are harmless.
    ctx_.agents->Attach(cluster_, handle_);
    spdlog::info("agent for cluster {} registered: {} nodes, epoch {}", cluster_, nodes.size(),
                 cluster.epoch);

    v1::ServerMessage registered;
    registered.mutable_registered()->set_cluster(cluster_);
    registered.mutable_registered()->set_epoch(cluster.epoch);
    auto ms = heartbeat_interval_.count();
    registered.mutable_registered()->mutable_heartbeat_interval()->set_seconds(ms / 1000);
    registered.mutable_registered()->mutable_heartbeat_interval()->set_nanos(
        static_cast<int32_t>((ms % 1000) * 1000000));
    Send(std::move(registered));

    ASSIGN_OR_RETURN(std::vector<Workload> active, ctx_.workloads->ListActive(cluster_));
    {
      absl::MutexLock lock(&mu_);
      for (const Workload& w : active) assigned_.insert(w.id);
    }
    // What the agent says it still runs or finished while we were apart.
    RETURN_IF_ERROR(HandleStatuses(r.known_workloads(), /*during_register=*/true));

    // Re-send every assignment the cluster holds; the agent ignores those it already has.
    ASSIGN_OR_RETURN(active, ctx_.workloads->ListActive(cluster_));
    std::vector<Workload> to_run;
    v1::ServerMessage cancels;
    for (const Workload& w : active) {
      to_run.push_back(w);
      if (w.cancel_requested) cancels.mutable_cancel()->add_workload_ids(absl::StrCat(w.id));
    }
    // Work the agent runs that the server no longer wants on this cluster must stop.
    absl::flat_hash_set<WorkloadId> active_ids;
    for (const Workload& w : active) active_ids.insert(w.id);
    for (const v1::WorkloadStatus& s : r.known_workloads()) {
      absl::StatusOr<WorkloadId> id = WorkloadIdFromProto("workload_id", s.workload_id());
      if (id.ok() && !active_ids.contains(*id) &&
          !IsTerminal(static_cast<WorkloadState>(s.state()))) {
        cancels.mutable_cancel()->add_workload_ids(s.workload_id());
      }
    }
    if (!to_run.empty()) ctx_.agents->Dispatch(to_run);
    if (cancels.cancel().workload_ids_size() > 0) Send(std::move(cancels));
    ctx_.wake_scheduler();
    return absl::OkStatus();
  }

  // The agent changed its inventory on our behalf (a MIG repartition carried by an assignment):
  // store it as registration does, with the info registered on this stream.
  absl::Status HandleInventory(const v1::InventoryUpdate& u) {
    std::vector<NodeInfo> nodes = NodesFromProto(u.inventory());
    RETURN_IF_ERROR(ValidateInventory(info_, nodes));
    ASSIGN_OR_RETURN(Cluster cluster, ctx_.clusters->RegisterCluster(info_, nodes));
    ctx_.scheduler->NotifyClusterChanged(cluster);
    spdlog::info("agent for cluster {} updated its inventory: {} nodes", cluster_, nodes.size());
    ctx_.wake_scheduler();
    return absl::OkStatus();
  }

  absl::Status HandleHeartbeat() {
    auto now = std::chrono::system_clock::now();
    // The store only needs the time coarsely; spare it a write per heartbeat.
    if (now - last_heartbeat_write_ > std::chrono::seconds(10)) {
      RETURN_IF_ERROR(ctx_.clusters->RecordHeartbeat(cluster_, now));
      last_heartbeat_write_ = now;
    }
    return absl::OkStatus();
  }

  absl::Status HandleStatuses(const google::protobuf::RepeatedPtrField<v1::WorkloadStatus>& updates,
                              bool during_register) {
    if (updates.empty()) return absl::OkStatus();
    ctx_.metrics->agent_status_updates.Increment(updates.size());
    std::vector<Transition> transitions;
    v1::ServerMessage ack;
    const std::string actor = absl::StrCat("agent:", cluster_);
    for (const v1::WorkloadStatus& s : updates) {
      absl::StatusOr<WorkloadId> id = WorkloadIdFromProto("workload_id", s.workload_id());
      if (!id.ok()) return id.status();
      ASSIGN_OR_RETURN(WorkloadState state, StateFromProto(s.state(), "status.updates.state"));
      bool valid = state == WorkloadState::kRunning || state == WorkloadState::kSucceeded ||
                   state == WorkloadState::kFailed || state == WorkloadState::kCancelled;
      if (!valid) {
        return absl::InvalidArgumentError(
            absl::StrCat("status.updates.state: agents report RUNNING, SUCCEEDED, FAILED or "
                         "CANCELLED, got ",
                         static_cast<int>(s.state())));
      }
      // An agent speaks only for work assigned to its cluster; anything else is acknowledged
      // (so it is not re-sent forever) and ignored.
      if (IsAssigned(*id)) {
        Transition t;
        t.id = *id;
        t.from =
            state == WorkloadState::kRunning ? WorkloadState::kPlaced : WorkloadState::kRunning;
        t.to = state;
        t.actor = actor;
        t.reason = state == WorkloadState::kRunning ? "started" : s.message();
        if (IsTerminal(state)) t.exit_code = s.exit_code();
        t.message = s.message();
        if (s.has_time()) t.time = FromProto(s.time());
        transitions.push_back(std::move(t));
      } else if (!during_register) {
        spdlog::warn("agent {} reported workload {} which is not assigned to it", cluster_, *id);
      }
      v1::WorkloadStatus* a = ack.mutable_ack()->add_statuses();
      a->set_workload_id(s.workload_id());
      a->set_state(s.state());
    }
    if (!transitions.empty()) {
      ASSIGN_OR_RETURN(std::vector<TransitionResult> results,
                       ctx_.workloads->ApplyTransitions(transitions));
      // A terminal report for work the store still has as PLACED (its RUNNING was never
      // recorded): apply it from PLACED.
      std::vector<Transition> retry;
      for (size_t i = 0; i < results.size(); ++i) {
        const TransitionResult& r = results[i];
        if (!r.applied && r.current && r.current->state == WorkloadState::kPlaced &&
            IsTerminal(transitions[i].to)) {
          Transition t = transitions[i];
          t.from = WorkloadState::kPlaced;
          retry.push_back(std::move(t));
        }
      }
      if (!retry.empty()) {
        ASSIGN_OR_RETURN(std::vector<TransitionResult> more,
                         ctx_.workloads->ApplyTransitions(retry));
        results.insert(results.end(), more.begin(), more.end());
      }
      std::vector<WorkloadEvent> events;
      bool released = false;
      for (const TransitionResult& r : results) {
        if (!r.applied || !r.event) continue;
        events.push_back(*r.event);
        if (IsTerminal(r.event->to)) {
          ctx_.scheduler->NotifyReleased(r.id);
          absl::MutexLock lock(&mu_);
          assigned_.erase(r.id);
          released = true;
        }
      }
      ctx_.watch->Publish(events);
      if (released) ctx_.wake_scheduler();
    }
    // Only after the commit: the agent forgets what was acknowledged.
    Send(std::move(ack));
    return absl::OkStatus();
  }

  const ApiContext& ctx_;
  grpc::CallbackServerContext* const context_;
  const std::chrono::milliseconds heartbeat_interval_;
  std::atomic<int> refs_{1};  // gRPC's, released in OnDone
  std::shared_ptr<SessionHandle> handle_;
  v1::AgentMessage in_;

  // Touched only by the one executor task handling this stream's current message.
  std::string cluster_;
  ClusterInfo info_;  // as registered on this stream
  std::chrono::system_clock::time_point last_heartbeat_write_{};

  absl::Mutex mu_;
  std::deque<v1::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  v1::ServerMessage current_;  // owned by the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  // Received, not yet handled; one executor task at a time drains it (processing_).
  std::vector<v1::AgentMessage> inbox_ ABSL_GUARDED_BY(mu_);
  bool processing_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_paused_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t out_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Work handed to this cluster (from the store at registration, then every dispatch).
  absl::flat_hash_set<WorkloadId> assigned_ ABSL_GUARDED_BY(mu_);

  friend class SessionHandle;
};

AgentStream* SessionHandle::Acquire() {
  absl::MutexLock lock(&mu_);
  if (stream_ != nullptr) stream_->Ref();
  return stream_;
}

void SessionHandle::Send(v1::ServerMessage message) {
  AgentStream* s = Acquire();
  if (s == nullptr) return;
  s->Send(std::move(message));
  s->Unref();
}

void SessionHandle::Close(const std::string& why) {
  AgentStream* s = Acquire();
  if (s == nullptr) return;
  s->FinishOnce(grpc::Status(grpc::StatusCode::ABORTED, why));
  s->Unref();
}

}  // namespace

grpc::ServerBidiReactor<v1::AgentMessage, v1::ServerMessage>* AgentServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  return new AgentStream(ctx_, context, heartbeat_interval_);
}

}  // namespace gpufed::api
