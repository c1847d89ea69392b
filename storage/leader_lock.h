#ifndef GPUFED_STORAGE_LEADER_LOCK_H_
#define GPUFED_STORAGE_LEADER_LOCK_H_

#include <cstdint>
#include <memory>
#include <string>

#include "federation/ports.h"

namespace gpufed::storage {

// "Only one scheduler is active": a PostgreSQL session-level advisory lock held on a dedicated
// connection. PostgreSQL releases it when that session ends, so a crashed or partitioned leader
// loses it without any lease logic of ours. Not thread-safe: one owner (the scheduler loop).
class LeaderLock final : public LeaderElector {
 public:
  static constexpr int64_t kSchedulerKey = 0x67707566'65640001;  // "gpufed" + 1

  LeaderLock(std::string dsn, int64_t key);
  ~LeaderLock() override;
  LeaderLock(const LeaderLock&) = delete;
  LeaderLock& operator=(const LeaderLock&) = delete;

  // Takes the lock if it is free; true if this process holds it afterwards. Reconnects as
  // needed; never throws.
  bool TryAcquire() override;
  // True if the lock is still held: its session answers. False also means it is lost, and the
  // caller must stop acting as leader before trying to acquire again.
  bool StillHeld() override;
  void Release() override;
  [[nodiscard]] bool held() const { return held_; }

 private:
  const std::string dsn_;
  const int64_t key_;
  struct Session;  // the dedicated connection (pqxx stays out of this header)
  std::unique_ptr<Session> session_;
  bool held_ = false;
};

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_LEADER_LOCK_H_
