// The control plane's Prometheus metrics (api/metrics.h): the quota, fair-share and pool gauges
// carry what the scheduler reports, in GPUs, and a row no longer reported leaves its series.

#include "api/metrics.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "prometheus/registry.h"

namespace gpufed::api {
namespace {

// The value of gauge `name` with these tenant and project labels; nullopt if there is none.
std::optional<double> Gauge(prometheus::Registry& registry, const std::string& name,
                            const std::string& tenant, const std::string& project) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      std::string t;
      std::string p;
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == "tenant") t = l.value;
        if (l.name == "project") p = l.value;
      }
      if (t == tenant && p == project) return m.gauge.value;
    }
  }
  return std::nullopt;
}

FairShare Share(const std::string& tenant, const std::string& project, double share,
                int64_t held_milli, double decayed) {
  FairShare f;
  f.tenant = tenant;
  f.project = project;
  f.share = share;
  f.held_milli = held_milli;
  f.decayed_gpu_hours = decayed;
  return f;
}

TEST(ControlMetricsTest, FairSharesAreGaugesPerTenantAndProjectThatLeaveWhenInactive) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  PrometheusControlMetrics control(metrics);
  control.FairShares({Share("acme", "", 0.25, 3500, 12.5), Share("acme", "p", 0.25, 3500, 12.5),
                      Share("beta", "", 0.75, 8000, 40)});
  EXPECT_EQ(Gauge(registry, "gpufed_fair_share", "acme", "-"), 0.25);
  EXPECT_EQ(Gauge(registry, "gpufed_fair_share", "beta", "-"), 0.75);
  EXPECT_EQ(Gauge(registry, "gpufed_fair_share_held_gpus", "acme", "p"), 3.5);
  EXPECT_EQ(Gauge(registry, "gpufed_fair_share_decayed_gpu_seconds", "beta", "-"), 40 * 3600);

  control.FairShares({Share("beta", "", 1.0, 8000, 41)});
  EXPECT_EQ(Gauge(registry, "gpufed_fair_share", "beta", "-"), 1.0);
  EXPECT_EQ(Gauge(registry, "gpufed_fair_share", "acme", "-"), std::nullopt);
  EXPECT_EQ(Gauge(registry, "gpufed_fair_share_held_gpus", "acme", "p"), std::nullopt);
}

TEST(ControlMetricsTest, QuotasAreGaugesInGpusThatLeaveWhenDeleted) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  PrometheusControlMetrics control(metrics);
  QuotaUsage u;
  u.key = QuotaKey{"acme", "", "gpu"};
  Quota q;
  q.key = u.key;
  q.guaranteed_milli = 8000;
  q.limit_milli = 12000;
  u.quota = q;
  u.used_milli = 10500;
  u.borrowed_milli = 2500;
  control.Quotas({u});
  EXPECT_EQ(Gauge(registry, "gpufed_quota_guaranteed", "acme", "-"), 8);
  EXPECT_EQ(Gauge(registry, "gpufed_quota_limit", "acme", "-"), 12);
  EXPECT_EQ(Gauge(registry, "gpufed_quota_used", "acme", "-"), 10.5);
  EXPECT_EQ(Gauge(registry, "gpufed_quota_borrowed", "acme", "-"), 2.5);
  control.Quotas({});
  EXPECT_EQ(Gauge(registry, "gpufed_quota_used", "acme", "-"), std::nullopt);
}

// The value of gauge `name` whose label `label` is `value`; nullopt if there is none.
std::optional<double> GaugeWith(prometheus::Registry& registry, const std::string& name,
                                const std::string& label, const std::string& value) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& m : family.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (l.name == label && l.value == value) return m.gauge.value;
      }
    }
  }
  return std::nullopt;
}

TEST(ControlMetricsTest, PoolIsGaugesPerClusterAndModelThatLeaveWhenNoLongerReported) {
  prometheus::Registry registry;
  Metrics metrics(registry);
  PrometheusControlMetrics control(metrics);
  PoolReport report;
  PoolModelReport& a = report.models.emplace_back();
  a.cluster = "a";
  a.model = "L4";
  a.gpus = ModelCount{8, 3, 5};
  a.fragmented_milli = 500;
  a.free_milli = 5500;
  PoolModelReport& b = report.models.emplace_back();
  b.cluster = "b";
  b.model = "H100-80GB";
  b.gpus = ModelCount{2, 0, 1};
  report.pending = {{ReasonCode::kNone, 1}, {ReasonCode::kGpusBusy, 4}};
  control.PoolState(report);
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_capacity_gpus", "cluster", "a"), 8);
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_allocated_gpus", "cluster", "a"), 3);
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_free_gpus", "cluster", "a"), 5);
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_fragmented_gpus", "cluster", "a"), 0.5);
  EXPECT_DOUBLE_EQ(*GaugeWith(registry, "gpufed_pool_fragmentation_ratio", "cluster", "a"),
                   500.0 / 5500);
  // Nothing free: no fragmentation rate to speak of.
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_fragmentation_ratio", "cluster", "b"), 0);
  EXPECT_EQ(GaugeWith(registry, "gpufed_scheduler_pending_workloads", "reason", "GpusBusy"), 4);
  EXPECT_EQ(GaugeWith(registry, "gpufed_scheduler_pending_workloads", "reason", "None"), 1);

  report.models.erase(report.models.begin());
  report.pending = {{ReasonCode::kGpusBusy, 2}};
  control.PoolState(report);
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_capacity_gpus", "cluster", "a"), std::nullopt);
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_fragmented_gpus", "cluster", "a"), std::nullopt);
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_capacity_gpus", "cluster", "b"), 2);
  EXPECT_EQ(GaugeWith(registry, "gpufed_scheduler_pending_workloads", "reason", "GpusBusy"), 2);
  EXPECT_EQ(GaugeWith(registry, "gpufed_scheduler_pending_workloads", "reason", "None"),
            std::nullopt);

  // Standing by: the active scheduler elsewhere reports the pool.
  control.PoolState(PoolReport{});
  EXPECT_EQ(GaugeWith(registry, "gpufed_pool_capacity_gpus", "cluster", "b"), std::nullopt);
  EXPECT_EQ(GaugeWith(registry, "gpufed_scheduler_pending_workloads", "reason", "GpusBusy"),
            std::nullopt);
}

}  // namespace
}  // namespace gpufed::api
