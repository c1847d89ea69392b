#ifndef GPUFED_TESTS_CLI_SYNC_STREAM_H_
#define GPUFED_TESTS_CLI_SYNC_STREAM_H_

// An ostream whose contents another thread may read while it is written (a watch running on
// one thread, the test polling its output on another).

#include <ostream>
#include <streambuf>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gpufed::cli::testing {

class SyncStringBuf : public std::streambuf {
 public:
  std::string contents() const {
    absl::MutexLock lock(&mu_);
    return text_;
  }

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      absl::MutexLock lock(&mu_);
      text_.push_back(static_cast<char>(c));
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    absl::MutexLock lock(&mu_);
    text_.append(s, static_cast<size_t>(n));
    return n;
  }

 private:
  mutable absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
};

class SyncStream : public std::ostream {
 public:
  SyncStream() : std::ostream(&buf_) {}
  [[nodiscard]] std::string contents() const { return buf_.contents(); }

 private:
  SyncStringBuf buf_;
};

}  // namespace gpufed::cli::testing

#endif  // GPUFED_TESTS_CLI_SYNC_STREAM_H_
