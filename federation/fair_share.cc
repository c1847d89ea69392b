#include "federation/fair_share.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace gpufed {

absl::Status ValidateUsage(const UsageSnapshot& usage) {
  if (usage.gpu_seconds.size() > kMaxUsageHolders) {
    return absl::InvalidArgumentError(absl::StrCat("usage: at most ", kMaxUsageHolders,
                                                   " holders, got ", usage.gpu_seconds.size()));
  }
  for (const auto& [holder, seconds] : usage.gpu_seconds) {
    if (!std::isfinite(seconds) || seconds < 0) {
      return absl::InvalidArgumentError(absl::StrCat("usage[", holder.first, "/", holder.second,
                                                     "]: must be finite and not negative"));
    }
  }
  return absl::OkStatus();
}

void DecayedUsage::Advance(Timestamp now, const std::map<Holder, int64_t>& held_milli) {
  if (!last_) {
    last_ = now;
    return;
  }
  if (now <= *last_) return;
  const double dt = std::chrono::duration<double>(now - *last_).count();
  const double h = std::chrono::duration<double>(half_life_).count();
  last_ = now;
  const double decay = std::exp2(-dt / h);
  for (auto it = gpu_seconds_.begin(); it != gpu_seconds_.end();) {
    it->second *= decay;
    // Forget what has decayed to nothing, so that holders long gone do not pile up.
    it = it->second < 1e-6 ? gpu_seconds_.erase(it) : std::next(it);
  }
  // Held at a constant rate g over dt, each instant decaying since: g * h/ln2 * (1 - 2^(-dt/h)).
  const double weight = h / std::log(2.0) * (1.0 - decay);
  for (const auto& [holder, milli] : held_milli) {
    if (milli > 0) gpu_seconds_[holder] += static_cast<double>(milli) / 1000.0 * weight;
  }
}

UsageSnapshot DecayedUsage::Snapshot() const {
  return UsageSnapshot{last_.value_or(Timestamp{}), gpu_seconds_};
}

void DecayedUsage::Restore(const UsageSnapshot& snapshot) {
  if (snapshot.as_of == Timestamp{}) return;
  last_ = snapshot.as_of;
  gpu_seconds_ = snapshot.gpu_seconds;
}

double DecayedUsage::GpuSeconds(const Holder& holder) const {
  auto it = gpu_seconds_.find(holder);
  return it == gpu_seconds_.end() ? 0.0 : it->second;
}

double DecayedUsage::AverageGpus(const Holder& holder) const {
  const double h = std::chrono::duration<double>(half_life_).count();
  return GpuSeconds(holder) * std::log(2.0) / h;
}

}  // namespace gpufed
