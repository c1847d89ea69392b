#include "storage/pg_pool.h"

#include <libpq-fe.h>

#include <algorithm>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "federation/request_deadline.h"

namespace gpufed::storage {
namespace {

int64_t Millis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

struct ConninfoFree {
  void operator()(PQconninfoOption* options) const { PQconninfoFree(options); }
};

}  // namespace

absl::Status CheckConnectionString(const std::string& dsn) {
  char* error = nullptr;
  std::unique_ptr<PQconninfoOption, ConninfoFree> options(PQconninfoParse(dsn.c_str(), &error));
  if (options != nullptr) return absl::OkStatus();
  std::string message = error != nullptr ? error : "out of memory";
  PQfreemem(error);
  // Keep libpq's words, drop what it quotes from the string.
  std::string withheld;
  bool quoted = false;
  for (const char c : message) {
    if (c == '"') {
      if (!quoted) withheld += "\"...\"";
      quoted = !quoted;
    } else if (!quoted && c != '\n') {
      withheld += c;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("database_url: not a valid libpq connection string: ", withheld));
}

std::string RedactPassword(std::string text, const std::string& dsn) {
  std::unique_ptr<PQconninfoOption, ConninfoFree> options(PQconninfoParse(dsn.c_str(), nullptr));
  if (options == nullptr) return text;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (std::string_view(o->keyword) != "password" || o->val == nullptr || *o->val == '\0') {
      continue;
    }
    const std::string decoded = o->val;
    // In a URL the password may be percent-encoded; hide the text between ':' and '@' as written.
    std::string written;
    if (const size_t scheme = dsn.find("://"); scheme != std::string::npos) {
      const size_t at = dsn.find('@', scheme + 3);
      const size_t colon = dsn.find(':', scheme + 3);
      if (at != std::string::npos && colon != std::string::npos && colon < at) {
        written = dsn.substr(colon + 1, at - colon - 1);
      }
    }
    for (const std::string& secret : {written, decoded}) {
      if (!secret.empty()) absl::StrReplaceAll({{secret, "***"}}, &text);
    }
  }
  return text;
}

std::string WithConnectTimeout(const std::string& dsn, int seconds) {
  if (seconds <= 0 || absl::StrContains(dsn, "connect_timeout")) return dsn;
  if (absl::StartsWith(dsn, "postgres://") || absl::StartsWith(dsn, "postgresql://")) {
    return absl::StrCat(dsn, absl::StrContains(dsn, "?") ? "&" : "?", "connect_timeout=", seconds);
  }
  return absl::StrCat(dsn, dsn.empty() ? "" : " ", "connect_timeout=", seconds);
}

absl::StatusOr<std::unique_ptr<PgPool>> PgPool::Create(std::string dsn, PgPoolOptions options,
                                                       ConnectionSetup setup) {
  options.clock = ClockOrSystem(options.clock);
  if (options.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("database pool size must be at least 1, got ", options.size));
  }
  if (options.max_attempts < 1) options.max_attempts = 1;
  dsn = WithConnectTimeout(dsn, options.connect_timeout_seconds);
  std::unique_ptr<PgPool> pool(new PgPool(std::move(dsn), std::move(options), std::move(setup)));
  absl::StatusOr<std::unique_ptr<pqxx::connection>> first = pool->Open();
  if (!first.ok()) return first.status();
  {
    absl::MutexLock lock(&pool->mu_);
    pool->idle_.push_back(*std::move(first));
    pool->open_ = 1;
  }
  return pool;
}

PgPool::~PgPool() {
  absl::MutexLock lock(&mu_);
  idle_.clear();
}

absl::StatusOr<std::unique_ptr<pqxx::connection>> PgPool::Open() {
  try {
    auto conn = std::make_unique<pqxx::connection>(dsn_);
    {
      // Session settings live as long as the connection; a reconnect gets them again here.
      pqxx::nontransaction txn(*conn);
      txn.exec(absl::StrCat("SET statement_timeout = ", Millis(options_.statement_timeout),
                            "; SET lock_timeout = ", Millis(options_.lock_timeout),
                            "; SET application_name = ", txn.quote(options_.application_name),
                            "; SET TIME ZONE 'UTC'"));
    }
    if (setup_) setup_(*conn);
    return conn;
  } catch (const std::exception& e) {
    absl::Status status = StatusFromException(e, "connecting to the database");
    if (absl::IsInternal(status)) {
      // libpqxx reports a failed connect as a plain failure in some versions.
      return absl::UnavailableError(status.message());
    }
    return status;
  }
}

