#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace gpufed::sim {

nlohmann::json ToJson(const ReplayResult& r) {
  nlohmann::json curve = nlohmann::json::array();
  for (const CurvePoint& p : r.curve) {
    curve.push_back({{"arrived_ratio", p.arrived_ratio}, {"allocation_ratio", p.allocation_ratio}});
  }
  nlohmann::json out = {
      {"mode", ReplayModeName(r.mode)},
      {"policy", r.policy},
      {"seed", r.seed},
      {"tie_order", TieOrderName(r.tie_order)},
      {"inflation", r.inflation},
      {"gpus_total", r.gpus_total},
      {"pods", r.pods},
      {"placed", r.placed},
      {"failed", r.failed},
      {"final_allocation_ratio", r.final_allocation_ratio},
      {"paper_allocation_ratio", r.paper_allocation_ratio},
      {"allocation_bound", r.allocation_bound},
      {"bound_premise_failures", r.bound_premise_failures},
      {"run_allocation_bound", r.run_allocation_bound},
      {"unallocated_gpus", r.unallocated_gpus},
      {"failed_gpu_milli", r.failed_gpu_milli},
      {"wall_seconds", r.wall_seconds},
      {"cpu_seconds", r.cpu_seconds},
      {"curve", std::move(curve)},
  };
  if (r.time) {
    const TimeModeResult& t = *r.time;
    nlohmann::json utilisation = nlohmann::json::array();
    for (const UtilisationPoint& p : t.utilisation) {
      utilisation.push_back({{"time", p.time},
                             {"allocation_ratio", p.allocation_ratio},
                             {"queued", p.queued},
                             {"running", p.running}});
    }
    out["time"] = {
        {"compression", t.compression},
        {"start_time", t.start_time},
        {"end_time", t.end_time},
        {"started", t.started},
        {"completed", t.completed},
        {"still_running", t.still_running},
        {"still_queued", t.still_queued},
        {"rejected", t.rejected},
        {"wait_seconds",
         {{"mean", t.wait.mean_seconds},
          {"p50", t.wait.p50_seconds},
          {"p99", t.wait.p99_seconds},
          {"max", t.wait.max_seconds}}},
        {"mean_allocation_ratio", t.mean_allocation_ratio},
        {"peak_allocation_ratio", t.peak_allocation_ratio},
        {"peak_queued", t.peak_queued},
        {"utilisation", std::move(utilisation)},
    };
  }
  return out;
}

std::vector<PolicySummary> Summarise(const std::vector<ReplayResult>& results) {
  std::vector<PolicySummary> out;
  std::map<std::string, size_t> at;
  for (const ReplayResult& r : results) {
    auto [it, added] = at.emplace(r.policy, out.size());
    if (added) {
      out.emplace_back();
      out.back().policy = r.policy;
    }
    PolicySummary& s = out[it->second];
    s.seeds.push_back(r.seed);
    s.mean_final_allocation_ratio += r.final_allocation_ratio;
    s.mean_paper_allocation_ratio += r.paper_allocation_ratio;
    s.mean_allocation_bound += r.allocation_bound;
    s.bound_premise_failures += r.bound_premise_failures;
    s.mean_run_allocation_bound += r.run_allocation_bound;
    s.mean_unallocated_gpus += r.unallocated_gpus;
    s.mean_placed += static_cast<double>(r.placed);
    s.mean_failed += static_cast<double>(r.failed);
    s.mean_wall_seconds += r.wall_seconds;
    s.mean_cpu_seconds += r.cpu_seconds;
    s.max_wall_seconds = std::max(s.max_wall_seconds, r.wall_seconds);
  }
  std::vector<std::vector<double>> papers(out.size());
  for (const ReplayResult& r : results) papers[at[r.policy]].push_back(r.paper_allocation_ratio);
  for (size_t i = 0; i < out.size(); ++i) {
    PolicySummary& s = out[i];
    const auto n = static_cast<double>(s.seeds.size());
    s.mean_final_allocation_ratio /= n;
    s.mean_paper_allocation_ratio /= n;
    s.mean_allocation_bound /= n;
    s.mean_run_allocation_bound /= n;
    s.mean_unallocated_gpus /= n;
    s.mean_placed /= n;
    s.mean_failed /= n;
    s.mean_wall_seconds /= n;
    s.mean_cpu_seconds /= n;
    if (papers[i].size() > 1) {
      double squares = 0;
      for (double p : papers[i]) {
        squares += (p - s.mean_paper_allocation_ratio) * (p - s.mean_paper_allocation_ratio);
      }
      s.stderr_paper_allocation_ratio = std::sqrt(squares / (n - 1)) / std::sqrt(n);
    }
  }
  return out;
}

nlohmann::json ToJson(const PolicySummary& s) {
  return {
      {"policy", s.policy},
      {"seeds", s.seeds},
      {"mean_final_allocation_ratio", s.mean_final_allocation_ratio},
      {"mean_paper_allocation_ratio", s.mean_paper_allocation_ratio},
      {"stderr_paper_allocation_ratio", s.stderr_paper_allocation_ratio},
      {"mean_allocation_bound", s.mean_allocation_bound},
      {"bound_premise_failures", s.bound_premise_failures},
      {"mean_run_allocation_bound", s.mean_run_allocation_bound},
      {"mean_unallocated_gpus", s.mean_unallocated_gpus},
      {"mean_placed", s.mean_placed},
      {"mean_failed", s.mean_failed},
      {"mean_wall_seconds", s.mean_wall_seconds},
      {"max_wall_seconds", s.max_wall_seconds},
      {"mean_cpu_seconds", s.mean_cpu_seconds},
  };
}

}  // namespace gpufed::sim
