#ifndef GPUFED_STORAGE_PG_AUDIT_LOG_H_
#define GPUFED_STORAGE_PG_AUDIT_LOG_H_

// The audit trail on PostgreSQL (federation/audit.h; schema migrations/0023_audit.sql).
//
// AppendAll inserts into audit_pending, as the trigger on workload_events does for every workload
// state change inside that change's transaction: recording takes no lock that other writers
// wait on. Seal locks the one row of audit_head FOR UPDATE, takes the oldest pending rows out,
// gives each the next id, hashes it with the key (auth/audit_chain.h) and inserts it into
// audit_events, and moves the head, in one transaction: sealers are serialized and ids have no
// gaps. Verify reads the head and walks audit_events in id order, a page at a time, inside one
// REPEATABLE READ snapshot. A trigger refuses UPDATE, DELETE and TRUNCATE on audit_events.
//
// Thread-safe. Its own small connection pool: an audit write never waits behind a burst of
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
  // HMAC key of the chain. Empty: AppendAll, Seal and Verify answer FAILED_PRECONDITION (List
  // works).
  std::string key;
  int pool_size = 2;
  // Rows read per round trip by Verify.
  int verify_page = 1000;
  // Rows chained per transaction by Seal.
  int seal_batch = 2000;
  const Clock* clock = nullptr;  // null: the system clock
};

class PgAuditLog final : public AuditLog {
 public:
  // UNAVAILABLE if the database cannot be reached.
  static absl::StatusOr<std::unique_ptr<PgAuditLog>> Create(const std::string& dsn,
                                                            PgAuditLogOptions options);
  ~PgAuditLog() override;

  absl::Status AppendAll(const std::vector<AuditEvent>& events) override;
  absl::StatusOr<int> Seal() override;
  absl::StatusOr<AuditPage> List(const AuditFilter& filter) override;
  absl::StatusOr<AuditVerification> Verify() override;

 private:
  PgAuditLog(PgAuditLogOptions options, std::unique_ptr<PgPool> pool);

  const PgAuditLogOptions options_;
  const std::unique_ptr<PgPool> pool_;
};

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_PG_AUDIT_LOG_H_
