#include "api/queued_audit_log.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "federation/request_deadline.h"
#include "federation/status_macros.h"
#include "spdlog/spdlog.h"

namespace gpufed::api {

QueuedAuditLog::QueuedAuditLog(AuditLog* inner, Options options)
    : inner_(inner), options_(options) {
  writer_ = std::thread([this] { WriterLoop(); });
}

QueuedAuditLog::~QueuedAuditLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_.join();
}

absl::Status QueuedAuditLog::AppendAll(const std::vector<AuditEvent>& events) {
  if (events.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (queued_rows_ + events.size() > options_.max_queued) {
    CountDropped(events.size());
    if (!overflowing_) {
      overflowing_ = true;
      spdlog::error(
          "audit: {} rows wait to be recorded; rows of refused calls are dropped until they "
          "are written (gpufed counts them)",
          queued_rows_);
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("audit: ", queued_rows_, " rows already wait to be recorded"));
  }
  queued_rows_ += events.size();
  queue_.push_back(events);
  ++enqueued_;
  return absl::OkStatus();
}

void QueuedAuditLog::CountDropped(size_t rows) {
  dropped_ += static_cast<int64_t>(rows);
  if (options_.dropped_counter != nullptr && rows > 0) {
    options_.dropped_counter->Increment(static_cast<double>(rows));
  }
}

void QueuedAuditLog::WriterLoop() {
  while (true) {
    std::vector<std::vector<AuditEvent>> calls;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything queued is written
      size_t rows = 0;
      // At least one call, however many rows it holds; then whole calls up to max_batch rows.
      while (!queue_.empty() &&
             (calls.empty() || rows + queue_.front().size() <= options_.max_batch)) {
        rows += queue_.front().size();
        calls.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_rows_ -= rows;
    }
    const size_t lost = Write(calls);
    absl::MutexLock lock(&mu_);
    done_ += calls.size();
    CountDropped(lost);
    if (lost == 0) overflowing_ = false;
  }
}

size_t QueuedAuditLog::Write(const std::vector<std::vector<AuditEvent>>& calls) {
  std::vector<AuditEvent> batch;
  for (const std::vector<AuditEvent>& call : calls)
    batch.insert(batch.end(), call.begin(), call.end());
  const absl::Status written = inner_->AppendAll(batch);
  if (written.ok()) return 0;
  const bool database_away =
      absl::IsUnavailable(written) || absl::IsDeadlineExceeded(written) || absl::IsAborted(written);
  if (calls.size() == 1 || database_away) {
    spdlog::error("audit: could not record {} rows ({} {} by {}): {}", batch.size(),
                  batch.front().action, batch.front().object, batch.front().actor,
                  written.ToString());
    return batch.size();
  }
  // The batch failed as a whole (nothing of it was recorded), perhaps because of one call's
  // rows: each call alone, so that only that one is lost.
  size_t lost = 0;
  for (const std::vector<AuditEvent>& call : calls) lost += Write({call});
  return lost;
}

absl::Status QueuedAuditLog::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  auto written = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= target; };
  if (!mu_.AwaitWithDeadline(absl::Condition(&written), CurrentDeadline())) {
    return absl::DeadlineExceededError("audit: rows recorded earlier are still being written");
  }
  return absl::OkStatus();
}

int64_t QueuedAuditLog::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

absl::StatusOr<int> QueuedAuditLog::Seal() { return inner_->Seal(); }

absl::StatusOr<AuditPage> QueuedAuditLog::List(const AuditFilter& filter) {
  RETURN_IF_ERROR(Flush());
  return inner_->List(filter);
}

absl::StatusOr<AuditVerification> QueuedAuditLog::Verify() {
  RETURN_IF_ERROR(Flush());
  return inner_->Verify();
}

}  // namespace gpufed::api
