#include "bench/resuming_watch.h"

#include <iostream>
#include <utility>

#include "grpcpp/client_context.h"

namespace gpufed::bench {

ResumingWatch::ResumingWatch(const std::shared_ptr<grpc::Channel>& channel, std::string token,
                             OnEvent on_event, std::string label)
    : token_(std::move(token)),
      on_event_(std::move(on_event)),
      label_(std::move(label)),
      stub_(v1::WorkloadService::NewStub(channel)),
      thread_([this] { Loop(); }) {}

void ResumingWatch::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

void ResumingWatch::Loop() {
  google::protobuf::Timestamp resume;
  bool have_resume = false;
  for (;;) {
    auto ctx = std::make_shared<grpc::ClientContext>();
    ctx->AddMetadata("authorization", "Bearer " + token_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      ctx_ = ctx;
    }
    v1::WatchRequest req;
    if (have_resume) *req.mutable_resume_after() = resume;
    auto reader = stub_->Watch(ctx.get(), req);
    v1::WorkloadEvent e;
    while (reader->Read(&e)) {
      events_++;
      if (e.has_resume_after()) {
        resume = e.resume_after();
        have_resume = true;
      }
      on_event_(e);
    }
    const grpc::Status s = reader->Finish();
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    // More changed since the resume point than one catch-up takes: live events from here on
    // (what happened meanwhile is not seen; the caller's count may stay short).
    if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION) have_resume = false;
    restarts_++;
    if (!label_.empty()) {
      std::cerr << label_ << ": watch ended (" << s.error_code() << " " << s.error_message()
                << "); watching again\n";
    }
  }
}

}  // namespace gpufed::bench
