#ifndef GPUFED_STORAGE_EMBEDDED_POSTGRES_H_
#define GPUFED_STORAGE_EMBEDDED_POSTGRES_H_

// A private PostgreSQL 15 server for a data folder: what gpufed-server runs when no
// --database-url is given, and what the test harness runs.
//
// Layout under `data_dir`:
//   pgdata/          the PostgreSQL cluster (initdb on first use)
//   run/             the Unix socket, if its path is short enough; else /tmp/gpufed-pg-XXXXXX
//   postgres.log     initdb/pg_ctl output and the server's start-up messages; the running
//                    server logs to pgdata/log/ (one file per weekday, rotated)
//
// The server listens on a Unix socket only (no TCP), in a directory only its owner can enter,
// with trust authentication on that socket: whoever can reach the socket is the superuser, and
// only the server's own user (and root) can. Durability settings stay at PostgreSQL's defaults
// (fsync, synchronous_commit and full_page_writes on): an acknowledged write survives a crash.
//
// PostgreSQL refuses to run as root. When this process runs as root, the data folder is given
// to the `postgres` system user and initdb/pg_ctl run as that user; every directory above the
// data folder must then be searchable by it.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "federation/clock.h"

namespace gpufed::storage {

class EmbeddedPostgres {
 public:
  struct Options {
    std::string bin_dir = "/usr/lib/postgresql/15/bin";
    // Created if missing; dsn() connects to it.
    std::string database = "gpufed";
    // Only names the socket file (.s.PGSQL.<port>): nothing listens on TCP.
    int port = 5432;
    // Room for the store's pool, its committer, migrations and a few psql sessions.
    int max_connections = 64;
    std::string shared_buffers = "128MB";
    // More postgresql.conf settings, applied at every start (e.g. {"log_min_duration_statement",
    // "250ms"}). Values are written as quoted strings.
    std::map<std::string, std::string> settings;
    absl::Duration start_timeout = absl::Seconds(60);
    // What start_timeout is measured with. Null: the process's SystemClock (ClockOrSystem).
    const Clock* clock = nullptr;
    // The user to run PostgreSQL as when this process is root.
    std::string system_user = "postgres";
    // false is for throwaway test servers only: fsync off, initdb without syncing, immediate
    // shutdown. Nothing survives an operating-system crash (a killed process is still fine).
    bool durable = true;
  };

  // Initialises the cluster on first use, then starts it; if a postmaster from an earlier run
  // (say the server was killed with SIGKILL) still serves this data folder, attaches to it
  // instead. Returns once the database `options.database` accepts connections.
  // Errors (one line, with the tail of postgres.log where it helps): FAILED_PRECONDITION
  // (PostgreSQL not installed, data folder unusable or not reachable by the postgres user),
  // UNAVAILABLE (the server did not start).
  static absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> Create(const std::string& data_dir,
                                                                  Options options);
  static absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> Create(const std::string& data_dir) {
    return Create(data_dir, Options());
  }

  // Stops the server (Stop()).
  ~EmbeddedPostgres();
  EmbeddedPostgres(const EmbeddedPostgres&) = delete;
  EmbeddedPostgres& operator=(const EmbeddedPostgres&) = delete;

  // libpq connection string for options.database, e.g.
  // "host=/data/postgres/run port=5432 user=postgres dbname=gpufed".
  [[nodiscard]] const std::string& dsn() const { return dsn_; }
  // The same server, another database.
  [[nodiscard]] std::string DsnFor(std::string_view database) const;

  // `pg_ctl stop -m fast`: waits for sessions to be cancelled and a shutdown checkpoint.
  // Idempotent. Not thread-safe with other calls on this object.
  absl::Status Stop();

  // True while the postmaster serving the data folder is alive (the pid in pgdata/postmaster.pid
  // exists). One killed with SIGKILL leaves the file behind, naming a pid that is gone.
  [[nodiscard]] bool Running() const;
  // Starts the server again after it died (Running() false). PostgreSQL replays its WAL first,
  // so every committed transaction is there. UNAVAILABLE when it does not come up; the killed
  // postmaster's backends may still be exiting, so try again after a pause.
  // Not thread-safe with other calls on this object.
  absl::Status Restart();

  // True if Create() attached to a postmaster that was already running.
  [[nodiscard]] bool reused() const { return reused_; }
  [[nodiscard]] const std::string& data_dir() const { return data_dir_; }
  [[nodiscard]] const std::string& socket_dir() const { return socket_dir_; }

 private:
  struct RunAs;
  static absl::StatusOr<std::shared_ptr<const RunAs>> LookUpUser(const std::string& name);
  EmbeddedPostgres(std::string data_dir, Options options);

  absl::Status Init();
  absl::Status InitDb();
  absl::Status WriteSettings();
  absl::Status Start();
  absl::Status EnsureDatabase();
  // Returns true and fills socket_dir_/port_ if a live postmaster serves pgdata.
  bool AttachToRunning();
  [[nodiscard]] std::string PgDataDir() const { return data_dir_ + "/pgdata"; }
  [[nodiscard]] std::string LogFile() const { return data_dir_ + "/postgres.log"; }
  [[nodiscard]] std::string LogTail() const;
  [[nodiscard]] std::string BaseDsn(std::string_view database) const;
  [[nodiscard]] absl::StatusOr<int> Run(const std::vector<std::string>& argv) const;
  absl::Status GiveToRunAs(const std::string& path) const;

  const std::string data_dir_;
  const Options options_;
  std::shared_ptr<const RunAs> run_as_;  // set when this process is root
  std::string socket_dir_;
  bool own_tmp_socket_dir_ = false;
  int port_ = 0;
  std::string dsn_;
  bool running_ = false;
  bool reused_ = false;
};

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_EMBEDDED_POSTGRES_H_
