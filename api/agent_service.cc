#include "api/agent_service.h"

#include <google/protobuf/util/time_util.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "api/parse_errors.h"
#include "api/status.h"
#include "federation/status_macros.h"
#include "grpcpp/alarm.h"
#include "spdlog/spdlog.h"

namespace gpufed::api {
namespace {

// No message to an agent grows with the work its cluster holds: assignments go out in batches
// of about this many bytes, cancellations in batches of this many ids.
constexpr size_t kMaxAssignBatchBytes = 1 << 20;
constexpr size_t kMaxCancelBatchIds = 10000;
// Messages received and not yet handled beyond which the stream stops reading (backpressure).
constexpr size_t kMaxInbox = 256;

class AgentStream;

google::protobuf::Duration DurationToProto(std::chrono::milliseconds d) {
  return google::protobuf::util::TimeUtil::MillisecondsToDuration(d.count());
}

// The AgentChannel the control plane holds: forwards to the stream while it lives.
class ChannelHandle final : public AgentChannel {
 public:
  explicit ChannelHandle(AgentStream* stream) : stream_(stream) {}
  void SendRegistered(const Cluster& cluster) override;
  void SendAssignments(const std::vector<Workload>& workloads) override;
  void SendCancels(const std::vector<WorkloadId>& ids) override;
  void Close(CloseReason reason, const std::string& why) override;
  void Forget() {
    absl::MutexLock lock(&mu_);
    stream_ = nullptr;
  }

