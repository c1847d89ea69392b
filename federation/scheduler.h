#ifndef GPUFED_FEDERATION_SCHEDULER_H_
#define GPUFED_FEDERATION_SCHEDULER_H_

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "federation/clock.h"
#include "federation/fair_share.h"
#include "federation/placement.h"
#include "federation/pool.h"
#include "federation/pool_report.h"
#include "federation/quota_ledger.h"
#include "federation/routing.h"
#include "federation/store.h"

namespace gpufed {

// The order a reclaim takes borrowed work in, after priority (lowest first).
enum class VictimOrder {
  // Checkpointable work first, then the least work lost (since the last checkpoint, or since
  // the start), then the most recently started.
  kLeastWorkLost,
  // The most recently started first, checkpoints ignored: the baseline the simulator compares
  // against (gpu_seconds_lost_newest_first).
  kNewestFirst,
};

struct SchedulerOptions {
  // Most workloads considered per cycle, in queue order.
  int max_considered = 2000;
  // Most PENDING rows read when (re)loading the queue from the store.
  int reload_limit = 50000;
  // A reason whose code is unchanged but whose figures moved ("3 GPUs free" -> "2 GPUs free")
  // is rewritten only after this many cycles: rewriting thousands of rows on every capacity
  // change would cost more than the scheduling itself. A new code is written at once.
  uint64_t reason_refresh_cycles = 500;
  // Placement policy and its knobs (federation/placement.h). An unknown policy name falls back
  // to the default; the server validates the name before it gets here.
  PlacementOptions placement;
  // How `balanced` workloads weigh price against distance (federation/routing.h).
  RoutingWeights routing;
  // Fragmentation-aware policies measure against the typical workloads of the most recent
  // specs: this many, refreshed every `mix_refresh_cycles` cycles when new ones arrived. Rebuild
  // starts the window with the active and pending workloads it loads.
  size_t mix_window = 2000;
  uint64_t mix_refresh_cycles = 50;
  // Within a cycle, a workload of the same shape as one that already failed gets that answer
  // without asking the engine until the next allocation changes the pool, which keeps a long
  // queue of identical jobs cheap. Off only to check that it changes no placement and no reason
  // (tests/unit/federation/scheduler_differential_test.cc).
  bool reuse_failed_shapes = true;

