#include "bench/report_bench.h"

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "federation/usage_report.h"
#include "nlohmann/json.hpp"
#include "pqxx/pqxx"
#include "storage/pg_store.h"
#include "tests/support/postgres_harness.h"

namespace gpufed::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The synthetic history: run w starts at a pseudo-random hour of the window and minute of that
// hour, holds g GPUs (1..8), a MIG instance or a share, for 1..48 hours (cut at the window's
// end), one record per GPU per whole hour it touches, as the meter writes them.
constexpr const char* kFill = R"sql(
WITH runs AS (
  SELECT w,
         from_epoch_us($1) + ((hashint4(w * 7 + $6) & 2147483647) % ($2 * 24)) * interval '1 hour'
           + ((hashint4(w * 11 + $6) & 2147483647) % 60) * interval '1 minute' AS started,
         1 + (hashint4(w * 13 + $6) & 2147483647) % 48 AS hours,
         1 + (hashint4(w * 17 + $6) & 2147483647) % 8 AS gpus,
         (hashint4(w * 19 + $6) & 2147483647) % 10 AS kind,
         (hashint4(w * 23 + $6) & 2147483647) % $3 AS tenant,
         (hashint4(w * 29 + $6) & 2147483647) % $4 AS cluster
  FROM generate_series(1, $5) AS w),
spans AS (
  SELECT r.*, h,
         greatest(r.started, date_trunc('hour', r.started) + h * interval '1 hour') AS s_from,
         least(r.started + r.hours * interval '1 hour',
               date_trunc('hour', r.started) + (h + 1) * interval '1 hour',
               from_epoch_us($1) + $2 * interval '1 day') AS s_to
  FROM runs r, generate_series(0, r.hours) AS h)
INSERT INTO usage_records (workload_id, attempt, replica, tenant, project, workload_class, cluster,
  node, gpu_uuid, gpu_model, mig_profile, gpu_milli, capacity, started_at, ended_at, fraction_num,
  fraction_den, price_micros_per_hour, profile_priced, cost_micros, gpu_line_cost_micros)
SELECT s.w, 1, 0, 'tenant-' || s.tenant, 'project-' || (s.w % 3), 
       (ARRAY['training', 'inference', 'batch', 'interactive'])[1 + s.w % 4],
       'cluster-' || s.cluster, 'node-' || (s.w % 16), 'GPU-' || s.w || '-' || g,
       (ARRAY['H100-80GB', 'A100-80GB', 'L4'])[1 + s.cluster % 3],
       CASE WHEN s.kind = 0 THEN '1g.10gb' ELSE '' END,
       CASE WHEN s.kind = 1 THEN 250 ELSE 0 END,
       (ARRAY['on-demand', 'spot', 'committed'])[1 + s.w % 3],
       s.s_from, s.s_to,
       CASE WHEN s.kind = 0 THEN 1 WHEN s.kind = 1 THEN 250 ELSE 1 END,
       CASE WHEN s.kind = 0 THEN 7 WHEN s.kind = 1 THEN 1000 ELSE 1 END,
       4000000, false, c.cost, c.cost
FROM spans s, generate_series(1, CASE WHEN s.kind <= 1 THEN 1 ELSE s.gpus END) AS g,
  LATERAL (SELECT (4000000 * extract(epoch FROM s.s_to - s.s_from) / 3600
    * CASE WHEN s.kind = 0 THEN 1.0 / 7 WHEN s.kind = 1 THEN 0.25 ELSE 1 END)::bigint AS cost) c
WHERE s.s_to > s.s_from
)sql";

// The rollup the insert path keeps (storage/pg_store.cc, insert_usage_records), built here in
// one pass over the records the fill wrote.
constexpr const char* kRollup = R"sql(
INSERT INTO usage_daily (day, tenant, project, cluster, gpu_model, mig_profile, workload_class,
  capacity, gpu_us, unpriced_gpu_us, cost_micros, records, gpu_line_cost_micros)
SELECT date_trunc('day', started_at, 'UTC'), tenant, project, cluster, gpu_model, mig_profile,
  workload_class, capacity, sum(g), sum(CASE WHEN price_micros_per_hour IS NULL THEN g ELSE 0 END),
  sum(cost_micros), count(*), sum(gpu_line_cost_micros)