 private:
  AgentStream* Acquire();
  template <typename Fn>
  void WithStream(Fn fn);
  absl::Mutex mu_;
  AgentStream* stream_ ABSL_GUARDED_BY(mu_);
};

// One agent's stream. Reads are processed one batch at a time on the agent executor (in order,
// with backpressure: reading pauses while kMaxInbox messages wait). Writes are queued and go
// out one at a time. StartRead/StartWrite/Finish are called with no lock held because gRPC may
// run reactions inline. Reference-counted: gRPC (until OnDone), queued executor work and each
// channel call hold a reference. Messages travel as raw bytes, parsed and serialised here, so
// that a message that does not parse is told from the agent closing its side.
class AgentStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  AgentStream(const ApiContext& ctx, grpc::CallbackServerContext* context)
      : ctx_(ctx), context_(context), channel_(std::make_shared<ChannelHandle>(this)) {
    ctx_.metrics->agents_connected.Increment();
    // Without a credential there is nothing to wait for (one is checked with the first message,
    // off the gRPC thread, as it may need the store).
    if (!context_->client_metadata().contains("authorization") &&
        !Authenticator::HasClientCertificate(*context_)) {
      FinishOnce(grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                              "missing bearer token or client certificate"));
      return;
    }
    // A stream that never registers is closed: it holds a connection, a reactor and a slot in
    // the agent gauge, and the credential check that would end a bad one waits for a message.
    Ref();  // the alarm's, released by its callback (it runs once: fired or cancelled)
    register_alarm_.Set(std::chrono::system_clock::now() + ctx_.agent_register_timeout,
                        [this](bool fired) {
                          if (fired && !registered_.load(std::memory_order_acquire)) {
                            FinishOnce(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                                    "register: not received in time"));
                          }
                          Unref();
                        });
    StartRead(&in_);
  }

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // Reading goes on while earlier messages are being committed; whatever arrived meanwhile is
  // handled together, with all its status reports in one transaction.
  void OnReadDone(bool ok) override {
    if (!ok) {
      FinishOnce(grpc::Status::OK);  // the agent closed its side
      return;
    }
    v1::AgentMessage message;
    if (absl::Status parsed = ParseMessage(&in_, &message); !parsed.ok()) {
      // link_ belongs to the executor task: name the peer instead of the cluster.
      spdlog::warn("agent stream from {}: {}", context_->peer(), parsed.ToString());
      FinishOnce(ToGrpcStatus(parsed));
      return;
    }
    bool schedule = false;
    bool read_more = false;
    {
      absl::MutexLock lock(&mu_);
      inbox_.push_back(std::move(message));
      if (!processing_) processing_ = schedule = true;
      if (inbox_.size() < kMaxInbox) {
        read_more = true;
      } else {
        reading_paused_ = true;  // resumes once the inbox is drained
      }
    }
    if (schedule) {
      Ref();
      if (!ctx_.agent_executor->TrySubmit([this] {
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
    std::optional<grpc::Status> finish;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      finish.swap(deferred_finish_);
      if (ok && !finishing_) write = TakeNextLocked();
    }
    if (finish) return Finish(*finish);
    if (!ok) return FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "stream broken"));
    if (write) WriteCurrent();
  }

  void OnCancel() override { FinishOnce(grpc::Status::CANCELLED); }

  void OnDone() override {
    register_alarm_.Cancel();
    channel_->Forget();
    if (link_ != nullptr) {
      ctx_.plane->AgentDisconnected(*link_);
      spdlog::info("agent for cluster {} disconnected", link_->cluster());
    }
    ctx_.metrics->agents_connected.Decrement();
    Unref();
  }

  void Send(v1::ServerMessage message) {
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      if (message.has_registered()) epoch_ = message.registered().epoch();
      message.set_seq(++out_seq_);
      message.set_epoch(epoch_);
      queue_.push_back(std::move(message));
      write = TakeNextLocked();
    }
    if (write) WriteCurrent();
  }

  // Finishes the stream with `status` (the first call's; later ones do nothing). A Finish is the
  // last write, and a stream has one write in flight at most (gRPC's C++ rules): with a write
  // under way it waits for OnWriteDone, and no queued message goes out after it.
  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      finishing_ = true;
      if (writing_) {
        deferred_finish_ = status;
        return;
      }
    }
    Finish(status);
  }

  [[nodiscard]] const ApiContext& ctx() const { return ctx_; }

 private:
  bool TakeNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || queue_.empty()) return false;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    return true;
  }

  // Serialises current_ and starts writing it. Without the lock: current_ and current_bytes_
  // belong to the one write in flight.
  void WriteCurrent() {
    current_bytes_.Clear();
    bool own_buffer = false;
    const grpc::Status serialized = grpc::SerializationTraits<v1::ServerMessage>::Serialize(
        current_, &current_bytes_, &own_buffer);
    if (!serialized.ok()) {
      {
        absl::MutexLock lock(&mu_);
        writing_ = false;  // nothing was started: the Finish need not wait
      }
      FinishOnce(grpc::Status(
          grpc::StatusCode::INTERNAL,
          absl::StrCat("cannot serialise a message to the agent: ", serialized.error_message())));
      return;
    }
    StartWrite(&current_bytes_);
  }

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
        spdlog::warn("agent stream {}: {}", link_ ? link_->cluster() : "(unregistered)",
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
    std::vector<const v1::WorkloadStatus*> statuses;
    for (const v1::AgentMessage& m : batch) {
      if (link_ != nullptr && m.body_case() == v1::AgentMessage::kStatus) {
        for (const v1::WorkloadStatus& u : m.status().updates()) statuses.push_back(&u);
        continue;
      }
      RETURN_IF_ERROR(HandleStatuses(statuses));
      statuses.clear();
      RETURN_IF_ERROR(Handle(m));
    }
    return HandleStatuses(statuses);
  }

  absl::Status Handle(const v1::AgentMessage& m) {
    if (link_ == nullptr) {
      // Who is calling comes first: a stream without a valid credential learns nothing else.
      ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->AuthenticateAgent(*context_));
      if (m.body_case() != v1::AgentMessage::kRegister) {
        return absl::FailedPreconditionError("the first message on a stream must be register");
      }
      return HandleRegister(who, m.register_());
    }
    switch (m.body_case()) {
      case v1::AgentMessage::kRegister:
        return absl::FailedPreconditionError("register: already registered on this stream");
      case v1::AgentMessage::kHeartbeat: {
        RETURN_IF_ERROR(ctx_.plane->Heartbeat(*link_));
        // Only a connection that still speaks for its cluster renews the agent's lease.
        v1::ServerMessage renewal;
        renewal.mutable_lease()->set_heartbeat_seq(m.seq());
        *renewal.mutable_lease()->mutable_lease() = DurationToProto(ctx_.agent_lease);
        Send(std::move(renewal));
        return absl::OkStatus();
      }
      case v1::AgentMessage::kStatus:
        return absl::InternalError("status reports are handled in batches");
      case v1::AgentMessage::kInventory:
        return ctx_.plane->UpdateInventory(*link_, NodesFromProto(m.inventory().inventory()));
      case v1::AgentMessage::kTelemetry: {
        ASSIGN_OR_RETURN(std::vector<TelemetryMinute> minutes, TelemetryFromProto(m.telemetry()));
        return ctx_.plane->ApplyTelemetry(*link_, minutes);
      }
      case v1::AgentMessage::BODY_NOT_SET:
        return absl::InvalidArgumentError("body: empty agent message");
    }
    return absl::OkStatus();
  }

  absl::Status HandleRegister(const auth::Principal& who, const v1::Register& r) {
    ASSIGN_OR_RETURN(ClusterInfo info, ClusterInfoFromProto(r.cluster(), r.info()));
    std::vector<NodeInfo> nodes = NodesFromProto(r.inventory());
    std::vector<AgentReport> known;
    known.reserve(r.known_workloads_size());
    for (const v1::WorkloadStatus& s : r.known_workloads()) {
      ASSIGN_OR_RETURN(AgentReport report, AgentReportFromProto(s));
      known.push_back(std::move(report));
    }
    ASSIGN_OR_RETURN(link_, ctx_.plane->RegisterAgent(who, info, nodes, known, channel_));
    registered_.store(true, std::memory_order_release);
    register_alarm_.Cancel();
    spdlog::info("agent for cluster {} registered: {} nodes, epoch {}", link_->cluster(),
                 nodes.size(), link_->epoch());
    return absl::OkStatus();
  }

  absl::Status HandleStatuses(const std::vector<const v1::WorkloadStatus*>& statuses) {
    if (statuses.empty()) return absl::OkStatus();
    std::vector<AgentReport> reports;
    reports.reserve(statuses.size());
    v1::ServerMessage ack;
    for (const v1::WorkloadStatus* s : statuses) {
      ASSIGN_OR_RETURN(AgentReport report, AgentReportFromProto(*s));
      reports.push_back(std::move(report));
      v1::WorkloadStatus* a = ack.mutable_ack()->add_statuses();
      a->set_workload_id(s->workload_id());
      a->set_state(s->state());
      a->set_attempt(s->attempt());
    }
    RETURN_IF_ERROR(ctx_.plane->ApplyAgentReports(*link_, reports));
    // Only after the commit: the agent forgets what was acknowledged.
    Send(std::move(ack));
    return absl::OkStatus();
  }

  const ApiContext& ctx_;
  grpc::CallbackServerContext* const context_;
  std::atomic<int> refs_{1};  // gRPC's, released in OnDone
  const std::shared_ptr<ChannelHandle> channel_;
  grpc::ByteBuffer in_;  // the read in flight

  // Touched only by the one executor task handling this stream's messages (and OnDone, after
  // it: the task holds a reference).
  std::shared_ptr<AgentLink> link_;
  // Closes the stream unless it registered in time (ApiContext::agent_register_timeout).
  grpc::Alarm register_alarm_;
  std::atomic<bool> registered_{false};

  absl::Mutex mu_;
  std::deque<v1::ServerMessage> queue_ ABSL_GUARDED_BY(mu_);
  v1::ServerMessage current_;       // owned by the write in flight
  grpc::ByteBuffer current_bytes_;  // current_ serialised, likewise
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  // FinishOnce's status while a write was in flight: OnWriteDone finishes with it.
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
  // Received, not yet handled; one executor task at a time drains it (processing_).
  std::vector<v1::AgentMessage> inbox_ ABSL_GUARDED_BY(mu_);
  bool processing_ ABSL_GUARDED_BY(mu_) = false;
  bool reading_paused_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t out_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

