// A Watch of every workload a token may see, kept open for a benchmark's whole run
// (bench/resuming_watch.h). A reader that falls behind is ended RESOURCE_EXHAUSTED by the server;
// this one watches again from the last event's resume_after, as any client should
// (docs/interfaces.md, "Resuming a Watch"). A catch-up may repeat an event: callers count each
// workload once.

#ifndef GPUFED_BENCH_RESUMING_WATCH_H_
#define GPUFED_BENCH_RESUMING_WATCH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gpufed/v1/workload_service.grpc.pb.h"
#include "grpcpp/channel.h"

namespace gpufed::bench {

class ResumingWatch {
 public:
  // Called on the watch's own thread, once per event received (resync events included).
  using OnEvent = std::function<void(const v1::WorkloadEvent&)>;

  // Starts watching at once. `label`, when not empty, names the bench in a line on stderr each
  // time the stream ends and is opened again.
  ResumingWatch(const std::shared_ptr<grpc::Channel>& channel, std::string token, OnEvent on_event,
                std::string label = "");
  ~ResumingWatch() { Stop(); }
  ResumingWatch(const ResumingWatch&) = delete;
  ResumingWatch& operator=(const ResumingWatch&) = delete;

  // Cancels the stream and joins the thread; no event is delivered after it returns.
  void Stop();

  [[nodiscard]] int64_t events() const { return events_.load(); }
  // How many times the stream ended and was opened again.
  [[nodiscard]] int64_t restarts() const { return restarts_.load(); }

 private:
  void Loop();

  const std::string token_;
  const OnEvent on_event_;
  const std::string label_;
  std::unique_ptr<v1::WorkloadService::Stub> stub_;
  std::mutex mu_;
  std::shared_ptr<grpc::ClientContext> ctx_;  // guarded by mu_
  bool stopping_ = false;                     // guarded by mu_
  std::atomic<int64_t> events_{0};
  std::atomic<int64_t> restarts_{0};
  std::thread thread_;  // last: started once everything above is in place
};

}  // namespace gpufed::bench

#endif  // GPUFED_BENCH_RESUMING_WATCH_H_
