#include "storage/embedded_postgres.h"

#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>  // NOLINT(modernize-deprecated-headers): POSIX kill
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "federation/status_macros.h"
#include "pqxx/pqxx"
#include "spdlog/spdlog.h"
#include "storage/pg_errors.h"

namespace gpufed::storage {

namespace fs = std::filesystem;

struct EmbeddedPostgres::RunAs {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  std::string home;
};

namespace {

// PostgreSQL's limit is sizeof(sockaddr_un.sun_path) (108) including the terminating NUL;
// staying below 100 leaves room and matches what the docs promise.
constexpr size_t kMaxSocketPathLength = 100;

// A value in a libpq connection string: quoted when it holds spaces, quotes or backslashes.
std::string ConnInfoValue(std::string_view value) {
  if (!value.empty() && value.find_first_of(" '\\\t\n") == std::string_view::npos) {
    return std::string(value);
  }
  std::string out = "'";
  for (char c : value) {
    if (c == '\'' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// A string value in postgresql.conf.
std::string ConfValue(std::string_view value) {
  std::string out = "'";
  for (char c : value) {
    if (c == '\'') out.push_back('\'');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

// Can `who` pass through directory `st` (search permission)?
bool CanSearch(const struct stat& st, uid_t uid, const std::vector<gid_t>& groups) {
  if (st.st_uid == uid) return (st.st_mode & S_IXUSR) != 0;
  for (gid_t g : groups) {
    if (st.st_gid == g) return (st.st_mode & S_IXGRP) != 0;
  }
  return (st.st_mode & S_IXOTH) != 0;
}

}  // namespace

template <typename T>
static absl::StatusOr<T> Errno(absl::string_view what, const std::string& path) {
  const int error = errno;
  // strerror_r (the GNU one, which returns the message): strerror's buffer is shared by threads.
  char buf[256];
  return absl::FailedPreconditionError(
      absl::StrCat(what, " ", path, ": ", strerror_r(error, buf, sizeof(buf))));
}

EmbeddedPostgres::EmbeddedPostgres(std::string data_dir, Options options)
    : data_dir_(std::move(data_dir)), options_(std::move(options)) {}

absl::StatusOr<std::unique_ptr<EmbeddedPostgres>> EmbeddedPostgres::Create(
    const std::string& data_dir, Options options) {
  if (data_dir.empty()) return absl::InvalidArgumentError("data_dir: required");
  std::error_code ec;
  fs::path absolute = fs::absolute(data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("embedded PostgreSQL: cannot resolve ", data_dir, ": ", ec.message()));
  }
  std::string dir = absolute.lexically_normal().string();
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::unique_ptr<EmbeddedPostgres> pg(new EmbeddedPostgres(std::move(dir), std::move(options)));
  RETURN_IF_ERROR(pg->Init());
  return pg;
}

EmbeddedPostgres::~EmbeddedPostgres() {
  absl::Status status = Stop();
  if (!status.ok()) spdlog::warn("embedded PostgreSQL: {}", std::string(status.message()));
}

std::string EmbeddedPostgres::DsnFor(std::string_view database) const { return BaseDsn(database); }

std::string EmbeddedPostgres::BaseDsn(std::string_view database) const {
  return absl::StrCat("host=", ConnInfoValue(socket_dir_), " port=", port_,
                      " user=postgres dbname=", ConnInfoValue(database));
}

absl::Status EmbeddedPostgres::Init() {
  for (const char* tool : {"initdb", "pg_ctl", "postgres"}) {
    std::string path = absl::StrCat(options_.bin_dir, "/", tool);
    if (!IsExecutable(path)) {
      return absl::FailedPreconditionError(
          absl::StrCat("embedded PostgreSQL: ", path,
                       " not found; install PostgreSQL 15 (Debian package postgresql-15) or pass "
                       "--database-url"));
    }
  }
  if (geteuid() == 0) {
    ASSIGN_OR_RETURN(run_as_, LookUpUser(options_.system_user));
  }

  std::error_code ec;
  if (!fs::exists(data_dir_, ec)) {
    fs::create_directories(data_dir_, ec);
    if (ec) {
      return absl::FailedPreconditionError(
          absl::StrCat("embedded PostgreSQL: cannot create ", data_dir_, ": ", ec.message()));
    }
    fs::permissions(data_dir_, fs::perms::owner_all, ec);
  }
  if (!fs::is_directory(data_dir_, ec)) {
    return absl::FailedPreconditionError(
        absl::StrCat("embedded PostgreSQL: ", data_dir_, " is not a directory"));
  }
  if (run_as_ != nullptr) {
    RETURN_IF_ERROR(GiveToRunAs(data_dir_));
    // PostgreSQL opens its files by absolute path as the postgres user: every directory on the
    // way must let that user through.
    for (fs::path p = fs::path(data_dir_).parent_path(); !p.empty(); p = p.parent_path()) {
      struct stat st;
      if (stat(p.c_str(), &st) == 0 && !CanSearch(st, run_as_->uid, run_as_->groups)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "embedded PostgreSQL runs as user '", run_as_->name, "', which cannot enter ",
            p.string(), "; allow it (chmod o+x ", p.string(), ") or choose another data folder"));
      }
      if (p == p.root_path()) break;
    }
  }

  if (!fs::exists(PgDataDir() + "/PG_VERSION", ec)) {
    if (fs::exists(PgDataDir(), ec) && !fs::is_empty(PgDataDir(), ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("embedded PostgreSQL: ", PgDataDir(),
                       " exists but is not a PostgreSQL data folder (no PG_VERSION)"));
    }
    RETURN_IF_ERROR(InitDb());
  }

  if (AttachToRunning()) {
    reused_ = true;
    spdlog::info("embedded PostgreSQL: attached to the server already running on {}", PgDataDir());
  } else {
    RETURN_IF_ERROR(WriteSettings());
    absl::Status started = Start();
    if (!started.ok()) {
      // Another process may have started it between our look and our start.
      if (!AttachToRunning()) return started;
      reused_ = true;
    }
  }
  running_ = true;
  RETURN_IF_ERROR(EnsureDatabase());
  dsn_ = BaseDsn(options_.database);
  return absl::OkStatus();
}

absl::Status EmbeddedPostgres::InitDb() {
  // initdb into a scratch folder and rename it into place, so that an interrupted initdb never
  // leaves a half-made cluster that a later start would trip over.
  const std::string scratch = data_dir_ + "/pgdata.initdb";
  std::error_code ec;
  fs::remove_all(scratch, ec);
  spdlog::info("embedded PostgreSQL: initialising {}", PgDataDir());
  std::vector<std::string> argv = {absl::StrCat(options_.bin_dir, "/initdb"),
                                   "-D",
                                   scratch,
                                   "-U",
                                   "postgres",
                                   "-E",
                                   "UTF8",
                                   "--locale=C",
                                   "--auth-local=trust",
                                   "--auth-host=reject",
                                   "--data-checksums"};
  if (!options_.durable) argv.emplace_back("--no-sync");
  ASSIGN_OR_RETURN(int rc, Run(argv));
  if (rc != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("embedded PostgreSQL: initdb failed (exit ", rc, "): ", LogTail()));
  }
  {
    std::ofstream conf(scratch + "/postgresql.conf", std::ios::app);
    conf << "\n# Settings gpufed manages; rewritten at every start.\n"
            "include_if_exists = 'gpufed.conf'\n";
    if (!conf) return Errno<bool>("embedded PostgreSQL: cannot write", scratch).status();
  }
  fs::rename(scratch, PgDataDir(), ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("embedded PostgreSQL: cannot rename ", scratch, ": ", ec.message()));
  }
  return absl::OkStatus();
}

absl::Status EmbeddedPostgres::WriteSettings() {
  port_ = options_.port;
  std::error_code ec;
  std::string candidate = data_dir_ + "/run";
  if (absl::StrCat(candidate, "/.s.PGSQL.", port_).size() < kMaxSocketPathLength) {
    fs::create_directories(candidate, ec);
    if (ec) return Errno<bool>("embedded PostgreSQL: cannot create", candidate).status();
    socket_dir_ = candidate;
    own_tmp_socket_dir_ = false;
  } else {
    char tmpl[] = "/tmp/gpufed-pg-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      return Errno<bool>("embedded PostgreSQL: cannot create", tmpl).status();
    }
    socket_dir_ = tmpl;
    own_tmp_socket_dir_ = true;
  }
  // Trust authentication on the socket is safe only because nobody else can enter this folder.
  fs::permissions(socket_dir_, fs::perms::owner_all, ec);
  if (run_as_ != nullptr) RETURN_IF_ERROR(GiveToRunAs(socket_dir_));