AgentStream* ChannelHandle::Acquire() {
  absl::MutexLock lock(&mu_);
  if (stream_ != nullptr) stream_->Ref();
  return stream_;
}

template <typename Fn>
void ChannelHandle::WithStream(Fn fn) {
  AgentStream* s = Acquire();
  if (s == nullptr) return;
  fn(*s);
  s->Unref();
}

void ChannelHandle::SendRegistered(const Cluster& cluster) {
  WithStream([&](AgentStream& s) {
    v1::ServerMessage m;
    v1::Registered* r = m.mutable_registered();
    r->set_cluster(cluster.info.name);
    r->set_epoch(cluster.epoch);
    *r->mutable_heartbeat_interval() = DurationToProto(s.ctx().heartbeat_interval);
    *r->mutable_lease() = DurationToProto(s.ctx().agent_lease);
    s.Send(std::move(m));
  });
}

void ChannelHandle::SendAssignments(const std::vector<Workload>& workloads) {
  WithStream([&](AgentStream& s) {
    for (v1::ServerMessage& m : AssignMessages(workloads, kMaxAssignBatchBytes)) {
      s.Send(std::move(m));
    }
  });
}

void ChannelHandle::SendCancels(const std::vector<WorkloadId>& ids) {
  WithStream([&](AgentStream& s) {
    for (v1::ServerMessage& m : CancelMessages(ids, kMaxCancelBatchIds)) s.Send(std::move(m));
  });
}

void ChannelHandle::Close(CloseReason reason, const std::string& why) {
  // The agent waits its longest backoff after ABORTED, and redials at once after UNAVAILABLE;
  // a revoked credential gets it nowhere.
  grpc::StatusCode code = grpc::StatusCode::UNAVAILABLE;
  if (reason == CloseReason::kReplaced) code = grpc::StatusCode::ABORTED;
  if (reason == CloseReason::kRevoked) code = grpc::StatusCode::UNAUTHENTICATED;
  WithStream([&](AgentStream& s) { s.FinishOnce(grpc::Status(code, why)); });
}

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* AgentServiceImpl::Connect(
    grpc::CallbackServerContext* context) {
  return new AgentStream(ctx_, context);
}

}  // namespace gpufed::api
