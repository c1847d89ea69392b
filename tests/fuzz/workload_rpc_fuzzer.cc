// gpufed.v1.WorkloadService: every RPC's request as the handler (api/workload_service.cc) and
// the use case before its store call (federation/control_plane.cc) convert and check it.

#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "api/convert.h"
#include "federation/validation.h"
#include "federation/watch_filter.h"
#include "gpufed/v1/workload_service.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_checks.h"
#include "tests/fuzz/rpc_harness.h"

namespace gpufed::fuzz {
namespace {

// Get, Explain, Cancel and Watch name a workload by its id: an accepted id is positive and
// spelled canonically, so it prints back as it came.
void CheckId(absl::string_view field, const std::string& text) {
  absl::StatusOr<WorkloadId> id = api::WorkloadIdFromProto(field, text);
  if (!OkOrInvalid(id.status(), "WorkloadIdFromProto")) return;
  Check(*id > 0, "WorkloadIdFromProto accepted a non-positive id");
  Check(absl::StrCat(*id) == text, "WorkloadIdFromProto accepted a non-canonical id: " + text);
}

const RpcTable& Table() {
  static const RpcTable* table = [] {
    std::vector<Rpc> rpcs;
    rpcs.push_back(Unary<v1::SubmitRequest>("Submit", [](const v1::SubmitRequest& r) {
      if (r.has_spec()) CheckSpec(r.spec());
    }));
    rpcs.push_back(Unary<v1::SubmitRequest>("WhatIf", [](const v1::SubmitRequest& r) {
      if (r.has_spec()) CheckSpec(r.spec());
    }));
    rpcs.push_back(Unary<v1::GetWorkloadRequest>(
        "Get", [](const v1::GetWorkloadRequest& r) { CheckId("id", r.id()); }));
    rpcs.push_back(Unary<v1::ExplainRequest>(
        "Explain", [](const v1::ExplainRequest& r) { CheckId("id", r.id()); }));
    rpcs.push_back(Unary<v1::CancelRequest>("Cancel", [](const v1::CancelRequest& r) {
      CheckId("id", r.id());
      OkOrInvalid(ValidateText("reason", r.reason(), kMaxReasonBytes), "reason");
    }));
    rpcs.push_back(Unary<v1::ListWorkloadsRequest>("List", [](const v1::ListWorkloadsRequest& r) {
      absl::StatusOr<ListFilter> filter = api::ListFilterFromProto(r);
      if (!OkOrInvalid(filter.status(), "ListFilterFromProto")) return;
      Check(filter->page_size >= 1 && filter->page_size <= 1000, "List: page size out of range");
    }));
    rpcs.push_back(Unary<v1::WatchRequest>("Watch", [](const v1::WatchRequest& r) {
      if (!r.workload_id().empty()) CheckId("workload_id", r.workload_id());
      // WatchReactor::ParseResume's bounds (a private step of the reactor, so restated here),
      // then the conversion it guards.
      if (!r.has_resume_after()) return;
      const google::protobuf::Timestamp& t = r.resume_after();
      if (t.seconds() < 0 || t.seconds() > 9223372035 || t.nanos() < 0 || t.nanos() > 999999999) {
        return;
      }
      (void)WatchResumePoint(api::FromProto(t));
    }));
    return new RpcTable("gpufed.v1.WorkloadService", std::move(rpcs));
  }();
  return *table;
}

}  // namespace
}  // namespace gpufed::fuzz

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  gpufed::fuzz::Table();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gpufed::fuzz::Table().Run(data, size);
  return 0;
}