FROM (SELECT *, round(fraction_num::numeric * (epoch_us(ended_at) - epoch_us(started_at))
                      / fraction_den) AS g FROM usage_records) r
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
)sql";

// Idle guarantees ($1 the window's start in microseconds, $2 days, $3 tenants): every tenant's own
// and its three projects' guarantees on three resources, every day, half of each idle.
constexpr const char* kFillGuarantees = R"sql(
INSERT INTO guarantee_daily (day, tenant, project, resource, reserved_unit_us, idle_unit_us)
SELECT from_epoch_us($1) + d * interval '1 day', 'tenant-' || t,
       CASE WHEN p = 0 THEN '' ELSE 'project-' || (p - 1) END,
       (ARRAY['gpu', 'H100-80GB', '1g.10gb'])[1 + r],
       int8 '28800000000' * 24, int8 '14400000000' * 24
FROM generate_series(0, $2 - 1) AS d, generate_series(0, $3 - 1) AS t,
     generate_series(0, 3) AS p, generate_series(0, 2) AS r
)sql";

// For comparison: the same day x tenant report summed from the records themselves.
constexpr const char* kFromRecords = R"sql(
SELECT date_trunc('day', started_at, 'UTC'), tenant,
  sum(round(fraction_num::numeric * (epoch_us(ended_at) - epoch_us(started_at)) / fraction_den)),
  sum(cost_micros), count(*)
FROM usage_records WHERE started_at >= from_epoch_us($1) AND started_at < from_epoch_us($2)
GROUP BY 1, 2
)sql";

struct Query {
  std::string name;
  UsageQuery query;
};

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  return v[i];
}

}  // namespace

