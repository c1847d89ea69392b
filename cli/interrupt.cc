#include "cli/interrupt.h"

#include <utility>

namespace gpufed::cli {

Interrupt::Handler::Handler(Interrupt* interrupt, std::function<void()> fn)
    : interrupt_(interrupt) {
  if (interrupt_ == nullptr) return;
  absl::MutexLock lock(&interrupt_->mu_);
  if (interrupt_->triggered_) fn();
  interrupt_->handler_ = std::move(fn);
}

Interrupt::Handler::~Handler() {
  if (interrupt_ == nullptr) return;
  absl::MutexLock lock(&interrupt_->mu_);
  interrupt_->handler_ = nullptr;
}

bool Interrupt::Trigger() {
  absl::MutexLock lock(&mu_);
  const bool first = !triggered_;
  triggered_ = true;
  if (!first || !handler_) return false;
  handler_();
  return true;
}

bool Interrupt::triggered() const {
  absl::MutexLock lock(&mu_);
  return triggered_;
}

}  // namespace gpufed::cli
