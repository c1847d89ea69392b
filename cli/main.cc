// gpufedctl: the command line for gpufed (docs/cli.md).

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <thread>

#include "cli/app.h"
#include "cli/interrupt.h"

int main(int argc, char** argv) {
  // Ctrl-C and SIGTERM are taken on a thread of our own, so a watch can cancel its stream and
  // exit normally instead of being killed mid-line. The mask must be set before gRPC starts
  // threads, which inherit it.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Never destroyed: the signal thread may still use it while the process exits.
  auto* interrupt = new gpufed::cli::Interrupt();
  std::thread([signals, interrupt] {
    while (true) {
      int signal_number = 0;
      if (sigwait(&signals, &signal_number) != 0) continue;
      if (interrupt->Trigger()) continue;
      // No command is able to stop cleanly (or this is the second Ctrl-C): die of the signal,
      // as an interrupted program does, so a calling shell sees it (and stops its loop).
      std::signal(signal_number, SIG_DFL);
      sigset_t just_this;
      sigemptyset(&just_this);
      sigaddset(&just_this, signal_number);
      pthread_sigmask(SIG_UNBLOCK, &just_this, nullptr);
      raise(signal_number);
      _exit(128 + signal_number);
    }
  }).detach();

  gpufed::cli::CliIo io;
  io.interrupt = interrupt;
  return gpufed::cli::RunCli(argc, argv, io);
}
