#ifndef GPUFED_API_WATCH_HUB_H_
#define GPUFED_API_WATCH_HUB_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "federation/ports.h"
#include "federation/types.h"
#include "gpufed/v1/workload_service.pb.h"

namespace gpufed::api {

// Fans committed workload events out to Watch streams in this process.
//
// Publish only queues: publishers (a Submit's handler, the scheduler) return at once, and one
// dispatcher thread hands each event to every subscriber, in the order published. So the cost of
// a thousand streams falls on that thread, never on the caller whose change it was. Each event
// is converted to its message (and its encoded size computed) once, and every stream that queues
// it shares that one copy.
//
// Writes take turns. A subscriber with something to write does not start the write itself; it
// asks for a turn (OnEvent returns true, or Ready), and the dispatcher gives turns round-robin
// over owners, one write per owner per round. Queueing an event costs a stream next to nothing;
// writing it is what costs (a gRPC operation and a socket write), so this is what keeps one
// caller's thousand streams from delaying another caller's one.
//
// Bounds: each owner (a caller: api::CallerKey, its API token) holds at most max_per_owner
// subscriptions at once, so one caller's streams cannot take the server's memory; at most
// max_backlog events wait for the dispatcher. Past that the backlog is dropped and every subscriber
// that would have got it is told (OnLost) so its caller watches again from its last event, rather
// than the publishers waiting or the hub's memory growing. Thread-safe.
class WatchHub final : public EventSink {
 public:
  using Message = std::shared_ptr<const v1::WorkloadEvent>;

  // What a Watch stream implements. Both run on the dispatcher thread and must only enqueue
  // (never block, never call back into the hub's Subscribe).
  class Subscriber {
   public:
    virtual ~Subscriber() = default;
    // One committed event, its message as streams write it (resume_after: the workload's
    // update_time) and that message's encoded size in bytes. True asks for a turn to write.
    virtual bool OnEvent(const WorkloadEvent& event, const Message& message, size_t bytes) = 0;
    // Events published while this subscriber was subscribed were dropped before it saw them.
    virtual void OnLost() = 0;
    // Its turn: start the next write, if one is still due.
    virtual void OnTurn() = 0;
    // The credential it subscribed with was revoked: end the stream (UNAUTHENTICATED). Called on
    // the revoking thread, not the dispatcher; must not block either.
    virtual void OnRevoked() = 0;
  };

  static constexpr size_t kDefaultMaxPerOwner = 64;
  static constexpr size_t kDefaultMaxBacklog = 20000;
  explicit WatchHub(size_t max_per_owner = kDefaultMaxPerOwner,
                    size_t max_backlog = kDefaultMaxBacklog);
  ~WatchHub() override;  // stops the dispatcher; what it had not handed out is dropped

  // A handle for Unsubscribe; RESOURCE_EXHAUSTED when `owner` already holds max_per_owner.
  // `token_id`: the API token the stream's caller presented (EndCredential), 0 for none.
  absl::StatusOr<uint64_t> Subscribe(const std::string& owner,
                                     std::shared_ptr<Subscriber> subscriber, int64_t token_id = 0);
  // Tells every subscriber of token `token_id` that it was revoked (Subscriber::OnRevoked).
  void EndCredential(int64_t token_id);
  // The subscriber gets nothing published after this; a batch the dispatcher is handing out at
  // this moment may still reach it.
  void Unsubscribe(uint64_t handle);
  void Publish(const std::vector<WorkloadEvent>& events) override;
  void Publish(const WorkloadEvent& event) { Publish(std::vector<WorkloadEvent>{event}); }

  // The subscriber of `handle` has a write due (its previous one is done, more waits): it gets
  // OnTurn in its owner's next turn. Ignored for a handle no longer subscribed.
  void Ready(uint64_t handle);

  // Events published and not yet handed out (for tests and metrics).
  size_t backlog() const;

  // The message of `e` as a live event of a Watch stream.
  static Message ToMessage(const WorkloadEvent& e);

 private:
  struct Entry {
    std::string owner;
    std::shared_ptr<Subscriber> subscriber;
    int64_t token_id = 0;
  };

  void DispatchLoop();
  void AddReadyLocked(uint64_t handle) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Gives the memory of ended streams back to the system: glibc keeps freed heap pages in its
  // arenas (1,000 cancelled unread streams left the server at 950 MiB RSS; malloc_trim took it
  // to 43 MiB), so a second after a stream ends (coalescing a burst of them), one malloc_trim(0).
  void TrimLoop();

  const size_t max_per_owner_;
  const size_t max_backlog_;

  // Lock order: mu_ before trim_mu_. Subscribers are called with neither held.
  mutable absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Entry> subscribers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, size_t> per_owner_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkloadEvent> backlog_ ABSL_GUARDED_BY(mu_);
  // Subscribers whose events were dropped, told before the next batch.
  std::vector<std::shared_ptr<Subscriber>> lost_ ABSL_GUARDED_BY(mu_);
  // Subscribers waiting for a turn to write, by owner, and the owners in turn order.
  absl::flat_hash_map<std::string, std::deque<uint64_t>> ready_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> ready_owners_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex trim_mu_;
  bool trim_wanted_ ABSL_GUARDED_BY(trim_mu_) = false;
  bool trim_stopping_ ABSL_GUARDED_BY(trim_mu_) = false;

  std::thread dispatcher_;
  std::thread trimmer_;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_WATCH_HUB_H_
