#ifndef GPUFED_CLI_INTERRUPT_H_
#define GPUFED_CLI_INTERRUPT_H_

// Lets a long-running command (watch) end cleanly when the user presses Ctrl-C.
//
// main() blocks SIGINT/SIGTERM and waits for them on a thread of its own, which calls
// Trigger(). A command that can stop cleanly installs a handler for its duration (Handler);
// the handler must be quick and non-blocking (e.g. grpc::ClientContext::TryCancel). When no
// handler is installed, or on a second Ctrl-C, Trigger() returns false and main() exits at
// once, as an interrupted program normally does.
//
// Thread safety: all members may be called from any thread. A handler runs under the internal
// lock, so once ~Handler returns the handler is not running and never will.

#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpufed::cli {

class Interrupt {
 public:
  Interrupt() = default;
  Interrupt(const Interrupt&) = delete;
  Interrupt& operator=(const Interrupt&) = delete;

  // Installs `fn` until destroyed. If the interrupt already fired, `fn` runs at once.
  // At most one handler is installed at a time (the newest replaces any other).
  class Handler {
   public:
    Handler(Interrupt* interrupt, std::function<void()> fn);
    ~Handler();
    Handler(const Handler&) = delete;
    Handler& operator=(const Handler&) = delete;

   private:
    Interrupt* interrupt_;  // May be null: then this does nothing.
  };

  // Records the interrupt and runs the installed handler. Returns true when a handler ran for
  // the first interrupt; false when the caller should terminate the process instead.
  bool Trigger();

  // Whether Trigger() was called.
  [[nodiscard]] bool triggered() const;

 private:
  mutable absl::Mutex mu_;
  bool triggered_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> handler_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_INTERRUPT_H_