  std::map<std::string, std::string> settings = {
      {"listen_addresses", ""},
      {"port", std::to_string(port_)},
      {"unix_socket_directories", socket_dir_},
      {"unix_socket_permissions", "0700"},
      {"max_connections", std::to_string(options_.max_connections)},
      {"shared_buffers", options_.shared_buffers},
      // Durability: these are PostgreSQL's defaults, spelled out so nobody "tunes" them away.
      {"fsync", "on"},
      {"synchronous_commit", "on"},
      {"full_page_writes", "on"},
      {"timezone", "UTC"},
      {"log_timezone", "UTC"},
      {"logging_collector", "on"},
      {"log_directory", "log"},
      {"log_filename", "postgresql-%a.log"},
      {"log_truncate_on_rotation", "on"},
      {"log_rotation_age", "1d"},
      {"log_rotation_size", "0"},
      {"log_line_prefix", "%m [%p] %q%u@%d "},
      // A client that dies inside a transaction must not hold row locks for ever.
      {"idle_in_transaction_session_timeout", "5min"},
      // Prepared statements keep a generic plan until the tables it reads are analysed again;
      // plans made while a fresh database was small (hash joins over whole tables) stay until
      // then. Autovacuum looks every 10 s instead of every minute (docs/storage.md).
      {"autovacuum_naptime", "10s"},
  };
  if (!options_.durable) {
    settings["fsync"] = "off";
    settings["full_page_writes"] = "off";
  }
  for (const auto& [key, value] : options_.settings) settings[key] = value;

