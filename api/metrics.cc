#include "api/metrics.h"

namespace gpufed::api {

Metrics::Metrics(prometheus::Registry& registry)
    : submissions(prometheus::BuildCounter()
                      .Name("gpufed_submissions_total")
                      .Help("Workload submissions by outcome")
                      .Register(registry)),
      submissions_created(submissions.Add({{"outcome", "created"}})),
      submissions_replayed(submissions.Add({{"outcome", "replayed"}})),
      submissions_rejected(submissions.Add({{"outcome", "rejected"}})),
      workloads_by_state(prometheus::BuildGauge()
                             .Name("gpufed_workloads")
                             .Help("Workloads in the store by state")
                             .Register(registry)),
      scheduler_cycle_seconds(
          prometheus::BuildHistogram()
              .Name("gpufed_scheduler_cycle_seconds")
              .Help("Duration of one scheduling cycle, commit included")
              .Register(registry)
              .Add({},
                   prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                           0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5})),
      scheduler_placements(prometheus::BuildCounter()
                               .Name("gpufed_scheduler_placements_total")
                               .Help("Workloads placed by the scheduler")
                               .Register(registry)
                               .Add({})),
      mig_repartitions(prometheus::BuildCounter()
                           .Name("gpufed_mig_repartitions_total")
                           .Help("MIG layout changes decided by the scheduler (partitioning "
                                 "authority); each is logged with its reason")
                           .Register(registry)
                           .Add({})),
      scheduler_pending(prometheus::BuildGauge()
                            .Name("gpufed_scheduler_pending")
                            .Help("Workloads in the scheduler's pending queue")
                            .Register(registry)
                            .Add({})),
      scheduler_leader(prometheus::BuildGauge()
                           .Name("gpufed_scheduler_leader")
                           .Help("1 if this server holds the scheduler lock")
                           .Register(registry)
                           .Add({})),
      agents_connected(prometheus::BuildGauge()
                           .Name("gpufed_agents_connected")
                           .Help("Agent streams connected to this server")
                           .Register(registry)
                           .Add({})),
      agent_status_updates(prometheus::BuildCounter()
                               .Name("gpufed_agent_status_updates_total")
                               .Help("Workload status updates received from agents")
                               .Register(registry)
                               .Add({})),
      clusters_lost(prometheus::BuildCounter()
                        .Name("gpufed_clusters_lost_total")
                        .Help("Clusters declared lost after their agent was silent past the "
                              "heartbeat timeout")
                        .Register(registry)
                        .Add({})),
      lost_workloads(prometheus::BuildCounter()
                         .Name("gpufed_lost_cluster_workloads_total")
                         .Help("Workloads that held capacity on a cluster declared lost, by "
                               "what became of them")
                         .Register(registry)),
      lost_workloads_requeued(lost_workloads.Add({{"outcome", "requeued"}})),
      lost_workloads_ended(lost_workloads.Add({{"outcome", "ended"}})),
      evictions(prometheus::BuildCounter()
                    .Name("gpufed_evictions_total")
                    .Help("Workloads told to stop so that they run elsewhere, by cause "
                          "(preemption: a drain; node_failure: a failed node or GPU)")
                    .Register(registry)) {}

}  // namespace gpufed::api