  // Quotas (docs/quotas.md): reclaim of borrowed capacity for owners within their guarantee.
  // Borrowed work younger than this (counted from its placement) is not taken as a victim.
  std::chrono::nanoseconds reclaim_min_runtime = std::chrono::nanoseconds::zero();
  // After borrowed work of a tenant was reclaimed, it may not borrow that resource again for
  // this long (no admit -> reclaim -> re-borrow loop).
  std::chrono::nanoseconds reborrow_backoff = std::chrono::seconds(30);
  VictimOrder victim_order = VictimOrder::kLeastWorkLost;
  // Evicted GPU-equivalents / those the owner needs, at most, in every reclaim.
  double max_eviction_ratio = 1.25;
  // Owners whose reclaim is planned per cycle (each plan copies the pool and tries victim sets),
  // and owners tried per cycle, planned or not (those tried longest ago first).
  int max_reclaims_per_cycle = 4;
  int max_reclaim_attempts_per_cycle = 16;
  // Nodes' victim sets tried per cluster for one owner, cheapest first (PlanReclaim).
  int max_reclaim_candidates = 64;
  // Fair share (docs/quotas.md#fair-share): usage decays by half over this long.
  std::chrono::nanoseconds fair_share_half_life = std::chrono::hours(24 * 7);
  // No starvation (docs/quotas.md#no-starvation): a whole-GPU workload first overtaken (work
  // judged after it placed while it did not fit) longer ago than this has, when it does not fit,
  // GPUs held for it as they free, which the work after it may not take (zero: never). At most
  // max_reservations at once, those overtaken longest ago first.
  std::chrono::nanoseconds starvation_bound = std::chrono::minutes(30);
  int max_reservations = 4;
};

struct CycleStats {
  int pending = 0;  // queue length at the start of the cycle
  int considered = 0;
  int placed = 0;
  int lost_races = 0;  // placements whose guard failed (cancelled meanwhile)
  int reasons_written = 0;
  int repartitions = 0;  // MIG layout changes decided (partitioning authority)
  int admitted = 0;      // PENDING -> ADMITTED: quota granted, no capacity yet
  int reclaims = 0;      // reclaims planned (ReclaimPlan)
};

// Borrowed work one owner's reclaim stops: each victim is stopped by its agent and, its stop
// confirmed, returns to PENDING (or ends PREEMPTED) by the failover rule. The record says who,
// whom, where and the shares before and after; it is stored with the victims' evictions.
struct ReclaimPlan {
  PreemptionRecord record;
  std::vector<WorkloadStore::Eviction> victims;  // parallel to record.victims
};

struct CycleResult {
  std::vector<Workload> placed;  // committed PLACED, to hand to agents
  // Every committed state change (PENDING -> ADMITTED, PENDING/ADMITTED -> PLACED).
  std::vector<WorkloadEvent> events;
  // Reclaims decided: the caller has the victims stopped (ControlPlane::Reclaim).
  std::vector<ReclaimPlan> reclaims;
  // Workloads within their guarantee the window left waiting (owners; with quotas only).
  std::vector<WorkloadId> owners_waiting;
  CycleStats stats;
};

// The scheduler (docs/domain.md#scheduling): holds the pool and the pending queue in memory, takes
// the queue in priority order, decides a batch of gang placements with the placement engine (the
// same one the simulator runs) and commits them in one transaction; every workload left PENDING
// carries a reason.
//
// Thread-safety: RunCycle/Rebuild must be called from one thread (the scheduler loop). The
// Notify* methods and Snapshot are safe from any thread; notifications are applied at the start
// of the next cycle.
class Scheduler {
 public:
  // `quotas` null: no quotas (every workload is admitted, as borrowed). `clock` null: the
  // system clock.
  Scheduler(WorkloadStore* workloads, ClusterStore* clusters, SchedulerOptions options = {},
            QuotaStore* quotas = nullptr, const Clock* clock = nullptr);

  // Loads clusters, active workloads and the pending queue from the store. Call before the first
  // cycle and whenever leadership was (re)gained.
  absl::Status Rebuild();

  // Re-reads the pending queue from the store (catches submissions made through other API
  // replicas, and changes it was not told of). The queue afterwards is as if every row had been
  // read, but only the rows it did not hold at their version are (ListPendingVersions, then
  // GetWorkloads). Keeps the pool as it is.
  absl::Status ReloadPending();

  // Saves the fair-share usage counted so far (QuotaStore::SaveUsage), so that the next active
  // scheduler goes on from it (Rebuild loads it). Scheduler thread only; the store's status.
  absl::Status SaveUsage();

  // One scheduling cycle.
  absl::StatusOr<CycleResult> RunCycle();

  void NotifySubmitted(const Workload& workload);
  void NotifyReleased(WorkloadId id);
  void NotifyClusterChanged(const Cluster& cluster);
  void NotifyClusterState(const std::string& cluster, ClusterState state);
  // A placed workload's agent confirmed it running from `at` (reclaim prefers victims that have
  // run least).
  void NotifyStarted(WorkloadId id, Timestamp at);
  // A quota was set or deleted: the next cycle reads them again.
  void NotifyQuotasChanged();
  // The victims of these reclaims could not be marked (the store failed): they are no longer
  // counted as stopping, and their owners may plan again.
  void NotifyReclaimFailed(const std::vector<ReclaimPlan>& reclaims);

  // Drops queued notifications (a server that is not the active scheduler calls this so they do
  // not pile up; Rebuild reads the truth from the store when it becomes active).
  void ClearInbox();

  // The pool as of the end of the last cycle.
  std::shared_ptr<const Pool> Snapshot() const;

  // Evaluates `spec` against the latest snapshot with the scheduler's placement options, without
  // placing anything: the explanation `gpufedctl explain` shows. Before the first Rebuild (a
  // starting server, or one that is not the active scheduler) there is no pool to judge by: the
  // reason says so and never_fits stays false. Safe from any thread.
  PlacementDecision Explain(const WorkloadSpec& spec) const;
  // The same with every cluster's rules, offers and prices beside it (Router::Explain): what
  // `gpufedctl explain` lists per candidate and `submit --what-if` answers.
  RoutingExplanation ExplainRouting(const WorkloadSpec& spec) const;

