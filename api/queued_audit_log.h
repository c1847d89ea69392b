#ifndef GPUFED_API_QUEUED_AUDIT_LOG_H_
#define GPUFED_API_QUEUED_AUDIT_LOG_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "federation/audit.h"
#include "prometheus/counter.h"

namespace gpufed::api {

// An audit log whose AppendAll never waits for the database. What the control plane records
// through the port itself is the row of a refused call (a state change's row is written by the
// store, in the change's own transaction); such a row is answered on whatever thread refused the
// call: one of gRPC's, when a Submit's spec is refused before the store, or the store's
// completion thread, when the store refuses it. Writing it there made a flood of refused calls
// hold those threads in audit commits, and so delay everyone else's answers.
//
// AppendAll queues the rows and returns. One writer thread writes what is queued to `inner` in
// batches, each one AppendAll (one transaction): a flood costs a commit per batch, not per call.
// A batch `inner` refuses is written again call by call, so that only the call at fault is lost;
// a batch that fails because the database is away (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, once
// `inner`'s own retries are spent) is dropped whole, so that a dead database costs one wait per
// batch, not one per call. List and Verify first wait (within the request's deadline) until every
// row queued before them has been written, so a caller sees what it recorded (as with `inner`
// alone), in this process; another replica sees it a moment later. Seal does not wait: the
// control loop seals every second and must not stall behind the writer; rows still queued are
// chained by a later seal. Rows carry the time the writer records them,
// milliseconds after the call.
//
// Bounds: at most max_queued rows wait. Rows past that, and rows `inner` refuses, are dropped,
// counted (dropped()) and logged, as a failed synchronous write was only logged: a call's answer
// never depends on its audit row. A crash loses what is queued.
//
// Thread-safe. Lock order: mu_ only; `inner` is called without it.
class QueuedAuditLog final : public AuditLog {
 public:
  struct Options {
    size_t max_queued = 10000;  // rows waiting for the writer
    size_t max_batch = 500;     // rows in one write
    // Counts what dropped() counts, for /metrics; may be null.
    prometheus::Counter* dropped_counter = nullptr;
  };

  // `inner` must outlive this log. Starts the writer thread.
  QueuedAuditLog(AuditLog* inner, Options options);
  explicit QueuedAuditLog(AuditLog* inner) : QueuedAuditLog(inner, Options()) {}
  // Writes what is queued, then stops the writer.
  ~QueuedAuditLog() override;
  QueuedAuditLog(const QueuedAuditLog&) = delete;
  QueuedAuditLog& operator=(const QueuedAuditLog&) = delete;

  // Queues the rows (all or none: a call's rows are written together) and returns OK;
  // RESOURCE_EXHAUSTED, counted as dropped, when they do not fit in the queue.
  absl::Status AppendAll(const std::vector<AuditEvent>& events) override;
  absl::StatusOr<int> Seal() override;
  absl::StatusOr<AuditPage> List(const AuditFilter& filter) override;
  absl::StatusOr<AuditVerification> Verify() override;

  // Returns once every row queued before the call has been written or dropped;
  // DEADLINE_EXCEEDED if the current request's deadline (CurrentDeadline) passes first.
  absl::Status Flush();
  // Rows dropped so far: refused for want of room, or refused by `inner`.
  int64_t dropped() const;

 private:
  void WriterLoop();
  void CountDropped(size_t rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the calls of one batch to `inner`; returns how many rows were dropped.
  size_t Write(const std::vector<std::vector<AuditEvent>>& calls);

  AuditLog* const inner_;
  const Options options_;

  mutable absl::Mutex mu_;
  std::deque<std::vector<AuditEvent>> queue_ ABSL_GUARDED_BY(mu_);  // one entry per call
  size_t queued_rows_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls queued since the start, and calls written or dropped: Flush waits for the second to
  // reach what the first was when it was called.
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  // Set once the queue has overflowed, until a write succeeds: overflow is logged once per
  // episode, not once per row.
  bool overflowing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_QUEUED_AUDIT_LOG_H_
