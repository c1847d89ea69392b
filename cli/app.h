#ifndef GPUFED_CLI_APP_H_
#define GPUFED_CLI_APP_H_

// gpufedctl's command line: flags (CLI11) -> configuration (config.h) -> a command
// (commands.h). Kept out of main() so tests can run the whole program in-process against a
// server on a real channel and check what it prints and the exit status.
//
// Exit status: 0 on success; 1 with "error: <CODE>: <message>" on the error stream when a
// command, the configuration or an input file fails; 2 for usage errors (unknown flags, bad
// flag values), with CLI11's message.
//
// Thread safety: RunCli may run on several threads at once when each has its own CliIo.

#include <functional>
#include <iostream>
#include <istream>
#include <ostream>

#include "absl/time/time.h"
#include "cli/commands.h"
#include "cli/config.h"
#include "cli/interrupt.h"

namespace gpufed::cli {

struct CliIo {
  std::ostream* out = &std::cout;
  std::ostream* err = &std::cerr;
  // Read by `submit -f -`.
  std::istream* in = &std::cin;
  EnvLookup env = ProcessEnv();
  // Optional; see interrupt.h.
  Interrupt* interrupt = nullptr;
  std::function<absl::Time()> now = [] { return absl::Now(); };
  RetryPolicy retry;
};

// Runs gpufedctl with `argv` (argv[0] is the program name) and returns the exit status.
int RunCli(int argc, const char* const* argv, const CliIo& io);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_APP_H_
