#ifndef GPUFED_CLI_SIM_COMMAND_H_
#define GPUFED_CLI_SIM_COMMAND_H_

// `gpufedctl sim replay`: replays an openb trace locally on the placement engine (sim/replay.h,
// docs/simulator.md). `gpufedctl sim run SCENARIO.yaml`: runs a quota scenario on the live
// scheduling code (sim/scenario.h, docs/scenarios.md). Neither needs a server or reads the
// client configuration.
//
//   gpufedctl sim replay --nodes NODES.csv --pods PODS.csv [--policy P|all] [--inflation 1.3]
//                        [--seed S | --seeds 1-10] [--mode snapshot|time] [-o json]
//
// Output: a table, or with -o json one object: the run (sim/report.h) when there is one run;
// {"runs": [...], "summary": [...]} (the mean per policy) when --policy all or --seeds asks for
// several. While it runs, a progress bar goes to stderr if stdout is a terminal.
//
// Thread safety: one SimCommand per RunCli call.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/output.h"

namespace gpufed::cli {

// "3", "1-10", "1,2,5-7" -> the seeds in order. INVALID_ARGUMENT naming --seeds otherwise.
absl::StatusOr<std::vector<uint64_t>> ParseSeedList(absl::string_view text);

class SimCommand {
 public:
  // Adds the `sim` command group to `app`. `app` must outlive this object.
  explicit SimCommand(CLI::App& app);
  // The parser holds pointers to the members.
  SimCommand(const SimCommand&) = delete;
  SimCommand& operator=(const SimCommand&) = delete;

  // Whether the command line chose a `sim` command.
  [[nodiscard]] bool parsed() const;

  // Runs the chosen command; returns the exit status (0, or 1 after "error: ..." on `err`).
  // `progress_to_terminal`: draw a progress bar on `err`.
  int Run(OutputFormat format, std::ostream& out, std::ostream& err,
          bool progress_to_terminal) const;
  // `sim run`: -o json prints the report as one JSON object on the last line.
  int RunScenario(OutputFormat format, std::ostream& out, std::ostream& err) const;

  // Whether a progress bar belongs on stderr: stdout (fd 1) and stderr are terminals and `out`
  // and `err` are the process's own streams.
  static bool ProgressWanted(const std::ostream& out, const std::ostream& err);

 private:
  CLI::App* sim_ = nullptr;
  CLI::App* replay_ = nullptr;
  CLI::App* run_ = nullptr;
  std::string scenario_;
  CLI::Option* seed_opt_ = nullptr;
  CLI::Option* seeds_opt_ = nullptr;
  CLI::Option* inflation_opt_ = nullptr;
  CLI::Option* compress_opt_ = nullptr;
  std::string nodes_;
  std::string pods_;
  std::string policy_ = "gpufed";
  double inflation_ = 1.3;
  double compress_ = 1;
  uint64_t seed_ = 1;
  std::string seeds_;
  std::string mode_ = "snapshot";
  std::string tie_order_ = "seeded";
};

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_SIM_COMMAND_H_
