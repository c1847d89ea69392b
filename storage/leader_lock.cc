#include "storage/leader_lock.h"

#include <pqxx/pqxx>

#include "spdlog/spdlog.h"

namespace gpufed::storage {

struct LeaderLock::Session {
  explicit Session(const std::string& dsn) : conn(dsn) {}
  pqxx::connection conn;
};

LeaderLock::LeaderLock(std::string dsn, int64_t key) : dsn_(std::move(dsn)), key_(key) {}

LeaderLock::~LeaderLock() { Release(); }

bool LeaderLock::TryAcquire() {
  if (held_) return StillHeld();
  try {
    if (!session_ || !session_->conn.is_open()) session_ = std::make_unique<Session>(dsn_);
    pqxx::nontransaction tx(session_->conn);
    pqxx::result r = tx.exec_params("SELECT pg_try_advisory_lock($1)", key_);
    held_ = r[0][0].as<bool>();
  } catch (const std::exception& e) {
    spdlog::warn("scheduler lock: {}", e.what());
    session_.reset();
    held_ = false;
  }
  return held_;
}

bool LeaderLock::StillHeld() {
  if (!held_ || !session_) return false;
  try {
    pqxx::nontransaction tx(session_->conn);
    // Ask PostgreSQL rather than trust our flag: the lock is ours only while this session lives.
    pqxx::result r = tx.exec_params(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() "
        "AND granted AND ((classid::bigint << 32) | objid::bigint) = $1",
        key_);
    held_ = r[0][0].as<int64_t>() > 0;
  } catch (const std::exception& e) {
    spdlog::warn("scheduler lock lost: {}", e.what());
    session_.reset();
    held_ = false;
  }
  return held_;
}

void LeaderLock::Release() {
  if (!session_) return;
  try {
    if (held_) {
      pqxx::nontransaction tx(session_->conn);
      tx.exec_params("SELECT pg_advisory_unlock($1)", key_);
    }
  } catch (const std::exception&) {
    // Closing the session releases it anyway.
  }
  held_ = false;
  session_.reset();
}

}  // namespace gpufed::storage
