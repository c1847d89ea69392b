// The scheduler's guard against starvation (docs/quotas.md#no-starvation): a whole-GPU workload
// first overtaken (work judged after it placed while it did not fit) longer ago than
// SchedulerOptions::starvation_bound has, when it still does not fit, GPUs held for it as they
// free, so that small work cannot overtake it forever. It keeps its place in the window's order.
// The walk of the window (scheduler.cc) calls these.

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "federation/failover.h"
#include "federation/scheduler.h"

namespace gpufed {
namespace {

// The pool holds what is reserved for workload `id` under this id, which no workload has
// (workload ids are positive).
WorkloadId ReservedHolderOf(WorkloadId id) { return -id; }

// Only whole-GPU work is reserved for: shares and MIG instances are small and free often.
bool Reservable(const WorkloadSpec& spec) {
  return spec.mig_profile.empty() && spec.gpu_milli == 0 && spec.gpus_per_replica > 0;
}

}  // namespace

void Scheduler::NoteOvertaken(WorkloadId id, bool overtaken, Timestamp now) {
  auto it = overtaken_since_.find(id);
  if (overtaken) {
    if (it == overtaken_since_.end()) {
      overtaken_since_.emplace(id, now);
      overtaken_order_.emplace(now, id);
    }
    return;
  }
  if (it == overtaken_since_.end()) return;
  overtaken_order_.erase({it->second, id});
  overtaken_since_.erase(it);
  reservations_.erase(id);
}

std::set<WorkloadId> Scheduler::Starving(Timestamp now) const {
  std::set<WorkloadId> out;
  if (options_.starvation_bound <= std::chrono::nanoseconds::zero()) return out;
  // Overtaken the longest first; a few that cannot be reserved for are looked past.
  int looked = 0;
  for (const auto& [since, id] : overtaken_order_) {
    if (static_cast<int>(out.size()) >= options_.max_reservations || ++looked > 64) break;
    if (now - since < options_.starvation_bound) break;
    auto q = queued_ids_.find(id);
    if (q == queued_ids_.end() || !Reservable(queue_.at(q->second).workload.spec)) continue;
    out.insert(id);
  }
  return out;
}

void Scheduler::HoldReserved(WorkloadId id) {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return;
  Reservation& r = it->second;
  const ClusterSlots* cluster = pool_.FindCluster(r.cluster);
  if (cluster == nullptr) {
    reservations_.erase(it);
    return;
  }
  // What of the target is free now is held; the rest is held as it frees, cycle by cycle.
  Assignment hold;
  hold.cluster = r.cluster;
  int64_t held = 0;
  for (const auto& [node_name, uuids] : r.gpus) {
    const NodeSlots* node = cluster->FindNode(node_name);
    if (node == nullptr) continue;
    ReplicaAssignment replica;
    replica.node = node_name;
    for (const std::string& uuid : uuids) {
      const int g = node->FindGpu(uuid);
      if (g < 0) continue;
      const GpuSlot& slot = node->gpus[g];
      if (!slot.healthy || slot.mig_enabled || !slot.holders.empty()) continue;
      replica.gpu_uuids.push_back(uuid);
      replica.gpu_indices.push_back(static_cast<uint32_t>(g));
    }
    held += static_cast<int64_t>(replica.gpu_uuids.size());
    if (!replica.gpu_uuids.empty()) hold.replicas.push_back(std::move(replica));
  }
  r.held = held;
  if (hold.replicas.empty()) return;
  if (pool_.Allocate(ReservedHolderOf(id), hold).ok()) held_reservations_.push_back(id);
}

void Scheduler::Reserve(WorkloadId id, const WorkloadSpec& spec, Timestamp now) {
  auto existing = reservations_.find(id);
  // A target whose work ran well past its expected end (estimates are estimates), or whose end
  // was never known, is chosen again once the bound has passed again.
  if (existing != reservations_.end() &&
      now > std::max(existing->second.chosen, existing->second.expected.value_or(Timestamp{})) +
                options_.starvation_bound) {
    reservations_.erase(existing);
    existing = reservations_.end();
  }
  if (existing == reservations_.end()) {
    std::optional<Reservation> r = ChooseTarget(id, spec, now);
    if (!r) return;  // nothing running now would make room
    existing = reservations_.emplace(id, std::move(*r)).first;
  }
  HoldReserved(id);
}

// The target: where it would be placed once the running work expected to end first has ended.
// Work with no estimated duration counts as ending last; work on GPUs another reservation is
// waiting for is not counted as ending at all, so two reservations do not wait on the same GPUs.
std::optional<Scheduler::Reservation> Scheduler::ChooseTarget(WorkloadId id,
                                                              const WorkloadSpec& spec,
                                                              Timestamp now) const {
  std::set<WorkloadId> spoken_for;
  for (const auto& [other, r] : reservations_) {
    if (other == id) continue;
    const ClusterSlots* cluster = pool_.FindCluster(r.cluster);
    if (cluster == nullptr) continue;
    for (const auto& [node_name, uuids] : r.gpus) {
      const NodeSlots* node = cluster->FindNode(node_name);
      if (node == nullptr) continue;
      for (const std::string& uuid : uuids) {
        const int g = node->FindGpu(uuid);
        if (g < 0) continue;
        for (const GpuHold& h : node->gpus[g].holders) spoken_for.insert(h.id);
      }
    }
  }
  struct End {
    bool known;
    Timestamp at;
    WorkloadId id;
    bool operator<(const End& o) const {
      if (known != o.known) return known;  // known ends first; the rest oldest first
      return std::tie(at, id) < std::tie(o.at, o.id);
    }
  };
  std::vector<End> ends;
  ends.reserve(held_.size());
  for (const auto& [held_id, w] : held_) {
    if (spoken_for.contains(held_id)) continue;
    const Timestamp since = w.start_time.value_or(w.update_time);
    if (w.spec.estimated_duration_ms > 0) {
      ends.push_back(
          {true, since + std::chrono::milliseconds(w.spec.estimated_duration_ms), held_id});
    } else {
      ends.push_back({false, since, held_id});
    }
  }
  std::sort(ends.begin(), ends.end());
  Pool trial = pool_;
  std::optional<Assignment> target;
  std::optional<Timestamp> expected = now;
  // Released in doubling batches: a few placements find about where it first fits.
  size_t next = 0;
  for (size_t batch = 1;; batch *= 2) {
    const size_t stop = std::min(ends.size(), next + batch);
    for (; next < stop; ++next) {
      trial.Release(ends[next].id);
      if (!ends[next].known) {
        expected.reset();
      } else if (expected) {
        expected = std::max(*expected, ends[next].at);
      }
    }
    PlacementDecision d = router_.Place(*reclaim_engine_, trial, spec, id, {}, now);
    if (d.assignment) {
      target = std::move(d.assignment);
      break;
    }
    if (next == ends.size()) break;
  }
  if (!target) return std::nullopt;
  Reservation r;
  r.cluster = target->cluster;
  for (const ReplicaAssignment& replica : target->replicas) {
    std::vector<std::string>& uuids = r.gpus[replica.node];
    uuids.insert(uuids.end(), replica.gpu_uuids.begin(), replica.gpu_uuids.end());
    r.target += static_cast<int64_t>(replica.gpu_uuids.size());
  }
  r.chosen = now;
  r.expected = expected;
  return r;
}

void Scheduler::ReleaseReserved() {
  for (WorkloadId id : held_reservations_) pool_.Release(ReservedHolderOf(id));
  held_reservations_.clear();
}

PendingReason Scheduler::ReservedReason(WorkloadId id, PendingReason waiting) const {
  auto it = reservations_.find(id);
  if (it == reservations_.end()) return waiting;
  const Reservation& r = it->second;
  PendingReason reason(ReasonCode::kReserved);
  reason.Set(figure::kCluster, r.cluster)
      .Set(figure::kReservedGpus, r.held)
      .Set(figure::kTargetGpus, r.target);
  if (r.expected) reason.Set(figure::kUntil, FormatTime(*r.expected));
  return reason;
}

}  // namespace gpufed