absl::StatusOr<PgPool::RequestBudget> PgPool::BudgetForRequest() const {
  RequestBudget budget{options_.acquire_timeout, false, std::nullopt};
  const absl::Time deadline = CurrentDeadline();
  if (deadline == absl::InfiniteFuture()) return budget;
  const absl::Duration left = deadline - Now();
  if (left <= absl::ZeroDuration()) {
    return absl::DeadlineExceededError("the request's deadline passed before the database call");
  }
  if (left < budget.acquire) {
    budget.acquire = left;
    budget.acquire_bound_by_deadline = true;
  }
  if (options_.statement_timeout == absl::ZeroDuration() || left < options_.statement_timeout) {
    // At least a millisecond: 0 would mean no limit at all.
    budget.statement = std::max(left, absl::Milliseconds(1));
  }
  return budget;
}

void PgPool::LowerStatementTimeout(pqxx::transaction_base& txn, Lease& lease,
                                   absl::Duration timeout) {
  const int64_t ms = std::max<int64_t>(1, Millis(timeout));
  if (dynamic_cast<pqxx::nontransaction*>(&txn) != nullptr) {
    // Outside a transaction block SET LOCAL does nothing.
    txn.exec(absl::StrCat("SET statement_timeout = ", ms));
    lease.restore_statement_timeout_ = true;
  } else {
    txn.exec(absl::StrCat("SET LOCAL statement_timeout = ", ms));
  }
}

absl::StatusOr<PgPool::Lease> PgPool::Acquire(absl::Duration timeout) {
  const absl::Time deadline = Now() + timeout;
  while (true) {
    std::unique_ptr<pqxx::connection> idle;
    {
      absl::MutexLock lock(&mu_);
      auto can_proceed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !idle_.empty() || open_ < options_.size;
      };
      // A wait of what is left by the injected clock (the mutex itself waits in real time).
      if (!mu_.AwaitWithTimeout(absl::Condition(&can_proceed), deadline - Now())) {
        return absl::UnavailableError(absl::StrCat("database busy: all ", options_.size,
                                                   " connections in use for ",
                                                   absl::FormatDuration(timeout)));
      }
      if (!idle_.empty()) {
        idle = std::move(idle_.back());
        idle_.pop_back();
      } else {
        ++open_;  // reserve the slot while connecting outside the lock
      }
    }
    if (idle == nullptr) {
      absl::StatusOr<std::unique_ptr<pqxx::connection>> conn = Open();
      if (!conn.ok()) {
        Forget();
        return conn.status();
      }
      return Lease(this, *std::move(conn));
    }
    if (StillAlive(*idle)) return Lease(this, std::move(idle));
    // The server closed it while it sat idle (restart, failover, idle timeout): replace it
    // before anything is sent on it, when retrying is still known to be safe.
    idle.reset();
    Forget();
    DropIdle();
  }
}

bool PgPool::StillAlive(pqxx::connection& conn) {
  try {
    // Reads whatever the server sent while the connection was idle, without blocking: a
    // terminated session shows up as an error message followed by end of file, so look twice.
    conn.get_notifs();
    conn.get_notifs();
    return conn.is_open();
  } catch (const std::exception&) {
    return false;
  }
}

void PgPool::Return(std::unique_ptr<pqxx::connection> conn) {
  // A connection whose socket died is useless; libpqxx would otherwise try to reactivate it
  // silently, without this pool's session settings.
  if (!conn->is_open()) {
    conn.reset();
    Forget();
    return;
  }
  absl::MutexLock lock(&mu_);
  idle_.push_back(std::move(conn));
}

void PgPool::DropIdle() {
  std::vector<std::unique_ptr<pqxx::connection>> idle;
  {
    absl::MutexLock lock(&mu_);
    idle.swap(idle_);
    open_ -= static_cast<int>(idle.size());
  }
  // Closed outside the lock.
}

void PgPool::Forget() {
  absl::MutexLock lock(&mu_);
  --open_;
}

PgPool::Lease::Lease(Lease&& other) noexcept
    : pool_(other.pool_),
      conn_(std::move(other.conn_)),
      restore_statement_timeout_(other.restore_statement_timeout_) {}

PgPool::Lease::~Lease() {
  if (conn_ == nullptr) return;
  if (restore_statement_timeout_) {
    try {
      pqxx::nontransaction txn(*conn_);
      txn.exec(absl::StrCat("SET statement_timeout = ", Millis(pool_->options_.statement_timeout)));
    } catch (const std::exception&) {
      Discard();  // a session whose settings are unknown is not returned
      return;
    }
  }
  pool_->Return(std::move(conn_));
}

void PgPool::Lease::Discard() {
  if (conn_ == nullptr) return;
  try {
    conn_->disconnect();
  } catch (const std::exception&) {
    // Closing a broken connection may fail; it is dropped either way.
  }
  conn_.reset();
  pool_->Forget();
  // One dead session usually means they all are (the server restarted or failed over): drop
  // the idle ones too rather than let the next callers find out one failed attempt at a time.
  pool_->DropIdle();
}

}  // namespace gpufed::storage