  std::string text =
      "# Written by gpufed at every start of its embedded PostgreSQL; edits here are lost.\n"
      "# Use ALTER SYSTEM (postgresql.auto.conf) for lasting changes.\n";
  for (const auto& [key, value] : settings)
    absl::StrAppend(&text, key, " = ", ConfValue(value), "\n");
  const std::string path = PgDataDir() + "/gpufed.conf";
  {
    std::ofstream out(path, std::ios::trunc);
    out << text;
    if (!out) return Errno<bool>("embedded PostgreSQL: cannot write", path).status();
  }
  chmod(path.c_str(), 0600);
  if (run_as_ != nullptr) RETURN_IF_ERROR(GiveToRunAs(path));
  return absl::OkStatus();
}

absl::Status EmbeddedPostgres::Start() {
  // The log file is opened by the postmaster (as the postgres user) through pg_ctl -l.
  { std::ofstream touch(LogFile(), std::ios::app); }
  if (run_as_ != nullptr) RETURN_IF_ERROR(GiveToRunAs(LogFile()));
  const int64_t seconds = std::max<int64_t>(1, absl::ToInt64Seconds(options_.start_timeout));
  ASSIGN_OR_RETURN(int rc,
                   Run({absl::StrCat(options_.bin_dir, "/pg_ctl"), "start", "-D", PgDataDir(), "-l",
                        LogFile(), "-w", "-t", std::to_string(seconds), "-s"}));
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("embedded PostgreSQL did not start (pg_ctl exit ", rc, "): ", LogTail()));
  }
  spdlog::info("embedded PostgreSQL: started on {} (socket in {})", PgDataDir(), socket_dir_);
  return absl::OkStatus();
}

bool EmbeddedPostgres::Running() const {
  std::ifstream in(PgDataDir() + "/postmaster.pid");
  std::string first;
  pid_t pid = 0;
  if (!in || !std::getline(in, first) || !absl::SimpleAtoi(first, &pid) || pid <= 0) return false;
  return kill(pid, 0) == 0 || errno == EPERM;
}

