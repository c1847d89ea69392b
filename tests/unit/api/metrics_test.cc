// The control plane's Prometheus metrics (api/metrics.h): the quota and fair-share gauges carry
// what the scheduler reports, in GPUs, and a row no longer reported leaves its series.

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
  EXPECT_EQ(Gauge(registry, "gpufed_fair_share_decayed_gpu_hours", "beta", "-"), 40);

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

}  // namespace
}  // namespace gpufed::api
