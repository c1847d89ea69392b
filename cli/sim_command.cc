#include "cli/sim_command.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/read_file.h"
#include "cli/scenario_yaml.h"
#include "federation/policy.h"
#include "nlohmann/json.hpp"
#include "sim/openb.h"
#include "sim/replay.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "spdlog/spdlog.h"

namespace gpufed::cli {
namespace {

constexpr int kExitError = 1;
constexpr uint64_t kMaxSeeds = 10000;

int ReportError(const absl::Status& status, std::ostream& err) {
  err << "error: " << absl::StatusCodeToString(status.code()) << ": " << status.message() << "\n";
  return kExitError;
}

// 4321 -> "4,321".
std::string WithThousands(uint64_t n) {
  std::string digits = absl::StrCat(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string Percent(double ratio) { return absl::StrFormat("%.2f%%", ratio * 100); }

// "[=====>    ] 54% 4,321 pods  fgd seed 3", redrawn in place.
class ProgressBar {
 public:
  ProgressBar(std::ostream& err, std::string label, absl::string_view unit)
      : err_(err), label_(std::move(label)), unit_(unit) {}

  void Draw(const sim::ReplayProgress& p) {
    constexpr int kWidth = 30;
    const double fraction =
        p.total == 0 ? 1.0 : static_cast<double>(p.done) / static_cast<double>(p.total);
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(kWidth, ' ');
    std::fill(bar.begin(), bar.begin() + filled, '=');
    if (filled < kWidth) bar[filled] = '>';
    err_ << "\r[" << bar << "] " << absl::StrFormat("%3d%%", static_cast<int>(fraction * 100))
         << " " << WithThousands(p.done) << " " << unit_ << "  " << label_ << "\x1b[K"
         << std::flush;
  }

  void Clear() { err_ << "\r\x1b[K" << std::flush; }

 private:
  std::ostream& err_;
  std::string label_;
  std::string unit_;
};

// The headroom bound (snapshot mode only; "-" in time mode); marked "*" when a run failed one of
// the large shares the bound assumes placed, so that the bound need not hold for it.
std::string Bound(double bound, uint64_t premise_failures) {
  if (bound == 0) return "-";
  return premise_failures == 0 ? Percent(bound) : absl::StrCat(Percent(bound), "*");
}

void WriteSnapshotTable(const std::vector<sim::ReplayResult>& runs, std::ostream& out) {
  Table table({"POLICY", "SEED", "PODS", "PLACED", "FAILED", "ALLOCATED", "AT INFLATION", "BOUND",
               "RUN BOUND", "UNALLOCATED GPUS", "WALL", "CPU"});
  for (const sim::ReplayResult& r : runs) {
    table.AddRow(
        {r.policy, absl::StrCat(r.seed), absl::StrCat(r.pods), absl::StrCat(r.placed),
         absl::StrCat(r.failed), Percent(r.final_allocation_ratio),
         Percent(r.paper_allocation_ratio), Bound(r.allocation_bound, r.bound_premise_failures),
         Bound(r.run_allocation_bound, 0), absl::StrFormat("%.1f", r.unallocated_gpus),
         absl::StrFormat("%.2fs", r.wall_seconds), absl::StrFormat("%.2fs", r.cpu_seconds)});
  }
  table.Render(out);
}

void WriteTimeTable(const std::vector<sim::ReplayResult>& runs, std::ostream& out) {
  Table table({"POLICY", "SEED", "PODS", "STARTED", "COMPLETED", "QUEUED", "REJECTED",
               "WAIT MEAN/P50/P99", "MEAN ALLOCATED", "FINAL", "WALL", "CPU"});
  for (const sim::ReplayResult& r : runs) {
    const sim::TimeModeResult& t = *r.time;
    table.AddRow({r.policy, absl::StrCat(r.seed), absl::StrCat(r.pods), absl::StrCat(t.started),
                  absl::StrCat(t.completed), absl::StrCat(t.still_queued), absl::StrCat(t.rejected),
                  absl::StrFormat("%.0fs/%.0fs/%.0fs", t.wait.mean_seconds, t.wait.p50_seconds,
                                  t.wait.p99_seconds),
                  Percent(t.mean_allocation_ratio), Percent(r.final_allocation_ratio),
                  absl::StrFormat("%.2fs", r.wall_seconds),
                  absl::StrFormat("%.2fs", r.cpu_seconds)});
  }
  table.Render(out);
}

void WriteSummaryTable(const std::vector<sim::PolicySummary>& summaries, std::ostream& out) {
  Table table({"POLICY", "SEEDS", "MEAN ALLOCATED", "MEAN AT INFLATION", "STD ERROR", "MEAN BOUND",
               "MEAN RUN BOUND", "MEAN UNALLOCATED GPUS", "MEAN WALL", "MAX WALL", "MEAN CPU"});
  for (const sim::PolicySummary& s : summaries) {
    table.AddRow({s.policy, absl::StrCat(s.seeds.size()), Percent(s.mean_final_allocation_ratio),
                  Percent(s.mean_paper_allocation_ratio),
                  absl::StrFormat("%.2f", 100 * s.stderr_paper_allocation_ratio),
                  Bound(s.mean_allocation_bound, s.bound_premise_failures),
                  Bound(s.mean_run_allocation_bound, 0),
                  absl::StrFormat("%.1f", s.mean_unallocated_gpus),
                  absl::StrFormat("%.2fs", s.mean_wall_seconds),
                  absl::StrFormat("%.2fs", s.max_wall_seconds),
                  absl::StrFormat("%.2fs", s.mean_cpu_seconds)});
  }
  table.Render(out);
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> ParseSeedList(absl::string_view text) {
  std::vector<uint64_t> seeds;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    uint64_t lo = 0;
    uint64_t hi = 0;
    const bool ok = ends.size() <= 2 && absl::SimpleAtoi(ends.front(), &lo) &&
                    absl::SimpleAtoi(ends.back(), &hi) && lo <= hi;
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--seeds: '", part, "' is not a seed or a range LO-HI (e.g. 1-10, or 1,2,5-7)"));
    }
    if (hi - lo >= kMaxSeeds || seeds.size() + (hi - lo + 1) > kMaxSeeds) {
      return absl::InvalidArgumentError(absl::StrCat("--seeds: more than ", kMaxSeeds, " seeds"));
    }
    for (uint64_t s = lo; s <= hi; ++s) seeds.push_back(s);
  }
  return seeds;
}

SimCommand::SimCommand(CLI::App& app) {
  sim_ = app.add_subcommand("sim", "Simulate placement locally on a cluster trace (no server)");
  sim_->require_subcommand(1);
  sim_->fallthrough();
  replay_ = sim_->add_subcommand(
      "replay",
      "Replay an openb trace (Alibaba GPU v2023) on the placement engine; see docs/simulator.md");
  replay_->fallthrough();
  replay_->add_option("--nodes", nodes_, "Node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
      ->required();
  replay_->add_option("--pods", pods_, "Pod list CSV (name,cpu_milli,memory_mib,num_gpu,...)")
      ->required();
  std::vector<std::string> policies = PolicyNames();
  policies.emplace_back("all");
  replay_->add_option("--policy", policy_, "Placement policy, or 'all' for each in turn")
      ->check(CLI::IsMember(policies))
      ->capture_default_str();
  inflation_opt_ =
      replay_
          ->add_option("--inflation", inflation_,
                       "Snapshot mode: requested GPUs as a multiple of the cluster's GPUs")
          ->check(CLI::PositiveNumber)
          ->capture_default_str();
  seed_opt_ = replay_->add_option("--seed", seed_, "Random seed")->capture_default_str();
  seeds_opt_ = replay_->add_option("--seeds", seeds_,
                                   "Several seeds, e.g. 1-10 or 1,3,5-7; prints the mean too");
  seeds_opt_->excludes(seed_opt_);
  replay_
      ->add_option("--mode", mode_,
                   "snapshot: the FGD paper's protocol; time: creation/deletion times, queue")
      ->check(CLI::IsMember({"snapshot", "time"}))
      ->capture_default_str();
  compress_opt_ = replay_
                      ->add_option("--compress", compress_,
                                   "Time mode: arrivals this many times closer together, each pod "
                                   "running as long as before (contention on a sparse trace)")
                      ->check(CLI::Range(1.0, 1e9))
                      ->capture_default_str();
  run_ = sim_->add_subcommand(
      "run", "Run a quota scenario on the live scheduling code; see docs/scenarios.md");
  run_->fallthrough();
  run_->add_option("scenario", scenario_, "Scenario YAML file")->required();
  replay_
      ->add_option("--tie-order", tie_order_,
                   "Among equal nodes take: seeded, the first of a random node order drawn once "
                   "per seed (the paper's simulator); list, the first in the node list; random, "
                   "one at random for each pod")
      ->check(CLI::IsMember({"seeded", "list", "random"}))
      ->capture_default_str();
}

bool SimCommand::parsed() const { return sim_->parsed(); }

bool SimCommand::ProgressWanted(const std::ostream& out, const std::ostream& err) {
  return &out == &std::cout && &err == &std::cerr && isatty(STDOUT_FILENO) == 1 &&
         isatty(STDERR_FILENO) == 1;
}

int SimCommand::Run(OutputFormat format, std::ostream& out, std::ostream& err,
                    bool progress_to_terminal) const {
  if (run_->parsed()) return RunScenario(format, out, err);
  if (!replay_->parsed()) return 0;  // require_subcommand makes this unreachable
  const sim::ReplayMode mode = *sim::ParseReplayMode(mode_);
  if (mode == sim::ReplayMode::kTime && inflation_opt_->count() > 0) {
    return ReportError(absl::InvalidArgumentError(
                           "--inflation applies to --mode snapshot only: time mode replays the "
                           "pods at their own times"),
                       err);
  }
  if (mode == sim::ReplayMode::kSnapshot && compress_opt_->count() > 0) {
    return ReportError(absl::InvalidArgumentError(
                           "--compress applies to --mode time only: snapshot mode has no times"),
                       err);
  }
  std::vector<uint64_t> seeds = {seed_};
  if (seeds_opt_->count() > 0) {
    absl::StatusOr<std::vector<uint64_t>> parsed = ParseSeedList(seeds_);
    if (!parsed.ok()) return ReportError(parsed.status(), err);
    seeds = *std::move(parsed);
  }
  std::vector<std::string> policies = {policy_};
  if (policy_ == "all") policies = PolicyNames();

  sim::Trace trace;
  absl::StatusOr<std::vector<sim::OpenbNode>> nodes = sim::ReadOpenbNodes(nodes_);
  if (!nodes.ok()) return ReportError(nodes.status(), err);
  trace.nodes = *std::move(nodes);
  absl::StatusOr<std::vector<sim::OpenbPod>> pods = sim::ReadOpenbPods(pods_);
  if (!pods.ok()) return ReportError(pods.status(), err);
  trace.pods = *std::move(pods);

  std::vector<sim::ReplayResult> runs;
  for (const std::string& policy : policies) {
    for (uint64_t seed : seeds) {
      sim::ReplayOptions options;
      options.policy = policy;
      options.seed = seed;
      options.mode = mode;
      options.inflation = inflation_;
      options.compression = compress_;
      options.tie_order = *sim::ParseTieOrder(tie_order_);
      ProgressBar bar(err, absl::StrCat(policy, " seed ", seed),
                      mode == sim::ReplayMode::kTime ? "arrivals" : "pods");
      sim::ProgressCallback progress;
      if (progress_to_terminal) {
        progress = [&bar](const sim::ReplayProgress& p) { bar.Draw(p); };
      }
      absl::StatusOr<sim::ReplayResult> result = sim::Replay(trace, options, progress);
      if (progress_to_terminal) bar.Clear();
      if (!result.ok()) return ReportError(result.status(), err);
      runs.push_back(*std::move(result));
    }
  }

  const bool several = runs.size() > 1;
  if (format == OutputFormat::kJson) {
    nlohmann::json doc;
    if (!several) {
      doc = sim::ToJson(runs.front());
    } else {
      doc["runs"] = nlohmann::json::array();
      for (const sim::ReplayResult& r : runs) doc["runs"].push_back(sim::ToJson(r));
      doc["summary"] = nlohmann::json::array();
      for (const sim::PolicySummary& s : sim::Summarise(runs)) {
        doc["summary"].push_back(sim::ToJson(s));
      }
    }
    out << doc.dump() << "\n";
    return 0;
  }
  if (mode == sim::ReplayMode::kTime) {
    WriteTimeTable(runs, out);
  } else {
    WriteSnapshotTable(runs, out);
  }
  if (several) {
    out << "\n";
    WriteSummaryTable(sim::Summarise(runs), out);
  }
  return 0;
}

int SimCommand::RunScenario(OutputFormat format, std::ostream& out, std::ostream& err) const {
  absl::StatusOr<std::string> text = ReadTextFile(scenario_);
  if (!text.ok()) return ReportError(text.status(), err);
  absl::StatusOr<sim::Scenario> scenario = ParseScenario(scenario_, *text);
  if (!scenario.ok()) return ReportError(scenario.status(), err);
  // The control plane logs what a server would (each reclaim, each archive batch); a scenario
  // reports them in its figures instead.
  spdlog::set_level(spdlog::level::warn);
  absl::StatusOr<sim::ScenarioReport> report = sim::RunScenario(*scenario);
  if (!report.ok()) return ReportError(report.status(), err);
  if (format == OutputFormat::kJson) {
    out << sim::ToJson(*report).dump() << "\n";
    return 0;
  }
  out << absl::StrFormat(
      "scenario %s: %d cycles, %d submitted, %d finished\n"
      "utilisation %.1f%%, max deviation from fair share %.1f%% (GPU-hours %.1f%%)\n"
      "reclaims %d, preemptions %d, max eviction ratio %.2f, max owner wait %d cycles, "
      "%.0f GPU-seconds lost\n\n",
      report->name, report->cycles, report->submitted, report->finished,
      100 * report->mean_utilisation, 100 * report->max_deviation,
      100 * report->max_gpu_hours_deviation, report->reclaims, report->preemptions,
      report->max_eviction_ratio, report->max_owner_wait_cycles, report->gpu_seconds_lost);
  Table table({"TENANT", "WEIGHT", "FAIR-SHARE", "MEAN-SHARE", "GPU-HOURS", "SUBMITTED", "FINISHED",
               "MAX-WAIT", "NEVER-PLACED"});
  for (const sim::TenantReport& t : report->tenants) {
    table.AddRow({t.name, absl::StrCat(t.weight), absl::StrFormat("%.1f%%", 100 * t.fair_share),
                  absl::StrFormat("%.1f%%", 100 * t.mean_share),
                  absl::StrFormat("%.1f", t.gpu_hours), absl::StrCat(t.submitted),
                  absl::StrCat(t.finished), absl::StrCat(t.max_wait_cycles, " cycles"),
                  absl::StrCat(t.never_placed)});
  }
  table.Render(out);
  return 0;
}

}  // namespace gpufed::cli
