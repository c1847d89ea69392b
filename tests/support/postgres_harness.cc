#include "tests/support/postgres_harness.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/status_macros.h"
#include "pqxx/pqxx"
#include "storage/embedded_postgres.h"
#include "storage/migrator.h"
#include "storage/pg_errors.h"
#include "tests/support/status_matchers.h"

namespace gpufed::testing {
namespace {

constexpr const char* kTemplateDatabase = "gpufed_template";

// The value of dbname= in a DSN this harness made ("... dbname=test_3").
std::string DatabaseName(const std::string& dsn) {
  size_t at = dsn.rfind("dbname=");
  if (at == std::string::npos) return "";
  std::string name = dsn.substr(at + 7);
  return name.substr(0, name.find(' '));
}

// Stops PostgreSQL and removes the folder once this process is gone, however it ended: a
// child blocks reading a pipe whose only writer is this process; end of file means we exited
// (or were killed), and a postmaster must not outlive a crashed test binary.
void StartReaper(const std::string& pg_ctl, const std::string& pgdata, const std::string& root) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;
  const std::string script =
      "if [ \"$(id -u)\" = 0 ]; then "
      "  setpriv --reuid=postgres --regid=postgres --init-groups "
      "    \"$1\" stop -D \"$2\" -m immediate -w -t 30; "
      "else \"$1\" stop -D \"$2\" -m immediate -w -t 30; fi; "
      "rm -rf \"$3\"";
  std::vector<std::string> argv_text = {"/bin/sh", "-c",   script, "gpufed-test-reaper",
                                        pg_ctl,    pgdata, root};
  std::vector<char*> argv;
  argv.reserve(argv_text.size() + 1);
  for (std::string& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return;
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here on.
    int null_fd = open("/dev/null", O_RDWR);
    dup2(fds[0], 3);  // dup2 clears close-on-exec on the copy, which we do not exec with anyway
    if (null_fd >= 0) {
      dup2(null_fd, 0);
      dup2(null_fd, 1);  // never hold the test runner's output pipe open
      dup2(null_fd, 2);
    }
    closefrom(4);
    setsid();
    char byte;
    while (read(3, &byte, 1) > 0) {
    }
    close(3);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[0]);
  // fds[1] stays open (close-on-exec) until this process ends.
}

}  // namespace

absl::StatusOr<TestPostgres*> TestPostgres::Get() {
  struct Holder {
    std::unique_ptr<TestPostgres> postgres;
    absl::Status status;
  };
  static Holder holder = [] {
    Holder h;
    h.postgres.reset(new TestPostgres());
    h.status = h.postgres->Start();
    if (!h.status.ok()) h.postgres.reset();
    return h;
  }();
  if (!holder.status.ok()) return holder.status;
  return holder.postgres.get();
}

absl::StatusOr<std::unique_ptr<TestPostgres>> TestPostgres::StartOwn() {
  std::unique_ptr<TestPostgres> postgres(new TestPostgres());
  RETURN_IF_ERROR(postgres->Start());
  return postgres;
}

absl::Status TestPostgres::Stop() { return server_->Stop(); }

absl::Status TestPostgres::Restart() { return server_->Restart(); }

absl::Status TestPostgres::Start() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/gpufed-test-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("cannot create ", pattern));
  }
  root_ = pattern;
  // As root, PostgreSQL runs as the postgres user, which must be able to pass through.
  if (geteuid() == 0) chmod(root_.c_str(), 0711);

  storage::EmbeddedPostgres::Options options;
  options.database = kTemplateDatabase;
  options.shared_buffers = "32MB";
  options.max_connections = 100;
  options.durable = false;  // test data need not survive a machine crash
  ASSIGN_OR_RETURN(server_, storage::EmbeddedPostgres::Create(root_ + "/pg", options));
  StartReaper(options.bin_dir + "/pg_ctl", root_ + "/pg/pgdata", root_);
  return storage::MigrateDatabase(server_->dsn());
}

TestPostgres::~TestPostgres() {
  server_.reset();  // stops PostgreSQL
  std::error_code ec;
  if (!root_.empty()) std::filesystem::remove_all(root_, ec);
}

std::string TestPostgres::AdminDsn() const { return server_->DsnFor("postgres"); }
std::string TestPostgres::DsnFor(const std::string& name) const { return server_->DsnFor(name); }

absl::StatusOr<std::string> TestPostgres::CreateDatabase() { return NewDatabase(true); }
absl::StatusOr<std::string> TestPostgres::CreateEmptyDatabase() { return NewDatabase(false); }

absl::StatusOr<std::string> TestPostgres::NewDatabase(bool migrated) {
  std::string name;
  {
    absl::MutexLock lock(&mu_);
    name = absl::StrCat("test_", ++next_database_);
  }
  try {
    pqxx::connection conn(AdminDsn());
    pqxx::nontransaction txn(conn);
    txn.exec(absl::StrCat("CREATE DATABASE ", txn.quote_name(name), " TEMPLATE ",
                          migrated ? kTemplateDatabase : "template0"));
  } catch (const std::exception& e) {
    return storage::StatusFromException(e, absl::StrCat("creating database ", name));
  }
  return DsnFor(name);
}

absl::Status TestPostgres::DropDatabase(const std::string& dsn) {
  const std::string name = DatabaseName(dsn);
  if (name.empty() || name == kTemplateDatabase || name == "postgres") {
    return absl::InvalidArgumentError(absl::StrCat("dsn: not a test database: ", dsn));
  }
  try {
    pqxx::connection conn(AdminDsn());
    pqxx::nontransaction txn(conn);
    txn.exec(absl::StrCat("DROP DATABASE IF EXISTS ", txn.quote_name(name), " WITH (FORCE)"));
  } catch (const std::exception& e) {
    return storage::StatusFromException(e, absl::StrCat("dropping database ", name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> CreateTestDatabase() {
  ASSIGN_OR_RETURN(TestPostgres * postgres, TestPostgres::Get());
  return postgres->CreateDatabase();
}

void PostgresTest::SetUp() {
  ASSERT_OK_AND_ASSIGN(postgres_, TestPostgres::Get());
  ASSERT_OK_AND_ASSIGN(dsn_, postgres_->CreateDatabase());
}

void PostgresTest::TearDown() {
  if (postgres_ == nullptr || dsn_.empty()) return;
  EXPECT_OK(postgres_->DropDatabase(dsn_));
}

}  // namespace gpufed::testing
