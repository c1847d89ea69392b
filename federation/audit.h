#ifndef GPUFED_FEDERATION_AUDIT_H_
#define GPUFED_FEDERATION_AUDIT_H_

// The audit trail (docs/security.md#audit): every mutating call, allowed or not, and every
// scheduler decision that moves capacity, as append-only rows chained by a keyed hash
// (auth/audit_chain.h) so that an edited, deleted or inserted row is found by Verify.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "federation/types.h"

namespace gpufed {

// One audit row. What the caller fills: actor .. detail; the store sets the rest.
struct AuditEvent {
  int64_t id = 0;     // set by the store: 1, 2, 3 ... without gaps, the order of the chain
  Timestamp time{};   // set by the store when it records the row (its clock), to the microsecond
  std::string actor;  // "user:<subject>", "agent:<cluster>", "scheduler", "control-loop", "server"
  // The scope the row belongs to (who may read it, as auth::Covers says): a tenant (empty: the
  // platform's) and a project of it (empty: the tenant's own).
  std::string tenant;
  std::string project;
  std::string action;     // "workloads.submit", "workloads.place", "tokens.create", ...
  std::string object;     // "workload/123", "tenant/acme", "cluster/dgx-1", "token/7"
  std::string outcome;    // kAuditOk, kAuditDenied, kAuditInvalid, kAuditFailed
  std::string reason;     // why (a status message, a scheduler's reason); never a secret
  std::string detail;     // short text; never a secret (no token, key or password)
  std::string prev_hash;  // set by the store: hash of row id-1 ("" for the first)
  std::string hash;       // set by the store: auth::AuditHash of this row
};

inline constexpr absl::string_view kAuditOk = "ok";
inline constexpr absl::string_view kAuditDenied = "denied";       // PERMISSION_DENIED
inline constexpr absl::string_view kAuditInvalid = "invalid";     // INVALID_ARGUMENT
inline constexpr absl::string_view kAuditNotFound = "not_found";  // NOT_FOUND
inline constexpr absl::string_view kAuditConflict = "conflict";   // ALREADY_EXISTS, ...
inline constexpr absl::string_view kAuditFailed = "failed";       // anything else

// Field limits: longer values are cut (a row is evidence, not a document store).
inline constexpr size_t kMaxAuditFieldBytes = 256;    // actor, tenant, project, action, object,
                                                      // outcome
inline constexpr size_t kMaxAuditReasonBytes = 1024;  // reason
inline constexpr size_t kMaxAuditDetailBytes = 2048;  // detail
inline constexpr int kMaxAuditPage = 1000;

struct AuditFilter {
  // Only rows of this tenant (a tenant-bound reader's view); nullopt: every row (platform
  // scope). With `project` non-empty too, only that project's rows (a project-bound reader's).
  std::optional<std::string> tenant;
  std::string project;
  std::string actor;               // exact; empty: any
  std::string object;              // exact; empty: any
  std::optional<Timestamp> since;  // time >= since
  std::optional<Timestamp> until;  // time < until
  int page_size = 100;             // 1..kMaxAuditPage
  int64_t before_id = 0;           // page cursor: only ids < before_id (newest first); 0: top
};

struct AuditPage {
  std::vector<AuditEvent> events;  // newest first
  int64_t next_before_id = 0;      // 0: last page
};

// A place where the chain is broken.
struct AuditBreak {
  int64_t id = 0;  // the row (or, for kDeleted, the first missing id)
  enum class Kind {
    kEdited,    // the row's hash does not match its content (it was changed after it was written)
    kDeleted,   // rows are missing before the next one (a gap in ids, or a link to no row)
    kInserted,  // a row the writer never appended (past the head it recorded, or linking to a
                // hash that is not the row before it)
  } kind = Kind::kEdited;
};

absl::string_view AuditBreakKindName(AuditBreak::Kind kind);  // "edited", "deleted", "inserted"

struct AuditVerification {
  int64_t rows = 0;                // rows walked
  std::vector<AuditBreak> breaks;  // empty: the chain is whole (as far as the table can tell)
  // The last row as the table has it: anchor it elsewhere (a ticket, a log) to detect, later,
  // rows cut from the end, which the table alone cannot show.
  int64_t head_id = 0;
  std::string head_hash;
};

// The audit trail's port. Thread-safe. Errors: UNAVAILABLE (retry), INVALID_ARGUMENT.
//
// Rows reach the chain in two steps. Recording makes a row durable (in PostgreSQL, a row of
// audit_pending, written by AppendAll or, for every workload state change, by the workload
// store's own transaction); Seal then chains the recorded rows, oldest first, under the head's
// lock. So a state change and its audit row commit together, and nothing on a request's path
// waits for the chain's single writer. List and Verify seal first: what they show includes
// every row recorded before the call.
class AuditLog {
 public:
  virtual ~AuditLog() = default;

  // Records every row of `events`, in order, in one transaction: all or none. The store sets
  // time as it records them, and id, prev_hash and hash as it seals them; fields past their
  // limits are cut then. FAILED_PRECONDITION when the store has no audit key.
  virtual absl::Status AppendAll(const std::vector<AuditEvent>& events) = 0;
  absl::Status Append(const AuditEvent& event) { return AppendAll({event}); }
  // Chains every row recorded and not yet chained, in the order recorded; returns how many.
  // Sealers are serialized (one chain head); a row is chained exactly once. FAILED_PRECONDITION
  // when the store has no audit key.
  virtual absl::StatusOr<int> Seal() = 0;
  // Rows newest first (after a Seal). INVALID_ARGUMENT naming page_size for one out of
  // 1..kMaxAuditPage.
  virtual absl::StatusOr<AuditPage> List(const AuditFilter& filter) = 0;
  // Seals, then walks every row in id order (in pages) and checks each link
  // (AuditChainVerifier). FAILED_PRECONDITION when the store has no audit key.
  virtual absl::StatusOr<AuditVerification> Verify() = 0;
};

// The check Verify runs, one implementation for every store: feed the rows in ascending id
// order, then Finish with the head the writer recorded (last id appended). Not thread-safe.
class AuditChainVerifier {
 public:
  explicit AuditChainVerifier(std::string key) : key_(std::move(key)) {}
  void Add(const AuditEvent& row);
  AuditVerification Finish(int64_t recorded_head_id);

 private:
  const std::string key_;
  AuditVerification result_;
  int64_t expected_id_ = 1;
  std::string prev_hash_;  // stored hash of the row before
  bool prev_edited_ = false;
  std::vector<int64_t> unverified_;  // rows whose hash did not match (edited or inserted)
};

// The hash of `row` (prev_hash included) under `key`: what Append stores in row.hash.
std::string AuditRowHash(absl::string_view key, const AuditEvent& row);

// What identifies `key` without revealing it: the keyed hash of a fixed row (id 0, which no
// real row has). A store keeps the sealing key's and refuses to seal with another.
std::string AuditKeyCheck(absl::string_view key);

// `event` with every field cut to its limit (at a UTF-8 character boundary).
AuditEvent TruncateAuditFields(AuditEvent event);

// Appends "<label>: <ids, comma-separated>" to `row.detail` ("; " before it when the detail has
// text already); nothing when `ids` is empty. How stores add what a change did to its row.
void AppendAuditIds(AuditEvent& row, absl::string_view label, const std::vector<int64_t>& ids);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_AUDIT_H_
