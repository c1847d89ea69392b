#ifndef GPUFED_AGENT_AGENT_H_
#define GPUFED_AGENT_AGENT_H_

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "agent/ledger.h"
#include "agent/spot_reclaim.h"
#include "agent/telemetry.h"
#include "agent/topology.h"
#include "federation/clock.h"
#include "gpufed/v1/agent_service.grpc.pb.h"

namespace gpufed::agent {

struct AgentOptions {
  // host:port of the server's gRPC endpoint.
  std::string server_address = "127.0.0.1:50051";
  // The cluster's agent token, sent as `authorization: Bearer <token>`. Never logged.
  std::string token;
  // How the channel to the server is secured: grpc::SslCredentials verifying the server (as
  // gpufed-agent builds them from --ca-file), or grpc::InsecureChannelCredentials() for a
  // plaintext development server. Required: nothing chooses plaintext by default.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string agent_version;
  // Reconnect backoff: starts here, doubles per failed attempt, capped at max; each wait is
  // drawn uniformly from [d/2, d]. A registered stream resets it.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(5);
  // A stream that brings no Registered within this long is abandoned and redialled.
  absl::Duration register_timeout = absl::Seconds(15);
  // Used when Registered carries no heartbeat interval.
  absl::Duration default_heartbeat_interval = absl::Seconds(10);
  // A status the server has not acknowledged this long after sending is sent again.
  absl::Duration status_resend_interval = absl::Seconds(30);
  // How long an ended, acknowledged workload id is remembered (so a late duplicate assignment
  // is still recognised) before it is forgotten.
  absl::Duration finished_retention = absl::Hours(1);
  // Most updates in one StatusReport.
  int max_updates_per_report = 1000;
  // Most backend Starts of one assignment batch in flight at once. A process backend's Start
  // waits for each replica's exec (about half a millisecond, more on a busy machine), so one at
  // a time caps a cluster at a few hundred starts a second. A batch that changes MIG layouts
  // always starts in order.
  int parallel_starts = 4;
  // On Shutdown, how long to keep the stream open for outstanding statuses to be acknowledged.
  absl::Duration shutdown_flush_timeout = absl::Seconds(3);
  // Where the agent keeps its ledger (docs/agent.md#ledger): what it started and how each run
  // ended, so that after a restart it reports what it ran instead of running it again. Empty:
  // no ledger (a restarted agent knows nothing of its earlier runs).
  std::string state_dir;
  // Simulated spot reclaims (docs/agent.md#spot-reclaims-simulated): every `spot_reclaim.every`
  // after Run() starts (zero: never) the provider takes back every node labelled
  // gpufed.io/capacity-type: spot for `spot_reclaim.duration`. Checked by
  // ValidateSpotReclaimSchedule.
  SpotReclaimSchedule spot_reclaim;
  // GPU telemetry (docs/chargeback.md#telemetry): while connected, every `telemetry_interval`
  // the source samples what each running workload holds; each minute's means go to the server
  // once the minute has ended. Null source or zero interval: none. At most
  // `max_telemetry_minutes` ended minutes wait to be sent (the oldest are dropped beyond).
  std::shared_ptr<TelemetrySource> telemetry;
  absl::Duration telemetry_interval = absl::Seconds(10);
  size_t max_telemetry_minutes = 100000;
  // What every interval above is measured with and status times are read from. Null: the
  // process's SystemClock.
  const Clock* clock = nullptr;
};

// Counters for logs and tests. A snapshot; fields are independent.
struct AgentStats {
  bool registered = false;
  uint64_t epoch = 0;
  // Streams that reached Registered.
  uint64_t registrations = 0;
  // Statuses waiting for the server's acknowledgement.
  size_t unacked_statuses = 0;
  // Workload ids the agent remembers (active or ended).
  size_t known_workloads = 0;
  // Assignments ignored because the id was already known.
  uint64_t duplicate_assignments = 0;
  // MIG repartitions applied to the inventory (ones already in effect are not counted).
  uint64_t repartitions_applied = 0;
  // InventoryUpdate messages written to the server.
  uint64_t inventory_updates_sent = 0;
  // Times the lease ran out, and workloads the agent stopped by itself then.
  uint64_t lease_expiries = 0;
  uint64_t lease_stops = 0;
  // Simulated spot reclaims that took nodes, the workloads they stopped, and the spot nodes
  // away now.
  uint64_t spot_reclaims = 0;
  uint64_t spot_reclaim_stops = 0;
  size_t spot_nodes_away = 0;
  // Telemetry minutes written to the server, and dropped unsent (too many waiting).
  uint64_t telemetry_minutes_sent = 0;
  uint64_t telemetry_minutes_dropped = 0;
};

// The agent's side of AgentService.Connect (docs/domain.md#agents-and-fencing): dials the server,
// registers the cluster, heartbeats, runs assignments through a Backend, and reports every state
// change at least once until the server acknowledges it. Work keeps running while the server is
// away; on reconnect the agent re-registers with everything it still runs or has not had
// acknowledged, and an assignment it already knows (running or ended) is never started twice.
//
// The lease (docs/agent.md#lease): every Registered and every answered heartbeat extends it to
// the granted length from when that message was sent. When it runs out, whether the stream is
// up or not, the agent stops by itself every workload the server would move elsewhere
// (WorkAssignment.stop_when_lease_expires) and reports each LOST once it can, so that a
// partitioned cluster never runs what the server has placed again. A new lease (the agent
// reached the server again) ends that.
//
// Simulated spot reclaims (docs/agent.md#spot-reclaims-simulated), when scheduled: at each one the
// agent reports its inventory without its spot nodes and stops the work on them; the server evicts
// that work as a node failure. The nodes come back after the schedule's duration, once the
// server has acknowledged every stop, so that it never hears a stop before the loss of the node.
//
// Thread-safe. Run() drives the connection; Shutdown() and Stats() may be called from any other
// thread. Destroy the agent only after Run() has returned.
class Agent {
 public:
  // INVALID_ARGUMENT for bad options; whatever the factory returns for the backend.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(AgentOptions options,
                                                       ClusterTopology topology,
                                                       const BackendFactory& make_backend);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Connects, serves and reconnects until Shutdown(). Call once.
  void Run();

