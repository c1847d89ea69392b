#include "federation/audit.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "auth/audit_chain.h"
#include "federation/store.h"

namespace gpufed {
namespace {

// `text` cut to at most `limit` bytes without splitting a UTF-8 character.
void Cut(std::string& text, size_t limit) {
  if (text.size() <= limit) return;
  size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  text.resize(end);
}

}  // namespace

absl::string_view AuditBreakKindName(AuditBreak::Kind kind) {
  switch (kind) {
    case AuditBreak::Kind::kEdited:
      return "edited";
    case AuditBreak::Kind::kDeleted:
      return "deleted";
    case AuditBreak::Kind::kInserted:
      return "inserted";
  }
  return "unknown";
}

std::string AuditKeyCheck(absl::string_view key) {
  auth::AuditFields f;
  f.action = "gpufed audit key check";
  return auth::AuditHash(key, f);
}

std::string AuditRowHash(absl::string_view key, const AuditEvent& row) {
  auth::AuditFields f;
  f.id = row.id;
  f.time_us =
      std::chrono::duration_cast<std::chrono::microseconds>(row.time.time_since_epoch()).count();
  f.actor = row.actor;
  f.tenant = row.tenant;
  f.project = row.project;
  f.action = row.action;
  f.object = row.object;
  f.outcome = row.outcome;
  f.reason = row.reason;
  f.detail = row.detail;
  f.prev_hash = row.prev_hash;
  return auth::AuditHash(key, f);
}

AuditEvent TruncateAuditFields(AuditEvent event) {
  for (std::string* field : {&event.actor, &event.tenant, &event.project, &event.action,
                             &event.object, &event.outcome}) {
    Cut(*field, kMaxAuditFieldBytes);
  }
  Cut(event.reason, kMaxAuditReasonBytes);
  Cut(event.detail, kMaxAuditDetailBytes);
  return event;
}

void AppendAuditIds(AuditEvent& row, absl::string_view label, const std::vector<int64_t>& ids) {
  if (ids.empty()) return;
  absl::StrAppend(&row.detail, row.detail.empty() ? "" : "; ", label, ": ",
                  absl::StrJoin(ids, ","));
}

std::vector<AuditEvent> PreemptionAuditRows(const AuditEvent& record,
                                            const WorkloadStore::PreemptionResult& result) {
  std::vector<AuditEvent> rows;
  if (record.action.empty()) return rows;
  for (const Workload& w : result.marked) {
    AuditEvent row = record;
    row.tenant = w.spec.tenant;
    row.project = w.spec.project;
    row.object = absl::StrCat("workload/", w.id);
    row.reason = "preempted";
    for (const PreemptionRecord& r : result.recorded) {
      for (const PreemptionVictim& v : r.victims) {
        if (v.id == w.id) row.reason = std::string(PreemptionCauseName(r.cause));
      }
    }
    row.detail = absl::StrCat("cluster: ", w.assignment.cluster);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string CancelAuditDetail(const Workload& after) {
  return absl::StrCat(
      "state ", StateName(after.state),
      after.cancel_requested && HoldsCapacity(after.state) ? ", agent asked to stop it" : "");
}

std::string LossAuditDetail(const ClusterStore::LossResult& loss) {
  int requeued = 0;
  int ended = 0;
  for (const TransitionResult& r : loss.transitions) {
    if (!r.applied || !r.event) continue;
    ++(r.event->to == WorkloadState::kPending ? requeued : ended);
  }
  return absl::StrCat("epoch: ", loss.cluster.epoch, "; requeued: ", requeued, "; ended: ", ended);
}

void AuditChainVerifier::Add(const AuditEvent& row) {
  ++result_.rows;
  const bool content_ok = AuditRowHash(key_, row) == row.hash;
  if (row.id > expected_id_) {
    // Ids are handed out one by one under the head's lock: a gap is rows taken away.
    result_.breaks.push_back({expected_id_, AuditBreak::Kind::kDeleted});
  } else if (row.prev_hash != prev_hash_ && !prev_edited_) {
    // The row before is not the one this row was chained to (a row put in its place). An edited
    // row before it explains the broken link already.
    result_.breaks.push_back({row.id, AuditBreak::Kind::kInserted});
  }
  // Whether a row that does not verify was edited or inserted is known once the writer's head
  // is (Finish): the writer never appended past it.
  if (!content_ok) unverified_.push_back(row.id);
  prev_hash_ = row.hash;
  prev_edited_ = !content_ok;
  expected_id_ = row.id + 1;
  result_.head_id = row.id;
  result_.head_hash = row.hash;
}

AuditVerification AuditChainVerifier::Finish(int64_t recorded_head_id) {
  for (int64_t id : unverified_) {
    result_.breaks.push_back(
        {id, id > recorded_head_id ? AuditBreak::Kind::kInserted : AuditBreak::Kind::kEdited});
  }
  unverified_.clear();
  if (recorded_head_id >= expected_id_) {
    // The writer appended rows the table no longer has at its end.
    result_.breaks.push_back({expected_id_, AuditBreak::Kind::kDeleted});
  }
  std::stable_sort(result_.breaks.begin(), result_.breaks.end(),
                   [](const AuditBreak& a, const AuditBreak& b) { return a.id < b.id; });
  return std::move(result_);
}

}  // namespace gpufed
