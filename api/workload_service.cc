#include "api/workload_service.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>

#include "api/convert.h"
#include "federation/status_macros.h"
#include "federation/watch_filter.h"

namespace gpufed::api {
namespace {

// Below gRPC's default 4 MiB receive limit, so that every client can read every page.
constexpr size_t kMaxListResponseBytes = 2 << 20;

}  // namespace

grpc::ServerUnaryReactor* WorkloadServiceImpl::Submit(grpc::CallbackServerContext* context,
                                                      const v1::SubmitRequest* request,
                                                      v1::SubmitResponse* response) {
  // Converts, validates and queues the spec for the group commit; `done` runs after the commit.
  // Never blocks.
  auto submit = [this, context, request, response](const auth::Principal& who, auto done) {
    // A spec that is missing or does not convert goes to the use case too: it counts every
    // rejected submission.
    absl::StatusOr<WorkloadSpec> spec = request->has_spec()
                                            ? SpecFromProto(request->spec())
                                            : absl::InvalidArgumentError("spec: required");
    ctx_.plane->Submit(who, std::move(spec), DeadlineOf(*context),
                       [response, done](absl::StatusOr<SubmitResult> result) {
                         if (result.ok()) {
                           *response->mutable_workload() = WorkloadToProto(result->workload);
                           response->set_created(result->created);
                         }
                         done(result.status());
                       });
  };
  if (std::optional<auth::Principal> who = ctx_.authn->Cached(*context)) {
    // A known caller: nothing left that blocks, so no hop to the executor.
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    submit(*who, [reactor](const absl::Status& status) { reactor->Finish(ToGrpcStatus(status)); });
    return reactor;
  }
  return RunOnExecutorAsync(ctx_, context, [this, context, submit](auto done) {
    absl::StatusOr<auth::Principal> who = ctx_.authn->Authenticate(*context);
    if (!who.ok()) return done(who.status());
    submit(*who, done);
  });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::Get(grpc::CallbackServerContext* context,
                                                   const v1::GetWorkloadRequest* request,
                                                   v1::Workload* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    ASSIGN_OR_RETURN(WorkloadId id, WorkloadIdFromProto("id", request->id()));
    ASSIGN_OR_RETURN(Workload w, ctx_.plane->GetWorkload(who, id));
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
    ASSIGN_OR_RETURN(Explanation e, ctx_.plane->Explain(who, id));
    *response = ExplanationToProto(e);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::List(grpc::CallbackServerContext* context,
                                                    const v1::ListWorkloadsRequest* request,
                                                    v1::ListWorkloadsResponse* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    ASSIGN_OR_RETURN(ListFilter filter, ListFilterFromProto(*request));
    ASSIGN_OR_RETURN(WorkloadPage page, ctx_.plane->ListWorkloads(who, std::move(filter)));
    *response = WorkloadPageToProto(page, kMaxListResponseBytes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::Cancel(grpc::CallbackServerContext* context,
                                                      const v1::CancelRequest* request,
                                                      v1::Workload* response) {
  return RunOnExecutor(ctx_, context, [this, context, request, response]() -> absl::Status {
    ASSIGN_OR_RETURN(auth::Principal who, ctx_.authn->Authenticate(*context));
    ASSIGN_OR_RETURN(WorkloadId id, WorkloadIdFromProto("id", request->id()));
    ASSIGN_OR_RETURN(Workload w, ctx_.plane->Cancel(who, id, request->reason()));
    *response = WorkloadToProto(w);
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
  // A watcher that does not read holds at most this much (besides what gRPC's flow-control window
  // holds); past it, it is told to watch again. With WatchHub's 64 streams per caller, 1,000
  // unread streams hold at most ~200 MiB. A reader that keeps up never comes near it: events go
  // out as fast as gRPC takes them.
  static constexpr size_t kMaxQueued = 1000;
  static constexpr size_t kMaxQueuedBytes = 128 << 10;

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
    WorkloadId only_id = 0;
    if (!request_.workload_id().empty()) {
      absl::StatusOr<WorkloadId> id = WorkloadIdFromProto("workload_id", request_.workload_id());
      if (!id.ok()) return FinishOnce(ToGrpcStatus(id.status()));
      only_id = *id;
    }
    auto shared = std::make_shared<Shared>();
    absl::StatusOr<uint64_t> subscribed = absl::UnknownError("not subscribed");
    {
      absl::MutexLock shared_lock(&shared->mu);
      shared->reactor = this;
    }
    {
      // Under mu_ so OnDone (which reads handle_) cannot interleave with subscribing; after a
      // Finish, nothing subscribes any more.
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      filter_.emplace(*who, only_id);
      shared_ = shared;
      // Subscribe before reading the current state so no change slips between the two.
      subscribed = ctx_.watch->Subscribe(who->subject, [shared](const WorkloadEvent& e) {
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
      if (subscribed.ok()) handle_ = *subscribed;
    }
    if (!subscribed.ok()) return FinishOnce(ToGrpcStatus(subscribed.status()));
    if (only_id != 0) {
      absl::StatusOr<WorkloadEvent> first = ctx_.plane->WatchSnapshot(*who, only_id);
      if (!first.ok()) return FinishOnce(ToGrpcStatus(first.status()));
      Offer(*first);
    }
  }

  void Offer(const WorkloadEvent& e) {
    std::optional<grpc::Status> finish;
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      // The filter decides under mu_, so events are queued in the order it decided them.
      const WatchVerdict verdict = filter_->Offer(e);
      if (!verdict.deliver) return;
      if (verdict.end) end_after_queue_ = true;
      v1::WorkloadEvent event = EventToProto(e);
      const size_t size = event.ByteSizeLong();
      if (queue_.size() >= kMaxQueued || queued_bytes_ + size > kMaxQueuedBytes) {
        queue_.clear();
        queued_bytes_ = 0;
        end_after_queue_ = true;
        overflow_ = true;
      } else {
        queued_bytes_ += size;
        queue_.push_back(std::move(event));
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
      queued_bytes_ -= std::min(queued_bytes_, current_.ByteSizeLong());
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

  absl::Mutex mu_;
  // What this caller gets (federation/watch_filter.h); set by Start before it subscribes.
  std::optional<WatchFilter> filter_ ABSL_GUARDED_BY(mu_);
  uint64_t handle_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<Shared> shared_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::WorkloadEvent> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  v1::WorkloadEvent current_;  // owned by the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool end_after_queue_ ABSL_GUARDED_BY(mu_) = false;
  bool overflow_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::WorkloadEvent>* WorkloadServiceImpl::Watch(
    grpc::CallbackServerContext* context, const v1::WatchRequest* request) {
  return new WatchReactor(ctx_, context, *request);
}

}  // namespace gpufed::api
