#ifndef GPUFED_STORAGE_PG_POOL_H_
#define GPUFED_STORAGE_PG_POOL_H_

// A bounded pool of libpqxx connections, and the one place that runs a transaction and turns
// its exceptions into statuses. Internal to storage/: nothing outside this folder sees pqxx.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "federation/clock.h"
#include "pqxx/pqxx"
#include "storage/pg_errors.h"

namespace gpufed::storage {

struct PgPoolOptions {
  // Most connections open at once. Opened on demand; one is opened by Create().
  int size = 8;
  // How long Acquire() waits for a free connection before answering UNAVAILABLE.
  absl::Duration acquire_timeout = absl::Seconds(5);
  // Server-side limits set on every connection (0: none). A statement running longer is
  // cancelled (DEADLINE_EXCEEDED); waiting for a row lock longer is ABORTED.
  absl::Duration statement_timeout = absl::Seconds(30);
  absl::Duration lock_timeout = absl::Seconds(10);
  // Attempts for one Transact() call when the failure is safe to retry: a serialization
  // failure, deadlock or lock timeout (ABORTED), or a connection found broken before COMMIT
  // was sent (a pooled connection outlived a database restart).
  int max_attempts = 3;
  std::string application_name = "gpufed";
  // Longest wait to open a connection (added to the DSN if it sets none).
  int connect_timeout_seconds = 5;
  // What a request's deadline is measured against (wall time), and the start of the wait for a
  // connection. Null: the process's SystemClock (ClockOrSystem).
  const Clock* clock = nullptr;
};

// `dsn` with connect_timeout=`seconds` added unless it names one already, so that an unreachable
// server fails a call within that time instead of the operating system's TCP timeout. Handles
// both "key=value ..." strings and postgresql:// URIs.
std::string WithConnectTimeout(const std::string& dsn, int seconds);

// Whether libpq can parse `dsn` (keyword/value or URL form). INVALID_ARGUMENT "database_url: not
// a valid libpq connection string: ..." otherwise, with every quoted part of libpq's message
// withheld: libpq quotes the part it could not parse, which may be the password.
absl::Status CheckConnectionString(const std::string& dsn);

// `text` with the password `dsn` holds (as written and as libpq decodes it) replaced by "***",
// for errors and log lines that may repeat it. `text` unchanged when `dsn` names none or does
// not parse (CheckConnectionString first).
std::string RedactPassword(std::string text, const std::string& dsn);

// Called once for each new connection, before first use: registers its prepared statements
// (libpqxx prepares each on the server lazily, on first execution).
using ConnectionSetup = std::function<void(pqxx::connection&)>;

// Thread-safe. Connections found broken are discarded and reopened on demand. All leases must
// be returned before the pool is destroyed.
class PgPool {
 public:
  // Opens the first connection so that a wrong DSN or an unreachable server fails here with
  // one line (UNAVAILABLE). INVALID_ARGUMENT for a bad size.
  static absl::StatusOr<std::unique_ptr<PgPool>> Create(std::string dsn, PgPoolOptions options,
                                                        ConnectionSetup setup);
  ~PgPool();
  PgPool(const PgPool&) = delete;
  PgPool& operator=(const PgPool&) = delete;

  // Exclusive use of one connection until destroyed.
  class Lease {
   public:
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    pqxx::connection& operator*() const { return *conn_; }
    pqxx::connection* operator->() const { return conn_.get(); }
    // The connection is unusable: close it instead of returning it to the pool.
    void Discard();

   private:
    friend class PgPool;
    Lease(PgPool* pool, std::unique_ptr<pqxx::connection> conn)
        : pool_(pool), conn_(std::move(conn)) {}
    PgPool* pool_;
    std::unique_ptr<pqxx::connection> conn_;
    bool restore_statement_timeout_ = false;  // see LowerStatementTimeout
  };

  // UNAVAILABLE if no connection is free within `timeout` or a new one cannot be opened.
  absl::StatusOr<Lease> Acquire(absl::Duration timeout);
  absl::StatusOr<Lease> Acquire() { return Acquire(options_.acquire_timeout); }

