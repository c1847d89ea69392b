#include "api/workload_service.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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
  return ServeAsync(
      ctx_, context, *request, CallKind::kWrite,
      [this, request, response](const auth::Principal& who, absl::Time deadline, auto done) {
        // A spec that is missing or does not convert goes to the use case too: it
        // counts every rejected submission.
        absl::StatusOr<WorkloadSpec> spec = request->has_spec()
                                                ? SpecFromProto(request->spec())
                                                : absl::InvalidArgumentError("spec: required");
        ctx_.plane->Submit(who, std::move(spec), deadline,
                           [response, done](absl::StatusOr<SubmitResult> result) {
                             if (result.ok()) {
                               *response->mutable_workload() = WorkloadToProto(result->workload);
                               response->set_created(result->created);
                             }
                             done(result.status());
                           });
      });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::Get(grpc::CallbackServerContext* context,
                                                   const v1::GetWorkloadRequest* request,
                                                   v1::Workload* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(WorkloadId id, WorkloadIdFromProto("id", request->id()));
                 ASSIGN_OR_RETURN(Workload w, ctx_.plane->GetWorkload(who, id));
                 *response = WorkloadToProto(w);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::Explain(grpc::CallbackServerContext* context,
                                                       const v1::ExplainRequest* request,
                                                       v1::ExplainResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(WorkloadId id, WorkloadIdFromProto("id", request->id()));
                 ASSIGN_OR_RETURN(Explanation e, ctx_.plane->Explain(who, id));
                 *response = ExplanationToProto(e);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::WhatIf(grpc::CallbackServerContext* context,
                                                      const v1::SubmitRequest* request,
                                                      v1::WhatIfResponse* response) {
  // On the executor like the other reads: routing a spec on the scheduler's pool takes an engine
  // call per allowed offer.
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 if (!request->has_spec()) return absl::InvalidArgumentError("spec: required");
                 ASSIGN_OR_RETURN(WorkloadSpec spec, SpecFromProto(request->spec()));
                 ASSIGN_OR_RETURN(RoutingExplanation e, ctx_.plane->WhatIf(who, std::move(spec)));
                 *response = WhatIfToProto(e);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::List(grpc::CallbackServerContext* context,
                                                    const v1::ListWorkloadsRequest* request,
                                                    v1::ListWorkloadsResponse* response) {
  return Serve(ctx_, context, *request, CallKind::kRead,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(ListFilter filter, ListFilterFromProto(*request));
                 ASSIGN_OR_RETURN(WorkloadPage page,
                                  ctx_.plane->ListWorkloads(who, std::move(filter)));
                 *response = WorkloadPageToProto(page, kMaxListResponseBytes);
                 return absl::OkStatus();
               });
}

grpc::ServerUnaryReactor* WorkloadServiceImpl::Cancel(grpc::CallbackServerContext* context,
                                                      const v1::CancelRequest* request,
                                                      v1::Workload* response) {
  return Serve(ctx_, context, *request, CallKind::kWrite,
               [this, request, response](const auth::Principal& who) -> absl::Status {
                 ASSIGN_OR_RETURN(WorkloadId id, WorkloadIdFromProto("id", request->id()));
                 ASSIGN_OR_RETURN(Workload w, ctx_.plane->Cancel(who, id, request->reason()));
                 *response = WorkloadToProto(w);
                 return absl::OkStatus();
               });
}

namespace {

// The largest resume_after a Timestamp (nanoseconds since 1970 in 64 bits) can hold.
constexpr int64_t kMaxResumeSeconds = 9223372035;

// Streams events to one Watch caller. Publishers (any thread) queue events; writes go out one at
// a time. gRPC may run reactions inline, so StartWrite and Finish are only ever called with no
// lock held. The reactor is reference-counted: gRPC's OnDone, the pending Start task, a pending
// catch-up read and each publisher delivery hold a reference, so nobody touches it after it is
// deleted.
//
// A resumed Watch of every workload catches up first (federation/watch_filter.h): one page of
// the workloads changed since the resume point is read (on the executor) whenever the previous
// page has been written, and all of it goes out before the live events published meanwhile,
// which wait in the bounded queue.
class WatchReactor final : public grpc::ServerWriteReactor<v1::WorkloadEvent> {
 public:
  // A watcher that does not read holds at most this much (besides what gRPC's flow-control window
  // holds); past it, it is told to watch again. With WatchHub's 64 streams per caller, 1,000
  // unread streams hold at most ~200 MiB. A reader that keeps up never comes near it: events go
  // out as fast as gRPC takes them.
  static constexpr size_t kMaxQueued = 1000;
  static constexpr size_t kMaxQueuedBytes = 128 << 10;
  // Workloads read per page of a catch-up: what waits for the reader besides the queue.
  static constexpr int kResyncPage = 64;

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
    std::optional<grpc::Status> deferred;  // FinishOnce came while this write was in flight
    bool turn = false;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      deferred.swap(deferred_finish_);
      if (deferred) {
        // finishing: nothing more goes out
      } else if (!ok) {
        finish = grpc::Status(grpc::StatusCode::CANCELLED, "stream closed");
      } else {
        turn = AdvanceLocked(&finish);
      }
    }
    if (deferred) return Finish(*deferred);
    Continue(turn, finish);
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
    if (shared) shared->Detach();
    Unref();
  }

 private:
  using Message = WatchHub::Message;

  // What the hub holds of this stream: it may outlive the reactor (OnDone clears the pointer),
  // and hands each delivery to the reactor under a reference of its own.
  class Shared final : public WatchHub::Subscriber {
   public:
    explicit Shared(WatchReactor* reactor) : reactor_(reactor) {}
    bool OnEvent(const WorkloadEvent& e, const Message& message, size_t bytes) override {
      // A stream that is ending takes nothing more: cheap to skip, even for a thousand of them.
      if (done_.load(std::memory_order_relaxed)) return false;
      WatchReactor* r = Acquire();
      if (r == nullptr) return false;
      const bool turn = r->Offer(e, message, bytes);
      r->Unref();
      return turn;
    }
    void OnTurn() override {
      if (WatchReactor* r = Acquire()) {
        r->Turn();
        r->Unref();
      }
    }
    void OnLost() override {
      if (WatchReactor* r = Acquire()) {
        r->Drop();
        r->Unref();
      }
    }
    void OnRevoked() override {
      if (WatchReactor* r = Acquire()) {
        r->FinishOnce(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "credential revoked"));
        r->Unref();
      }
    }
    // No more deliveries matter: the stream is ending (or has ended).
    void Done() { done_.store(true, std::memory_order_relaxed); }
    void Detach() {
      Done();
      absl::MutexLock lock(&mu_);
      reactor_ = nullptr;
    }

   private:
    WatchReactor* Acquire() {
      absl::MutexLock lock(&mu_);
      if (reactor_ != nullptr) reactor_->Ref();
      return reactor_;
    }

    std::atomic<bool> done_{false};
    absl::Mutex mu_;
    WatchReactor* reactor_ ABSL_GUARDED_BY(mu_);
  };

  // A live event waiting to be written, with what the catch-up check needs. The message is
  // shared with every other stream that queued it (WatchHub).
  struct Queued {
    Message event;
    WorkloadId id = 0;
    uint64_t version = 0;
    size_t bytes = 0;
  };

  void Ref() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  // The request's resume fields; INVALID_ARGUMENT naming the field.
  absl::Status ParseResume(bool one_workload) {
    if (request_.after_version() != 0 && !one_workload) {
      return absl::InvalidArgumentError("after_version: only with workload_id");
    }
    if (!request_.has_resume_after()) return absl::OkStatus();
    if (one_workload) {
      return absl::InvalidArgumentError(
          "resume_after: only without workload_id (a Watch of one workload resumes with "
          "after_version)");
    }
    const google::protobuf::Timestamp& t = request_.resume_after();
    if (t.seconds() < 0 || t.seconds() > kMaxResumeSeconds || t.nanos() < 0 ||
        t.nanos() > 999999999) {
      return absl::InvalidArgumentError(
          "resume_after: not a valid time (seconds 0..9223372035, nanos 0..999999999)");
    }
    return absl::OkStatus();
  }

  void Start() {
    // The stream itself lives as long as its caller wants; each read it makes for that caller
    // is bounded like a unary call.
    DeadlineScope deadline(AbslNow(*ctx_.clock) + ctx_.max_call_duration);
    absl::StatusOr<auth::Principal> who = ctx_.authn->Authenticate(*context_);
    if (!who.ok()) return FinishOnce(ToGrpcStatus(who.status()));
    if (absl::Status allowed = ControlPlane::AuthorizeWatch(*who); !allowed.ok()) {
      return FinishOnce(ToGrpcStatus(allowed));
    }
    WorkloadId only_id = 0;
    if (!request_.workload_id().empty()) {
      absl::StatusOr<WorkloadId> id = WorkloadIdFromProto("workload_id", request_.workload_id());
      if (!id.ok()) return FinishOnce(ToGrpcStatus(id.status()));
      only_id = *id;
    }
    if (absl::Status resume = ParseResume(only_id != 0); !resume.ok()) {
      return FinishOnce(ToGrpcStatus(resume));
    }
    auto shared = std::make_shared<Shared>(this);
    absl::StatusOr<uint64_t> subscribed = absl::UnknownError("not subscribed");
    {
      // Under mu_ so OnDone (which reads handle_) cannot interleave with subscribing; after a
      // Finish, nothing subscribes any more.
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      filter_.emplace(*who, only_id, request_.after_version());
      who_ = *who;
      if (request_.has_resume_after()) {
        resync_from_ = WatchResumePoint(FromProto(request_.resume_after()));
        fetching_ = true;
      }
      shared_ = shared;
      // Subscribe before reading the current state so no change slips between the two.
      subscribed = ctx_.watch->Subscribe(CallerKey(*who), shared, who->token_id);
      if (subscribed.ok()) handle_ = *subscribed;
    }
    if (!subscribed.ok()) return FinishOnce(ToGrpcStatus(subscribed.status()));
    if (only_id != 0) {
      absl::StatusOr<WorkloadEvent> first = ctx_.plane->WatchSnapshot(*who, only_id);
      if (!first.ok()) return FinishOnce(ToGrpcStatus(first.status()));
      const Message message = WatchHub::ToMessage(*first);
      Continue(Offer(*first, message, message->ByteSizeLong()), std::nullopt);
    }
    if (request_.has_resume_after()) ReadResyncPage();
  }

  // Reads the next page of the catch-up (on an executor thread) and queues what the filter
  // lets through.
  void ReadResyncPage() {
    std::optional<ChangeCursor> from;
    {
      std::optional<grpc::Status> finish;
      bool turn = false;
      {
        absl::MutexLock lock(&mu_);
        if (finishing_) return;
        from = resync_from_;
        if (!from) {
          // Dropped between asking for this page and now (DropLocked): nothing to read, but
          // what waited for the read (the end, RESOURCE_EXHAUSTED) must still come.
          fetching_ = false;
          turn = AdvanceLocked(&finish);
        }
      }
      if (!from) return Continue(turn, finish);
    }
    DeadlineScope deadline(AbslNow(*ctx_.clock) + ctx_.max_call_duration);
    absl::StatusOr<std::vector<Workload>> page = ctx_.plane->WatchResync(*who_, *from, kResyncPage);
    if (!page.ok()) return FinishOnce(ToGrpcStatus(page.status()));
    std::optional<grpc::Status> finish;
    bool turn = false;
    {
      absl::MutexLock lock(&mu_);
      fetching_ = false;
      if (finishing_) return;
      // The queue overflowed meanwhile: the stream ends once what was written is done.
      if (overflow_) page->clear();
      if (overflow_ || page->size() < static_cast<size_t>(kResyncPage)) {
        resync_from_.reset();  // the last page
      } else {
        resync_from_ = ChangeCursor{page->back().update_time, page->back().id};
      }
      for (Workload& w : *page) {
        if (!filter_->OfferResync(w).deliver) continue;
        if (++resynced_ > kMaxWatchResync) {
          finish = grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                absl::StrCat("resume_after: more than ", kMaxWatchResync,
                                             " workloads changed since; list and watch again"));
          break;
        }
        const WorkloadState state = w.state;
        const Timestamp time = w.update_time;
        v1::WorkloadEvent event = EventToProto(WorkloadEvent{std::move(w), state, state, time});
        event.set_resync(true);
        resync_queue_.push_back(std::move(event));
      }
      if (finish) {
        resync_queue_.clear();
        resync_from_.reset();
      } else {
        turn = AdvanceLocked(&finish);
      }
    }
    Continue(turn, finish);
  }

  // Queues one live event; true when this stream now wants a turn to write (the hub's caller
  // passes that on).
  bool Offer(const WorkloadEvent& e, const Message& message, size_t bytes) {
    std::optional<grpc::Status> finish;
    bool turn = false;
    {
      absl::MutexLock lock(&mu_);
      // After a drop nothing more is queued: the caller resumes from the last event it got, and
      // an event after the gap would move that point past what it never saw.
      if (finishing_ || overflow_) return false;
      // The filter decides under mu_, so events are queued in the order it decided them.
      const WatchVerdict verdict = filter_->Offer(e);
      if (verdict.end) end_after_queue_ = true;
      if (verdict.deliver) {
        if (CatchingUpLocked())
          caught_up_floor_ = std::min(caught_up_floor_, e.workload.update_time);
        if (queue_.size() >= kMaxQueued || queued_bytes_ + bytes > kMaxQueuedBytes) {
          DropLocked();
        } else {
          queued_bytes_ += bytes;
          queue_.push_back(Queued{message, e.workload.id, e.workload.version, bytes});
        }
      }
      turn = AdvanceLocked(&finish);
    }
    if (finish) FinishOnce(*finish);
    return turn;
  }

  // Events for this stream were dropped (the hub fell behind).
  void Drop() {
    std::optional<grpc::Status> finish;
    bool turn = false;
    {
      absl::MutexLock lock(&mu_);
      if (finishing_ || overflow_) return;
      DropLocked();
      turn = AdvanceLocked(&finish);
    }
    Continue(turn, finish);
  }

  // The hub's turn for this stream: the next write, if one is still due.
  void Turn() {
    std::optional<grpc::Status> finish;
    bool write = false;
    {
      absl::MutexLock lock(&mu_);
      turn_pending_ = false;
      write = TakeNextLocked(&finish);
    }
    if (write) StartWrite(current_.get());
    if (finish) FinishOnce(*finish);
  }

  // After anything changed what waits: asks for a turn (true) when a write is due, or else
  // lets TakeNextLocked finish the stream or fetch the catch-up's next page. Writes start only
  // in a turn, so that they take turns with every other caller's streams (WatchHub).
  bool AdvanceLocked(std::optional<grpc::Status>* finish) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || turn_pending_ || finishing_) return false;
    const bool due =
        !resync_queue_.empty() || (!fetching_ && !resync_from_.has_value() && !queue_.empty());
    if (due) {
      turn_pending_ = true;
      return true;
    }
    TakeNextLocked(finish);  // no write is due: at most a fetch or the end
    return false;
  }

  // What AdvanceLocked decided, done with no lock held: a turn asked of the hub, or the end.
  void Continue(bool turn, const std::optional<grpc::Status>& finish) {
    if (turn) {
      uint64_t handle = 0;
      {
        absl::MutexLock lock(&mu_);
        handle = handle_;
      }
      ctx_.watch->Ready(handle);
    }
    if (finish) FinishOnce(*finish);
  }

  // Too slow, or events lost: what waits is dropped, and once the write in flight (if any) is
  // done the stream ends RESOURCE_EXHAUSTED; the reader resumes from the last event it got.
  void DropLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::deque<Queued>().swap(queue_);
    std::deque<v1::WorkloadEvent>().swap(resync_queue_);
    resync_from_.reset();
    queued_bytes_ = 0;
    end_after_queue_ = true;
    overflow_ = true;
    if (shared_) shared_->Done();
  }

  bool CatchingUpLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return resync_from_.has_value() || fetching_ || !resync_queue_.empty();
  }

  // Picks the next event to write (true) or decides to finish; only when no write is in flight.
  // While catching up: the catch-up first, reading its next page when one was written.
  bool TakeNextLocked(std::optional<grpc::Status>* finish) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return false;
    if (!resync_queue_.empty()) {
      auto event = std::make_shared<v1::WorkloadEvent>(std::move(resync_queue_.front()));
      resync_queue_.pop_front();
      // A live event waiting behind the catch-up may be stamped earlier than this workload: the
      // reader must resume from before it (a later one is stamped after this read, less the
      // overlap).
      *event->mutable_resume_after() =
          ToProto(std::min(FromProto(event->workload().update_time()), caught_up_floor_));
      current_ = std::move(event);
      writing_ = true;
      return true;
    }
    if (fetching_) return false;
    if (resync_from_) {
      fetching_ = true;
      Ref();
      if (!ctx_.executor->TrySubmit([this] {
            ReadResyncPage();
            Unref();
          })) {
        Unref();
        *finish = grpc::Status(grpc::StatusCode::UNAVAILABLE, "server busy; watch again");
      }
      return false;
    }
    while (!queue_.empty()) {
      Queued next = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= std::min(queued_bytes_, next.bytes);
      // The catch-up already sent this version or a newer one.
      if (filter_->Superseded(next.id, next.version)) continue;
      current_ = std::move(next.event);
      writing_ = true;
      return true;
    }
    if (end_after_queue_) {
      *finish = overflow_ ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                         "watcher too slow; events dropped, watch again "
                                         "(resume_after or after_version: the last event's)")
                          : grpc::Status::OK;
    }
    return false;
  }

  // A Finish is the last write, and a stream has one write in flight at most (gRPC's C++ rules):
  // with a write under way it waits for OnWriteDone.
  void FinishOnce(const grpc::Status& status) {
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;
      finishing_ = true;
      if (shared_) shared_->Done();
      // Nothing more is written: give the memory back now, not when gRPC lets go of the call.
      std::deque<Queued>().swap(queue_);
      std::deque<v1::WorkloadEvent>().swap(resync_queue_);
      queued_bytes_ = 0;
      if (writing_) {
        deferred_finish_ = status;
        return;
      }
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
  // Set by Start before anything reads it; constant after.
  std::optional<auth::Principal> who_;
  uint64_t handle_ ABSL_GUARDED_BY(mu_) = 0;
  std::shared_ptr<Shared> shared_ ABSL_GUARDED_BY(mu_);
  std::deque<Queued> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The catch-up of a resumed Watch of every workload: the next page starts after
  // `resync_from_` (unset: none left), `fetching_` while a page is being read, the page read
  // waiting to be written, how many workloads it sent, and the earliest stamp of a live event
  // queued while it ran.
  std::optional<ChangeCursor> resync_from_ ABSL_GUARDED_BY(mu_);
  bool fetching_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::WorkloadEvent> resync_queue_ ABSL_GUARDED_BY(mu_);
  int resynced_ ABSL_GUARDED_BY(mu_) = 0;
  Timestamp caught_up_floor_ ABSL_GUARDED_BY(mu_) = Timestamp::max();
  Message current_;  // the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Waiting for the hub to give this stream its turn to write (Turn).
  bool turn_pending_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  // FinishOnce's status while a write was in flight: OnWriteDone finishes with it.
  std::optional<grpc::Status> deferred_finish_ ABSL_GUARDED_BY(mu_);
  bool end_after_queue_ ABSL_GUARDED_BY(mu_) = false;
  bool overflow_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

grpc::ServerWriteReactor<v1::WorkloadEvent>* WorkloadServiceImpl::Watch(
    grpc::CallbackServerContext* context, const v1::WatchRequest* request) {
  if (absl::Status refused = CheckRequestSize(*request); !refused.ok()) {
    // A reactor that finishes at once: gRPC's default for a refused stream.
    class Refused final : public grpc::ServerWriteReactor<v1::WorkloadEvent> {
     public:
      explicit Refused(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
      void OnDone() override { delete this; }
    };
    return new Refused(refused);
  }
  return new WatchReactor(ctx_, context, *request);
}

}  // namespace gpufed::api