 private:
  // Explain (without `candidates`: the decision alone) and ExplainRouting.
  RoutingExplanation Evaluate(const WorkloadSpec& spec, bool candidates) const;

 public:
  // Queue length after the last cycle.
  int pending_count() const;

  // Every quota with what its holder holds now (placed work; borrowed: above the guarantee), as
  // of the last cycle that changed the pool. Empty before the first Rebuild. Safe from any
  // thread.
  std::vector<QuotaUsage> QuotaReport() const;
  // Every active tenant's and project's weight, share, holdings and decayed usage, as of the last
  // cycle that changed the pool. Safe from any thread.
  std::vector<FairShare> FairShareReport() const;

  // The reason of a workload the scheduler has not judged in its window: waiting its turn.
  // Submissions are stored with it. Safe from any thread.
  PendingReason QueuedReason() const;

  // The typical workloads the placement engine measures fragmentation against (MixOf over the
  // recent specs). Scheduler thread only.
  const WorkloadMix& mix() const { return engine_->mix(); }

  // The pool and the queue as this scheduler holds them now (federation/pool_report.h), the
  // fragmentation measured against mix(). Empty before the first Rebuild. Scheduler thread only;
  // reads every node and every queued workload, so the control loop calls it now and then.
  PoolReport Report() const;

 private:
  struct QueueKey {
    int32_t neg_priority;
    WorkloadId id;
    // NOLINTNEXTLINE(modernize-use-nullptr): clang-tidy 14 misreads a defaulted <=>.
    auto operator<=>(const QueueKey&) const = default;
  };
  struct Queued {
    Workload workload;
    PendingReason last_reason;   // as stored
    uint64_t written_cycle = 0;  // cycle that stored it
    // The latest reason, when only its figures differ from the stored one and it waits for
    // reason_refresh_cycles to pass.
    std::optional<PendingReason> unwritten;
    bool judged = false;        // the engine looked at it in some window
    uint64_t window_cycle = 0;  // the last cycle whose window held it
    // Within its guarantee and waiting for capacity (the last walk's verdict): reclaim may
    // stop borrowed work for it.
    bool owner_waiting = false;
    uint64_t reclaim_tried = 0;  // the last cycle that planned a reclaim for it
  };
  // A reclaim under way: its victims stop, then its owner is placed.
  struct Reclaiming {
    std::string cluster;
    std::vector<WorkloadId> victims;
    std::vector<std::string> models;  // the owner may take GPUs of these (empty: any)
    std::string resource;
    // Every victim has stopped: the owner is judged first in the next walk, then it is done.
    bool freed = false;
  };
  // What admission decided for a workload about to be judged.
  struct Admission {
    AdmissionVerdict verdict;
    PendingReason refused;  // set: not admitted now (quota, backoff)
    // The models admission leaves it (those where it is owned, or within the limits); empty:
    // every model it asks for.
    std::vector<std::string> models;
    ResourceAmounts reserve;  // held while it waits ADMITTED
  };
  // What the next cycle must look at (see RunCycle): everything in the window when the pool
  // changed, else only what arrived since the last cycle and what left the window.
  struct Dirty {
    bool pool = true;                // capacity changed: every workload in the window is judged
    std::vector<WorkloadId> fresh;   // enqueued since the last cycle, not yet judged
    std::vector<WorkloadId> window;  // the window the last cycle judged
  };
  // What the last walk of the window left behind, so that a cycle with nothing to judge can skip
  // the walk (RunCycle).
  struct WindowEnd {
    // The key of the window's last workload when the window was full (max_considered of them);
    // none when the whole queue fitted, so that any newcomer joins the window.
    std::optional<QueueKey> last;
    // Some workload in the window has figures waiting for their refresh.
    bool unwritten = false;
  };
  struct Inbox {
    std::vector<Workload> submitted;
    std::vector<WorkloadId> released;
    std::vector<Cluster> clusters;
    std::vector<std::pair<std::string, ClusterState>> states;
    bool quotas = false;
    std::vector<WorkloadId> reclaim_failed;  // victims
    std::vector<std::pair<WorkloadId, Timestamp>> started;
  };