  // Runs `fn(txn)` in a fresh transaction of type Txn (pqxx::work, pqxx::nontransaction, ...)
  // and commits if it returns OK; an error status from `fn` rolls back and is returned as is
  // (so bad input leaves the database unchanged). Exceptions become statuses (pg_errors.h);
  // retryable failures are retried up to options.max_attempts times, so `fn` must keep its
  // effects inside its return value. `what` names the operation in messages.
  // With pqxx::nontransaction each statement commits by itself, so a connection that breaks
  // during the call leaves its outcome unknown: it is retried only if `idempotent`.
  // Fn: (Txn&) -> absl::Status or absl::StatusOr<T>.
  template <typename Txn = pqxx::work, typename Fn>
  std::invoke_result_t<Fn&, Txn&> Transact(absl::string_view what, Fn&& fn, bool idempotent = true);

  [[nodiscard]] const PgPoolOptions& options() const { return options_; }

 private:
  PgPool(std::string dsn, PgPoolOptions options, ConnectionSetup setup)
      : dsn_(std::move(dsn)), options_(std::move(options)), setup_(std::move(setup)) {}

  absl::StatusOr<std::unique_ptr<pqxx::connection>> Open();
  void Return(std::unique_ptr<pqxx::connection> conn);
  void Forget();
  void DropIdle();
  static bool StillAlive(pqxx::connection& conn);

  // What the current request (federation/request_deadline.h) leaves for one attempt:
  // DEADLINE_EXCEEDED once its deadline has passed.
  struct RequestBudget {
    absl::Duration acquire;
    bool acquire_bound_by_deadline = false;
    std::optional<absl::Duration> statement;  // set when shorter than the connection's own
  };
  absl::StatusOr<RequestBudget> BudgetForRequest() const;
  [[nodiscard]] absl::Time Now() const { return absl::FromChrono(options_.clock->Now()); }

  // Lowers statement_timeout to `timeout` for the transaction `txn` on `lease`: SET LOCAL in a
  // transaction block; for statements that commit one by one, a session SET that the lease
  // puts back to the pool's value when it is returned.
  static void LowerStatementTimeout(pqxx::transaction_base& txn, Lease& lease,
                                    absl::Duration timeout);

  static const absl::Status& StatusOf(const absl::Status& s) { return s; }
  template <typename T>
  static const absl::Status& StatusOf(const absl::StatusOr<T>& s) {
    return s.status();
  }

  const std::string dsn_;
  const PgPoolOptions options_;
  const ConnectionSetup setup_;

  absl::Mutex mu_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_ ABSL_GUARDED_BY(mu_);
  int open_ ABSL_GUARDED_BY(mu_) = 0;  // idle + leased + being opened
};

template <typename Txn, typename Fn>
std::invoke_result_t<Fn&, Txn&> PgPool::Transact(absl::string_view what, Fn&& fn, bool idempotent) {
  using Result = std::invoke_result_t<Fn&, Txn&>;
  absl::Status failure;
  for (int attempt = 1; attempt <= options_.max_attempts; ++attempt) {
    // The request's deadline bounds the wait for a connection and the statements.
    absl::StatusOr<RequestBudget> budget = BudgetForRequest();
    if (!budget.ok()) return budget.status();
    absl::StatusOr<Lease> lease = Acquire(budget->acquire);
    if (!lease.ok()) {
      if (budget->acquire_bound_by_deadline && absl::IsUnavailable(lease.status())) {
        return absl::DeadlineExceededError(
            absl::StrCat(what, ": no database connection came free before the request's deadline"));
      }
      return lease.status();
    }
    bool retryable = false;
    try {
      Txn txn(**lease);
      if (budget->statement) LowerStatementTimeout(txn, *lease, *budget->statement);
      Result result = fn(txn);
      if (!StatusOf(result).ok()) {
        txn.abort();
        return result;
      }
      txn.commit();
      return result;
    } catch (const std::exception& e) {
      failure = StatusFromException(e, what);
      if (IsConnectionBroken(e)) lease->Discard();
      // A connection that broke before COMMIT rolled its transaction back: safe to run again.
      // One that broke during COMMIT (in doubt), or under statements that commit one by one,
      // is not, unless running them twice does no harm.
      constexpr bool kAutocommit = std::is_same_v<Txn, pqxx::nontransaction>;
      retryable = absl::IsAborted(failure) ||
                  (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr &&
                   dynamic_cast<const pqxx::in_doubt_error*>(&e) == nullptr &&
                   (!kAutocommit || idempotent));
    }
    if (!retryable) break;
  }
  return failure;
}

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_PG_POOL_H_
