// gpufed.v1.QuotaService: every RPC's request as the handler (api/quota_service.cc) and the use
// case before its store call (federation/quota_use_cases.cc) convert and check it.

#include <cstddef>
#include <cstdint>

#include "absl/strings/numbers.h"
#include "api/convert.h"
#include "federation/fair_share.h"
#include "federation/preemption.h"
#include "federation/quota.h"
#include "federation/validation.h"
#include "gpufed/v1/quota_service.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_harness.h"

namespace gpufed::fuzz {
namespace {

// MayReadQuotas: every tenant when empty, else a name.
bool CheckTenantFilter(const std::string& tenant) {
  return tenant.empty() || OkOrInvalid(ValidateName("tenant", tenant), "tenant");
}

const RpcTable& Table() {
  static const RpcTable* table = [] {
    std::vector<Rpc> rpcs;
    rpcs.push_back(Unary<v1::SetQuotaRequest>("SetQuota", [](const v1::SetQuotaRequest& r) {
      if (!r.has_quota()) return;
      const Quota quota = api::QuotaFromProto(r.quota());
      if (!OkOrInvalid(ValidateQuota(quota), "ValidateQuota")) return;
      // Stored and answered in the proto form.
      Check(api::QuotaFromProto(api::QuotaToProto(quota)) == quota,
            "QuotaFromProto(QuotaToProto(q)) != q");
    }));
    rpcs.push_back(
        Unary<v1::DeleteQuotaRequest>("DeleteQuota", [](const v1::DeleteQuotaRequest& r) {
          if (!OkOrInvalid(ValidateName("tenant", r.tenant()), "tenant")) return;
          if (!r.project().empty() &&
              !OkOrInvalid(ValidateName("project", r.project()), "project")) {
            return;
          }
          OkOrInvalid(ValidateQuotaResource("resource", r.resource()), "resource");
        }));
    rpcs.push_back(Unary<v1::ListQuotasRequest>(
        "ListQuotas", [](const v1::ListQuotasRequest& r) { CheckTenantFilter(r.tenant()); }));
    rpcs.push_back(Unary<v1::GetQuotaUsageRequest>(
        "GetQuotaUsage", [](const v1::GetQuotaUsageRequest& r) { CheckTenantFilter(r.tenant()); }));
    rpcs.push_back(Unary<v1::ListPreemptionsRequest>(
        "ListPreemptions", [](const v1::ListPreemptionsRequest& r) {
          int64_t before = 0;
          if (!r.page_token().empty() &&
              (!absl::SimpleAtoi(r.page_token(), &before) || before <= 0)) {
            return;  // the handler's INVALID_ARGUMENT
          }
          CheckTenantFilter(r.tenant());
        }));
    rpcs.push_back(
        Unary<v1::SetShareWeightRequest>("SetShareWeight", [](const v1::SetShareWeightRequest& r) {
          const ShareWeight weight = api::ShareWeightFromProto(r.weight());
          if (!OkOrInvalid(ValidateShareWeight(weight), "ValidateShareWeight")) return;
          Check(api::ShareWeightFromProto(api::ShareWeightToProto(weight)) == weight,
                "ShareWeightFromProto(ShareWeightToProto(w)) != w");
        }));
    return new RpcTable("gpufed.v1.QuotaService", std::move(rpcs));
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