absl::Status EmbeddedPostgres::Restart() {
  RETURN_IF_ERROR(Start());
  running_ = true;
  return absl::OkStatus();
}

bool EmbeddedPostgres::AttachToRunning() {
  // postmaster.pid: pid, data dir, start time, port, socket dir, listen address, shm key,
  // status — one per line.
  std::ifstream in(PgDataDir() + "/postmaster.pid");
  if (!in) return false;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  if (lines.size() < 5) return false;
  pid_t pid = 0;
  int port = 0;
  if (!absl::SimpleAtoi(lines[0], &pid) || pid <= 0 || !absl::SimpleAtoi(lines[3], &port)) {
    return false;
  }
  if (kill(pid, 0) != 0 && errno != EPERM) return false;  // stale file from a dead server
  std::string socket_dir(absl::StripAsciiWhitespace(lines[4]));
  if (socket_dir.empty()) return false;

  std::string conninfo = absl::StrCat("host=", ConnInfoValue(socket_dir), " port=", port,
                                      " user=postgres dbname=postgres connect_timeout=5");
  const Clock& clock = *ClockOrSystem(options_.clock);
  const absl::Time deadline = AbslNow(clock) + options_.start_timeout;
  while (true) {
    PGPing ping = PQping(conninfo.c_str());
    if (ping == PQPING_OK) break;
    // REJECT: starting up or shutting down; wait for it to settle.
    if (ping != PQPING_REJECT || AbslNow(clock) > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (kill(pid, 0) != 0 && errno != EPERM) return false;
  }
  socket_dir_ = socket_dir;
  port_ = port;
  own_tmp_socket_dir_ = absl::StartsWith(socket_dir_, "/tmp/gpufed-pg-");
  return true;
}

absl::Status EmbeddedPostgres::EnsureDatabase() {
  try {
    pqxx::connection conn(BaseDsn("postgres"));
    pqxx::nontransaction txn(conn);
    pqxx::result found =
        txn.exec_params("SELECT 1 FROM pg_database WHERE datname = $1", options_.database);
    if (found.empty()) {
      try {
        txn.exec(absl::StrCat("CREATE DATABASE ", txn.quote_name(options_.database)));
      } catch (const pqxx::sql_error& e) {
        // 42P04 duplicate_database: a concurrent starter made it first.
        if (e.sqlstate() != "42P04") throw;
      }
    }
  } catch (const std::exception& e) {
    return StatusFromException(e, "embedded PostgreSQL: creating the database");
  }
  return absl::OkStatus();
}

absl::Status EmbeddedPostgres::Stop() {
  if (!running_) return absl::OkStatus();
  running_ = false;
  const std::string pg_ctl = absl::StrCat(options_.bin_dir, "/pg_ctl");
  absl::Status status = absl::OkStatus();
  // A throwaway server need not write a shutdown checkpoint.
  absl::StatusOr<int> rc = Run({pg_ctl, "stop", "-D", PgDataDir(), "-m",
                                options_.durable ? "fast" : "immediate", "-w", "-t", "60", "-s"});
  if (!rc.ok() || *rc != 0) {
    // A fast shutdown waits for a checkpoint; if that hangs, crash-stop (WAL makes it safe).
    absl::StatusOr<int> again =
        Run({pg_ctl, "stop", "-D", PgDataDir(), "-m", "immediate", "-w", "-t", "30", "-s"});
    if (!again.ok() || *again != 0) {
      status = absl::UnavailableError(absl::StrCat(
          "embedded PostgreSQL: pg_ctl stop failed; last lines of the log: ", LogTail()));
    }
  }
  if (own_tmp_socket_dir_) {
    std::error_code ec;
    fs::remove_all(socket_dir_, ec);
  }
  return status;
}

std::string EmbeddedPostgres::LogTail() const {
  std::ifstream in(LogFile());
  std::deque<std::string> tail;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    tail.push_back(line);
    if (tail.size() > 8) tail.pop_front();
  }
  if (tail.empty()) return absl::StrCat("(", LogFile(), " is empty)");
  return absl::StrCat(absl::StrJoin(tail, " | "), " (see ", LogFile(), ")");
}

