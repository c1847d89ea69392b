#include "agent/spot_reclaim.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "federation/types.h"

namespace gpufed::agent {

absl::Status ValidateSpotReclaimSchedule(const SpotReclaimSchedule& schedule) {
  if (schedule.every < absl::ZeroDuration() || schedule.every == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        "--spot-reclaim-every: must be a finite duration >= 0 (0: no reclaims)");
  }
  if (!schedule.enabled()) {
    if (schedule.duration != absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          "--spot-reclaim-for: needs --spot-reclaim-every (how often the nodes are taken)");
    }
    return absl::OkStatus();
  }
  if (schedule.duration <= absl::ZeroDuration() || schedule.duration >= schedule.every) {
    return absl::InvalidArgumentError(
        absl::StrCat("--spot-reclaim-for: must be > 0 and shorter than --spot-reclaim-every (",
                     absl::FormatDuration(schedule.every),
                     ") so that the nodes are back before the next "
                     "reclaim; got ",
                     absl::FormatDuration(schedule.duration)));
  }
  return absl::OkStatus();
}

MonotonicTime NextSpotReclaim(MonotonicTime origin, absl::Duration every, MonotonicTime after) {
  const int64_t period = absl::ToInt64Nanoseconds(std::max(every, absl::Nanoseconds(1)));
  const int64_t since =
      std::chrono::duration_cast<std::chrono::nanoseconds>(after - origin).count();
  const int64_t slot = since < 0 ? 1 : since / period + 1;
  return origin + std::chrono::nanoseconds(slot * period);
}

std::vector<std::string> SpotNodes(const v1::Inventory& inventory) {
  std::vector<std::string> out;
  for (const v1::Node& node : inventory.nodes()) {
    auto label = node.labels().find(std::string(kCapacityTypeLabel));
    if (label != node.labels().end() && ParseCapacityType(label->second) == CapacityType::kSpot) {
      out.push_back(node.name());
    }
  }
  return out;
}

}  // namespace gpufed::agent
