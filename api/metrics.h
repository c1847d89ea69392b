#ifndef GPUFED_API_METRICS_H_
#define GPUFED_API_METRICS_H_

#include <memory>

#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gpufed::api {

// The Prometheus series the API layer and the scheduler loop update. Created once per server;
// the prometheus-cpp metric objects are thread-safe.
struct Metrics {
  explicit Metrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& submissions;
  prometheus::Counter& submissions_created;   // new workloads committed
  prometheus::Counter& submissions_replayed;  // idempotent replays
  prometheus::Counter& submissions_rejected;  // any error
  prometheus::Family<prometheus::Gauge>& workloads_by_state;
  prometheus::Histogram& scheduler_cycle_seconds;
  prometheus::Counter& scheduler_placements;
  prometheus::Counter& mig_repartitions;  // MIG layout changes decided (partitioning authority)
  prometheus::Gauge& scheduler_pending;
  prometheus::Gauge& scheduler_leader;
  prometheus::Gauge& agents_connected;
  prometheus::Counter& agent_status_updates;
};

}  // namespace gpufed::api

#endif  // GPUFED_API_METRICS_H_
