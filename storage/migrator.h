#ifndef GPUFED_STORAGE_MIGRATOR_H_
#define GPUFED_STORAGE_MIGRATOR_H_

// Schema migrations. The SQL files in migrations/ (NNNN_name.sql) are compiled into the binary
// (storage/CMakeLists.txt generates EmbeddedMigrations()), so a server always carries exactly
// the schema it was built for and tests build their databases from the same files.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpufed::storage {

struct Migration {
  int64_t version;        // NNNN of the file name
  std::string_view name;  // the rest of the file name, without .sql
  std::string_view sql;   // the file's text; may hold several statements
};

// migrations/*.sql in ascending version order.
std::span<const Migration> EmbeddedMigrations();

// The newest version in EmbeddedMigrations().
int64_t LatestSchemaVersion();

// Brings the database at `dsn` up to date: applies every migration not yet recorded in
// schema_migrations, in version order, each in its own transaction that also records it.
// Every transaction first takes a transaction-level advisory lock, so several servers may
// start against one database at once: one applies, the others wait and then find nothing to
// do. Idempotent.
// Errors: FAILED_PRECONDITION (one line) if the database holds a schema version newer than
// the newest in `migrations` (an older binary must not write to a newer schema);
// UNAVAILABLE if the database cannot be reached; INTERNAL (naming the migration) if a
// migration's SQL fails, in which case that migration is rolled back entirely.
absl::Status MigrateDatabase(const std::string& dsn);
absl::Status MigrateDatabase(const std::string& dsn, std::span<const Migration> migrations);

// The highest version recorded in schema_migrations; 0 for a database never migrated.
// For /readyz and start-up checks. UNAVAILABLE if the database cannot be reached.
absl::StatusOr<int64_t> AppliedSchemaVersion(const std::string& dsn);

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_MIGRATOR_H_