  // Stops the backend (its work is stopped, not reported), gives outstanding statuses up to
  // shutdown_flush_timeout to be acknowledged, then ends the stream. Run() returns soon after.
  // Blocks while the backend stops. Idempotent.
  void Shutdown();

  // Tells the agent its clock was moved by hand (a FakeClock in a test): waits measured on it
  // are looked at again now rather than when their real-time remainder runs out.
  void ClockMoved();

  // The hardware changed (a node left, a GPU failed or came back; gpufed-agent re-reads its
  // topology file on SIGHUP): reports `inventory` to the server, which stops the work on what
  // failed and moves or ends it. GPUs still there keep the MIG layout the agent applied.
  void ReplaceInventory(v1::Inventory inventory);

  [[nodiscard]] AgentStats Stats() const;
  // The inventory as the agent reports it now (the topology's, after any repartitions and
  // ReplaceInventory, without spot nodes a reclaim has taken).
  [[nodiscard]] v1::Inventory Inventory() const;
  [[nodiscard]] const Backend& backend() const { return *backend_; }

 private:
  // (workload id, state, attempt): how the server's acks name statuses.
  using StatusKey = std::tuple<std::string, int, uint32_t>;

  // What one replica of an active workload holds on one GPU.
  struct GpuUse {
    std::string node;
    std::string uuid;
    std::string mig_profile;  // set: only this MIG instance
    uint32_t mig_start = 0;
    uint32_t gpu_milli = 0;  // set: a share of the GPU
  };
  // What the agent knows about one workload id.
  struct Record {
    v1::WorkloadState state = v1::WORKLOAD_STATE_PLACED;  // PLACED: starting
    int32_t exit_code = 0;
    std::string message;
    absl::Time time;
    uint64_t epoch = 0;    // the assignment's epoch
    uint32_t attempt = 0;  // the assignment's attempt
    v1::WorkloadClass workload_class = v1::WORKLOAD_CLASS_UNSPECIFIED;
    bool terminal_acked = false;
    bool stop_on_lease = false;      // WorkAssignment.stop_when_lease_expires
    bool lease_stopped = false;      // the agent stopped it: its lease ran out
    std::vector<GpuUse> gpus;        // while active, for checking repartitions
    std::vector<std::string> nodes;  // its replicas' nodes, each once
    // A spot reclaim took one of its nodes: the agent stopped it (or never started it).
    bool reclaimed = false;
    // Assigned to a node away in a spot reclaim (the server placed it before it heard): not
    // started until the node comes back, unless the server cancels it first.
    std::optional<v1::WorkAssignment> held;
    // A later attempt handed over while this one still runs: started once this one has ended.
    std::optional<v1::WorkAssignment> next;
  };
  struct OutboxEntry {
    v1::WorkloadStatus status;
    uint64_t order = 0;
    MonotonicTime last_sent = MonotonicTime::min();
    bool queued = false;
  };
  // Everything that belongs to one stream.
  struct Stream {
    std::shared_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::ServerMessage>> rw;
  };

