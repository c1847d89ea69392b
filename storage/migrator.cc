#include "storage/migrator.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "federation/status_macros.h"
#include "pqxx/pqxx"
#include "spdlog/spdlog.h"
#include "storage/pg_errors.h"
#include "storage/pg_pool.h"

namespace gpufed::storage {
namespace {

// pg_advisory_xact_lock key: "gpufed" + "mig" in ASCII, so it is recognisable in pg_locks.
constexpr int64_t kMigrationLockKey = 0x67707566656d6967;

constexpr int kConnectTimeoutSeconds = 5;

constexpr const char* kSchemaExists = "SELECT to_regclass('schema_migrations') IS NOT NULL";
constexpr const char* kAppliedVersions = "SELECT version FROM schema_migrations ORDER BY version";
constexpr const char* kRecordMigration =
    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)";

std::set<int64_t> ReadApplied(pqxx::transaction_base& txn) {
  std::set<int64_t> applied;
  if (!txn.exec1(kSchemaExists)[0].as<bool>()) return applied;
  for (const pqxx::row& row : txn.exec(kAppliedVersions)) applied.insert(row[0].as<int64_t>());
  return applied;
}

absl::Status CheckOrder(std::span<const Migration> migrations) {
  for (size_t i = 0; i < migrations.size(); ++i) {
    if (migrations[i].version < 1) {
      return absl::InvalidArgumentError(absl::StrCat("migration ", std::string(migrations[i].name),
                                                     " has version ", migrations[i].version));
    }
    if (i > 0 && migrations[i].version <= migrations[i - 1].version) {
      return absl::InvalidArgumentError("migrations must be in strictly ascending version order");
    }
  }
  return absl::OkStatus();
}

absl::Status NewerSchemaError(int64_t applied, int64_t known) {
  return absl::FailedPreconditionError(absl::StrCat(
      "database schema version ", applied, " is newer than this gpufed build knows (", known,
      "); run a gpufed release that supports it or point --database-url elsewhere"));
}

}  // namespace

int64_t LatestSchemaVersion() {
  std::span<const Migration> all = EmbeddedMigrations();
  return all.empty() ? 0 : all.back().version;
}

absl::Status MigrateDatabase(const std::string& dsn) {
  return MigrateDatabase(dsn, EmbeddedMigrations());
}

absl::Status MigrateDatabase(const std::string& dsn, std::span<const Migration> migrations) {
  RETURN_IF_ERROR(CheckOrder(migrations));
  const int64_t known = migrations.empty() ? 0 : migrations.back().version;
  const Migration* current = nullptr;
  try {
    pqxx::connection conn(WithConnectTimeout(dsn, kConnectTimeoutSeconds));
    // One transaction per step: lock, look, apply at most one migration, record it, commit.
    // Re-reading under the lock each time makes concurrent migrators converge.
    while (true) {
      pqxx::work txn(conn, "migrate");
      txn.exec_params("SELECT pg_advisory_xact_lock($1)", kMigrationLockKey);
      std::set<int64_t> applied = ReadApplied(txn);
      if (!applied.empty() && *applied.rbegin() > known) {
        return NewerSchemaError(*applied.rbegin(), known);
      }
      current = nullptr;
      for (const Migration& m : migrations) {
        if (!applied.contains(m.version)) {
          current = &m;
          break;
        }
      }
      if (current == nullptr) {
        txn.commit();
        return absl::OkStatus();
      }
      txn.exec(std::string(current->sql));
      txn.exec_params(kRecordMigration, current->version, std::string(current->name));
      txn.commit();
      spdlog::info("database migrated to version {} ({})", current->version, current->name);
    }
  } catch (const std::exception& e) {
    if (current != nullptr) {
      absl::Status status = StatusFromException(
          e,
          absl::StrCat("applying migration ", current->version, "_", std::string(current->name)));
      // A migration that does not apply is a defect of this build, not a transient failure,
      // unless the connection itself went away.
      if (absl::IsUnavailable(status) || absl::IsAborted(status)) return status;
      return absl::InternalError(status.message());
    }
    absl::Status status = StatusFromException(e, "migrating the database");
    return absl::IsInternal(status) ? absl::UnavailableError(status.message()) : status;
  }
}

absl::StatusOr<int64_t> AppliedSchemaVersion(const std::string& dsn) {
  try {
    pqxx::connection conn(WithConnectTimeout(dsn, kConnectTimeoutSeconds));
    pqxx::read_transaction txn(conn);
    std::set<int64_t> applied = ReadApplied(txn);
    return applied.empty() ? 0 : *applied.rbegin();
  } catch (const std::exception& e) {
    absl::Status status = StatusFromException(e, "reading the schema version");
    return absl::IsInternal(status) ? absl::UnavailableError(status.message()) : status;
  }
}

}  // namespace gpufed::storage
