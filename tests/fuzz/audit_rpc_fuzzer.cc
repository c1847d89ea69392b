// gpufed.v1.AuditService: every RPC's request as the handler (api/audit_service.cc) and the use
// case before its store call (federation/audit_use_cases.cc) convert and check it.

#include <cstddef>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "api/convert.h"
#include "federation/audit.h"
#include "federation/validation.h"
#include "gpufed/v1/audit_service.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_harness.h"

namespace gpufed::fuzz {
namespace {

const RpcTable& Table() {
  static const RpcTable* table = [] {
    std::vector<Rpc> rpcs;
    rpcs.push_back(Unary<v1::ListAuditEventsRequest>(
        "ListAuditEvents", [](const v1::ListAuditEventsRequest& r) {
          if (!r.tenant().empty() && !OkOrInvalid(ValidateName("tenant", r.tenant()), "tenant")) {
            return;
          }
          // Times are checked as the handler checks them; the page token is a positive id or
          // refused.
          if (r.has_since()) (void)api::CheckedFromProto("since", r.since());
          if (r.has_until()) (void)api::CheckedFromProto("until", r.until());
          int64_t before = 0;
          if (!r.page_token().empty()) (void)absl::SimpleAtoi(r.page_token(), &before);
        }));
    rpcs.push_back(Unary<v1::VerifyAuditRequest>("VerifyAudit", [](const auto&) {}));
    return new RpcTable("gpufed.v1.AuditService", std::move(rpcs));
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