  // True when nothing the last walk of the window decided can have changed: the same capacity,
  // every newcomer queued behind the window's end, no figures waiting for their refresh.
  bool WindowStands(const Dirty& dirty) const;
  // Walks the window (the first max_considered workloads of the queue): judges what it must
  // (everything when `pool_changed`, else what the engine has not judged yet), tentatively
  // allocates what fits (appending the transitions), notes where the window ends (window_end_).
  // Returns how many workloads the window held.
  int WalkWindow(bool pool_changed, MigQueue& mig_queue, std::vector<Transition>& transitions,
                 std::vector<std::pair<WorkloadId, PendingReason>>& reasons, CycleStats& stats);
  // Applies notifications; true if the pool changed.
  bool DrainInbox();
  // Records `reason` for a queued workload, appending it to `out` when the stored one must be
  // rewritten (a new code, or figures older than reason_refresh_cycles).
  void UpdateReason(Queued& queued, PendingReason reason,
                    std::vector<std::pair<WorkloadId, PendingReason>>& out) const;
  void RememberSpec(const WorkloadSpec& spec);
  void RefreshMix();
  void Enqueue(const Workload& workload);
  // Removes a queued workload (and its MIG demand).
  void Dequeue(std::map<QueueKey, Queued>::iterator it);
  void Publish();

  // ---- Quotas (docs/quotas.md) ----
  absl::Status LoadQuotas();
  // What `w` holds of each resource by its assignment on the pool.
  ResourceAmounts HeldOf(const Workload& w) const;
  // Records what `w` (now holding capacity) holds, for admission and reclaim.
  void TrackHeld(const Workload& w);
  void ForgetHeld(WorkloadId id);
  // The GPU models `spec` may land on, as admission judges them ("" alone: none known).
  std::vector<std::string> CandidateModels(const WorkloadSpec& spec) const;
  // What an ADMITTED workload reserves while it waits.
  ResourceAmounts ReservationOf(const WorkloadSpec& spec) const;
  // Admission of `queued` (its own reservation dropped first).
  Admission Admit(const Queued& queued) const;
  // After a tentative placement: the quota reason to undo it for, if any (a limit on what it
  // actually takes, or capacity kept for a reclaim).
  std::optional<PendingReason> RefusePlaced(const Queued& queued, const ResourceAmounts& held,
                                            const Assignment& assignment) const;
  // Plans a reclaim for an owner that did not fit; nullopt when no victim set qualifies.
  std::optional<ReclaimPlan> PlanReclaim(const Queued& owner, const Admission& admission,
                                         Timestamp now);
  // The first `limit` queued workloads in fair-share order (FairOrder in scheduler_quotas.cc).
  std::vector<QueueKey> FairOrder(int limit) const;
  // Decays usage to `now` and counts what every holder held since the last call.
  void AdvanceUsage(Timestamp now);
  std::vector<FairShare> FairShares() const;
  // Reclaims whose owner left the queue or whose victims all stopped are done.
  void SettleReclaims();
  PendingReason ReclaimingReason(WorkloadId owner) const;

