#ifndef GPUFED_AGENT_LEDGER_H_
#define GPUFED_AGENT_LEDGER_H_

// The agent's record of what it runs, in a file of its state folder, so that its own restart
// neither loses nor repeats work (docs/agent.md#ledger). One line per event, appended: a run
// started, a run ended (state and exit code), an end the server acknowledged. On open, the
// runs not acknowledged as ended are returned and the file is rewritten with only them. Only
// the server's workload ids (canonical decimal) are recorded; others are ignored.
//
// Appends are write(2) calls without fsync: they survive the agent being killed (the kernel
// holds them) but not the machine losing power, after which the runs are gone anyway.
//
// Not thread-safe: the agent calls it under its own lock.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "gpufed/v1/types.pb.h"

namespace gpufed::agent {

class Ledger {
 public:
  struct Entry {
    std::string workload_id;
    uint32_t attempt = 0;
    uint64_t epoch = 0;
    // PLACED: started and not known to have ended; otherwise its end, not yet acknowledged.
    v1::WorkloadState state = v1::WORKLOAD_STATE_PLACED;
    int32_t exit_code = 0;
  };

  // Opens <dir>/ledger (creating `dir` and the file). `unfinished` gets the runs not
  // acknowledged as ended, in the order they started. FAILED_PRECONDITION when the folder or
  // file cannot be made or read.
  static absl::StatusOr<std::unique_ptr<Ledger>> Open(const std::string& dir,
                                                      std::vector<Entry>* unfinished);
  ~Ledger();
  Ledger(const Ledger&) = delete;
  Ledger& operator=(const Ledger&) = delete;

  void Started(const std::string& workload_id, uint32_t attempt, uint64_t epoch);
  void Ended(const std::string& workload_id, uint32_t attempt, v1::WorkloadState state,
             int32_t exit_code);
  void Acked(const std::string& workload_id, uint32_t attempt);

  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  Ledger(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  void Append(const std::string& line);
  // Rewrites the file with the live entries only (temporary file, then rename).
  void Compact();

  const std::string path_;
  int fd_;
  uint64_t next_order_ = 0;
  uint64_t lines_ = 0;
  // Live entries by (id, attempt) key "id attempt", with their start order.
  absl::flat_hash_map<std::string, std::pair<uint64_t, Entry>> live_;
};

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_LEDGER_H_
