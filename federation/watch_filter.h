#ifndef GPUFED_FEDERATION_WATCH_FILTER_H_
#define GPUFED_FEDERATION_WATCH_FILTER_H_

// The domain half of Watch: which committed workload events one caller gets, and when its
// stream ends. The transport (api/workload_service.cc) subscribes to the events first, then
// passes the first event of a one-workload Watch (ControlPlane::WatchSnapshot) and every
// published event through Offer, and writes what it is told to deliver. Queueing, flow control
// and slow readers stay with the transport.
//
// Resuming (docs/interfaces.md, "Resuming a Watch"). A one-workload Watch resumes after the
// version the caller last received: nothing at or below it is delivered again. A Watch of every
// workload resumes after a point in time (WatchResumePoint): the transport reads the current
// state of every workload changed since (ControlPlane::WatchResync, in pages), passes each
// through OfferResync and writes all of it before the live events that were published
// meanwhile; when it writes such a live event it asks Superseded, so that no version older
// than, or equal to, one the resync sent follows it.

#include <chrono>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "auth/principal.h"
#include "federation/types.h"

namespace gpufed {

// A resumed Watch of every workload reads back this far before the point the caller gives: a
// change is stamped with its transaction's start (Workload::update_time) but published after
// its commit, so a change stamped a little before the last event the caller received may have
// been published after it. PgStore's transactions are short (one or a few statements); one that
// took longer than this from its start to its publication could be missed by a resume.
inline constexpr std::chrono::seconds kWatchResumeOverlap{10};
// At most this many workloads are sent to catch up a resumed Watch of every workload; past it the
// stream ends FAILED_PRECONDITION (list and watch again). Bounds the work of one resume and what
// the filter remembers of it.
inline constexpr int kMaxWatchResync = 10000;

// A position in the order of workloads' last changes: (update_time, id).
struct ChangeCursor {
  Timestamp time{};
  WorkloadId id = 0;

  bool operator==(const ChangeCursor&) const = default;
};

// Where the catch-up of a Watch of every workload resumed after `resume_after` (the caller's
// last event's resume point) starts reading: kWatchResumeOverlap earlier.
ChangeCursor WatchResumePoint(Timestamp resume_after);

// What to do with one event.
struct WatchVerdict {
  bool deliver = false;  // send it to the caller
  bool end = false;      // after it, end the stream (OK): the watched workload has ended

  bool operator==(const WatchVerdict&) const = default;
};

// Not thread-safe: the caller serialises Offer (the Watch reactor calls it under its own lock),
// so that events are written in the order they were decided in.
class WatchFilter {
 public:
  // `workload` 0: every event of a workload `who` may read (auth::Allows workloads.read), for as
  // long as the caller stays. Otherwise only that workload's events, if `who` may read it: each
  // version at most once, never an older version after a newer one (the first event and the
  // live stream may overlap), none at or below `after_version` (a resumed Watch: the caller has
  // seen it), and the stream ends with its first terminal state (at once, undelivered, when the
  // caller has already seen it).
  WatchFilter(auth::Principal who, WorkloadId workload, uint64_t after_version = 0)
      : who_(std::move(who)), workload_(workload), last_version_(after_version) {}

  WatchVerdict Offer(const WorkloadEvent& e);

  // A Watch of every workload, catching up: `w` as read by ControlPlane::WatchResync. Delivered
  // if the caller may read it (and not already sent at this version or a newer one); remembered,
  // so that Superseded can drop a live event it makes stale.
  WatchVerdict OfferResync(const Workload& w);
  // A live event delivered by Offer, about to be written after the catch-up: true when the
  // catch-up already sent workload `id` at `version` or a newer one (skip it).
  [[nodiscard]] bool Superseded(WorkloadId id, uint64_t version) const;

  [[nodiscard]] WorkloadId workload() const { return workload_; }

 private:
  const auth::Principal who_;
  const WorkloadId workload_;
  uint64_t last_version_ = 0;  // one workload: the newest version the caller has
  bool ended_ = false;
  // Every workload, catching up: the version sent of each workload the catch-up sent.
  absl::flat_hash_map<WorkloadId, uint64_t> resynced_;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_WATCH_FILTER_H_