  // ---- No starvation (scheduler_reservations.cc) ----
  // GPUs held for a workload that waited past the starvation bound: a target placement, held
  // (allocated in the pool under ReservedHolderOf(id), during a cycle only) as far as it is free.
  struct Reservation {
    std::string cluster;
    std::map<std::string, std::vector<std::string>> gpus;  // node -> GPU uuids
    int64_t target = 0;                                    // GPUs in `gpus`
    int64_t held = 0;                                      // of them free and held this cycle
    Timestamp chosen{};
    // When the work on them is expected to have ended; none when some has no estimate.
    std::optional<Timestamp> expected;
  };
  // `overtaken`: a walk judged `id` short of capacity and placed work judged after it; the first
  // time starts its clock. Not overtaken: it left the queue (placed, cancelled); its clock and
  // reservation end.
  void NoteOvertaken(WorkloadId id, bool overtaken, Timestamp now);
  // The queued workloads overtaken for longer than the bound that may have GPUs held for them.
  std::set<WorkloadId> Starving(Timestamp now) const;
  // After a starving workload did not fit: chooses its target if it has none (or a stale one)
  // and holds what of it is free.
  void Reserve(WorkloadId id, const WorkloadSpec& spec, Timestamp now);
  std::optional<Reservation> ChooseTarget(WorkloadId id, const WorkloadSpec& spec,
                                          Timestamp now) const;
  // Holds the free GPUs of `id`'s target in the pool until ReleaseReserved.
  void HoldReserved(WorkloadId id);
  // Releases every reservation held this cycle (the pool is left as the store has it).
  void ReleaseReserved();
  // kReserved for a workload with a reservation; `waiting` otherwise.
  PendingReason ReservedReason(WorkloadId id, PendingReason waiting) const;

  WorkloadStore* const workloads_;
  ClusterStore* const clusters_;
  QuotaStore* const quotas_;
  const Clock* const clock_;
  const SchedulerOptions options_;

  // Owned by the scheduler thread.
  Pool pool_;
  std::map<QueueKey, Queued> queue_;
  std::map<WorkloadId, QueueKey> queued_ids_;
  MigQueue mig_demand_;  // replicas queued per MIG profile
  Dirty dirty_;
  WindowEnd window_end_;
  uint64_t cycle_ = 0;
  std::unique_ptr<PlacementEngine> engine_;
  // Every placement goes through the router: a workload's hard rules and objective first, then
  // the engine inside the clusters they allow (federation/routing.h).
  Router router_;
  std::deque<WorkloadSpec> recent_specs_;
  bool mix_stale_ = false;
  // Quotas: the ledger of what is held and reserved; the workloads holding capacity (victim
  // candidates); reclaims under way by owner; when a tenant may borrow a resource again.
  QuotaLedger ledger_;
  std::map<WorkloadId, Workload> held_;
  std::map<WorkloadId, Reclaiming> reclaims_;
  std::map<std::pair<std::string, std::string>, Timestamp> backoff_;  // (tenant, resource)
  std::unique_ptr<PlacementEngine> reclaim_engine_;
  // Fair share: weights set (others weigh 1), decayed usage, the queue by tenant and project,
  // and since when queued workloads have been overtaken (NoteOvertaken).
  std::map<std::pair<std::string, std::string>, int64_t> weights_;
  DecayedUsage usage_;
  std::map<std::string, std::map<std::string, std::set<QueueKey>>> by_holder_;
  std::map<WorkloadId, Timestamp> overtaken_since_;             // NoteOvertaken
  std::set<std::pair<Timestamp, WorkloadId>> overtaken_order_;  // the same, longest first
  std::map<WorkloadId, Reservation> reservations_;
  std::vector<WorkloadId> held_reservations_;  // reservations held in pool_ this cycle
  std::vector<WorkloadId> owners_waiting_;     // this cycle's (CycleResult::owners_waiting)

  mutable absl::Mutex mu_;
  Inbox inbox_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Pool> snapshot_ ABSL_GUARDED_BY(mu_);
  bool loaded_ ABSL_GUARDED_BY(mu_) = false;  // a Rebuild published the pool
  int pending_count_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<QuotaUsage> quota_report_ ABSL_GUARDED_BY(mu_);
  std::vector<FairShare> fair_share_report_ ABSL_GUARDED_BY(mu_);

  // Explain: one call at a time, on a private copy of the snapshot (placing fills caches inside
  // the pool and the engine, so the shared snapshot is never placed on), copied again only when
  // a newer snapshot has been published; the engine and its caches are kept between calls.
  // Taken before mu_, never while holding it.
  mutable absl::Mutex explain_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable std::shared_ptr<const Pool> explain_source_ ABSL_GUARDED_BY(explain_mu_);
  mutable std::unique_ptr<Pool> explain_pool_ ABSL_GUARDED_BY(explain_mu_);
  mutable std::unique_ptr<PlacementEngine> explain_engine_ ABSL_GUARDED_BY(explain_mu_);
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_SCHEDULER_H_
