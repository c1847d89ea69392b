// gpufed.v1.ReportService: every RPC's request as the handler (api/report_service.cc) and the use
// case before its store call (federation/report_use_cases.cc) convert and check it.

#include <cstddef>
#include <cstdint>

#include "api/convert.h"
#include "federation/cost_allocation.h"
#include "federation/usage_report.h"
#include "federation/validation.h"
#include "gpufed/v1/report_service.pb.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/rpc_harness.h"

namespace gpufed::fuzz {
namespace {

const RpcTable& Table() {
  static const RpcTable* table = [] {
    std::vector<Rpc> rpcs;
    rpcs.push_back(
        Unary<v1::GetUsageReportRequest>("GetUsageReport", [](const v1::GetUsageReportRequest& r) {
          absl::StatusOr<UsageQuery> query = api::UsageQueryFromProto(r);
          if (!OkOrInvalid(query.status(), "request")) return;
          if (!OkOrInvalid(ValidateUsageQuery(*query), "query")) return;
          if (!query->tenant.empty() &&
              !OkOrInvalid(ValidateName("tenant", query->tenant), "tenant")) {
            return;
          }
          if (!query->project.empty() &&
              !OkOrInvalid(ValidateName("project", query->project), "project")) {
            return;
          }
          if (!query->cluster.empty()) {
            (void)OkOrInvalid(ValidateName("cluster", query->cluster), "cluster");
          }
          // What an accepted query's lines look like on the wire: sums of no records.
          (void)api::UsageLineToProto(UsageLine{query->from, {}, 0, 0, 0, 0});
        }));
    rpcs.push_back(Unary<v1::ListWorkloadTelemetryRequest>(
        "ListWorkloadTelemetry", [](const v1::ListWorkloadTelemetryRequest& r) {
          absl::StatusOr<api::TelemetryWindow> window = api::TelemetryWindowFromProto(r);
          if (!OkOrInvalid(window.status(), "request")) return;
          Check(window->to > window->from, "an accepted window ends after it starts");
          Check(window->limit >= 1 && window->limit <= 10000, "an accepted limit is 1..10000");
        }));
    rpcs.push_back(Unary<v1::GetCostAllocationRequest>(
        "GetCostAllocation", [](const v1::GetCostAllocationRequest& r) {
          absl::StatusOr<CostQuery> query = api::CostQueryFromProto(r);
          if (!OkOrInvalid(query.status(), "request")) return;
          UsageQuery window;
          window.from = query->from;
          window.to = query->to;
          if (!OkOrInvalid(ValidateUsageQuery(window), "window")) return;
          if (!query->cluster.empty() &&
              !OkOrInvalid(ValidateName("cluster", query->cluster), "cluster")) {
            return;
          }
          // An accepted query's answer for a cluster nobody used: all of it idle or unallocated.
          CostReport report;
          report.policy = query->policy.value_or(IdlePolicy::kSeparate);
          report.clusters.push_back(ClusterCost{
              query->cluster,
              AllocateCost({{{"H100-80GB", CapacityType::kOnDemand}, 1000}}, {}, report.policy)});
          const v1::GetCostAllocationResponse answer = api::CostAllocationToProto(report);
          const v1::ClusterCostAllocation& c = answer.clusters(0);
          Check(c.idle_micros() + c.unallocated_micros() == c.capacity_cost_micros(),
                "idle and unallocated add up to an unused cluster's capacity");
        }));
    return new RpcTable("gpufed.v1.ReportService", std::move(rpcs));
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