int RunReportBench(const ReportBenchOptions& options) {
  absl::StatusOr<testing::TestPostgres*> postgres = testing::TestPostgres::Get();
  if (!postgres.ok()) {
    std::cerr << "report bench: " << postgres.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::string> dsn = (*postgres)->CreateDatabase();
  if (!dsn.ok()) {
    std::cerr << "report bench: " << dsn.status() << "\n";
    return 1;
  }
  // A month ending at a UTC midnight.
  const Timestamp to = std::chrono::floor<std::chrono::days>(std::chrono::system_clock::now());
  const Timestamp from = to - std::chrono::hours(24 * options.days);
  const int64_t from_us =
      std::chrono::duration_cast<std::chrono::microseconds>(from.time_since_epoch()).count();
  int64_t records = 0;
  double fill_s = 0;
  {
    pqxx::connection conn(*dsn);
    pqxx::work txn(conn);
    const auto start = Clock::now();
    pqxx::result r =
        txn.exec_params(kFill, from_us, options.days, options.tenants, options.clusters,
                        options.workloads, static_cast<int64_t>(options.seed % 1000000));
    records = static_cast<int64_t>(r.affected_rows());
    txn.exec0(kRollup);
    txn.exec0("ANALYZE usage_records");
    txn.exec0("ANALYZE usage_daily");
    txn.commit();
    fill_s = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::cerr << "report bench: " << records << " usage records of " << options.workloads
            << " workloads over " << options.days << " days written in " << fill_s << " s\n";

  absl::StatusOr<std::unique_ptr<storage::PgStore>> store = storage::PgStore::Create(*dsn);
  if (!store.ok()) {
    std::cerr << "report bench: " << store.status() << "\n";
    return 1;
  }
  auto q = [&](ReportPeriod period, std::vector<ReportDimension> by, std::string tenant = "") {
    UsageQuery query;
    query.from = from;
    query.to = to;
    query.period = period;
    query.group_by = std::move(by);
    query.tenant = std::move(tenant);
    return query;
  };
  using D = ReportDimension;
  const std::vector<Query> queries = {
      {"whole, no grouping", q(ReportPeriod::kWhole, {})},
      {"day x tenant", q(ReportPeriod::kDay, {D::kTenant})},
      {"day x tenant x gpu_model", q(ReportPeriod::kDay, {D::kTenant, D::kGpuModel})},
      {"week x cluster x mig_profile", q(ReportPeriod::kWeek, {D::kCluster, D::kMigProfile})},
      {"month x all seven",
       q(ReportPeriod::kMonth, {D::kTenant, D::kProject, D::kCluster, D::kGpuModel, D::kMigProfile,
                                D::kWorkloadClass, D::kCapacity})},
      {"day x project, one tenant", q(ReportPeriod::kDay, {D::kProject}, "tenant-7")},
  };
  nlohmann::json out = {{"bench", "report"},
                        {"workloads", options.workloads},
                        {"days", options.days},
                        {"records", records},
                        {"fill_seconds", fill_s}};
  nlohmann::json results = nlohmann::json::array();
  double worst = 0;
  for (const Query& query : queries) {
    std::vector<double> seconds;
    size_t lines = 0;
    for (int i = 0; i < options.repeats; ++i) {
      const auto start = Clock::now();
      absl::StatusOr<std::vector<UsageLine>> r = (*store)->ReportUsage(query.query);
      seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      if (!r.ok()) {
        std::cerr << "report bench: " << query.name << ": " << r.status() << "\n";
        return 1;
      }
      lines = r->size();
    }
    const double p50 = Percentile(seconds, 0.5);
    const double max = *std::max_element(seconds.begin(), seconds.end());
    worst = std::max(worst, max);
    std::cerr << "report bench: " << query.name << ": " << lines << " lines, median " << p50
              << " s, max " << max << " s\n";
    results.push_back({{"query", query.name}, {"lines", lines}, {"median_s", p50}, {"max_s", max}});
  }
  // What GetUsageReport adds to the lines (the idle guarantees: per day, tenant, project and
  // resource, here every tenant's and project's guarantee on three resources every day) and
  // what GetCostAllocation reads (the held costs by cluster, tenant, model and capacity).
  {
    pqxx::connection conn(*dsn);
    pqxx::work txn(conn);
    txn.exec_params(kFillGuarantees, from_us, options.days, options.tenants);
    txn.exec0("ANALYZE guarantee_daily");
    txn.commit();
  }
  auto timed = [&](const std::string& name, auto call) -> bool {
    std::vector<double> seconds;
    size_t lines = 0;
    for (int i = 0; i < options.repeats; ++i) {
      const auto start = Clock::now();
      auto r = call();
      seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      if (!r.ok()) {
        std::cerr << "report bench: " << name << ": " << r.status() << "\n";
        return false;
      }
      lines = r->size();
    }
    const double p50 = Percentile(seconds, 0.5);
    const double max = *std::max_element(seconds.begin(), seconds.end());
    worst = std::max(worst, max);
    std::cerr << "report bench: " << name << ": " << lines << " lines, median " << p50 << " s, max "
              << max << " s\n";
    results.push_back({{"query", name}, {"lines", lines}, {"median_s", p50}, {"max_s", max}});
    return true;
  };
  if (!timed("idle guarantees, day",
             [&] { return (*store)->ReportGuarantees(q(ReportPeriod::kDay, {})); }) ||
      !timed("held costs (cost allocation)",
             [&] { return (*store)->ReportHeldCosts(from, to, ""); })) {
    return 1;
  }
  // The same day x tenant report, summed from the records (what the rollup saves).
  double raw_s = 0;
  size_t rollup_rows = 0;
  {
    pqxx::connection conn(*dsn);
    pqxx::nontransaction txn(conn);
    rollup_rows = txn.exec1("SELECT count(*) FROM usage_daily")[0].as<size_t>();
    const int64_t to_us =
        std::chrono::duration_cast<std::chrono::microseconds>(to.time_since_epoch()).count();
    const auto start = Clock::now();
    txn.exec_params(kFromRecords, from_us, to_us);
    raw_s = std::chrono::duration<double>(Clock::now() - start).count();
  }
  std::cerr << "report bench: " << rollup_rows << " rollup rows; day x tenant summed from the "
            << "records instead: " << raw_s << " s\n";
  out["rollup_rows"] = rollup_rows;
  out["from_records_s"] = raw_s;
  out["queries"] = results;
  out["worst_s"] = worst;
  store->reset();
  (void)(*postgres)->DropDatabase(*dsn);
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace gpufed::bench
