#ifndef GPUFED_TESTS_SUPPORT_MEMORY_AUDIT_LOG_H_
#define GPUFED_TESTS_SUPPORT_MEMORY_AUDIT_LOG_H_

// The audit port (federation/audit.h) in memory, behaving as storage::PgAuditLog does
// (tests/storage/store_contract_test.cc runs one suite against both): rows are recorded, then
// chained by Seal (List and Verify seal first). Thread-safe: one mutex, so sealing is serialized
// as PgAuditLog's is by the head's row lock. sim::MemoryStore records its workload state changes
// here when given the log (MemoryStore::RecordAuditIn), as PostgreSQL's trigger does.

#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "federation/audit.h"
#include "federation/clock.h"

namespace gpufed::testing {

class MemoryAuditLog final : public AuditLog {
 public:
  // Time from `clock`, which must outlive the log. `key` empty: Append and Verify answer
  // FAILED_PRECONDITION.
  MemoryAuditLog(std::string key, const Clock* clock) : key_(std::move(key)), clock_(clock) {}

  absl::Status AppendAll(const std::vector<AuditEvent>& events) override {
    if (events.empty()) return absl::OkStatus();
    if (key_.empty()) return NoKey();
    const Timestamp now = Timestamp(
        std::chrono::duration_cast<std::chrono::microseconds>(clock_->Now().time_since_epoch()));
    absl::MutexLock lock(&mu_);
    for (const AuditEvent& e : events) {
      AuditEvent row = TruncateAuditFields(e);
      row.time = now;
      pending_.push_back(std::move(row));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int> Seal() override {
    if (key_.empty()) return NoKey();
    absl::MutexLock lock(&mu_);
    return SealLocked();
  }

  absl::StatusOr<AuditPage> List(const AuditFilter& filter) override {
    if (filter.page_size < 1 || filter.page_size > kMaxAuditPage) {
      return absl::InvalidArgumentError(
          absl::StrCat("page_size: must be 1 to ", kMaxAuditPage, ", got ", filter.page_size));
    }
    absl::MutexLock lock(&mu_);
    if (!key_.empty()) SealLocked();
    AuditPage page;
    // Newest first.
    for (size_t i = rows_.size(); i-- > 0;) {
      const AuditEvent& e = rows_[i];
      if (filter.before_id > 0 && e.id >= filter.before_id) continue;
      if (filter.tenant && e.tenant != *filter.tenant) continue;
      if (filter.tenant && !filter.project.empty() && e.project != filter.project) continue;
      if (!filter.actor.empty() && e.actor != filter.actor) continue;
      if (!filter.object.empty() && e.object != filter.object) continue;
      if (filter.since && e.time < *filter.since) continue;
      if (filter.until && e.time >= *filter.until) continue;
      if (static_cast<int>(page.events.size()) == filter.page_size) {
        page.next_before_id = page.events.back().id;
        break;
      }
      page.events.push_back(e);
    }
    return page;
  }

  absl::StatusOr<AuditVerification> Verify() override {
    if (key_.empty()) return NoKey();
    absl::MutexLock lock(&mu_);
    SealLocked();
    AuditChainVerifier verifier(key_);
    for (const AuditEvent& row : rows_) verifier.Add(row);
    return verifier.Finish(static_cast<int64_t>(rows_.size()));
  }

 private:
  int SealLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int n = static_cast<int>(pending_.size());
    for (AuditEvent& row : pending_) {
      row.id = static_cast<int64_t>(rows_.size()) + 1;
      row.prev_hash = rows_.empty() ? "" : rows_.back().hash;
      row.hash = AuditRowHash(key_, row);
      rows_.push_back(std::move(row));
    }
    pending_.clear();
    return n;
  }

  static absl::Status NoKey() {
    return absl::FailedPreconditionError("audit: no audit key configured (audit_key_file)");
  }

  const std::string key_;
  const Clock* const clock_;
  absl::Mutex mu_;
  std::vector<AuditEvent> pending_ ABSL_GUARDED_BY(mu_);  // recorded, in order, not chained
  std::vector<AuditEvent> rows_ ABSL_GUARDED_BY(mu_);     // by id: rows_[i].id == i + 1
};

}  // namespace gpufed::testing

#endif  // GPUFED_TESTS_SUPPORT_MEMORY_AUDIT_LOG_H_
