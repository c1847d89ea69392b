#ifndef GPUFED_STORAGE_PG_AUDIT_LOG_H_
#define GPUFED_STORAGE_PG_AUDIT_LOG_H_

// The audit trail on PostgreSQL (federation/audit.h; schema migrations/0023_audit.sql).
//
// Append locks the one row of audit_head FOR UPDATE, takes the next id, hashes the row with the
// key (auth/audit_chain.h), inserts it and moves the head, in one transaction: appends are
// serialized and ids have no gaps. Verify reads the head and walks audit_events in id order, a
// page at a time, inside one REPEATABLE READ snapshot. A trigger refuses UPDATE, DELETE and
// TRUNCATE on audit_events.
//
// Thread-safe. Its own small connection pool: an audit append never waits behind a burst of
// user reads on PgStore's.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "federation/audit.h"
#include "federation/clock.h"

namespace gpufed::storage {

class PgPool;

struct PgAuditLogOptions {
  // HMAC key of the chain. Empty: Append and Verify answer FAILED_PRECONDITION (List works).
  std::string key;
  int pool_size = 2;
  // Rows read per round trip by Verify.
  int verify_page = 1000;
  const Clock* clock = nullptr;  // null: the system clock
};

class PgAuditLog final : public AuditLog {
 public:
  // UNAVAILABLE if the database cannot be reached.
  static absl::StatusOr<std::unique_ptr<PgAuditLog>> Create(const std::string& dsn,
                                                            PgAuditLogOptions options);
  ~PgAuditLog() override;

  absl::StatusOr<AuditEvent> Append(const AuditEvent& event) override;
  absl::Status AppendAll(const std::vector<AuditEvent>& events) override;
  absl::StatusOr<AuditPage> List(const AuditFilter& filter) override;
  absl::StatusOr<AuditVerification> Verify() override;

 private:
  PgAuditLog(PgAuditLogOptions options, std::unique_ptr<PgPool> pool);
  // Appends `events` in order in one transaction; the rows as stored.
  absl::StatusOr<std::vector<AuditEvent>> AppendRows(const std::vector<AuditEvent>& events);

  const PgAuditLogOptions options_;
  const std::unique_ptr<PgPool> pool_;
};

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_PG_AUDIT_LOG_H_
