#include "api/workload_service.h"

#include <atomic>
#include <deque>
#include <optional>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/agent_service.h"
#include "api/convert.h"
#include "federation/status_macros.h"
#include "federation/validation.h"

namespace gpufed::api {
namespace {

constexpr int kDefaultPageSize = 100;
constexpr int kMaxPageSize = 1000;

std::string EncodePageToken(WorkloadId before_id) {
  return absl::WebSafeBase64Escape(absl::StrCat("v1:", before_id));
}

absl::StatusOr<WorkloadId> DecodePageToken(absl::string_view token) {
  std::string raw;
  WorkloadId id = 0;
  if (!absl::WebSafeBase64Unescape(token, &raw) || raw.rfind("v1:", 0) != 0 ||
      !absl::SimpleAtoi(absl::string_view(raw).substr(3), &id) || id <= 0) {
    return absl::InvalidArgumentError("page_token: not a token from a previous List response");
  }
  return id;
}

// Loads a workload the caller may see; NOT_FOUND otherwise (another tenant's id looks absent).
absl::StatusOr<Workload> GetVisible(const ApiContext& ctx, const auth::Principal& who,
                                    WorkloadId id) {
  absl::StatusOr<Workload> w = ctx.workloads->Get(id);
  if (!w.ok()) return w.status();
  if (!who.CanRead(w->spec.tenant)) {
    return absl::NotFoundError(absl::StrCat("workload ", id, " not found"));
  }
  return w;
}

}  // namespace

grpc::ServerUnaryReactor* WorkloadServiceImpl::Submit(grpc::CallbackServerContext* context,
                                                      const v1::SubmitRequest* request,
                                                      v1::SubmitResponse* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    absl::Status status = [&]() -> absl::Status {
      ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
      if (!request->has_spec()) return absl::InvalidArgumentError("spec: required");
      ASSIGN_OR_RETURN(WorkloadSpec spec, SpecFromProto(request->spec()));
      if (spec.tenant.empty()) spec.tenant = who.tenant;
      RETURN_IF_ERROR(ValidateName("spec.tenant", spec.tenant));
      if (!who.CanSubmit(spec.tenant)) {
        return absl::PermissionDeniedError("permission denied: may not submit to this tenant");
      }
      RETURN_IF_ERROR(ValidateSpec(spec));
      ASSIGN_OR_RETURN(SubmitResult result, ctx_.workloads->Submit(spec));
      *response->mutable_workload() = WorkloadToProto(result.workload);
      response->set_created(result.created);
      if (result.created) {
        ctx_.metrics->submissions_created.Increment();
        ctx_.scheduler->NotifySubmitted(result.workload);
        WorkloadEvent event{result.workload, WorkloadState::kUnspecified, WorkloadState::kPending,
                            result.workload.create_time};
        ctx_.watch->Publish(event);
        ctx_.wake_scheduler();
      } else {
        ctx_.metrics->submissions_replayed.Increment();
      }
      return absl::OkStatus();
    }();
    if (!status.ok()) ctx_.metrics->submissions_rejected.Increment();
    return status;
  });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::Get(grpc::CallbackServerContext* context,
                                                   const v1::GetWorkloadRequest* request,
                                                   v1::Workload* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    ASSIGN_OR_RETURN(WorkloadId id, WorkloadIdFromProto("id", request->id()));
    ASSIGN_OR_RETURN(Workload w, GetVisible(ctx_, who, id));
    *response = WorkloadToProto(w);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::Explain(grpc::CallbackServerContext* context,
                                                       const v1::ExplainRequest* request,
                                                       v1::ExplainResponse* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    ASSIGN_OR_RETURN(WorkloadId id, WorkloadIdFromProto("id", request->id()));
    ASSIGN_OR_RETURN(Workload w, GetVisible(ctx_, who, id));
    *response->mutable_workload() = WorkloadToProto(w);
    switch (w.state) {
      case WorkloadState::kPending: {
        PlacementDecision d = ctx_.scheduler->Explain(w.spec);
        if (d.assignment) {
          response->set_fits_now_on(d.assignment->cluster);
          response->set_explanation(absl::StrCat("fits now on ", d.assignment->cluster,
                                                 "; the scheduler places it in its next cycle"));
        } else {
          response->set_explanation(RenderReason(d.reason));
          response->set_reason_code(std::string(ReasonCodeName(d.reason.code)));
          response->set_never_fits(d.reason.never_fits());
        }
        break;
      }
      case WorkloadState::kPlaced:
      case WorkloadState::kRunning:
        response->set_explanation(absl::StrCat(StateName(w.state), " on ", w.assignment.cluster,
                                               " (", w.assignment.replicas.size(), " replica",
                                               w.assignment.replicas.size() == 1 ? "" : "s", ")"));
        break;
      default:
        response->set_explanation(
            absl::StrCat(StateName(w.state), w.message.empty() ? "" : ": ", w.message));
        break;
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::List(grpc::CallbackServerContext* context,
                                                    const v1::ListWorkloadsRequest* request,
                                                    v1::ListWorkloadsResponse* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    ListFilter filter;
    filter.tenant = request->tenant();
    if (filter.tenant.empty() && !who.SeesAllTenants()) filter.tenant = who.tenant;
    if (!filter.tenant.empty() && !who.CanRead(filter.tenant)) {
      return absl::PermissionDeniedError("permission denied: may not list this tenant");
    }
    if (filter.tenant.empty() && !who.SeesAllTenants()) {
      return absl::PermissionDeniedError("permission denied");
    }
    filter.project = request->project();
    filter.cluster = request->cluster();
    for (int i = 0; i < request->states_size(); ++i) {
      ASSIGN_OR_RETURN(WorkloadState s,
                       StateFromProto(request->states(i), absl::StrCat("states[", i, "]")));
      filter.states.push_back(s);
    }
    if (request->page_size() > kMaxPageSize) {
      return absl::InvalidArgumentError(absl::StrCat("page_size: must be at most ", kMaxPageSize,
                                                     ", got ", request->page_size()));
    }
    filter.page_size =
        request->page_size() == 0 ? kDefaultPageSize : static_cast<int>(request->page_size());
    if (!request->page_token().empty()) {
      ASSIGN_OR_RETURN(filter.before_id, DecodePageToken(request->page_token()));
    }
    ASSIGN_OR_RETURN(WorkloadPage page, ctx_.workloads->List(filter));
    for (const Workload& w : page.workloads) *response->add_workloads() = WorkloadToProto(w);
    if (page.next_before_id != 0) {
      response->set_next_page_token(EncodePageToken(page.next_before_id));
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::Cancel(grpc::CallbackServerContext* context,
                                                      const v1::CancelRequest* request,
                                                      v1::Workload* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    ASSIGN_OR_RETURN(WorkloadId id, WorkloadIdFromProto("id", request->id()));
    if (request->reason().size() > 1024) {
      return absl::InvalidArgumentError("reason: must be at most 1024 characters");
    }
    ASSIGN_OR_RETURN(Workload before, GetVisible(ctx_, who, id));
    if (!who.CanSubmit(before.spec.tenant)) {
      return absl::PermissionDeniedError("permission denied: may not cancel in this tenant");
    }
    std::string reason = request->reason().empty() ? "cancelled by user" : request->reason();
    ASSIGN_OR_RETURN(WorkloadStore::CancelResult result,
                     ctx_.workloads->RequestCancel(id, absl::StrCat("user:", who.subject), reason));
    if (result.event) ctx_.watch->Publish(*result.event);
    if (result.workload.state == WorkloadState::kCancelled) {
      ctx_.scheduler->NotifyReleased(id);  // drops it from the pending queue
    } else if (result.workload.cancel_requested && HoldsCapacity(result.workload.state)) {
      ctx_.agents->SendCancel(result.workload.assignment.cluster, id);
    }
    *response = WorkloadToProto(result.workload);
    return absl::OkStatus();
  });
}

namespace {

// Streams events to one Watch caller. Publishers (any thread) queue events; writes go out one at
// a time. gRPC may run reactions inline, so StartWrite and Finish are only ever called with no
// lock held. The reactor is reference-counted: gRPC's OnDone, the pending Start task and each
// publisher delivery hold a reference, so nobody touches it after it is deleted.
class WatchReactor final : public grpc::ServerWriteReactor<v1::WorkloadEvent> {
 public:
  static constexpr size_t kMaxQueued = 10000;

  WatchReactor(const ApiContext& ctx, grpc::CallbackServerContext* context,
               v1::WatchRequest request)
      : ctx_(ctx), context_(context), request_(std::move(request)) {
    Ref();  // for Start
    bool queued = ctx_.executor->TrySubmit([this] {
      Start();
      Unref();
    });
    if (!queued) {
      Unref();
      FinishOnce(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server busy; retry"));
    }
  }

  void OnWriteDone(bool ok) override {
    std::optional<grpc::Status> finish;
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        finish = grpc::Status(grpc::StatusCode::CANCELLED, "stream closed");
      } else {
        write = TakeNextLocked(&finish);
      }
    }
    if (write) StartWrite(&current_);
    if (finish) FinishOnce(*finish);
  }

  void OnCancel() override {
    bool idle;
    {
      absl::MutexLock lock(&mu_);
      idle = !writing_;
    }
    // With a write outstanding, OnWriteDone(false) follows and finishes.
    if (idle) FinishOnce(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    uint64_t handle = 0;
    std::shared_ptr<Shared> shared;
    {
      absl::MutexLock lock(&mu_);
      handle = handle_;
      shared = shared_;
    }
    if (handle != 0) ctx_.watch->Unsubscribe(handle);
    if (shared) {
      absl::MutexLock lock(&shared->mu);
      shared->reactor = nullptr;
    }
    Unref();
  }

 private:
  struct Shared {
    absl::Mutex mu;
    WatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
  };

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  void Start() {
    absl::StatusOr<auth::Principal> who = ctx_.authn->Authenticate(*context_);
    if (!who.ok()) return FinishOnce(ToGrpcStatus(who.status()));
    principal_ = *who;
    if (!request_.workload_id().empty()) {
      absl::StatusOr<WorkloadId> id = WorkloadIdFromProto("workload_id", request_.workload_id());
      if (!id.ok()) return FinishOnce(ToGrpcStatus(id.status()));
      only_id_ = *id;
    }
    auto shared = std::make_shared<Shared>();
    {
      absl::MutexLock shared_lock(&shared->mu);
      shared->reactor = this;
    }
    {
      // Under mu_ so OnDone (which reads handle_) cannot interleave with subscribing; after a
      // Finish, nothing subscribes any more.
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      shared_ = shared;
      // Subscribe before reading the current state so no change slips between the two.
      handle_ = ctx_.watch->Subscribe([shared](const WorkloadEvent& e) {
        WatchReactor* reactor = nullptr;
        {
          absl::MutexLock l(&shared->mu);
          reactor = shared->reactor;
          if (reactor != nullptr) reactor->Ref();
        }
        if (reactor == nullptr) return;
        reactor->Offer(e);
        reactor->Unref();
      });
    }
    if (only_id_ != 0) {
      absl::StatusOr<Workload> w = GetVisible(ctx_, principal_, only_id_);
      if (!w.ok()) return FinishOnce(ToGrpcStatus(w.status()));
      Offer(WorkloadEvent{*w, w->state, w->state, w->update_time});
    }
  }

  void Offer(const WorkloadEvent& e) {
    if (only_id_ != 0 && e.workload.id != only_id_) return;
    if (!principal_.CanRead(e.workload.spec.tenant)) return;
    std::optional<grpc::Status> finish;
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      if (only_id_ != 0) {
        // The initial snapshot and the live stream may overlap; never repeat or go backwards.
        if (sent_any_ && e.workload.version <= last_version_) return;
        last_version_ = e.workload.version;
        sent_any_ = true;
        if (IsTerminal(e.workload.state)) end_after_queue_ = true;
      }
      if (queue_.size() >= kMaxQueued) {
        queue_.clear();
        end_after_queue_ = true;
        overflow_ = true;
      } else {
        queue_.push_back(EventToProto(e));
      }
      write = TakeNextLocked(&finish);
    }
    if (write) StartWrite(&current_);
    if (finish) FinishOnce(*finish);
  }

  // Picks the next event to write (true) or decides to finish; only when no write is in flight.
  bool TakeNextLocked(std::optional<grpc::Status>* finish) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return false;
    if (!queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      return true;
    }
    if (end_after_queue_) {
      *finish = overflow_ ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                         "watcher too slow; events dropped, watch again")
                          : grpc::Status::OK;
    }
    return false;
  }

  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      finishing_ = true;
    }
    Finish(status);
  }

  const ApiContext& ctx_;
  grpc::CallbackServerContext* const context_;
  const v1::WatchRequest request_;
  std::atomic<int> refs_{1};  // gRPC's, released in OnDone
  // Written by Start before the subscription exists; read-only afterwards.
  auth::Principal principal_;
  WorkloadId only_id_ = 0;

  absl::Mutex mu_;
  uint64_t handle_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<Shared> shared_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::WorkloadEvent> queue_ ABSL_GUARDED_BY(mu_);
  v1::WorkloadEvent current_;  // owned by the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool end_after_queue_ ABSL_GUARDED_BY(mu_) = false;
  bool overflow_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t last_version_ ABSL_GUARDED_BY(mu_) = 0;
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::WorkloadEvent>* WorkloadServiceImpl::Watch(
    grpc::CallbackServerContext* context, const v1::WatchRequest* request) {
  return new WatchReactor(ctx_, context, *request);
}

}  // namespace gpufed::api