  Agent(AgentOptions options, ClusterTopology topology);

  // One connection: dial, register, serve until the stream breaks. True if it registered;
  // `final_status` says how the stream ended.
  bool RunStream(grpc::Status* final_status);
  void SendLoop(Stream* stream);
  void Dispatch(const v1::ServerMessage& msg);
  void HandleAssign(const v1::AssignBatch& batch);
  void HandleCancel(const v1::CancelBatch& batch);
  void HandleAck(const v1::StatusAck& ack);
  void HandleLease(const v1::LeaseRenewal& renewal);
  // The lease runs at least until `until`.
  void ExtendLeaseLocked(MonotonicTime until) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for the lease to run out and stops what it must; until Shutdown.
  void LeaseLoop();
  // Runs the spot reclaim schedule until Shutdown (only when one is set).
  void SpotLoop();
  // Samples telemetry every telemetry interval until Shutdown (only with a source), connected or
  // not: the source is read without the lock (a scrape may wait on a slow exporter), so neither
  // heartbeats nor the backend's events wait for it.
  void TelemetryLoop();
  // Takes the spot nodes away: the inventory without them goes out, and the ids of the active
  // workloads on them (to stop, without the lock) are returned. No spot node: nothing happens.
  std::vector<std::string> BeginReclaimLocked(MonotonicTime now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The nodes come back; returns the assignments held for them (to start, without the lock).
  std::vector<v1::WorkAssignment> EndReclaimLocked(MonotonicTime now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The server has heard the reclaim: the inventory without the nodes was written, and every
  // workload the reclaim stopped has its end acknowledged.
  [[nodiscard]] bool ReclaimSettledLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The inventory without the nodes a reclaim has taken: what Register and InventoryUpdate say.
  [[nodiscard]] v1::Inventory ReportedInventoryLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The nodes of `r` a reclaim has taken, comma-separated; empty when none.
  [[nodiscard]] std::string ReclaimedNodesOf(const Record& r) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new record for `a`, active (starting).
  Record NewRecord(const v1::WorkAssignment& a) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnEvent(WorkloadEvent event);
  // Applies the assignment's MIG repartitions to the inventory (through the backend), in order,
  // before its replicas start. INVALID_ARGUMENT naming the repartition when it names an unknown
  // GPU or an invalid layout; FAILED_PRECONDITION when another active workload uses what the
  // change would remove. Repartitions already in effect are skipped.
  absl::Status ApplyRepartitions(const v1::WorkAssignment& work);
  // Applies `work`'s repartitions and starts it; a failure ends it FAILED (or, when the backend
  // is shutting down, forgets it so the server places it again).
  void StartOne(const v1::WorkAssignment& work);

  v1::AgentMessage BuildRegister() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What every running workload holds, as telemetry sources see it.
  std::vector<Occupant> OccupantsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[nodiscard]] v1::WorkloadStatus StatusOf(const std::string& id, const Record& r) const;
  // Adds (or re-queues) a status for sending until acknowledged.
  void Enqueue(v1::WorkloadStatus status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets a record terminal and queues its status.
  void Finish(const std::string& id, Record& r, v1::WorkloadState state, int32_t exit_code,
              std::string message, absl::Time time) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Forget(MonotonicTime now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Duration Jitter(absl::Duration d);
  // Wall time: what statuses record.
  [[nodiscard]] absl::Time Now() const { return AbslNow(clock_); }
  // Monotonic time: what every interval and timeout of the agent is measured with.
  [[nodiscard]] MonotonicTime Mono() const { return clock_.Monotonic(); }
  [[nodiscard]] MonotonicTime After(absl::Duration d) const { return MonotonicAfter(clock_, d); }
  // changed_.WaitWithDeadline, with `deadline` read on clock_'s monotonic reading. True when it
  // has passed.
  bool WaitChanged(MonotonicTime deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return WaitUntil(changed_, &mu_, clock_, deadline);
  }

  const AgentOptions options_;
  const Clock& clock_;
  // The cluster name and info; the inventory part is only the starting point of inventory_.
  const ClusterTopology topology_;
  std::unique_ptr<Backend> backend_;  // set once in Create
  // Set in Create when options_.state_dir is given; written under mu_.
  std::unique_ptr<Ledger> ledger_ ABSL_PT_GUARDED_BY(mu_);
  // Takes over what the ledger says an earlier run of the agent left (Create).
  void Recover(const std::vector<Ledger::Entry>& unfinished) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // outbox, registration, stream or stop state changed
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<grpc::ClientContext> current_context_ ABSL_GUARDED_BY(mu_);
  bool stream_done_ ABSL_GUARDED_BY(mu_) = true;
  bool sender_exited_ ABSL_GUARDED_BY(mu_) = true;
  bool registered_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration heartbeat_interval_ ABSL_GUARDED_BY(mu_);
  uint64_t registrations_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t duplicate_assignments_ ABSL_GUARDED_BY(mu_) = 0;
  // The topology, changed by repartitions and ReplaceInventory. Register and InventoryUpdate
  // report it without the nodes a spot reclaim has taken (ReportedInventoryLocked).
  v1::Inventory inventory_ ABSL_GUARDED_BY(mu_);
  // The inventory changed since it was last sent (Register or InventoryUpdate).
  bool inventory_dirty_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t repartitions_applied_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t inventory_updates_sent_ ABSL_GUARDED_BY(mu_) = 0;
  // Workloads starting or running (Heartbeat.running).
  size_t active_count_ ABSL_GUARDED_BY(mu_) = 0;

  // The lease: how long each grant runs (zero: the server grants none), when the current one
  // runs out (min(): never granted), whether it has run out, and the heartbeats of this stream
  // not answered yet (seq, when sent), oldest first.
  absl::Duration lease_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  MonotonicTime lease_until_ ABSL_GUARDED_BY(mu_) = MonotonicTime::min();
  bool lease_expired_ ABSL_GUARDED_BY(mu_) = false;
  MonotonicTime register_sent_ ABSL_GUARDED_BY(mu_){};
  std::deque<std::pair<uint64_t, MonotonicTime>> heartbeats_sent_ ABSL_GUARDED_BY(mu_);
  uint64_t lease_expiries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lease_stops_ ABSL_GUARDED_BY(mu_) = 0;

  // The spot reclaim under way: the nodes away (empty: none), in inventory order, when it
  // began and when they are due back, and whether an inventory without them has been written
  // to a stream since.
  std::vector<std::string> reclaimed_nodes_ ABSL_GUARDED_BY(mu_);
  MonotonicTime reclaim_began_ ABSL_GUARDED_BY(mu_){};
  MonotonicTime reclaim_until_ ABSL_GUARDED_BY(mu_){};
  bool reclaim_reported_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t spot_reclaims_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t spot_reclaim_stops_ ABSL_GUARDED_BY(mu_) = 0;

  // Telemetry minutes being summed and waiting to be sent; null without telemetry.
  std::unique_ptr<MinuteAggregator> minutes_ ABSL_GUARDED_BY(mu_);
  uint64_t telemetry_minutes_sent_ ABSL_GUARDED_BY(mu_) = 0;

  absl::flat_hash_map<std::string, Record> workloads_ ABSL_GUARDED_BY(mu_);
  // Ended workloads in the order they ended, for Forget().
  std::deque<std::pair<MonotonicTime, std::string>> ended_ ABSL_GUARDED_BY(mu_);

  absl::flat_hash_map<StatusKey, OutboxEntry> outbox_ ABSL_GUARDED_BY(mu_);
  // order -> key: the outbox in the order statuses arose (RUNNING before the end).
  std::map<uint64_t, StatusKey> outbox_order_ ABSL_GUARDED_BY(mu_);
  uint64_t next_order_ ABSL_GUARDED_BY(mu_) = 1;
  // Statuses to send on the current stream, oldest first.
  std::deque<StatusKey> send_queue_ ABSL_GUARDED_BY(mu_);

  absl::Mutex rng_mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(rng_mu_);
};

}  // namespace gpufed::agent

#endif  // GPUFED_AGENT_AGENT_H_
