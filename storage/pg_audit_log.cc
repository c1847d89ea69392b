#include "storage/pg_audit_log.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "federation/status_macros.h"
#include "pqxx/pqxx"
#include "storage/pg_pool.h"

namespace gpufed::storage {
namespace {

using std::chrono::microseconds;

constexpr const char* kLockHead =
    "SELECT last_id, last_hash FROM audit_head WHERE singleton FOR UPDATE";
constexpr const char* kInsertEvent =
    "INSERT INTO audit_events (id, at, actor, tenant, project, action, object, outcome, reason,"
    " detail, prev_hash, hash)"
    " VALUES ($1, from_epoch_us($2), $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";
constexpr const char* kMoveHead = "UPDATE audit_head SET last_id = $1, last_hash = $2";
constexpr const char* kReadHead = "SELECT last_id FROM audit_head WHERE singleton";

#define GPUFED_AUDIT_COLUMNS                                                                     \
  " id, epoch_us(at) AS at_us, actor, tenant, project, action, object, outcome, reason, detail," \
  " prev_hash, hash "

constexpr const char* kChainPage =
    "SELECT" GPUFED_AUDIT_COLUMNS "FROM audit_events WHERE id > $1 ORDER BY id LIMIT $2";
// Every filter is optional: NULL (or '') leaves it out. The tenant filter is the visibility
// rule; the id cursor pages newest first.
constexpr const char* kList =
    "SELECT" GPUFED_AUDIT_COLUMNS
    "FROM audit_events WHERE ($1::text IS NULL OR (tenant = $1 AND ($2 = '' OR project = $2)))"
    " AND ($3 = '' OR actor = $3) AND ($4 = '' OR object = $4)"
    " AND ($5::bigint IS NULL OR at >= from_epoch_us($5))"
    " AND ($6::bigint IS NULL OR at < from_epoch_us($6)) AND ($7 = 0 OR id < $7)"
    " ORDER BY id DESC LIMIT $8";

void Prepare(pqxx::connection& conn) {
  conn.prepare("audit_lock_head", kLockHead);
  conn.prepare("audit_insert", kInsertEvent);
  conn.prepare("audit_move_head", kMoveHead);
  conn.prepare("audit_read_head", kReadHead);
  conn.prepare("audit_chain_page", kChainPage);
  conn.prepare("audit_list", kList);
}

int64_t ToMicros(Timestamp t) {
  return std::chrono::duration_cast<microseconds>(t.time_since_epoch()).count();
}

AuditEvent FromRow(const pqxx::row& row) {
  AuditEvent e;
  e.id = row["id"].as<int64_t>();
  e.time = Timestamp(microseconds(row["at_us"].as<int64_t>()));
  e.actor = row["actor"].c_str();
  e.tenant = row["tenant"].c_str();
  e.project = row["project"].c_str();
  e.action = row["action"].c_str();
  e.object = row["object"].c_str();
  e.outcome = row["outcome"].c_str();
  e.reason = row["reason"].c_str();
  e.detail = row["detail"].c_str();
  e.prev_hash = row["prev_hash"].c_str();
  e.hash = row["hash"].c_str();
  return e;
}

absl::Status NoKey() {
  return absl::FailedPreconditionError("audit: no audit key configured (audit_key_file)");
}

}  // namespace

absl::StatusOr<std::unique_ptr<PgAuditLog>> PgAuditLog::Create(const std::string& dsn,
                                                               PgAuditLogOptions options) {
  if (options.pool_size < 1) return absl::InvalidArgumentError("pool_size: must be at least 1");
  if (options.verify_page < 1) {
    return absl::InvalidArgumentError("verify_page: must be at least 1");
  }
  options.clock = ClockOrSystem(options.clock);
  PgPoolOptions pool_options;
  pool_options.size = options.pool_size;
  pool_options.clock = options.clock;
  pool_options.application_name = "gpufed-audit";
  ASSIGN_OR_RETURN(std::unique_ptr<PgPool> pool, PgPool::Create(dsn, pool_options, Prepare));
  return std::unique_ptr<PgAuditLog>(new PgAuditLog(std::move(options), std::move(pool)));
}

PgAuditLog::PgAuditLog(PgAuditLogOptions options, std::unique_ptr<PgPool> pool)
    : options_(std::move(options)), pool_(std::move(pool)) {}

PgAuditLog::~PgAuditLog() = default;

absl::StatusOr<AuditEvent> PgAuditLog::Append(const AuditEvent& event) {
  ASSIGN_OR_RETURN(std::vector<AuditEvent> rows, AppendRows({event}));
  return std::move(rows.front());
}

absl::Status PgAuditLog::AppendAll(const std::vector<AuditEvent>& events) {
  if (events.empty()) return absl::OkStatus();
  return AppendRows(events).status();
}

absl::StatusOr<std::vector<AuditEvent>> PgAuditLog::AppendRows(
    const std::vector<AuditEvent>& events) {
  if (options_.key.empty()) return NoKey();
  std::vector<AuditEvent> cut;
  cut.reserve(events.size());
  for (const AuditEvent& e : events) cut.push_back(TruncateAuditFields(e));
  return pool_->Transact(
      "append audit events", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<AuditEvent>> {
        // Ids, time and hashes are made inside the retry loop: a retried append gets fresh ones.
        std::vector<AuditEvent> rows = cut;
        const pqxx::row head = txn.exec_prepared1("audit_lock_head");
        int64_t id = head["last_id"].as<int64_t>();
        std::string prev = head["last_hash"].c_str();
        const Timestamp now = Timestamp(microseconds(ToMicros(options_.clock->Now())));
        for (AuditEvent& row : rows) {
          row.id = ++id;
          row.time = now;
          row.prev_hash = prev;
          row.hash = AuditRowHash(options_.key, row);
          txn.exec_prepared0("audit_insert", row.id, ToMicros(row.time), row.actor, row.tenant,
                             row.project, row.action, row.object, row.outcome, row.reason,
                             row.detail, row.prev_hash, row.hash);
          prev = row.hash;
        }
        txn.exec_prepared0("audit_move_head", id, prev);
        return rows;
      });
}

absl::StatusOr<AuditPage> PgAuditLog::List(const AuditFilter& filter) {
  if (filter.page_size < 1 || filter.page_size > kMaxAuditPage) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be 1 to ", kMaxAuditPage, ", got ", filter.page_size));
  }
  std::optional<int64_t> since, until;
  if (filter.since) since = ToMicros(*filter.since);
  if (filter.until) until = ToMicros(*filter.until);
  return pool_->Transact<pqxx::nontransaction>(
      "list audit events", [&](pqxx::nontransaction& txn) -> absl::StatusOr<AuditPage> {
        AuditPage page;
        // One row more than asked tells whether another page follows.
        pqxx::result rows = txn.exec_prepared(
            "audit_list", filter.tenant, filter.project, filter.actor, filter.object, since, until,
            std::max<int64_t>(filter.before_id, 0), filter.page_size + 1);
        for (const pqxx::row& row : rows) {
          if (static_cast<int>(page.events.size()) == filter.page_size) {
            page.next_before_id = page.events.back().id;
            break;
          }
          page.events.push_back(FromRow(row));
        }
        return page;
      });
}

absl::StatusOr<AuditVerification> PgAuditLog::Verify() {
  if (options_.key.empty()) return NoKey();
  return pool_->Transact<
      pqxx::transaction<pqxx::isolation_level::repeatable_read, pqxx::readwrite_policy::read_only>>(
      "verify audit chain", [&](auto& txn) -> absl::StatusOr<AuditVerification> {
        // One snapshot: the head and every page as of the same moment, so appends that commit
        // meanwhile neither show as rows past the head nor go missing.
        const int64_t head = txn.exec_prepared1("audit_read_head")[0].template as<int64_t>();
        AuditChainVerifier verifier(options_.key);
        int64_t after = 0;
        while (true) {
          pqxx::result rows = txn.exec_prepared("audit_chain_page", after, options_.verify_page);
          for (const pqxx::row& row : rows) verifier.Add(FromRow(row));
          if (static_cast<int>(rows.size()) < options_.verify_page) break;
          after = rows[rows.size() - 1]["id"].template as<int64_t>();
        }
        return verifier.Finish(head);
      });
}

}  // namespace gpufed::storage
