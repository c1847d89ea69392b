#include "agent/telemetry.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "federation/mig.h"
#include "google/protobuf/util/time_util.h"

namespace gpufed::agent {
namespace {

// What a workload of one class does with a whole GPU, as fractions (DCGM's profiling fields) and
// NVML's coarse percent.
struct Profile {
  double sm_active, sm_occupancy, tensor, dram, engine, gpu_util, fb_share, power_share;
};

Profile ProfileOf(v1::WorkloadClass c) {
  switch (c) {
    case v1::WORKLOAD_CLASS_TRAINING:
      return {0.82, 0.45, 0.55, 0.45, 0.96, 99, 0.85, 0.85};
    case v1::WORKLOAD_CLASS_INFERENCE:
      return {0.30, 0.20, 0.20, 0.25, 0.60, 70, 0.50, 0.45};
    case v1::WORKLOAD_CLASS_BATCH:
      return {0.60, 0.35, 0.15, 0.40, 0.85, 95, 0.60, 0.70};
    case v1::WORKLOAD_CLASS_INTERACTIVE:
      return {0.05, 0.03, 0.01, 0.03, 0.12, 20, 0.30, 0.20};
    default:
      return {0.50, 0.30, 0.20, 0.30, 0.75, 90, 0.50, 0.60};
  }
}

// Board power in watts by model family; a guess for others.
double MaxPowerWatts(absl::string_view model) {
  if (absl::StrContains(model, "H100") || absl::StrContains(model, "H200")) return 700;
  if (absl::StrContains(model, "B200") || absl::StrContains(model, "GB200")) return 1000;
  if (absl::StrContains(model, "A100")) return 400;
  if (absl::StrContains(model, "A30")) return 165;
  if (absl::StrContains(model, "L4")) return 72;
  if (absl::StrContains(model, "L40")) return 350;
  return 300;
}

// A factor in [1 - spread, 1 + spread], a function of its arguments only: the same in every
// process (absl::Hash is seeded per process, so it is not used here).
double Noise(const std::string& workload, int64_t second, double spread) {
  std::vector<uint32_t> seeds(workload.begin(), workload.end());
  seeds.push_back(static_cast<uint32_t>(second));
  seeds.push_back(static_cast<uint32_t>(static_cast<uint64_t>(second) >> 32));
  std::seed_seq seq(seeds.begin(), seeds.end());
  uint32_t value = 0;
  seq.generate(&value, &value + 1);
  const double u = static_cast<double>(value) / 4294967295.0;  // 0..1
  return 1.0 + spread * (2 * u - 1);
}

double Clamp(double v, double lo, double hi) { return std::clamp(v, lo, hi); }

constexpr int kFields = 9;
enum Field { kEngine, kSm, kOccupancy, kTensor, kDram, kUtil, kFb, kPower, kTemp };

std::array<std::optional<double>, kFields> FieldsOf(const GpuMetrics& m) {
  return {m.gr_engine_active, m.sm_active,   m.sm_occupancy, m.pipe_tensor_active, m.dram_active,
          m.gpu_util,         m.fb_used_mib, m.power_watts,  m.gpu_temp_celsius};
}

}  // namespace

bool LacksProfiling(absl::string_view model) {
  for (absl::string_view old : {"K80", "M60", "M40", "P4", "P40", "P100"}) {
    if (absl::StrContains(model, old)) return true;
  }
  return false;
}

std::vector<GpuMetrics> SimTelemetry::Sample(const std::vector<Occupant>& occupants,
                                             absl::Time at) {
  const int64_t second = absl::ToUnixSeconds(at);
  // A GPU shared by several workloads is as busy as the sum of their shares' activity.
  std::map<std::string, double> shared_activity;
  for (const Occupant& o : occupants) {
    if (o.gpu_milli > 0 && o.mig_profile.empty()) {
      shared_activity[o.gpu_uuid] += ProfileOf(o.workload_class).sm_active * o.gpu_milli / 1000.0 *
                                     Noise(o.workload_id, second, 0.08);
    }
  }
  std::vector<GpuMetrics> out;
  out.reserve(occupants.size());
  for (const Occupant& o : occupants) {
    const Profile p = ProfileOf(o.workload_class);
    double busy = Noise(o.workload_id, second, 0.08);  // scales every activity field
    double part = 1.0;  // of the GPU's memory and power this occupant's readings cover
    std::optional<Fraction> mig;
    if (!o.mig_profile.empty()) {
      if (const MigGeometry* geo = FindMigGeometry(o.gpu_model); geo != nullptr) {
        if (const MigProfile* prof = geo->Find(o.mig_profile); prof != nullptr) {
          mig = MigFraction(*geo, *prof, MigBasis::kCompute);
          part = static_cast<double>(prof->memory_slices) / geo->memory_slots;
        }
      }
    } else if (o.gpu_milli > 0) {
      busy = Clamp(shared_activity[o.gpu_uuid] / p.sm_active, 0.0, 1.0 / p.sm_active);
    }
    GpuMetrics m;
    const double activity = Clamp(p.sm_active * busy, 0.0, 1.0);
    if (!LacksProfiling(o.gpu_model)) {
      // A busy MIG instance reads SM activity a little above 1 (DCGM normalises by the
      // instance's SMs) and engine activity as a part of the whole GPU.
      m.sm_active = mig ? activity * 1.15 : activity;
      m.sm_occupancy = Clamp(p.sm_occupancy * busy, 0.0, 1.0);
      m.pipe_tensor_active = Clamp(p.tensor * busy, 0.0, 1.0);
      m.dram_active = Clamp(p.dram * busy, 0.0, 1.0);
      const double engine = Clamp(p.engine * busy, 0.0, 1.0);
      m.gr_engine_active =
          mig ? engine * static_cast<double>(mig->num) / static_cast<double>(mig->den) : engine;
    }
    if (!mig) m.gpu_util = Clamp(p.gpu_util * busy, 0.0, 100.0);
    if (o.gpu_memory_mib > 0) {
      m.fb_used_mib = std::floor(static_cast<double>(o.gpu_memory_mib) * part * p.fb_share);
    }
    m.power_watts =
        std::round(MaxPowerWatts(o.gpu_model) * (0.15 + 0.85 * activity) * (mig ? part : 1.0));
    m.gpu_temp_celsius = std::round(32 + 45 * activity);
    out.push_back(m);
  }
  return out;
}

MinuteAggregator::MinuteAggregator(absl::Duration interval, size_t max_minutes)
    : interval_(interval), max_minutes_(max_minutes) {}

void MinuteAggregator::Add(const Occupant& o, const GpuMetrics& metrics, absl::Time at) {
  const int64_t minute = absl::ToUnixSeconds(at) / 60 * 60;
  Key key{minute, o.gpu_uuid, o.mig_profile, o.mig_start, o.workload_id, o.attempt};
  Sums& s = open_[key];
  if (s.samples == 0) {
    s.gpu_uuid = o.gpu_uuid;
    s.mig_profile = o.mig_profile;
    s.mig_start = o.mig_start;
    s.workload_id = o.workload_id;
    s.attempt = o.attempt;
    s.minute_seconds = minute;
  }
  ++s.samples;
  const auto fields = FieldsOf(metrics);
  for (int i = 0; i < kFields; ++i) {
    if (fields[i]) {
      s.sum[i] += *fields[i];
      ++s.count[i];
    }
  }
}

void MinuteAggregator::Close(absl::Time now) {
  const int64_t current = absl::ToUnixSeconds(now) / 60 * 60;
  const int64_t interval_s = std::max<int64_t>(1, absl::ToInt64Seconds(interval_));
  for (auto it = open_.begin(); it != open_.end() && std::get<0>(it->first) < current;) {
    const Sums& s = it->second;
    v1::GpuMinute m;
    m.set_gpu_uuid(s.gpu_uuid);
    m.set_mig_profile(s.mig_profile);
    m.set_mig_start(s.mig_start);
    *m.mutable_minute() = google::protobuf::util::TimeUtil::SecondsToTimestamp(s.minute_seconds);
    m.set_covered_seconds(static_cast<uint32_t>(std::min<int64_t>(60, s.samples * interval_s)));
    m.set_workload_id(s.workload_id);
    m.set_attempt(s.attempt);
    auto mean = [&](int i) { return s.sum[i] / s.count[i]; };
    if (s.count[kEngine] > 0) m.set_gr_engine_active(mean(kEngine));
    if (s.count[kSm] > 0) m.set_sm_active(mean(kSm));
    if (s.count[kOccupancy] > 0) m.set_sm_occupancy(mean(kOccupancy));
    if (s.count[kTensor] > 0) m.set_pipe_tensor_active(mean(kTensor));
    if (s.count[kDram] > 0) m.set_dram_active(mean(kDram));
    if (s.count[kUtil] > 0) m.set_gpu_util(mean(kUtil));
    if (s.count[kFb] > 0) m.set_fb_used_mib(mean(kFb));
    if (s.count[kPower] > 0) m.set_power_watts(mean(kPower));
    if (s.count[kTemp] > 0) m.set_gpu_temp_celsius(mean(kTemp));
    ended_.push_back(std::move(m));
    it = open_.erase(it);
  }
  if (ended_.size() > max_minutes_) {
    const size_t excess = ended_.size() - max_minutes_;
    ended_.erase(ended_.begin(), ended_.begin() + static_cast<std::ptrdiff_t>(excess));
    dropped_ += excess;
  }
}

std::vector<v1::GpuMinute> MinuteAggregator::TakeEnded(absl::Time now, size_t max) {
  Close(now);
  const size_t n = std::min(max, ended_.size());
  std::vector<v1::GpuMinute> out(
      std::make_move_iterator(ended_.begin()),
      std::make_move_iterator(ended_.begin() + static_cast<std::ptrdiff_t>(n)));
  ended_.erase(ended_.begin(), ended_.begin() + static_cast<std::ptrdiff_t>(n));
  return out;
}

}  // namespace gpufed::agent
