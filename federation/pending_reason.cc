#include "federation/pending_reason.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "federation/quota.h"

namespace gpufed {
namespace {

struct CodeName {
  ReasonCode code;
  absl::string_view name;
};

constexpr CodeName kCodeNames[] = {
    {ReasonCode::kNone, ""},
    {ReasonCode::kNoClusters, "NoClusters"},
    {ReasonCode::kNoMatchingGpu, "NoMatchingGpu"},
    {ReasonCode::kMigProfileUnavailable, "MigProfileUnavailable"},
    {ReasonCode::kGpuCountUnsatisfiable, "GpuCountUnsatisfiable"},
    {ReasonCode::kHostCpuUnsatisfiable, "HostCpuUnsatisfiable"},
    {ReasonCode::kHostMemoryUnsatisfiable, "HostMemoryUnsatisfiable"},
    {ReasonCode::kHostResourcesUnsatisfiable, "HostResourcesUnsatisfiable"},
    {ReasonCode::kTopologyUnsatisfiable, "TopologyUnsatisfiable"},
    {ReasonCode::kNoReadyCluster, "NoReadyCluster"},
    {ReasonCode::kHostResourcesBusy, "HostResourcesBusy"},
    {ReasonCode::kMigPartitioningOff, "MigPartitioningOff"},
    {ReasonCode::kNothingFree, "NothingFree"},
    {ReasonCode::kGpusBusy, "GpusBusy"},
    {ReasonCode::kGpuShareBusy, "GpuShareBusy"},
    {ReasonCode::kMigInstanceBusy, "MigInstanceBusy"},
    {ReasonCode::kGangBusy, "GangBusy"},
    {ReasonCode::kQueueDepth, "QueueDepth"},
    {ReasonCode::kPlacementConflict, "PlacementConflict"},
    {ReasonCode::kNotLoaded, "NotLoaded"},
    {ReasonCode::kRequeued, "Requeued"},
    {ReasonCode::kClusterLost, "ClusterLost"},
    {ReasonCode::kPreempted, "Preempted"},
    {ReasonCode::kNodeFailed, "NodeFailed"},
    {ReasonCode::kUnclassified, "Unclassified"},
    {ReasonCode::kQuotaLimit, "QuotaLimit"},
    {ReasonCode::kReclaiming, "Reclaiming"},
    {ReasonCode::kKeptForReclaim, "KeptForReclaim"},
    {ReasonCode::kReborrowBackoff, "ReborrowBackoff"},
    {ReasonCode::kReserved, "Reserved"},
    {ReasonCode::kNoClusterAllowed, "NoClusterAllowed"},
};

std::string Plural(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

// "2 free GPUs", "300 milli-GPU free", "1 possible 3g.40gb instance".
std::string Units(const std::string& unit, int64_t n) {
  if (unit == "GPU") return Plural(n, "free GPU", "free GPUs");
  if (unit == "milli-GPU") return absl::StrCat(n, " milli-GPU free");
  return Plural(n, absl::StrCat("possible ", unit, " instance"),
                absl::StrCat("possible ", unit, " instances"));
}

// What the pool has, for the never-fits reasons about GPU models.
std::string InPool(const PendingReason& r) {
  const std::string& models = r.Text(figure::kPoolModels);
  return models.empty() ? "the pool has no GPUs" : absl::StrCat("GPU models in the pool: ", models);
}

// Why no cluster can ever hold it (the part after "but").
std::string NeverWhy(const PendingReason& r) {
  const std::string& level = r.Text(figure::kLevel);
  const std::string& where = r.Text(figure::kWhere);
  const int64_t largest = r.Int(figure::kLargest);
  switch (r.code) {
    case ReasonCode::kNoMatchingGpu:
      return absl::StrCat("no cluster has GPUs that match (", InPool(r), ")");
    case ReasonCode::kMigProfileUnavailable: {
      const std::string& profile = r.Text(figure::kProfile);
      const std::string& offering = r.Text(figure::kMigModels);
      return absl::StrCat("no cluster has a MIG-capable GPU offering ", profile, " that matches (",
                          offering.empty()
                              ? absl::StrCat("no GPU product has a MIG profile ", profile)
                              : absl::StrCat(profile, " is a profile of ", offering),
                          "; ", InPool(r), ")");
    }
    case ReasonCode::kGpuCountUnsatisfiable:
      return absl::StrCat("no ", level, " has ", r.Int(figure::kGpus),
                          " matching GPUs (largest: ", largest, " on ", where, ")");
    case ReasonCode::kHostCpuUnsatisfiable:
      return absl::StrCat("no node with matching GPUs has ", r.Int(figure::kCpuMillis),
                          " CPU millis (largest: ", largest, " on ", where, ")");
    case ReasonCode::kHostMemoryUnsatisfiable:
      return absl::StrCat("no node with matching GPUs has ", r.Int(figure::kMemoryMib),
                          " MiB of host memory (largest: ", largest, " on ", where, ")");
    case ReasonCode::kHostResourcesUnsatisfiable:
      return absl::StrCat("no ", level, " has the CPU and memory for it");
    case ReasonCode::kTopologyUnsatisfiable:
      return absl::StrCat("at most ", r.Int(figure::kFit), " of ", r.Int(figure::kReplicas),
                          " replicas fit in one ", level, " (largest: ", where, ")");
    default:
      return "";
  }
}

// What is in the way now (the part after "waiting for capacity: needs ...; ").
std::string WaitingDetail(const PendingReason& r) {
  const std::string& unit = r.Text(figure::kUnit);
  const std::string& level = r.Text(figure::kLevel);
  const std::string& where = r.Text(figure::kWhere);
  // Something that matches is free, just not enough of it in one place.
  const std::string free =
      absl::StrCat(Units(unit, r.Int(figure::kFree)), " (", r.Text(figure::kFreeByModel),
                   ") across ", Plural(r.Int(figure::kClusters), "cluster", "clusters"), ", but ");
  switch (r.code) {
    case ReasonCode::kHostResourcesBusy:
      if (!r.Has(figure::kFree)) return "no node has the CPU and memory free";
      return absl::StrCat(free, "no ", level, " with them has the CPU and memory free");
    case ReasonCode::kMigPartitioningOff:
      return absl::StrCat("no free ", r.Text(figure::kProfile),
                          " instance, and partitioning is off (the engine does not change MIG "
                          "layouts)");
    case ReasonCode::kNothingFree:
      return absl::StrCat("nothing that matches is free (", Units(unit, 0), ")");
    case ReasonCode::kGpusBusy:
      return absl::StrCat(free, "no ", level, " has ", r.Int(figure::kGpus),
                          " free (largest: ", r.Int(figure::kLargest), " on ", where, ")");
    case ReasonCode::kGpuShareBusy:
      return absl::StrCat(free, "no GPU has ", r.Int(figure::kMilli),
                          " milli-GPU free (most on one GPU: ", r.Int(figure::kMost), ")");
    case ReasonCode::kMigInstanceBusy:
      return absl::StrCat(
          free, "no free ", r.Text(figure::kProfile), " instance and no idle GPU to ",
          r.Int(figure::kPartitioning) != 0 ? "repartition" : "use (partitioning is off)");
    case ReasonCode::kGangBusy:
      return absl::StrCat(free, "no ", level, " holds ", r.Int(figure::kReplicas),
                          " replicas now (largest: ", r.Int(figure::kFit), " in ", where, ")");
    default:
      return "";
  }
}

template <typename Figures>
auto Find(Figures& figures, absl::string_view name) {
  auto it = std::lower_bound(figures.begin(), figures.end(), name,
                             [](const ReasonFigure& f, absl::string_view n) { return f.name < n; });
  return it != figures.end() && it->name == name ? it : figures.end();
}

}  // namespace

absl::string_view ReasonCodeName(ReasonCode code) {
  for (const CodeName& c : kCodeNames) {
    if (c.code == code) return c.name;
  }
  return "Unknown";
}

std::optional<ReasonCode> ParseReasonCode(absl::string_view name) {
  for (const CodeName& c : kCodeNames) {
    if (c.name == name) return c.code;
  }
  return std::nullopt;
}

bool NeverFits(ReasonCode code) {
  return (code >= ReasonCode::kNoClusters && code <= ReasonCode::kTopologyUnsatisfiable) ||
         code == ReasonCode::kNoClusterAllowed;
}

std::ostream& operator<<(std::ostream& os, ReasonCode code) {
  return os << (code == ReasonCode::kNone ? "None" : ReasonCodeName(code));
}

PendingReason& PendingReason::Set(absl::string_view name, int64_t value) {
  auto it = std::lower_bound(figures.begin(), figures.end(), name,
                             [](const ReasonFigure& f, absl::string_view n) { return f.name < n; });
  if (it != figures.end() && it->name == name) {
    it->value = value;
  } else {
    figures.insert(it, ReasonFigure{std::string(name), value});
  }
  return *this;
}

PendingReason& PendingReason::Set(absl::string_view name, std::string value) {
  auto it = std::lower_bound(figures.begin(), figures.end(), name,
                             [](const ReasonFigure& f, absl::string_view n) { return f.name < n; });
  if (it != figures.end() && it->name == name) {
    it->value = std::move(value);
  } else {
    figures.insert(it, ReasonFigure{std::string(name), std::move(value)});
  }
  return *this;
}

int64_t PendingReason::Int(absl::string_view name) const {
  auto it = Find(figures, name);
  if (it == figures.end()) return 0;
  const int64_t* v = std::get_if<int64_t>(&it->value);
  return v == nullptr ? 0 : *v;
}

const std::string& PendingReason::Text(absl::string_view name) const {
  static const std::string kEmpty;
  auto it = Find(figures, name);
  if (it == figures.end()) return kEmpty;
  const std::string* v = std::get_if<std::string>(&it->value);
  return v == nullptr ? kEmpty : *v;
}

bool PendingReason::Has(absl::string_view name) const {
  return Find(figures, name) != figures.end();
}

bool IsQuotaReason(ReasonCode code) {
  return code == ReasonCode::kQuotaLimit || code == ReasonCode::kReclaiming ||
         code == ReasonCode::kKeptForReclaim || code == ReasonCode::kReborrowBackoff;
}

std::string RenderReason(const PendingReason& r) {
  const std::string& needs = r.Text(figure::kNeeds);
  switch (r.code) {
    case ReasonCode::kNone:
      return "";
    case ReasonCode::kNoClusters:
      return absl::StrCat("no clusters are registered; needs ", needs);
    case ReasonCode::kNoMatchingGpu:
    case ReasonCode::kMigProfileUnavailable:
    case ReasonCode::kGpuCountUnsatisfiable:
    case ReasonCode::kHostCpuUnsatisfiable:
    case ReasonCode::kHostMemoryUnsatisfiable:
    case ReasonCode::kHostResourcesUnsatisfiable:
    case ReasonCode::kTopologyUnsatisfiable:
      return absl::StrCat("no cluster can ever hold it: needs ", needs, ", but ", NeverWhy(r));
    case ReasonCode::kNoClusterAllowed:
      return absl::StrCat("no cluster ", r.Text(figure::kRule), " offers ", needs);
    case ReasonCode::kNoReadyCluster:
      return absl::StrCat("waiting for a cluster to become ready (", r.Text(figure::kNotReady),
                          "); needs ", needs);
    case ReasonCode::kHostResourcesBusy:
    case ReasonCode::kMigPartitioningOff:
    case ReasonCode::kNothingFree:
    case ReasonCode::kGpusBusy:
    case ReasonCode::kGpuShareBusy:
    case ReasonCode::kMigInstanceBusy:
    case ReasonCode::kGangBusy: {
      std::string words =
          absl::StrCat("waiting for capacity: needs ", needs, "; ", WaitingDetail(r));
      if (const std::string& not_ready = r.Text(figure::kNotReady); !not_ready.empty()) {
        absl::StrAppend(&words, "; not ready: ", not_ready);
      }
      return words;
    }
    case ReasonCode::kQueueDepth:
      return absl::StrCat("queued: ", r.Int(figure::kConsidered),
                          " higher-priority or older workloads are considered first");
    case ReasonCode::kPlacementConflict:
      return "internal: placement conflicted with the pool; retrying next cycle";
    case ReasonCode::kNotLoaded:
      return "cannot judge yet: the scheduler on this server has not loaded the pool (it is "
             "starting, or another server is the active scheduler); try again shortly";
    case ReasonCode::kRequeued:
    case ReasonCode::kUnclassified:
      return r.Text(figure::kText);
    case ReasonCode::kClusterLost:
      return absl::StrCat("requeued: cluster ", r.Text(figure::kCluster), " was lost at ",
                          r.Text(figure::kLostAt), "; attempt ", r.Int(figure::kAttempt), " of ",
                          r.Int(figure::kMaxAttempts), " ended there, waiting for the next");
    case ReasonCode::kPreempted:
      return absl::StrCat("requeued: stopped on cluster ", r.Text(figure::kCluster), " at ",
                          r.Text(figure::kEndedAt), " (", r.Text(figure::kText), "); attempt ",
                          r.Int(figure::kAttempt), " of ", r.Int(figure::kMaxAttempts),
                          " ended there, waiting for the next");
    case ReasonCode::kNodeFailed:
      return absl::StrCat("requeued: hardware it ran on in cluster ", r.Text(figure::kCluster),
                          " failed at ", r.Text(figure::kEndedAt), " (", r.Text(figure::kText),
                          "); attempt ", r.Int(figure::kAttempt), " of ",
                          r.Int(figure::kMaxAttempts), " ended there, waiting for the next");
    case ReasonCode::kQuotaLimit:
      return absl::StrCat(
          "quota: ", r.Text(figure::kHolder), " holds ", FormatQuotaAmount(r.Int(figure::kHeld)),
          "/", FormatQuotaAmount(r.Int(figure::kLimit)), " ", r.Text(figure::kResource),
          " (limit); this workload asks ", FormatQuotaAmount(r.Int(figure::kAsked)), " more");
    case ReasonCode::kReclaiming:
      // Whose work is stopping is not said: the borrowers may be other tenants.
      return absl::StrCat("waiting for reclaim: borrowed capacity on cluster ",
                          r.Text(figure::kCluster), " is stopping to free guaranteed ",
                          r.Text(figure::kResource));
    case ReasonCode::kKeptForReclaim:
      return absl::StrCat("borrowing ", r.Text(figure::kResource),
                          ": the free capacity on cluster ", r.Text(figure::kCluster),
                          " is kept for guaranteed work being placed there after a reclaim");
    case ReasonCode::kReborrowBackoff:
      return absl::StrCat("borrowing ", r.Text(figure::kResource), ": ", r.Text(figure::kHolder),
                          " had it reclaimed and may borrow it again from ",
                          r.Text(figure::kUntil));
    case ReasonCode::kReserved: {
      std::string words = absl::StrCat(
          "waited past the starvation bound: ", r.Int(figure::kReservedGpus), " of ",
          Plural(r.Int(figure::kTargetGpus), "GPU", "GPUs"), " on cluster ",
          r.Text(figure::kCluster), " are held for it, the rest as the work on them ends");
      if (r.Has(figure::kUntil))
        absl::StrAppend(&words, " (expected by ", r.Text(figure::kUntil), ")");
      return words;
    }
  }
  return "";
}

PendingReason ReasonWithText(ReasonCode code, std::string text) {
  PendingReason r(code);
  r.Set(figure::kText, std::move(text));
  return r;
}

ReasonChange CompareReasons(const PendingReason& stored, const PendingReason& found) {
  if (stored.code != found.code) return ReasonChange::kCode;
  return stored.figures == found.figures ? ReasonChange::kNone : ReasonChange::kFigures;
}

std::ostream& operator<<(std::ostream& os, const PendingReason& reason) {
  return os << reason.code << ": " << RenderReason(reason);
}

}  // namespace gpufed