absl::Status EmbeddedPostgres::GiveToRunAs(const std::string& path) const {
  if (run_as_ == nullptr) return absl::OkStatus();
  if (chown(path.c_str(), run_as_->uid, run_as_->gid) != 0) {
    return Errno<bool>(absl::StrCat("embedded PostgreSQL: cannot give to user ", run_as_->name),
                       path)
        .status();
  }
  return absl::OkStatus();
}

absl::StatusOr<int> EmbeddedPostgres::Run(const std::vector<std::string>& argv) const {
  // Everything the child needs is prepared before fork(): after it, only async-signal-safe
  // calls are allowed (this process has threads).
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Nothing in the server calls setenv, so reading the environment cannot race.
  const char* home = run_as_ != nullptr ? run_as_->home.c_str()
                                        : std::getenv("HOME");  // NOLINT(concurrency-mt-unsafe)
  std::vector<std::string> env_text = {
      "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "LC_ALL=C",
      "LANG=C",
      absl::StrCat("HOME=", home != nullptr ? home : "/"),
  };
  std::vector<char*> env;
  env.reserve(env_text.size() + 1);
  for (const std::string& e : env_text) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  const RunAs* run_as = run_as_.get();
  const std::string log_file = LogFile();

  int log_fd = open(log_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (log_fd < 0) return Errno<int>("embedded PostgreSQL: cannot open", log_file);
  int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) {
    close(log_fd);
    return Errno<int>("embedded PostgreSQL: cannot open", "/dev/null");
  }
  if (run_as != nullptr) fchown(log_fd, run_as->uid, run_as->gid);

  pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    close(null_fd);
    return Errno<int>("embedded PostgreSQL: fork failed for", argv[0]);
  }
  if (pid == 0) {
    dup2(null_fd, STDIN_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    closefrom(3);  // the postmaster must not inherit our sockets and database connections
    // Its own session: a Ctrl-C meant for the server must not also kill PostgreSQL mid-write;
    // the server stops it in order.
    setsid();
    if (run_as != nullptr) {
      if (setgroups(run_as->groups.size(), run_as->groups.data()) != 0 ||
          setgid(run_as->gid) != 0 || setuid(run_as->uid) != 0) {
        _exit(126);
      }
    }
    // The parent's working directory may be closed to the postgres user.
    if (chdir(data_dir_.c_str()) != 0 && chdir("/") != 0) _exit(126);
    execve(args[0], args.data(), env.data());
    _exit(127);
  }
  close(log_fd);
  close(null_fd);
  int wstatus = 0;
  while (waitpid(pid, &wstatus, 0) < 0) {
    if (errno != EINTR) return Errno<int>("embedded PostgreSQL: waitpid failed for", argv[0]);
  }
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  return absl::UnavailableError(
      absl::StrCat("embedded PostgreSQL: ", argv[0], " was killed by signal ", WTERMSIG(wstatus)));
}

absl::StatusOr<std::shared_ptr<const EmbeddedPostgres::RunAs>> EmbeddedPostgres::LookUpUser(
    const std::string& name) {
  auto run_as = std::make_shared<EmbeddedPostgres::RunAs>();
  struct passwd pw;
  struct passwd* found = nullptr;
  std::vector<char> buffer(16384);
  if (getpwnam_r(name.c_str(), &pw, buffer.data(), buffer.size(), &found) != 0 ||
      found == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "embedded PostgreSQL cannot run as root and there is no '", name,
        "' user to run it as; install the postgresql package or run gpufed as another user"));
  }
  run_as->name = name;
  run_as->uid = pw.pw_uid;
  run_as->gid = pw.pw_gid;
  run_as->home = pw.pw_dir != nullptr ? pw.pw_dir : "/";
  int count = 32;
  run_as->groups.resize(count);
  while (getgrouplist(name.c_str(), pw.pw_gid, run_as->groups.data(), &count) < 0) {
    run_as->groups.resize(count);
  }
  run_as->groups.resize(count);
  return std::shared_ptr<const EmbeddedPostgres::RunAs>(std::move(run_as));
}

}  // namespace gpufed::storage
