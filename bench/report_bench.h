#ifndef GPUFED_BENCH_REPORT_BENCH_H_
#define GPUFED_BENCH_REPORT_BENCH_H_

// `gpufed-bench report`: usage reports over a month of history (issue #13, point 5: a 30-day
// report over 100,000 workloads answers in under 1 s). A fresh PostgreSQL database from the
// project's migrations (the test harness's embedded server, fsync off), filled with the usage
// records of `workloads` runs spread over `days` days by one SQL statement (tenants, projects,
// clusters, GPU models, MIG profiles and shares, 1..8 GPUs, runs of 1..48 hours cut at whole
// hours as the meter cuts them), then each report query timed `repeats` times through
// PgStore::ReportUsage, the call the ReportService makes.

#include <cstdint>

namespace gpufed::bench {

struct ReportBenchOptions {
  int workloads = 100000;
  int days = 30;
  int tenants = 50;
  int clusters = 20;
  int repeats = 5;
  uint64_t seed = 1;
};

// Progress on stderr, one JSON object as the last line of stdout. Returns the exit code.
int RunReportBench(const ReportBenchOptions& options);

}  // namespace gpufed::bench

#endif  // GPUFED_BENCH_REPORT_BENCH_H_
