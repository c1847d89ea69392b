#include "storage/pg_audit_log.h"

#include <chrono>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "federation/status_macros.h"
#include "nlohmann/json.hpp"
#include "pqxx/pqxx"
#include "storage/pg_pool.h"

namespace gpufed::storage {
namespace {

using nlohmann::json;
using std::chrono::microseconds;

constexpr const char* kLockHead =
    "SELECT last_id, last_hash, key_check FROM audit_head WHERE singleton FOR UPDATE";
constexpr const char* kSetKeyCheck = "UPDATE audit_head SET key_check = $1 WHERE key_check = ''";
// Input: [{"at_us", "actor", "tenant", "project", "action", "object", "outcome", "reason",
// "detail"}], recorded in array order.
constexpr const char* kRecord =
    "INSERT INTO audit_pending (at, actor, tenant, project, action, object, outcome, reason,"
    " detail)"
    " SELECT from_epoch_us(r.at_us), r.actor, r.tenant, r.project, r.action, r.object, r.outcome,"
    " r.reason, r.detail"
    " FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS a(row, ord),"
    " jsonb_to_record(a.row) AS r(at_us bigint, actor text, tenant text, project text,"
    " action text, object text, outcome text, reason text, detail text)"
    " ORDER BY a.ord";
// The oldest recorded rows, taken out of audit_pending to be chained (under the head's lock,
// so no other sealer takes them; a row recorded meanwhile waits for the next seal).
constexpr const char* kTakePending =
    "WITH taken AS (DELETE FROM audit_pending WHERE seq IN"
    " (SELECT seq FROM audit_pending ORDER BY seq LIMIT $1)"
    " RETURNING seq, epoch_us(at) AS at_us, actor, tenant, project, action, object, outcome,"
    " reason, detail)"
    " SELECT * FROM taken ORDER BY seq";
// Input: the chained rows, [{"id", "at_us", ..., "prev_hash", "hash"}].
constexpr const char* kInsertEvents =
    "INSERT INTO audit_events (id, at, actor, tenant, project, action, object, outcome, reason,"
    " detail, prev_hash, hash)"
    " SELECT r.id, from_epoch_us(r.at_us), r.actor, r.tenant, r.project, r.action, r.object,"
    " r.outcome, r.reason, r.detail, r.prev_hash, r.hash"
    " FROM jsonb_to_recordset($1::jsonb) AS r(id bigint, at_us bigint, actor text, tenant text,"
    " project text, action text, object text, outcome text, reason text, detail text,"
    " prev_hash text, hash text)";
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
  conn.prepare("audit_set_key_check", kSetKeyCheck);
  conn.prepare("audit_record", kRecord);
  conn.prepare("audit_take_pending", kTakePending);
  conn.prepare("audit_insert", kInsertEvents);
  conn.prepare("audit_move_head", kMoveHead);
  conn.prepare("audit_read_head", kReadHead);
  conn.prepare("audit_chain_page", kChainPage);
  conn.prepare("audit_list", kList);
}

int64_t ToMicros(Timestamp t) {
  return std::chrono::duration_cast<microseconds>(t.time_since_epoch()).count();
}

// What a row says, in audit_events and audit_pending alike: everything but the chain's columns.
AuditEvent ContentFromRow(const pqxx::row& row) {
  AuditEvent e;
  e.time = Timestamp(microseconds(row["at_us"].as<int64_t>()));
  e.actor = row["actor"].c_str();
  e.tenant = row["tenant"].c_str();
  e.project = row["project"].c_str();
  e.action = row["action"].c_str();
  e.object = row["object"].c_str();
  e.outcome = row["outcome"].c_str();
  e.reason = row["reason"].c_str();
  e.detail = row["detail"].c_str();
  return e;
}

// A chained row of audit_events.
AuditEvent FromRow(const pqxx::row& row) {
  AuditEvent e = ContentFromRow(row);
  e.id = row["id"].as<int64_t>();
  e.prev_hash = row["prev_hash"].c_str();
  e.hash = row["hash"].c_str();
  return e;
}

// A row of audit_pending, as kTakePending returns it, cut to the limits (TruncateAuditFields).
AuditEvent FromPendingRow(const pqxx::row& row) { return TruncateAuditFields(ContentFromRow(row)); }

json RowJson(const AuditEvent& e) {
  return json{{"at_us", ToMicros(e.time)}, {"actor", e.actor},   {"tenant", e.tenant},
              {"project", e.project},      {"action", e.action}, {"object", e.object},
              {"outcome", e.outcome},      {"reason", e.reason}, {"detail", e.detail}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

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
  if (options.seal_batch < 1) return absl::InvalidArgumentError("seal_batch: must be at least 1");
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

absl::Status PgAuditLog::AppendAll(const std::vector<AuditEvent>& events) {
  if (events.empty()) return absl::OkStatus();
  if (options_.key.empty()) return NoKey();
  const Timestamp now = Timestamp(microseconds(ToMicros(options_.clock->Now())));
  json rows = json::array();
  for (const AuditEvent& e : events) {
    AuditEvent cut = TruncateAuditFields(e);
    cut.time = now;
    rows.push_back(RowJson(cut));
  }
  const std::string input = Dump(rows);
  return pool_->Transact("record audit events", [&](pqxx::work& txn) -> absl::Status {
    txn.exec_prepared0("audit_record", input);
    return absl::OkStatus();
  });
}

absl::StatusOr<int> PgAuditLog::Seal() {
  if (options_.key.empty()) return NoKey();
  int sealed = 0;
  while (true) {
    ASSIGN_OR_RETURN(
        int n, pool_->Transact("seal audit events", [&](pqxx::work& txn) -> absl::StatusOr<int> {
          // Ids and hashes are made inside the retry loop: a retried seal makes them afresh.
          const pqxx::row head = txn.exec_prepared1("audit_lock_head");
          const std::string key_check = AuditKeyCheck(options_.key);
          const std::string recorded = head["key_check"].c_str();
          if (recorded.empty()) {
            txn.exec_prepared0("audit_set_key_check", key_check);
          } else if (recorded != key_check) {
            return absl::FailedPreconditionError(
                "audit: this server's audit key is not the one that seals the chain "
                "(audit_key_file must be the same on every replica)");
          }
          auto id = head["last_id"].as<int64_t>();
          std::string prev = head["last_hash"].c_str();
          const pqxx::result taken = txn.exec_prepared("audit_take_pending", options_.seal_batch);
          if (taken.empty()) return 0;
          json rows = json::array();
          for (const pqxx::row& r : taken) {
            AuditEvent row = FromPendingRow(r);
            row.id = ++id;
            row.prev_hash = prev;
            row.hash = AuditRowHash(options_.key, row);
            json j = RowJson(row);
            j["id"] = row.id;
            j["prev_hash"] = row.prev_hash;
            j["hash"] = row.hash;
            rows.push_back(std::move(j));
            prev = row.hash;
          }
          txn.exec_prepared0("audit_insert", Dump(rows));
          txn.exec_prepared0("audit_move_head", id, prev);
          return static_cast<int>(taken.size());
        }));
    sealed += n;
    if (n < options_.seal_batch) return sealed;
  }
}

absl::StatusOr<AuditPage> PgAuditLog::List(const AuditFilter& filter) {
  if (filter.page_size < 1 || filter.page_size > kMaxAuditPage) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be 1 to ", kMaxAuditPage, ", got ", filter.page_size));
  }
  // What the caller recorded before it asked is shown: the rows waiting are chained first.
  if (!options_.key.empty()) {
    if (absl::Status s = Seal().status(); !s.ok() && !absl::IsFailedPrecondition(s)) return s;
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
  // With another key than the chain's, nothing is sealed and the walk shows every row edited:
  // what an operator with the wrong key file must see.
  if (absl::Status s = Seal().status(); !s.ok() && !absl::IsFailedPrecondition(s)) return s;
  return pool_->Transact<
      pqxx::transaction<pqxx::isolation_level::repeatable_read, pqxx::readwrite_policy::read_only>>(
      "verify audit chain", [&](auto& txn) -> absl::StatusOr<AuditVerification> {
        // One snapshot: the head and every page as of the same moment, so appends that commit
        // meanwhile neither show as rows past the head nor go missing.
        const auto head = txn.exec_prepared1("audit_read_head")[0].template as<int64_t>();
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
