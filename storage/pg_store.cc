#include "storage/pg_store.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "auth/policy.h"
#include "federation/request_deadline.h"
#include "federation/status_macros.h"
#include "federation/validation.h"
#include "nlohmann/json.hpp"
#include "pqxx/pqxx"
#include "storage/json_codec.h"
#include "storage/migrator.h"
#include "storage/pg_pool.h"

namespace gpufed::storage {

// One submission waiting for the committer.
struct PendingSubmit {
  WorkloadSpec owned_spec;
  const WorkloadSpec* spec = &owned_spec;
  PendingReason reason;
  // Encoded by the caller's thread, off the committer's path.
  std::string spec_json;
  std::string reason_json;  // {"code", "figures", "message"}
  std::string actor_json;   // a JSON string: the submission event's actor
  absl::Time deadline = absl::InfiniteFuture();
  absl::StatusOr<SubmitResult> result = absl::InternalError("submit was not committed");
  WorkloadStore::SubmitCallback done;
};

namespace {

using nlohmann::json;

// ---- SQL ---------------------------------------------------------------------------------
// Every statement is prepared once per connection under its name (RegisterStatements). Times
// travel as microseconds since the epoch (epoch_us / from_epoch_us, migrations/0001).

#define GPUFED_WORKLOAD_COLUMNS                                                                  \
  " w.id, w.spec::text AS spec, w.state, w.pending_reason, w.pending_reason_code,"               \
  " w.pending_reason_figures::text AS pending_reason_figures, w.assignment::text AS assignment," \
  " w.cancel_requested, w.exit_code, w.message, epoch_us(w.created_at) AS created_us,"           \
  " epoch_us(w.updated_at) AS updated_us, epoch_us(w.started_at) AS started_us,"                 \
  " epoch_us(w.ended_at) AS ended_us, w.version, w.attempts, w.evicting "

// The admin's declaration comes with every cluster row (one primary-key lookup; NULL when there
// is none), so every Cluster the store returns carries it, as the in-memory store's do.
#define GPUFED_CLUSTER_COLUMNS                                                            \
  " c.name, c.provider, c.region, c.zone, c.jurisdiction,"                                \
  " to_json(c.compliance_labels)::text AS compliance_labels, c.state, c.epoch,"           \
  " epoch_us(c.last_heartbeat) AS heartbeat_us, c.cordoned,"                              \
  " (SELECT d.declaration::text FROM cluster_declarations d WHERE d.cluster = c.name) AS" \
  " declaration "

// One group of submits. Input: [{"ord": n, "spec": {...}, "reason": {"code", "figures",
// "message"}, "actor": "user:..."}]. Tenant and project are resolved in the same statement so that
// an unknown one only drops its own row; each project of the group is locked FOR KEY SHARE once,
// which keeps it from being deleted under the insert (migrations/0005); ids are drawn up front so
// each output row can be matched to its input by ord; ON CONFLICT DO NOTHING leaves idempotency-key
// clashes to be looked up afterwards instead of failing the transaction.
constexpr const char* kSubmitBatch = R"sql(
WITH input AS (
  SELECT r.ord, r.spec, r.reason, coalesce(nullif(r.actor, ''), 'submit') AS actor,
         r.spec->>'tenant' AS tenant, r.spec->>'project' AS project, r.spec->>'name' AS name,
         NULLIF(r.spec->>'idempotency_key', '') AS idempotency_key,
         (r.spec->>'priority')::integer AS priority
  FROM jsonb_to_recordset($1::jsonb) AS r(ord integer, spec jsonb, reason jsonb, actor text)),
projects_locked AS (
  SELECT p.tenant, p.name FROM projects p
  WHERE (p.tenant, p.name) IN (SELECT DISTINCT tenant, project FROM input)
  FOR KEY SHARE),
resolved AS (
  SELECT i.*,
         EXISTS (SELECT 1 FROM tenants t WHERE t.name = i.tenant) AS tenant_found,
         EXISTS (SELECT 1 FROM projects_locked p
                 WHERE p.tenant = i.tenant AND p.name = i.project) AS project_found
  FROM input i),
fresh AS (
  SELECT nextval('workloads_id_seq') AS id, ord FROM resolved WHERE project_found ORDER BY ord),
inserted AS (
  INSERT INTO workloads (id, tenant, project, name, idempotency_key, spec, priority,
                         pending_reason_code, pending_reason_figures, pending_reason)
  SELECT f.id, r.tenant, r.project, r.name, r.idempotency_key, r.spec, r.priority,
         r.reason->>'code', r.reason->'figures', r.reason->>'message'
  FROM fresh f JOIN resolved r USING (ord)
  ON CONFLICT (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
  RETURNING id, epoch_us(created_at) AS created_us, epoch_us(updated_at) AS updated_us,
            version),
events AS (
  INSERT INTO workload_events (workload_id, at, from_state, to_state, actor, reason)
  SELECT ins.id, from_epoch_us(ins.created_us), NULL, 'PENDING', r.actor, 'submitted'
  FROM inserted ins JOIN fresh f ON f.id = ins.id JOIN resolved r USING (ord))
SELECT r.ord, r.tenant_found, r.project_found, ins.id, ins.created_us, ins.updated_us,
       ins.version
FROM resolved r LEFT JOIN fresh f USING (ord) LEFT JOIN inserted ins ON ins.id = f.id
)sql";

// The workloads that hold the idempotency keys of submits that were not inserted.
constexpr const char* kSubmitLookup =
    "SELECT r.ord, (w.spec = r.spec) AS same_spec," GPUFED_WORKLOAD_COLUMNS
    "FROM jsonb_to_recordset($1::jsonb) AS r(ord integer, spec jsonb) "
    "JOIN workloads w ON w.tenant = r.spec->>'tenant' "
    "AND w.idempotency_key = r.spec->>'idempotency_key'";

constexpr const char* kGetWorkload =
    "SELECT" GPUFED_WORKLOAD_COLUMNS "FROM workloads w WHERE w.id = $1";
constexpr const char* kGetArchivedWorkload =
    "SELECT" GPUFED_WORKLOAD_COLUMNS "FROM workloads_archive w WHERE w.id = $1";
// WorkloadStore::ArchiveFinished: rows another transaction holds are left for the next batch.
constexpr const char* kArchiveFinished = R"sql(
WITH moved AS (
  DELETE FROM workloads w WHERE w.id IN (
    SELECT id FROM workloads
    WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'PREEMPTED', 'LOST')
      AND ended_at < from_epoch_us($1)
    ORDER BY ended_at, id LIMIT $2
    FOR UPDATE SKIP LOCKED)
  RETURNING w.*)
INSERT INTO workloads_archive SELECT * FROM moved
)sql";
constexpr const char* kGetWorkloads =
    "SELECT" GPUFED_WORKLOAD_COLUMNS
    "FROM workloads w WHERE w.id = ANY($1::bigint[]) ORDER BY w.id";
constexpr const char* kLockWorkload =
    "SELECT" GPUFED_WORKLOAD_COLUMNS "FROM workloads w WHERE w.id = $1 FOR UPDATE";
constexpr const char* kListPending =
    "SELECT" GPUFED_WORKLOAD_COLUMNS
    "FROM workloads w WHERE w.state IN ('PENDING', 'ADMITTED') ORDER BY w.priority DESC, w.id "
    "LIMIT $1";
// ListPending's rows, id and version only: a reload of the scheduler's queue reads the rest
// only for the rows it does not hold at that version.
constexpr const char* kListPendingVersions =
    "SELECT w.id, w.version FROM workloads w WHERE w.state IN ('PENDING', 'ADMITTED') "
    "ORDER BY w.priority DESC, w.id LIMIT $1";
// A resumed Watch's catch-up: keyset pages in the order of the last change
// (migrations/0011: index on (updated_at, id)). $1, $2: after this (microseconds, id); $3: one
// tenant or NULL for all.
constexpr const char* kListChangedAfter =
    "SELECT" GPUFED_WORKLOAD_COLUMNS
    "FROM workloads w WHERE (w.updated_at, w.id) > (from_epoch_us($1), $2)"
    " AND ($3::text IS NULL OR w.tenant = $3) ORDER BY w.updated_at, w.id LIMIT $4";
constexpr const char* kListActive =
    "SELECT" GPUFED_WORKLOAD_COLUMNS
    "FROM workloads w WHERE w.state IN ('PLACED', 'RUNNING') ORDER BY w.id";
// By the tenant's index (tenant, id); only ids, so a tenant holding thousands costs little.
constexpr const char* kListHeldIds =
    "SELECT id FROM workloads WHERE tenant = $1 AND ($2 = '' OR project = $2) "
    "AND state IN ('PLACED', 'RUNNING') ORDER BY id";
constexpr const char* kListActiveOnCluster =
    "SELECT" GPUFED_WORKLOAD_COLUMNS
    "FROM workloads w WHERE w.state IN ('PLACED', 'RUNNING') AND w.cluster = $1 ORDER BY w.id";

// Every batch locks its rows in id order before changing any: two batches touching the same
// workloads then queue behind each other instead of deadlocking.
constexpr const char* kLockWorkloads =
    "SELECT id FROM workloads WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE";

// The clusters a round of placements names, share-locked (in name order) before any workload
// row: a loss of one of them (LoseCluster updates its row) then waits for the placements to
// commit, or they wait for the loss and see its epoch. Input: a JSON array of names.
constexpr const char* kShareClusters =
    "SELECT name FROM clusters WHERE name IN (SELECT jsonb_array_elements_text($1::jsonb)) "
    "ORDER BY name FOR SHARE";

// One round of guarded transitions (each workload at most once per round). Input:
// [{"ord", "id", "from_state", "to_state", "actor", "reason", "assignment", "exit_code",
//   "message", "at_us", "on_cluster", "at_attempt", "pending_code", "pending_figures",
//   "pending_message"}]; the pending_* fields are the reason a workload returning to PENDING
// gets (empty for every other state); on_cluster, at_attempt and unless_evicting are optional
// guards. A move to PLACED is fenced by its cluster's row and cordons: not when the cluster is
// unreachable, at another epoch or cordoned, nor onto a cordoned node.
constexpr const char* kApplyTransitions = R"sql(
WITH input AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(
    ord integer, id bigint, from_state text, to_state text, actor text, reason text,
    assignment jsonb, exit_code integer, message text, at_us bigint, on_cluster text,
    at_attempt integer, unless_evicting boolean, pending_code text, pending_figures jsonb,
    pending_message text)),
changed AS (
  UPDATE workloads w SET
    state = i.to_state,
    pending_reason = i.pending_message,
    pending_reason_code = i.pending_code,
    pending_reason_figures = i.pending_figures,
    assignment = CASE WHEN i.to_state = 'PLACED' THEN i.assignment
                      WHEN i.to_state = 'PENDING' THEN NULL ELSE w.assignment END,
    cluster = CASE WHEN i.to_state = 'PLACED' THEN i.assignment->>'cluster'
                   WHEN i.to_state = 'PENDING' THEN NULL ELSE w.cluster END,
    cluster_epoch = CASE WHEN i.to_state = 'PLACED' THEN (i.assignment->>'epoch')::bigint
                         WHEN i.to_state = 'PENDING' THEN NULL ELSE w.cluster_epoch END,
    started_at = CASE WHEN i.to_state = 'RUNNING' THEN coalesce(from_epoch_us(i.at_us), now())
                      WHEN i.to_state = 'PENDING' THEN NULL ELSE w.started_at END,
    ended_at = CASE WHEN i.to_state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'PREEMPTED', 'LOST')
                    THEN coalesce(from_epoch_us(i.at_us), now()) ELSE w.ended_at END,
    metered_until = CASE WHEN i.to_state = 'RUNNING'
                         THEN least(greatest(coalesce(from_epoch_us(i.at_us), now()), w.updated_at),
                                    now())
                         ELSE w.metered_until END,
    exit_code = coalesce(i.exit_code, w.exit_code),
    message = CASE WHEN i.message <> '' THEN i.message ELSE w.message END,
    attempts = w.attempts + CASE WHEN i.to_state = 'PLACED' THEN 1 ELSE 0 END,
    evicting = CASE WHEN i.to_state IN ('PLACED', 'RUNNING') THEN w.evicting END,
    updated_at = now(),
    version = w.version + 1
  FROM input i
  WHERE w.id = i.id AND w.state = i.from_state
    AND (i.on_cluster IS NULL OR w.cluster = i.on_cluster)
    AND (i.at_attempt IS NULL OR w.attempts = i.at_attempt)
    AND (i.unless_evicting IS NOT TRUE OR w.evicting IS NULL)
    AND (i.to_state <> 'PLACED' OR NOT EXISTS (
           SELECT 1 FROM clusters c
           WHERE c.name = i.assignment->>'cluster'
             AND (c.state = 'unreachable' OR c.cordoned
                  OR c.epoch <> (i.assignment->>'epoch')::bigint)))
    AND (i.to_state <> 'PLACED' OR NOT EXISTS (
           SELECT 1 FROM node_cordons k, jsonb_array_elements(i.assignment->'replicas') rep
           WHERE k.cluster = i.assignment->>'cluster' AND k.node = rep->>'node'))
  RETURNING )sql" GPUFED_WORKLOAD_COLUMNS R"sql(, i.ord, i.from_state AS event_from,
    i.actor AS event_actor, i.reason AS event_reason,
    epoch_us(coalesce(from_epoch_us(i.at_us), now())) AS event_us),
events AS (
  INSERT INTO workload_events (workload_id, at, from_state, to_state, actor, reason)
  SELECT id, from_epoch_us(event_us), event_from, state, event_actor, event_reason
  FROM changed)
SELECT * FROM changed
)sql";

// Writes only reasons that changed (code, figures or words), only while still waiting (PENDING or
// ADMITTED); rows
// locked in id order. Input: [{"id", "code", "figures", "message"}].
constexpr const char* kSetPendingReasons = R"sql(
WITH input AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(id bigint, code text, figures jsonb,
                                                    message text)),
target AS (
  SELECT w.id, i.code, i.figures, i.message FROM workloads w JOIN input i ON i.id = w.id
  WHERE w.state IN ('PENDING', 'ADMITTED')
    AND (w.pending_reason_code, w.pending_reason_figures, w.pending_reason)
        IS DISTINCT FROM (i.code, i.figures, i.message)
  ORDER BY w.id
  FOR UPDATE OF w)
UPDATE workloads w
SET pending_reason = t.message, pending_reason_code = t.code, pending_reason_figures = t.figures,
    updated_at = now(), version = w.version + 1
FROM target t
WHERE w.id = t.id
)sql";

constexpr const char* kCancelNow = R"sql(
WITH changed AS (
  UPDATE workloads w
  SET state = 'CANCELLED', pending_reason = '', pending_reason_code = '',
      pending_reason_figures = '{}', cancel_requested = true,
      message = CASE WHEN $3 <> '' THEN $3 ELSE w.message END,
      ended_at = now(), updated_at = now(), version = w.version + 1
  WHERE w.id = $1
  RETURNING )sql" GPUFED_WORKLOAD_COLUMNS R"sql(),
events AS (
  INSERT INTO workload_events (workload_id, at, from_state, to_state, actor, reason)
  SELECT id, now(), $4, 'CANCELLED', $2, $3 FROM changed)
SELECT * FROM changed
)sql";

// Marks evictions (WorkloadStore::RequestEvictions), rows locked in id order. Input:
// [{"id", "cluster", "attempt", "why", "message"}].
constexpr const char* kRequestEvictions = R"sql(
WITH input AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS r(id bigint, cluster text, attempt integer,
                                                    why text, message text)),
target AS (
  SELECT w.id, i.why, i.message FROM workloads w JOIN input i ON i.id = w.id
  WHERE w.state IN ('PLACED', 'RUNNING') AND w.cluster = i.cluster AND w.attempts = i.attempt
    AND NOT w.cancel_requested AND w.evicting IS NULL
  ORDER BY w.id
  FOR UPDATE OF w)
UPDATE workloads w
SET evicting = t.why, message = t.message, updated_at = now(), version = w.version + 1
FROM target t
WHERE w.id = t.id
RETURNING )sql" GPUFED_WORKLOAD_COLUMNS;

// Appends one preemption record; $11 a JSON array of tenant names.
constexpr const char* kInsertPreemption = R"sql(
INSERT INTO preemptions (at, cause, preemptor, tenant, project, resource, cluster, needed_milli,
                         evicted_milli, gpu_seconds_lost, tenants, victims, shares)
VALUES (from_epoch_us($1), $2, $3, $4, $5, $6, $7, $8, $9, $10,
        ARRAY(SELECT jsonb_array_elements_text($11::jsonb)), $12::jsonb, $13::jsonb)
RETURNING id
)sql";
#define GPUFED_PREEMPTION_COLUMNS                                                             \
  " id, epoch_us(at) AS at_us, cause, preemptor, tenant, project, resource, cluster, "        \
  "needed_milli, evicted_milli, gpu_seconds_lost, victims::text AS victims, shares::text AS " \
  "shares "
// Newest first; $1 a tenant ('' for all), $2 an id to stay below (0: none), $3 the page.
constexpr const char* kListPreemptions =
    "SELECT" GPUFED_PREEMPTION_COLUMNS
    "FROM preemptions WHERE ($1 = '' OR $1 = ANY(tenants)) AND ($2 = 0 OR id < $2) "
    "ORDER BY id DESC LIMIT $3";

constexpr const char* kUpsertShareWeight =
    "INSERT INTO share_weights (tenant, project, weight) VALUES ($1, $2, $3) "
    "ON CONFLICT (tenant, project) DO UPDATE SET weight = EXCLUDED.weight, updated_at = now()";
constexpr const char* kListShareWeights =
    "SELECT tenant, project, weight FROM share_weights ORDER BY tenant, project";
// Fair-share usage: replaced as a whole; $1 epoch microseconds, $2 a JSON array of
// {tenant, project, gpu_seconds}.
constexpr const char* kDeleteUsage = "DELETE FROM fair_share_usage";
constexpr const char* kInsertUsage =
    "INSERT INTO fair_share_usage (tenant, project, gpu_seconds, as_of) "
    "SELECT r.tenant, r.project, r.gpu_seconds, from_epoch_us($1) "
    "FROM jsonb_to_recordset($2::jsonb) AS r(tenant text, project text, "
    "gpu_seconds double precision)";
constexpr const char* kListUsage =
    "SELECT tenant, project, gpu_seconds, epoch_us(as_of) AS as_of_us FROM fair_share_usage";

constexpr const char* kRequestCancel =
    "UPDATE workloads w SET cancel_requested = true, updated_at = now(), "
    "version = w.version + 1 WHERE w.id = $1 RETURNING" GPUFED_WORKLOAD_COLUMNS;

// ---- Clusters ----
constexpr const char* kUpsertCluster =
    "INSERT INTO clusters AS c (name, provider, region, zone, jurisdiction, compliance_labels, "
    "state, last_heartbeat) "
    "VALUES ($1, $2, $3, $4, $5, ARRAY(SELECT jsonb_array_elements_text($6::jsonb)), 'ready', "
    "now()) "
    "ON CONFLICT (name) DO UPDATE SET provider = EXCLUDED.provider, region = EXCLUDED.region, "
    "zone = EXCLUDED.zone, jurisdiction = EXCLUDED.jurisdiction, "
    "compliance_labels = EXCLUDED.compliance_labels, "
    "state = CASE WHEN c.cordoned THEN 'draining' ELSE 'ready' END, "
    "last_heartbeat = now(), updated_at = now() "
    "RETURNING" GPUFED_CLUSTER_COLUMNS;
constexpr const char* kDeleteGpus = "DELETE FROM gpus WHERE cluster = $1";
constexpr const char* kDeleteNodes = "DELETE FROM nodes WHERE cluster = $1";
constexpr const char* kInsertNodes =
    "INSERT INTO nodes (cluster, name, rack, block, cpu_millis, memory_mib, labels, schedulable) "
    "SELECT $1, r.name, r.rack, r.block, r.cpu_millis, r.memory_mib, r.labels, r.schedulable "
    "FROM jsonb_to_recordset($2::jsonb) AS r(name text, rack text, block text, "
    "cpu_millis bigint, memory_mib bigint, labels jsonb, schedulable boolean)";
constexpr const char* kInsertGpus =
    "INSERT INTO gpus (cluster, node, uuid, index, model, memory_mib, nvlink_domain, numa_node, "
    "pcie_switch, mig_capable, healthy, mig_enabled, mig_layout) "
    "SELECT $1, r.node, r.uuid, r.index, r.model, r.memory_mib, r.nvlink_domain, r.numa_node, "
    "r.pcie_switch, r.mig_capable, r.healthy, r.mig_enabled, r.mig_layout "
    "FROM jsonb_to_recordset($2::jsonb) AS r(node text, uuid text, index integer, model text, "
    "memory_mib bigint, nvlink_domain text, numa_node integer, pcie_switch text, "
    "mig_capable boolean, healthy boolean, mig_enabled boolean, mig_layout jsonb)";
constexpr const char* kListClusters =
    "SELECT" GPUFED_CLUSTER_COLUMNS "FROM clusters c ORDER BY c.name";
constexpr const char* kGetCluster =
    "SELECT" GPUFED_CLUSTER_COLUMNS "FROM clusters c WHERE c.name = $1";
// $1 = '' means every cluster (the inventory is read as a whole and the plan is the same).
// A cordoned node reads as not schedulable.
constexpr const char* kListNodes =
    "SELECT n.cluster, n.name, n.rack, n.block, n.cpu_millis, n.memory_mib, "
    "n.labels::text AS labels, n.schedulable AND k.node IS NULL AS schedulable, "
    "k.node IS NOT NULL AS cordoned "
    "FROM nodes n LEFT JOIN node_cordons k ON k.cluster = n.cluster AND k.node = n.name "
    "WHERE $1 = '' OR n.cluster = $1 ORDER BY n.cluster, n.name";
// An operator's cordon on a whole cluster ($2: on or off); an unreachable cluster stays so.
constexpr const char* kCordonCluster =
    "UPDATE clusters SET cordoned = $2, "
    "state = CASE WHEN state = 'unreachable' THEN state WHEN $2 THEN 'draining' ELSE 'ready' END, "
    "updated_at = now() WHERE name = $1 RETURNING name";
// Taken by a node's cordon: placements share-lock the clusters they name, so one that began
// before the cordon commits first (and is seen by an eviction read after it), and one after
// sees the cordon.
constexpr const char* kLockCluster = "SELECT 1 FROM clusters WHERE name = $1 FOR UPDATE";
// What a cluster to delete still has, its row locked: a placement, a token or a cordon change on
// it waits for the deletion (and a placement is fenced by the cordon it needs).
constexpr const char* kClusterDependents =
    "SELECT c.cordoned, "
    "(SELECT count(*) FROM workloads w WHERE w.cluster = $1 AND w.state IN ('PLACED', 'RUNNING')) "
    "AS held, "
    "(SELECT count(*) FROM api_tokens t WHERE t.cluster = $1 AND t.revoked_at IS NULL "
    "AND (t.expires_at IS NULL OR t.expires_at > now())) AS tokens, "
    "(SELECT count(*) FROM cluster_certificates k WHERE k.cluster = $1 AND k.revoked_at IS NULL "
    "AND k.not_after > now()) AS certificates "
    "FROM clusters c WHERE c.name = $1 FOR UPDATE OF c";
constexpr const char* kDeleteCluster =
    "WITH d AS (DELETE FROM cluster_declarations WHERE cluster = $1 RETURNING 1), "
    "c AS (DELETE FROM clusters WHERE name = $1 RETURNING 1) "
    "SELECT (SELECT count(*) FROM d) + (SELECT count(*) FROM c) AS deleted";
constexpr const char* kNodeExists = "SELECT 1 FROM nodes WHERE cluster = $1 AND name = $2";
constexpr const char* kNodeKnown =
    "SELECT 1 FROM nodes WHERE cluster = $1 AND name = $2 "
    "UNION ALL SELECT 1 FROM node_cordons WHERE cluster = $1 AND node = $2";
constexpr const char* kCordonNode =
    "INSERT INTO node_cordons (cluster, node) VALUES ($1, $2) ON CONFLICT DO NOTHING";
constexpr const char* kUncordonNode = "DELETE FROM node_cordons WHERE cluster = $1 AND node = $2";
constexpr const char* kListGpus =
    "SELECT cluster, node, uuid, index, model, memory_mib, nvlink_domain, numa_node, "
    "pcie_switch, mig_capable, healthy, mig_enabled, mig_layout::text AS mig_layout "
    "FROM gpus WHERE $1 = '' OR cluster = $1 "
    "ORDER BY cluster, node, index";
constexpr const char* kRecordHeartbeat =
    "UPDATE clusters SET last_heartbeat = GREATEST(last_heartbeat, from_epoch_us($2)) "
    "WHERE name = $1";
// Declares a cluster lost: unreachable, and a new epoch unless it was unreachable already.
constexpr const char* kLoseCluster =
    "UPDATE clusters c SET "
    "epoch = c.epoch + CASE WHEN c.state <> 'unreachable' THEN 1 ELSE 0 END, "
    "state = 'unreachable', updated_at = now() WHERE c.name = $1 RETURNING" GPUFED_CLUSTER_COLUMNS;
// Admin declarations (migrations/0017): replaced whole, never touched by registration. $1 is
// [{"cluster": ..., "declaration": {...}}], clusters distinct (ON CONFLICT may not update a row
// twice in one statement).
constexpr const char* kUpsertDeclarations =
    "INSERT INTO cluster_declarations (cluster, declaration) "
    "SELECT r.cluster, r.declaration FROM jsonb_to_recordset($1::jsonb) "
    "AS r(cluster text, declaration jsonb) "
    "ON CONFLICT (cluster) DO UPDATE SET declaration = EXCLUDED.declaration, updated_at = now()";
constexpr const char* kListDeclarations =
    "SELECT cluster, declaration::text AS declaration FROM cluster_declarations ORDER BY cluster";
constexpr const char* kSetClusterState =
    "UPDATE clusters SET "
    "epoch = epoch + CASE WHEN $2 = 'unreachable' AND state <> 'unreachable' THEN 1 ELSE 0 END, "
    "state = $2, updated_at = now() WHERE name = $1";

// ---- Tenancy ----
constexpr const char* kCreateTenant =
    "INSERT INTO tenants (name, display_name) VALUES ($1, $2) ON CONFLICT DO NOTHING "
    "RETURNING epoch_us(created_at) AS created_us";
constexpr const char* kListTenants =
    "SELECT name, display_name, epoch_us(created_at) AS created_us FROM tenants ORDER BY name";
constexpr const char* kTenantExists = "SELECT 1 FROM tenants WHERE name = $1";
// Deleting a project or tenant: its row locked FOR UPDATE first, which waits for (and then
// excludes) the KEY SHARE locks a submit's or a new project's or token's insert takes on it.
constexpr const char* kLockProject =
    "SELECT 1 FROM projects WHERE tenant = $1 AND name = $2 FOR UPDATE";
constexpr const char* kCountProjectWorkloads =
    "SELECT count(*) FROM workloads WHERE tenant = $1 AND project = $2";
constexpr const char* kCountProjectTokens =
    "SELECT count(*) FROM api_tokens WHERE tenant = $1 AND project = $2 AND revoked_at IS NULL";
constexpr const char* kDeleteProject =
    "WITH q AS (DELETE FROM quotas WHERE tenant = $1 AND project = $2), "
    "w AS (DELETE FROM share_weights WHERE tenant = $1 AND project = $2), "
    "t AS (DELETE FROM api_tokens WHERE tenant = $1 AND project = $2 AND revoked_at IS NOT NULL) "
    "DELETE FROM projects WHERE tenant = $1 AND name = $2";
constexpr const char* kLockTenant = "SELECT 1 FROM tenants WHERE name = $1 FOR UPDATE";
constexpr const char* kTenantDependents =
    "SELECT EXISTS (SELECT 1 FROM projects WHERE tenant = $1) AS projects, "
    "EXISTS (SELECT 1 FROM api_tokens WHERE tenant = $1 AND revoked_at IS NULL) AS tokens";
constexpr const char* kDeleteTenant =
    "WITH q AS (DELETE FROM quotas WHERE tenant = $1), "
    "w AS (DELETE FROM share_weights WHERE tenant = $1), "
    "t AS (DELETE FROM api_tokens WHERE tenant = $1 AND revoked_at IS NOT NULL) "
    "DELETE FROM tenants WHERE name = $1";
constexpr const char* kCreateProject =
    "INSERT INTO projects (tenant, name) VALUES ($1, $2) ON CONFLICT DO NOTHING "
    "RETURNING epoch_us(created_at) AS created_us";
constexpr const char* kListProjects =
    "SELECT tenant, name, epoch_us(created_at) AS created_us FROM projects WHERE tenant = $1 "
    "ORDER BY name";
#define GPUFED_TOKEN_COLUMNS                                                               \
  " id, subject, role, coalesce(tenant, '') AS tenant, coalesce(project, '') AS project, " \
  "coalesce(cluster, '') AS cluster, epoch_us(created_at) AS created_us, "                 \
  "epoch_us(expires_at) AS expires_us, epoch_us(last_used_at) AS last_used_us, "           \
  "epoch_us(revoked_at) AS revoked_us "
constexpr const char* kCreateToken =
    "INSERT INTO api_tokens (token_hash, subject, role, tenant, project, cluster, expires_at) "
    "VALUES ($1, $2, $3, NULLIF($4, ''), NULLIF($5, ''), NULLIF($6, ''), from_epoch_us($7)) "
    "ON CONFLICT (token_hash) DO NOTHING RETURNING" GPUFED_TOKEN_COLUMNS;
constexpr const char* kListTokens = "SELECT" GPUFED_TOKEN_COLUMNS
                                    "FROM api_tokens WHERE ($1 = '' OR tenant = $1) "
                                    "AND ($2 = '' OR project = $2) ORDER BY id LIMIT $3";
constexpr const char* kLookupToken =
    "UPDATE api_tokens SET last_used_at = now() WHERE token_hash = $1 AND revoked_at IS NULL "
    "AND (expires_at IS NULL OR expires_at > now()) RETURNING" GPUFED_TOKEN_COLUMNS;
// The first revocation's time stays.
constexpr const char* kRevokeToken =
    "UPDATE api_tokens SET revoked_at = coalesce(revoked_at, now()) "
    "WHERE id = $1 AND ($2 = '' OR tenant = $2) AND ($3 = '' OR project = $3) "
    "RETURNING" GPUFED_TOKEN_COLUMNS;
constexpr const char* kRevokeClusterTokens =
    "UPDATE api_tokens SET revoked_at = now() "
    "WHERE role = 'agent' AND cluster = $1 AND revoked_at IS NULL RETURNING id";
constexpr const char* kCountTokens = "SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL";
// ---- Role bindings ----
// One scope: ($2, $3) as tenant and project, '' standing for NULL (the platform, the tenant).
#define GPUFED_BINDING_SCOPE \
  " tenant IS NOT DISTINCT FROM NULLIF($2, '') AND project IS NOT DISTINCT FROM NULLIF($3, '') "
#define GPUFED_BINDING_COLUMNS                                                         \
  " subject, role, coalesce(tenant, '') AS tenant, coalesce(project, '') AS project, " \
  "epoch_us(created_at) AS created_us, epoch_us(updated_at) AS updated_us "
// Roles by rank, lowest first (auth::Outranks): a role's position is its rank; agent has none.
#define GPUFED_ROLE_RANK(expr) \
  "array_position(ARRAY['viewer', 'tenant-user', 'tenant-admin', 'platform-admin'], " expr ")"
// One subject at one scope, whether or not a binding exists yet: a token made for it and a
// binding set for it take this lock first, so neither misses the other.
constexpr const char* kLockSubjectScope =
    "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 || '/' || $3, 7))";
constexpr const char* kLockBinding =
    "SELECT" GPUFED_BINDING_COLUMNS "FROM role_bindings WHERE subject = $1 AND" GPUFED_BINDING_SCOPE
    "FOR UPDATE";
constexpr const char* kShareBinding =
    "SELECT role FROM role_bindings WHERE subject = $1 AND" GPUFED_BINDING_SCOPE "FOR SHARE";
constexpr const char* kCountScopeBindings =
    "SELECT count(*) FROM role_bindings WHERE tenant IS NOT DISTINCT FROM NULLIF($1, '')";
constexpr const char* kUpsertBinding =
    "INSERT INTO role_bindings (subject, tenant, project, role) "
    "VALUES ($1, NULLIF($2, ''), NULLIF($3, ''), $4) "
    "ON CONFLICT (tenant, project, subject) DO UPDATE SET role = EXCLUDED.role, "
    "updated_at = CASE WHEN role_bindings.role = EXCLUDED.role THEN role_bindings.updated_at "
    "ELSE now() END RETURNING" GPUFED_BINDING_COLUMNS;
// The subject's live tokens at the scope that rank above role $4 take it.
constexpr const char* kLowerSubjectTokens =
    "UPDATE api_tokens SET role = $4 WHERE subject = $1 AND" GPUFED_BINDING_SCOPE
    "AND revoked_at IS NULL AND " GPUFED_ROLE_RANK("role") " > " GPUFED_ROLE_RANK(
        "$4::text") " RETURNING id";
constexpr const char* kRevokeSubjectTokens =
    "UPDATE api_tokens SET revoked_at = now() WHERE subject = $1 AND" GPUFED_BINDING_SCOPE
    "AND revoked_at IS NULL AND role <> 'agent' RETURNING id";
constexpr const char* kDeleteBinding =
    "DELETE FROM role_bindings WHERE subject = $1 AND" GPUFED_BINDING_SCOPE;
constexpr const char* kListBindings =
    "SELECT" GPUFED_BINDING_COLUMNS
    "FROM role_bindings WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR project = $2) "
    "ORDER BY tenant NULLS FIRST, project NULLS FIRST, subject LIMIT $3";
constexpr const char* kListSubjectBindings =
    "SELECT" GPUFED_BINDING_COLUMNS
    "FROM role_bindings WHERE subject = $1 ORDER BY tenant NULLS FIRST, project NULLS FIRST "
    "LIMIT $2";
// ---- Cluster certificates ----
#define GPUFED_CLUSTER_CERT_COLUMNS                                                                \
  " serial, cluster, epoch_us(not_before) AS not_before_us, epoch_us(not_after) AS not_after_us, " \
  "epoch_us(issued_at) AS issued_us, epoch_us(revoked_at) AS revoked_us "
constexpr const char* kAddClusterCertificate =
    "INSERT INTO cluster_certificates (serial, cluster, not_before, not_after) "
    "VALUES ($1, $2, from_epoch_us($3), from_epoch_us($4)) ON CONFLICT (serial) DO NOTHING "
    "RETURNING" GPUFED_CLUSTER_CERT_COLUMNS;
constexpr const char* kLookupClusterCertificate =
    "SELECT" GPUFED_CLUSTER_CERT_COLUMNS
    "FROM cluster_certificates WHERE serial = $1 AND cluster = $2 AND revoked_at IS NULL "
    "AND not_after > now()";
constexpr const char* kRevokeClusterCertificates =
    "UPDATE cluster_certificates SET revoked_at = now() WHERE cluster = $1 AND revoked_at IS NULL";
// ---- Audit ----
// An audited change's row, recorded in the change's transaction (federation/store.h); the
// sealer chains it later (storage/pg_audit_log.h). The time is the transaction's, as the
// trigger on workload_events records it.
constexpr const char* kRecordAudit =
    "INSERT INTO audit_pending (actor, tenant, project, action, object, outcome, reason, detail)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
// ---- Quotas ----
#define GPUFED_QUOTA_COLUMNS                                                                 \
  " tenant, project, resource, guaranteed_milli, coalesce(limit_milli, -1) AS limit_milli, " \
  "overcommitted, epoch_us(updated_at) AS updated_us "
constexpr const char* kLockQuotaTenant =
    "SELECT pg_advisory_xact_lock(hashtext('gpufed.quota.tenant:' || $1))";
constexpr const char* kLockQuotaResource =
    "SELECT pg_advisory_xact_lock(hashtext('gpufed.quota.resource:' || $1))";
constexpr const char* kProjectExists = "SELECT 1 FROM projects WHERE tenant = $1 AND name = $2";
constexpr const char* kQuotasOnResource =
    "SELECT" GPUFED_QUOTA_COLUMNS "FROM quotas WHERE resource = $1 ORDER BY tenant, project";
constexpr const char* kTenantQuotaCount =
    "SELECT count(*) AS n, count(*) FILTER (WHERE project = $2 AND resource = $3) AS mine "
    "FROM quotas WHERE tenant = $1";
constexpr const char* kUpsertQuota =
    "INSERT INTO quotas (tenant, project, resource, guaranteed_milli, limit_milli, overcommitted) "
    "VALUES ($1, $2, $3, $4, NULLIF($5, -1), $6) ON CONFLICT (tenant, project, resource) DO "
    "UPDATE SET guaranteed_milli = EXCLUDED.guaranteed_milli, limit_milli = EXCLUDED.limit_milli, "
    "overcommitted = EXCLUDED.overcommitted, updated_at = now() "
    "RETURNING epoch_us(updated_at) AS updated_us";
constexpr const char* kDeleteQuota =
    "DELETE FROM quotas WHERE tenant = $1 AND project = $2 AND resource = $3";
constexpr const char* kListTenantQuotas = "SELECT" GPUFED_QUOTA_COLUMNS
                                          "FROM quotas WHERE tenant = $1 ORDER BY tenant, project, "
                                          "resource";
constexpr const char* kListAllQuotas =
    "SELECT" GPUFED_QUOTA_COLUMNS "FROM quotas ORDER BY tenant, project, resource";
// A full scan: fine while finished workloads are archived out of the hot table (docs/storage.md).
// Counts per state from the deltas the workloads triggers append (migrations/0006), not from a
// scan of workloads. Folding first, in its own statement, keeps the deltas few; a concurrent fold
// (another server) only skips rows this one already folded, and every snapshot sees the same
// sums before and after a fold.
constexpr const char* kFoldStateCounts = R"sql(
WITH gone AS (DELETE FROM workload_state_counts RETURNING state, delta)
INSERT INTO workload_state_counts (state, delta)
SELECT state, sum(delta) FROM gone GROUP BY state HAVING sum(delta) <> 0
)sql";
constexpr const char* kCountByState =
    "SELECT state, sum(delta)::bigint AS n FROM workload_state_counts GROUP BY state "
    "HAVING sum(delta) <> 0";
constexpr const char* kSchemaVersion = "SELECT coalesce(max(version), 0) FROM schema_migrations";

// ---- Metering (migrations/0024_usage.sql; MeteringStore) ----

// The running workloads among $1 (locked by the caller), each with its metering mark.
constexpr const char* kRunningMarks =
    "SELECT" GPUFED_WORKLOAD_COLUMNS
    ", epoch_us(coalesce(w.metered_until, w.started_at, w.updated_at)) AS mark_us "
    "FROM workloads w WHERE w.id = ANY($1::bigint[]) AND w.state = 'RUNNING'";
// The meter pass: running workloads marked before $1, oldest mark first, at most $2. A row a
// transition holds is skipped (it is metered by that transition or by the next pass), so the
// pass never waits on, nor deadlocks with, the control path.
constexpr const char* kMeterDue =
    "SELECT" GPUFED_WORKLOAD_COLUMNS
    ", epoch_us(w.metered_until) AS mark_us FROM workloads w "
    "WHERE w.state = 'RUNNING' AND w.metered_until < from_epoch_us($1) "
    "ORDER BY w.metered_until, w.id LIMIT $2 FOR UPDATE OF w SKIP LOCKED";
constexpr const char* kMoveMarks =
    "UPDATE workloads SET metered_until = from_epoch_us($2) WHERE id = ANY($1::bigint[])";
constexpr const char* kDatabaseNow = "SELECT epoch_us(now())";
// Input: a JSON array of records (UsageJson). A record already there is left as it is; the
// records inserted are added to usage_daily, whose rows are locked in key order (two inserts
// never wait on each other in a cycle).
constexpr const char* kInsertUsageRecords = R"sql(
WITH inserted AS (
  INSERT INTO usage_records (workload_id, attempt, replica, tenant, project, workload_class,
    cluster, node, gpu_uuid, gpu_model, mig_profile, gpu_milli, capacity, started_at, ended_at,
    fraction_num, fraction_den, price_micros_per_hour, profile_priced, cost_micros,
    gpu_line_cost_micros)
  SELECT r.workload_id, r.attempt, r.replica, r.tenant, r.project, r.workload_class, r.cluster,
    r.node, r.gpu_uuid, r.gpu_model, r.mig_profile, r.gpu_milli, r.capacity,
    from_epoch_us(r.from_us), from_epoch_us(r.to_us), r.fraction_num, r.fraction_den, r.price,
    r.profile_priced, r.cost, r.gpu_line_cost
  FROM jsonb_to_recordset($1::jsonb) AS r(workload_id bigint, attempt integer, replica integer,
    tenant text, project text, workload_class text, cluster text, node text, gpu_uuid text,
    gpu_model text, mig_profile text, gpu_milli integer, capacity text, from_us bigint,
    to_us bigint, fraction_num bigint, fraction_den bigint, price bigint, profile_priced boolean,
    cost bigint, gpu_line_cost bigint)
  ON CONFLICT DO NOTHING
  RETURNING started_at, tenant, project, cluster, gpu_model, mig_profile, workload_class, capacity,
    round(fraction_num::numeric * (epoch_us(ended_at) - epoch_us(started_at)) / fraction_den)
      AS gpu_us,
    price_micros_per_hour, cost_micros, gpu_line_cost_micros)
INSERT INTO usage_daily AS u (day, tenant, project, cluster, gpu_model, mig_profile,
  workload_class, capacity, gpu_us, unpriced_gpu_us, cost_micros, records, gpu_line_cost_micros)
SELECT date_trunc('day', started_at, 'UTC'), tenant, project, cluster, gpu_model, mig_profile,
  workload_class, capacity, sum(gpu_us), sum(CASE WHEN price_micros_per_hour IS NULL THEN gpu_us
  ELSE 0 END), sum(cost_micros), count(*), sum(gpu_line_cost_micros)
FROM inserted
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
ON CONFLICT (day, tenant, project, cluster, gpu_model, mig_profile, workload_class, capacity)
DO UPDATE SET gpu_us = u.gpu_us + EXCLUDED.gpu_us,
  unpriced_gpu_us = u.unpriced_gpu_us + EXCLUDED.unpriced_gpu_us,
  cost_micros = u.cost_micros + EXCLUDED.cost_micros, records = u.records + EXCLUDED.records,
  gpu_line_cost_micros = u.gpu_line_cost_micros + EXCLUDED.gpu_line_cost_micros
)sql";
// Telemetry (migrations/0025_telemetry.sql): $1 the cluster, $2 a JSON array of attributed
// minutes (TelemetryJson). A minute already kept is left as it is; what the minutes kept measured
// is added to usage_daily (rows locked in key order, as insert_usage_records does). Answers how
// many were kept.
constexpr const char* kInsertTelemetry = R"sql(
WITH inserted AS (
  INSERT INTO telemetry_minutes (cluster, gpu_uuid, mig_profile, mig_start, minute, workload_id,
    attempt, tenant, project, workload_class, gpu_model, capacity, covered_seconds,
    gr_engine_active, sm_active, sm_occupancy, pipe_tensor_active, dram_active, gpu_util,
    fb_used_mib, power_watts, gpu_temp_celsius, activity, activity_source, measured_gpu_us,
    effective_gpu_us, coarse_gpu_us)
  SELECT $1, r.gpu_uuid, r.mig_profile, r.mig_start, from_epoch_us(r.minute_us), r.workload_id,
    r.attempt, r.tenant, r.project, r.workload_class, r.gpu_model, r.capacity, r.covered_seconds,
    r.gr_engine_active, r.sm_active, r.sm_occupancy, r.pipe_tensor_active, r.dram_active,
    r.gpu_util, r.fb_used_mib, r.power_watts, r.gpu_temp_celsius, r.activity, r.activity_source,
    r.measured_gpu_us, r.effective_gpu_us, r.coarse_gpu_us
  FROM jsonb_to_recordset($2::jsonb) AS r(gpu_uuid text, mig_profile text, mig_start integer,
    minute_us bigint, workload_id bigint, attempt integer, tenant text, project text,
    workload_class text, gpu_model text, capacity text, covered_seconds integer,
    gr_engine_active double precision, sm_active double precision,
    sm_occupancy double precision, pipe_tensor_active double precision,
    dram_active double precision, gpu_util double precision, fb_used_mib double precision,
    power_watts double precision, gpu_temp_celsius double precision,
    activity double precision, activity_source text, measured_gpu_us bigint,
    effective_gpu_us bigint, coarse_gpu_us bigint)
  ON CONFLICT DO NOTHING
  RETURNING minute, tenant, project, cluster, gpu_model, mig_profile, workload_class, capacity,
    measured_gpu_us, effective_gpu_us, coarse_gpu_us),
daily AS (
  INSERT INTO usage_daily AS u (day, tenant, project, cluster, gpu_model, mig_profile,
    workload_class, capacity, gpu_us, unpriced_gpu_us, cost_micros, records, measured_gpu_us,
    effective_gpu_us, coarse_gpu_us)
  SELECT date_trunc('day', minute, 'UTC'), tenant, project, cluster, gpu_model, mig_profile,
    workload_class, capacity, 0, 0, 0, 0, sum(measured_gpu_us), sum(effective_gpu_us),
    sum(coarse_gpu_us)
  FROM inserted
  WHERE measured_gpu_us > 0
  GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
  ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
  ON CONFLICT (day, tenant, project, cluster, gpu_model, mig_profile, workload_class, capacity)
  DO UPDATE SET measured_gpu_us = u.measured_gpu_us + EXCLUDED.measured_gpu_us,
    effective_gpu_us = u.effective_gpu_us + EXCLUDED.effective_gpu_us,
    coarse_gpu_us = u.coarse_gpu_us + EXCLUDED.coarse_gpu_us)
SELECT count(*) AS kept FROM inserted
)sql";
// $1 the workload, [$2, $3) the window in microseconds, $4 the most rows.
constexpr const char* kListTelemetry = R"sql(
SELECT cluster, gpu_uuid, mig_profile, mig_start, epoch_us(minute) AS minute_us, workload_id,
  attempt, tenant, project, covered_seconds, gr_engine_active, sm_active, sm_occupancy,
  pipe_tensor_active, dram_active, gpu_util, fb_used_mib, power_watts, gpu_temp_celsius, activity,
  activity_source, measured_gpu_us, effective_gpu_us, coarse_gpu_us
FROM telemetry_minutes
WHERE workload_id = $1 AND minute >= from_epoch_us($2) AND minute < from_epoch_us($3)
ORDER BY minute, cluster, gpu_uuid, mig_profile, mig_start
LIMIT $4
)sql";
// The oldest $2 minutes before $1.
constexpr const char* kPruneTelemetry = R"sql(
DELETE FROM telemetry_minutes WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM telemetry_minutes WHERE minute < from_epoch_us($1) ORDER BY minute LIMIT $2))
)sql";
// $1 tenant, $2 project, $3 cluster ('' for all), [$4, $5) the window in microseconds; $6 whether
// a cursor follows: ($7 .. $11) the position of the last record of the previous page; $12 the page.
constexpr const char* kListUsageRecords = R"sql(
SELECT workload_id, attempt, replica, tenant, project, workload_class, cluster, node, gpu_uuid,
  gpu_model, mig_profile, gpu_milli, capacity, epoch_us(started_at) AS from_us,
  epoch_us(ended_at) AS to_us, fraction_num, fraction_den, price_micros_per_hour, profile_priced,
  cost_micros, gpu_line_cost_micros
FROM usage_records
WHERE ($1 = '' OR tenant = $1) AND ($2 = '' OR project = $2) AND ($3 = '' OR cluster = $3)
  AND started_at < from_epoch_us($5) AND ended_at > from_epoch_us($4)
  AND (NOT $6 OR (started_at, workload_id, attempt, replica, gpu_uuid)
                 > (from_epoch_us($7), $8, $9, $10, $11))
ORDER BY started_at, workload_id, attempt, replica, gpu_uuid
LIMIT $12
)sql";

// A rollup row's period (`day`, a UTC midnight) as the report's period $3 cuts the window that
// starts at $1: its day, ISO week, month, or the window's start.
#define GPUFED_REPORT_PERIOD                           \
  "epoch_us(CASE $3 WHEN 'day' THEN day "              \
  "WHEN 'week' THEN date_trunc('week', day, 'UTC') "   \
  "WHEN 'month' THEN date_trunc('month', day, 'UTC') " \
  "ELSE from_epoch_us($1) END) AS period_us"

// A report (MeteringStore::ReportUsage), from usage_daily: [$1, $2) the window in microseconds
// (whole days), $3 the period, $4 $5 $6 the tenant, project and cluster filters ('' for all),
// $7..$13 whether each dimension is asked for (one not asked for reads NULL, and is summed
// over), $14 the most rows. Exact integer sums, as SumUsage's.
constexpr const char* kReportUsage = "SELECT " GPUFED_REPORT_PERIOD R"sql(,
  CASE WHEN $7 THEN tenant END AS tenant,
  CASE WHEN $8 THEN project END AS project,
  CASE WHEN $9 THEN cluster END AS cluster,
  CASE WHEN $10 THEN gpu_model END AS gpu_model,
  CASE WHEN $11 THEN mig_profile END AS mig_profile,
  CASE WHEN $12 THEN workload_class END AS workload_class,
  CASE WHEN $13 THEN capacity END AS capacity,
  sum(gpu_us)::bigint AS gpu_us, sum(unpriced_gpu_us)::bigint AS unpriced_us,
  sum(cost_micros)::bigint AS cost, sum(records)::bigint AS records,
  sum(measured_gpu_us)::bigint AS measured_us, sum(effective_gpu_us)::bigint AS effective_us,
  sum(coarse_gpu_us)::bigint AS coarse_us
FROM usage_daily
WHERE day >= from_epoch_us($1) AND day < from_epoch_us($2)
  AND ($4 = '' OR tenant = $4) AND ($5 = '' OR project = $5) AND ($6 = '' OR cluster = $6)
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
LIMIT $14
)sql";

// Cost allocation's input (MeteringStore::ReportHeldCosts): [$1, $2) the window in microseconds,
// $3 the cluster ('' for all).
constexpr const char* kReportHeldCosts = R"sql(
SELECT cluster, tenant, gpu_model, capacity, sum(gpu_line_cost_micros)::bigint AS gpu_line,
  sum(cost_micros)::bigint AS billed
FROM usage_daily
WHERE day >= from_epoch_us($1) AND day < from_epoch_us($2) AND ($3 = '' OR cluster = $3)
GROUP BY 1, 2, 3, 4
)sql";
// Idle guarantees (migrations/0026): $1 a JSON array of GuaranteeUse (GuaranteeJson), added to
// their days' rows, locked in key order.
constexpr const char* kRecordGuarantees = R"sql(
INSERT INTO guarantee_daily AS g (day, tenant, project, resource, reserved_unit_us, idle_unit_us)
SELECT from_epoch_us(r.day_us), r.tenant, r.project, r.resource, sum(r.reserved), sum(r.idle)
FROM jsonb_to_recordset($1::jsonb) AS r(day_us bigint, tenant text, project text, resource text,
  reserved bigint, idle bigint)
GROUP BY 1, 2, 3, 4
ORDER BY 1, 2, 3, 4
ON CONFLICT (day, tenant, project, resource)
DO UPDATE SET reserved_unit_us = g.reserved_unit_us + EXCLUDED.reserved_unit_us,
  idle_unit_us = g.idle_unit_us + EXCLUDED.idle_unit_us
)sql";
// [$1, $2) the window in microseconds, $3 the period, $4 $5 the tenant and project filters ('' for
// all), $6 the cluster filter (guarantees are on no cluster: one named matches nothing), $7 the
// most rows.
constexpr const char* kReportGuarantees = "SELECT " GPUFED_REPORT_PERIOD R"sql(,
  tenant, project, resource, sum(reserved_unit_us)::bigint AS reserved,
  sum(idle_unit_us)::bigint AS idle
FROM guarantee_daily
WHERE day >= from_epoch_us($1) AND day < from_epoch_us($2) AND $6 = ''
  AND ($4 = '' OR tenant = $4) AND ($5 = '' OR project = $5)
GROUP BY 1, 2, 3, 4
LIMIT $7
)sql";

constexpr std::pair<const char*, const char*> kStatements[] = {
    {"report_usage", kReportUsage},
    {"report_held_costs", kReportHeldCosts},
    {"record_guarantees", kRecordGuarantees},
    {"report_guarantees", kReportGuarantees},
    {"running_marks", kRunningMarks},
    {"meter_due", kMeterDue},
    {"move_marks", kMoveMarks},
    {"database_now", kDatabaseNow},
    {"insert_usage_records", kInsertUsageRecords},
    {"list_usage_records", kListUsageRecords},
    {"insert_telemetry", kInsertTelemetry},
    {"list_telemetry", kListTelemetry},
    {"prune_telemetry", kPruneTelemetry},
    {"submit_batch", kSubmitBatch},
    {"submit_lookup", kSubmitLookup},
    {"get_workload", kGetWorkload},
    {"get_workloads", kGetWorkloads},
    {"get_archived_workload", kGetArchivedWorkload},
    {"archive_finished", kArchiveFinished},
    {"lock_workload", kLockWorkload},
    {"list_pending", kListPending},
    {"list_pending_versions", kListPendingVersions},
    {"list_changed_after", kListChangedAfter},
    {"list_active", kListActive},
    {"list_active_on_cluster", kListActiveOnCluster},
    {"list_held_ids", kListHeldIds},
    {"lock_workloads", kLockWorkloads},
    {"share_clusters", kShareClusters},
    {"apply_transitions", kApplyTransitions},
    {"set_pending_reasons", kSetPendingReasons},
    {"cancel_now", kCancelNow},
    {"request_cancel", kRequestCancel},
    {"request_evictions", kRequestEvictions},
    {"insert_preemption", kInsertPreemption},
    {"list_preemptions", kListPreemptions},
    {"upsert_share_weight", kUpsertShareWeight},
    {"list_share_weights", kListShareWeights},
    {"delete_usage", kDeleteUsage},
    {"insert_usage", kInsertUsage},
    {"list_usage", kListUsage},
    {"upsert_cluster", kUpsertCluster},
    {"delete_gpus", kDeleteGpus},
    {"delete_nodes", kDeleteNodes},
    {"insert_nodes", kInsertNodes},
    {"insert_gpus", kInsertGpus},
    {"list_clusters", kListClusters},
    {"get_cluster", kGetCluster},
    {"list_nodes", kListNodes},
    {"cordon_cluster", kCordonCluster},
    {"lock_cluster", kLockCluster},
    {"cluster_dependents", kClusterDependents},
    {"delete_cluster", kDeleteCluster},
    {"node_exists", kNodeExists},
    {"node_known", kNodeKnown},
    {"cordon_node", kCordonNode},
    {"uncordon_node", kUncordonNode},
    {"list_gpus", kListGpus},
    {"record_heartbeat", kRecordHeartbeat},
    {"set_cluster_state", kSetClusterState},
    {"lose_cluster", kLoseCluster},
    {"upsert_declarations", kUpsertDeclarations},
    {"list_declarations", kListDeclarations},
    {"record_audit", kRecordAudit},
    {"create_tenant", kCreateTenant},
    {"list_tenants", kListTenants},
    {"tenant_exists", kTenantExists},
    {"create_project", kCreateProject},
    {"lock_project", kLockProject},
    {"count_project_workloads", kCountProjectWorkloads},
    {"count_project_tokens", kCountProjectTokens},
    {"delete_project", kDeleteProject},
    {"lock_tenant", kLockTenant},
    {"tenant_dependents", kTenantDependents},
    {"delete_tenant", kDeleteTenant},
    {"list_projects", kListProjects},
    {"create_token", kCreateToken},
    {"lookup_token", kLookupToken},
    {"list_tokens", kListTokens},
    {"revoke_token", kRevokeToken},
    {"revoke_cluster_tokens", kRevokeClusterTokens},
    {"count_tokens", kCountTokens},
    {"lock_subject_scope", kLockSubjectScope},
    {"lock_binding", kLockBinding},
    {"share_binding", kShareBinding},
    {"count_scope_bindings", kCountScopeBindings},
    {"upsert_binding", kUpsertBinding},
    {"lower_subject_tokens", kLowerSubjectTokens},
    {"revoke_subject_tokens", kRevokeSubjectTokens},
    {"delete_binding", kDeleteBinding},
    {"list_bindings", kListBindings},
    {"list_subject_bindings", kListSubjectBindings},
    {"add_cluster_certificate", kAddClusterCertificate},
    {"lookup_cluster_certificate", kLookupClusterCertificate},
    {"revoke_cluster_certificates", kRevokeClusterCertificates},
    {"lock_quota_tenant", kLockQuotaTenant},
    {"lock_quota_resource", kLockQuotaResource},
    {"project_exists", kProjectExists},
    {"quotas_on_resource", kQuotasOnResource},
    {"tenant_quota_count", kTenantQuotaCount},
    {"upsert_quota", kUpsertQuota},
    {"delete_quota", kDeleteQuota},
    {"list_tenant_quotas", kListTenantQuotas},
    {"list_all_quotas", kListAllQuotas},
    {"fold_state_counts", kFoldStateCounts},
    {"count_by_state", kCountByState},
    {"schema_version", kSchemaVersion},
};

// List(): one prepared variant per combination of filters, so each gets a plan that can use
// the index for its filter (a single "($1 = '' OR tenant = $1)" statement would get a generic
// plan that cannot). Bit 0: tenant, 1: project, 2: states, 3: cluster.
constexpr int kListVariants = 16;

std::string ListStatementName(int mask) { return absl::StrCat("list_workloads_", mask); }

std::string ListStatementSql(int mask) {
  std::string sql = "SELECT" GPUFED_WORKLOAD_COLUMNS "FROM workloads w WHERE w.id < $1";
  int n = 1;
  if (mask & 1) absl::StrAppend(&sql, " AND w.tenant = $", ++n);
  if (mask & 2) absl::StrAppend(&sql, " AND w.project = $", ++n);
  if (mask & 4) absl::StrAppend(&sql, " AND w.state = ANY($", ++n, "::text[])");
  if (mask & 8) absl::StrAppend(&sql, " AND w.cluster = $", ++n);
  absl::StrAppend(&sql, " ORDER BY w.id DESC LIMIT $", ++n);
  return sql;
}

void RegisterStatements(pqxx::connection& conn) {
  for (const auto& [name, sql] : kStatements) conn.prepare(name, sql);
  for (int mask = 0; mask < kListVariants; ++mask) {
    conn.prepare(ListStatementName(mask), ListStatementSql(mask));
  }
}

// ---- Conversions ---------------------------------------------------------------------------

int64_t ToMicros(Timestamp t) {
  return std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
}

Timestamp FromMicros(int64_t us) {
  return Timestamp(std::chrono::duration_cast<Timestamp::duration>(std::chrono::microseconds(us)));
}

std::optional<Timestamp> OptionalMicros(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return FromMicros(f.as<int64_t>());
}

// A PostgreSQL array literal of integers: {1,2,3}.
std::string IdArray(const std::vector<WorkloadId>& ids) {
  return absl::StrCat("{", absl::StrJoin(ids, ","), "}");
}

// A reason as the columns store it: {"code", "figures", "message"} (RenderReason's words).
json ReasonJson(const PendingReason& reason) {
  return {{"code", std::string(ReasonCodeName(reason.code))},
          {"figures", json::parse(ReasonFiguresToJson(reason.figures))},
          {"message", RenderReason(reason)}};
}

// The stored reason. An unknown code (written by a newer server) or unreadable figures leave
// the words alone, as kUnclassified: the reason is advisory, and reading a workload must not
// fail over it. So do rows written before reasons had codes (migrations/0003).
PendingReason PendingReasonFromRow(const pqxx::row& row) {
  const std::optional<ReasonCode> code = ParseReasonCode(row["pending_reason_code"].c_str());
  if (code && *code != ReasonCode::kNone) {
    absl::StatusOr<std::vector<ReasonFigure>> figures =
        ReasonFiguresFromJson(row["pending_reason_figures"].c_str());
    if (figures.ok()) {
      PendingReason r(*code);
      r.figures = *std::move(figures);
      return r;
    }
  }
  std::string words = row["pending_reason"].c_str();
  if (words.empty()) return {};
  return ReasonWithText(ReasonCode::kUnclassified, std::move(words));
}

absl::StatusOr<Workload> WorkloadFromRow(const pqxx::row& row) {
  Workload w;
  w.id = row["id"].as<int64_t>();
  ASSIGN_OR_RETURN(w.spec, WorkloadSpecFromJson(row["spec"].c_str()));
  std::optional<WorkloadState> state = ParseState(row["state"].c_str());
  if (!state) {
    return absl::InternalError(
        absl::StrCat("workload ", w.id, " has unknown state ", row["state"].c_str()));
  }
  w.state = *state;
  w.pending_reason = PendingReasonFromRow(row);
  if (!row["assignment"].is_null()) {
    ASSIGN_OR_RETURN(w.assignment, AssignmentFromJson(row["assignment"].c_str()));
  }
  w.cancel_requested = row["cancel_requested"].as<bool>();
  w.exit_code = row["exit_code"].as<int32_t>();
  w.message = row["message"].c_str();
  w.create_time = FromMicros(row["created_us"].as<int64_t>());
  w.update_time = FromMicros(row["updated_us"].as<int64_t>());
  w.start_time = OptionalMicros(row["started_us"]);
  w.end_time = OptionalMicros(row["ended_us"]);
  w.version = row["version"].as<uint64_t>();
  w.attempts = row["attempts"].as<uint32_t>();
  if (!row["evicting"].is_null()) {
    w.evicting = ParseAttemptEnd(row["evicting"].c_str());
    if (!w.evicting) {
      return absl::InternalError(absl::StrCat("workload ", w.id, " is evicting for unknown cause ",
                                              row["evicting"].c_str()));
    }
  }
  return w;
}

absl::StatusOr<std::vector<Workload>> WorkloadsFromResult(const pqxx::result& result) {
  std::vector<Workload> out;
  out.reserve(result.size());
  for (const pqxx::row& row : result) {
    ASSIGN_OR_RETURN(Workload w, WorkloadFromRow(row));
    out.push_back(std::move(w));
  }
  return out;
}

// A stored declaration; the row's key names the cluster. One this build cannot read is INTERNAL.
absl::StatusOr<ClusterDeclaration> DeclarationFromRow(const std::string& cluster,
                                                      const pqxx::field& field) {
  absl::StatusOr<ClusterDeclaration> d = ClusterDeclarationFromJson(field.c_str());
  if (!d.ok()) {
    return absl::InternalError(
        absl::StrCat("cluster ", cluster, ": stored declaration: ", d.status().message()));
  }
  d->cluster = cluster;
  return d;
}

absl::StatusOr<Cluster> ClusterFromRow(const pqxx::row& row) {
  Cluster c;
  c.info.name = row["name"].c_str();
  c.info.provider = row["provider"].c_str();
  c.info.region = row["region"].c_str();
  c.info.zone = row["zone"].c_str();
  c.info.jurisdiction = row["jurisdiction"].c_str();
  try {
    c.info.compliance_labels =
        json::parse(row["compliance_labels"].c_str()).get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    return absl::InternalError(
        absl::StrCat("cluster ", c.info.name, ": compliance_labels: ", e.what()));
  }
  std::optional<ClusterState> state = ParseClusterState(row["state"].c_str());
  if (!state) {
    return absl::InternalError(
        absl::StrCat("cluster ", c.info.name, " has unknown state ", row["state"].c_str()));
  }
  c.state = *state;
  c.epoch = row["epoch"].as<uint64_t>();
  c.last_heartbeat = OptionalMicros(row["heartbeat_us"]);
  c.cordoned = row["cordoned"].as<bool>();
  if (!row["declaration"].is_null()) {
    ASSIGN_OR_RETURN(c.declared, DeclarationFromRow(c.info.name, row["declaration"]));
  }
  return c;
}

// Reads nodes and GPUs of `cluster` ('' = all) into the clusters of `by_name`.
absl::Status ReadInventory(pqxx::transaction_base& txn, const std::string& cluster,
                           std::map<std::string, Cluster*>& by_name) {
  std::map<std::pair<std::string, std::string>, NodeInfo*> nodes;
  for (const pqxx::row& row : txn.exec_prepared("list_nodes", cluster)) {
    auto it = by_name.find(row["cluster"].c_str());
    if (it == by_name.end()) continue;  // registered after the clusters were read
    NodeInfo node;
    node.name = row["name"].c_str();
    node.rack = row["rack"].c_str();
    node.block = row["block"].c_str();
    node.cpu_millis = row["cpu_millis"].as<uint64_t>();
    node.memory_mib = row["memory_mib"].as<uint64_t>();
    ASSIGN_OR_RETURN(node.labels, LabelsFromJson(row["labels"].c_str()));
    node.schedulable = row["schedulable"].as<bool>();
    node.cordoned = row["cordoned"].as<bool>();
    it->second->nodes.push_back(std::move(node));
  }
  // Pointers are taken only once every vector has stopped growing.
  for (auto& [name, c] : by_name) {
    for (NodeInfo& node : c->nodes) nodes[{name, node.name}] = &node;
  }
  for (const pqxx::row& row : txn.exec_prepared("list_gpus", cluster)) {
    auto it = nodes.find({row["cluster"].c_str(), row["node"].c_str()});
    if (it == nodes.end()) continue;
    GpuInfo gpu;
    gpu.uuid = row["uuid"].c_str();
    gpu.index = row["index"].as<uint32_t>();
    gpu.model = row["model"].c_str();
    gpu.memory_mib = row["memory_mib"].as<uint64_t>();
    gpu.nvlink_domain = row["nvlink_domain"].c_str();
    gpu.numa_node = row["numa_node"].as<int32_t>();
    gpu.pcie_switch = row["pcie_switch"].c_str();
    gpu.mig_capable = row["mig_capable"].as<bool>();
    gpu.healthy = row["healthy"].as<bool>();
    gpu.mig_enabled = row["mig_enabled"].as<bool>();
    ASSIGN_OR_RETURN(gpu.mig_layout, MigLayoutFromJson(row["mig_layout"].c_str()));
    it->second->gpus.push_back(std::move(gpu));
  }
  return absl::OkStatus();
}

// The cluster `name` as stored, with its nodes and GPUs; nullopt when there is none.
absl::StatusOr<std::optional<Cluster>> ReadCluster(pqxx::transaction_base& txn,
                                                   const std::string& name) {
  pqxx::result r = txn.exec_prepared("get_cluster", name);
  if (r.empty()) return std::nullopt;
  ASSIGN_OR_RETURN(Cluster cluster, ClusterFromRow(r[0]));
  std::map<std::string, Cluster*> by_name = {{cluster.info.name, &cluster}};
  RETURN_IF_ERROR(ReadInventory(txn, name, by_name));
  return cluster;
}

// ---- Validation ------------------------------------------------------------------------------

// The rules for names are federation/validation.h's; the API applies them, and so does the
// store, which must never hold a name the API would refuse.
absl::Status CheckName(absl::string_view field, const std::string& value) {
  return ValidateName(field, value);
}

// PutDeclarations' input: each passes ValidateDeclaration ("declarations[i]..."), and no cluster
// is named twice (which one would win is not for the store to guess).
absl::Status CheckDeclarations(const std::vector<ClusterDeclaration>& declarations) {
  std::set<std::string_view> seen;
  for (size_t i = 0; i < declarations.size(); ++i) {
    const std::string field = absl::StrCat("declarations[", i, "]");
    RETURN_IF_ERROR(ValidateDeclaration(field, declarations[i]));
    if (!seen.insert(declarations[i].cluster).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".cluster: \"", declarations[i].cluster, "\" is declared twice"));
    }
  }
  return absl::OkStatus();
}

// Records `record` (cut to the audit limits) in `txn`; nothing when it has no action.
void RecordAudit(pqxx::transaction_base& txn, const AuditEvent& record) {
  if (record.action.empty()) return;
  const AuditEvent row = TruncateAuditFields(record);
  txn.exec_prepared0("record_audit", row.actor, row.tenant, row.project, row.action, row.object,
                     row.outcome, row.reason, row.detail);
}

}  // namespace

// ---- Construction -----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<PgStore>> PgStore::Create(const std::string& dsn, Options options) {
  if (options.pool_size < 1) return absl::InvalidArgumentError("pool_size: must be at least 1");
  if (options.max_group_size < 1) {
    return absl::InvalidArgumentError("max_group_size: must be at least 1");
  }
  if (options.committers < 1) return absl::InvalidArgumentError("committers: must be at least 1");
  if (options.completion_threads < 1) {
    return absl::InvalidArgumentError("completion_threads: must be at least 1");
  }
  if (options.control_pool_size < 1) {
    return absl::InvalidArgumentError("control_pool_size: must be at least 1");
  }
  if (options.max_queued_submits < 1) {
    return absl::InvalidArgumentError("max_queued_submits: must be at least 1");
  }
  options.clock = ClockOrSystem(options.clock);
  PgPoolOptions pool_options;
  pool_options.clock = options.clock;
  pool_options.size = options.pool_size;
  pool_options.acquire_timeout = options.acquire_timeout;
  pool_options.statement_timeout = options.statement_timeout;
  ASSIGN_OR_RETURN(std::unique_ptr<PgPool> pool,
                   PgPool::Create(dsn, pool_options, RegisterStatements));

  ASSIGN_OR_RETURN(
      int64_t version,
      pool->Transact<pqxx::nontransaction>(
          "reading the schema version", [](pqxx::nontransaction& txn) -> absl::StatusOr<int64_t> {
            if (!txn.exec1("SELECT to_regclass('schema_migrations') IS NOT NULL")[0].as<bool>()) {
              return 0;
            }
            return txn.exec_prepared1("schema_version")[0].as<int64_t>();
          }));
  const int64_t latest = LatestSchemaVersion();
  if (version < latest) {
    return absl::FailedPreconditionError(absl::StrCat("database schema is at version ", version,
                                                      " but this build needs ", latest,
                                                      "; apply the migrations first"));
  }
  if (version > latest) {
    return absl::FailedPreconditionError(absl::StrCat("database schema version ", version,
                                                      " is newer than this gpufed build knows (",
                                                      latest, ")"));
  }

  PgPoolOptions committer_options = pool_options;
  committer_options.size = options.committers;
  ASSIGN_OR_RETURN(std::unique_ptr<PgPool> committer_pool,
                   PgPool::Create(dsn, committer_options, RegisterStatements));
  PgPoolOptions control_options = pool_options;
  control_options.size = options.control_pool_size;
  ASSIGN_OR_RETURN(std::unique_ptr<PgPool> control_pool,
                   PgPool::Create(dsn, control_options, RegisterStatements));
  return std::unique_ptr<PgStore>(
      new PgStore(options, std::move(pool), std::move(committer_pool), std::move(control_pool)));
}

PgStore::PgStore(Options options, std::unique_ptr<PgPool> pool,
                 std::unique_ptr<PgPool> committer_pool, std::unique_ptr<PgPool> control_pool)
    : options_(options),
      pool_(std::move(pool)),
      committer_pool_(std::move(committer_pool)),
      control_pool_(std::move(control_pool)) {
  for (int i = 0; i < options_.committers; ++i) {
    committers_.emplace_back([this] { CommitterLoop(); });
  }
  for (int i = 0; i < options_.completion_threads; ++i) {
    completers_.emplace_back([this] { CompletionLoop(); });
  }
}

PgStore::~PgStore() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : committers_) t.join();
  {
    absl::MutexLock lock(&done_mu_);
    completers_stopping_ = true;
  }
  for (std::thread& t : completers_) t.join();
}

void PgStore::CompletionLoop() {
  while (true) {
    std::unique_ptr<PendingSubmit> p;
    {
      absl::MutexLock lock(&done_mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(done_mu_) {
        return !done_.empty() || completers_stopping_;
      };
      done_mu_.Await(absl::Condition(&ready));
      if (done_.empty()) return;  // stopping, and every caller has been answered
      p = std::move(done_.front());
      done_.pop_front();
    }
    std::move(p->done)(std::move(p->result));
  }
}

PgStore::Stats PgStore::GetStats() const {
  absl::MutexLock lock(&mu_);
  Stats stats = stats_;
  stats.queued = static_cast<int64_t>(queue_.size());
  return stats;
}

absl::StatusOr<int64_t> PgStore::SchemaVersion() {
  return pool_->Transact<pqxx::nontransaction>(
      "reading the schema version", [](pqxx::nontransaction& txn) -> absl::StatusOr<int64_t> {
        return txn.exec_prepared1("schema_version")[0].as<int64_t>();
      });
}

// ---- Submit: group commit --------------------------------------------------------------------

absl::StatusOr<SubmitResult> PgStore::Submit(const WorkloadSpec& spec, const PendingReason& reason,
                                             const std::string& actor) {
  absl::Notification committed;
  absl::StatusOr<SubmitResult> out;
  SubmitAsync(spec, reason, actor, CurrentDeadline(), [&](absl::StatusOr<SubmitResult> result) {
    out = std::move(result);
    committed.Notify();
  });
  committed.WaitForNotification();
  return out;
}

void PgStore::SubmitAsync(const WorkloadSpec& spec, const PendingReason& reason,
                          const std::string& actor, absl::Time deadline, SubmitCallback done) {
  absl::Status valid = [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckName("spec.tenant", spec.tenant));
    RETURN_IF_ERROR(CheckName("spec.project", spec.project));
    if (spec.name.empty()) return absl::InvalidArgumentError("spec.name: required");
    return absl::OkStatus();
  }();
  if (!valid.ok()) {
    std::move(done)(valid);
    return;
  }
  auto pending = std::make_unique<PendingSubmit>();
  pending->owned_spec = spec;
  pending->spec_json = WorkloadSpecToJson(spec);
  pending->reason = reason;
  pending->reason_json = ReasonJson(reason).dump(-1, ' ', false, json::error_handler_t::replace);
  pending->actor_json = json(actor).dump(-1, ' ', false, json::error_handler_t::replace);
  pending->deadline = deadline;
  pending->done = std::move(done);
  absl::Status refused;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      refused = absl::UnavailableError("submit: the store is shutting down");
    } else if (queue_.size() >= static_cast<size_t>(options_.max_queued_submits)) {
      refused = absl::UnavailableError(absl::StrCat(
          "submit: ", queue_.size(), " submits already waiting for the database; retry later"));
    } else {
      queue_.push_back(std::move(pending));
    }
  }
  // NOLINTNEXTLINE(bugprone-use-after-move): `pending` is moved only when `refused` is OK.
  if (!refused.ok()) std::move(pending->done)(refused);
}

void PgStore::CommitterLoop() {
  while (true) {
    std::vector<std::unique_ptr<PendingSubmit>> taken;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stopping, and everything queued has been answered
      size_t take = std::min(queue_.size(), static_cast<size_t>(options_.max_group_size));
      taken.reserve(take);
      for (size_t i = 0; i < take; ++i) {
        taken.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    // A caller whose deadline passed has been told so by its transport: storing its workload
    // now would acknowledge nobody and surprise the retry.
    const absl::Time now = absl::FromChrono(options_.clock->Now());
    std::vector<PendingSubmit*> group;
    group.reserve(taken.size());
    for (const auto& p : taken) {
      if (p->deadline < now) {
        p->result = absl::DeadlineExceededError("submit: deadline passed before the commit");
      } else {
        group.push_back(p.get());
      }
    }
    if (!group.empty()) CommitGroup(group);
    // The commit completes the calls: each callback answers its caller, on the completion
    // threads, while this one goes on to the next group.
    absl::MutexLock lock(&done_mu_);
    for (auto& p : taken) done_.push_back(std::move(p));
  }
}

namespace {

// What one insert statement decided: final outcomes for the entries it inserted or could not
// resolve, and the entries whose idempotency key was already taken (to be looked up).
struct RoundResult {
  std::vector<std::pair<size_t, absl::StatusOr<SubmitResult>>> outcomes;
  std::vector<size_t> clashes;
};

// [{"ord": i, "spec": {...}, "reason": {...}, "actor": "..."}, ...] for the given entries of the
// group.
std::string SubmitInput(const std::vector<PendingSubmit*>& group,
                        const std::vector<size_t>& entries) {
  std::string input = "[";
  for (size_t i : entries) {
    if (input.size() > 1) input += ',';
    absl::StrAppend(&input, "{\"ord\":", i, ",\"spec\":", group[i]->spec_json,
                    ",\"reason\":", group[i]->reason_json, ",\"actor\":", group[i]->actor_json,
                    "}");
  }
  input += ']';
  return input;
}

// Inserts `entries` of `group` with one statement (kSubmitBatch).
RoundResult InsertRound(pqxx::transaction_base& txn, const std::vector<PendingSubmit*>& group,
                        const std::vector<size_t>& entries) {
  RoundResult round;
  for (const pqxx::row& row : txn.exec_prepared("submit_batch", SubmitInput(group, entries))) {
    const auto ord = row["ord"].as<size_t>();
    const WorkloadSpec& spec = *group[ord]->spec;
    if (!row["tenant_found"].as<bool>()) {
      round.outcomes.emplace_back(
          ord, absl::NotFoundError(
                   absl::StrCat("spec.tenant: tenant \"", spec.tenant, "\" does not exist")));
    } else if (!row["project_found"].as<bool>()) {
      round.outcomes.emplace_back(ord, absl::NotFoundError(absl::StrCat(
                                           "spec.project: project \"", spec.project,
                                           "\" does not exist in tenant \"", spec.tenant, "\"")));
    } else if (row["id"].is_null()) {
      round.clashes.push_back(ord);
    } else {
      SubmitResult result;
      result.created = true;
      Workload& w = result.workload;
      w.id = row["id"].as<int64_t>();
      w.spec = spec;
      w.state = WorkloadState::kPending;
      w.pending_reason = group[ord]->reason;
      w.create_time = FromMicros(row["created_us"].as<int64_t>());
      w.update_time = FromMicros(row["updated_us"].as<int64_t>());
      w.version = row["version"].as<uint64_t>();
      round.outcomes.emplace_back(ord, std::move(result));
    }
  }
  return round;
}

// The workloads holding the keys of `clashes`: the earlier workload if the spec is the same,
// ALREADY_EXISTS otherwise.
absl::StatusOr<std::vector<std::pair<size_t, absl::StatusOr<SubmitResult>>>> LookUpClashes(
    pqxx::transaction_base& txn, const std::vector<PendingSubmit*>& group,
    const std::vector<size_t>& clashes) {
  std::vector<std::pair<size_t, absl::StatusOr<SubmitResult>>> out;
  for (const pqxx::row& row : txn.exec_prepared("submit_lookup", SubmitInput(group, clashes))) {
    const auto ord = row["ord"].as<size_t>();
    ASSIGN_OR_RETURN(Workload existing, WorkloadFromRow(row));
    if (row["same_spec"].as<bool>()) {
      out.emplace_back(ord, SubmitResult{std::move(existing), false});
    } else {
      out.emplace_back(
          ord, absl::AlreadyExistsError(absl::StrCat(
                   "spec.idempotency_key: \"", group[ord]->spec->idempotency_key,
                   "\" was already used by workload ", existing.id, " with a different spec")));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<absl::StatusOr<SubmitResult>>> PgStore::CommitOnce(
    const std::vector<PendingSubmit*>& group) {
  std::vector<absl::StatusOr<SubmitResult>> outcomes(
      group.size(), absl::InternalError("submit: the database returned no row for it"));
  // Several submits of one idempotency key in one group go to successive rounds (statements)
  // so that each later one sees the earlier one's row, exactly as if they had come one after
  // the other.
  std::vector<std::vector<size_t>> rounds(1);
  {
    std::map<std::pair<std::string_view, std::string_view>, size_t> seen;
    for (size_t i = 0; i < group.size(); ++i) {
      const WorkloadSpec& spec = *group[i]->spec;
      size_t round = 0;
      if (!spec.idempotency_key.empty()) round = seen[{spec.tenant, spec.idempotency_key}]++;
      if (round >= rounds.size()) rounds.resize(round + 1);
      rounds[round].push_back(i);
    }
  }

  if (rounds.size() == 1) {
    // The common case: one statement, committing by itself — a single round trip and a single
    // WAL flush for the whole group. Not retried if the connection breaks under it: it may
    // have committed, and the callers' idempotency keys make their own retries safe.
    ASSIGN_OR_RETURN(RoundResult round,
                     committer_pool_->Transact<pqxx::nontransaction>(
                         "submit",
                         [&](pqxx::nontransaction& txn) -> absl::StatusOr<RoundResult> {
                           return InsertRound(txn, group, rounds[0]);
                         },
                         /*idempotent=*/false));
    for (auto& [i, outcome] : round.outcomes) outcomes[i] = std::move(outcome);
    if (!round.clashes.empty()) {
      // Read-only, after the commit: the rows found are committed and their keys and specs
      // never change.
      auto found = committer_pool_->Transact<pqxx::nontransaction>(
          "submit",
          [&](pqxx::nontransaction& txn) { return LookUpClashes(txn, group, round.clashes); });
      if (!found.ok()) {
        for (size_t i : round.clashes) outcomes[i] = found.status();
      } else {
        for (auto& [i, outcome] : *found) outcomes[i] = std::move(outcome);
      }
    }
    return outcomes;
  }

  ASSIGN_OR_RETURN(
      auto decided,
      committer_pool_->Transact(
          "submit",
          [&](pqxx::work& txn)
              -> absl::StatusOr<std::vector<std::pair<size_t, absl::StatusOr<SubmitResult>>>> {
            std::vector<std::pair<size_t, absl::StatusOr<SubmitResult>>> all;
            for (const std::vector<size_t>& entries : rounds) {
              RoundResult round = InsertRound(txn, group, entries);
              for (auto& entry : round.outcomes) all.push_back(std::move(entry));
              if (round.clashes.empty()) continue;
              ASSIGN_OR_RETURN(auto found, LookUpClashes(txn, group, round.clashes));
              for (auto& entry : found) all.push_back(std::move(entry));
            }
            return all;
          }));
  for (auto& [i, outcome] : decided) outcomes[i] = std::move(outcome);
  return outcomes;
}

void PgStore::CommitGroup(const std::vector<PendingSubmit*>& group) {
  absl::StatusOr<std::vector<absl::StatusOr<SubmitResult>>> outcomes = CommitOnce(group);
  if (outcomes.ok()) {
    for (size_t i = 0; i < group.size(); ++i) group[i]->result = std::move((*outcomes)[i]);
  } else if (group.size() > 1 && !absl::IsUnavailable(outcomes.status()) &&
             !absl::IsDeadlineExceeded(outcomes.status()) && !absl::IsAborted(outcomes.status())) {
    // The group's statement failed as a whole (so nothing of it was committed) for a reason
    // that may lie in one entry, say text PostgreSQL refuses: commit each alone so that only
    // that one fails.
    for (PendingSubmit* p : group) {
      absl::StatusOr<std::vector<absl::StatusOr<SubmitResult>>> single = CommitOnce({p});
      p->result =
          single.ok() ? std::move((*single)[0]) : absl::StatusOr<SubmitResult>(single.status());
    }
  } else {
    for (PendingSubmit* p : group) p->result = outcomes.status();
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.submits += static_cast<int64_t>(group.size());
    stats_.submit_groups += 1;
    stats_.largest_group =
        std::max<int64_t>(stats_.largest_group, static_cast<int64_t>(group.size()));
  }
}

// ---- Workload reads --------------------------------------------------------------------------

absl::StatusOr<Workload> PgStore::Get(WorkloadId id) {
  if (id <= 0) return absl::InvalidArgumentError("id: must be positive");
  return pool_->Transact<pqxx::nontransaction>(
      "get workload", [id](pqxx::nontransaction& txn) -> absl::StatusOr<Workload> {
        pqxx::result r = txn.exec_prepared("get_workload", id);
        if (r.empty()) r = txn.exec_prepared("get_archived_workload", id);
        if (r.empty()) return absl::NotFoundError(absl::StrCat("workload ", id, " not found"));
        return WorkloadFromRow(r[0]);
      });
}

absl::StatusOr<WorkloadPage> PgStore::List(const ListFilter& filter) {
  if (filter.page_size < 0) return absl::InvalidArgumentError("page_size: must not be negative");
  if (filter.before_id < 0) return absl::InvalidArgumentError("before_id: must not be negative");
  constexpr int kDefaultPageSize = 100;
  constexpr int kMaxPageSize = 1000;
  const int page_size =
      filter.page_size == 0 ? kDefaultPageSize : std::min(filter.page_size, kMaxPageSize);

  int mask = 0;
  std::vector<std::string> params;
  params.push_back(std::to_string(filter.before_id > 0 ? filter.before_id
                                                       : std::numeric_limits<int64_t>::max()));
  if (!filter.tenant.empty()) {
    mask |= 1;
    params.push_back(filter.tenant);
  }
  if (!filter.project.empty()) {
    mask |= 2;
    params.push_back(filter.project);
  }
  if (!filter.states.empty()) {
    mask |= 4;
    std::vector<std::string> names;
    for (size_t i = 0; i < filter.states.size(); ++i) {
      if (filter.states[i] == WorkloadState::kUnspecified) {
        return absl::InvalidArgumentError(absl::StrCat("states[", i, "]: unspecified"));
      }
      names.emplace_back(StateName(filter.states[i]));
    }
    params.push_back(absl::StrCat("{", absl::StrJoin(names, ","), "}"));
  }
  if (!filter.cluster.empty()) {
    mask |= 8;
    params.push_back(filter.cluster);
  }
  params.push_back(std::to_string(page_size + 1));  // one more: is there a next page?

  return pool_->Transact<pqxx::nontransaction>(
      "list workloads", [&](pqxx::nontransaction& txn) -> absl::StatusOr<WorkloadPage> {
        pqxx::result r =
            txn.exec_prepared(ListStatementName(mask), pqxx::prepare::make_dynamic_params(params));
        WorkloadPage page;
        const size_t n = std::min(r.size(), static_cast<size_t>(page_size));
        page.workloads.reserve(n);
        for (size_t i = 0; i < n; ++i) {
          ASSIGN_OR_RETURN(Workload w, WorkloadFromRow(r[i]));
          page.workloads.push_back(std::move(w));
        }
        if (r.size() > n && !page.workloads.empty()) {
          page.next_before_id = page.workloads.back().id;
        }
        return page;
      });
}

absl::StatusOr<std::vector<Workload>> PgStore::ListPending(int limit) {
  if (limit <= 0) return absl::InvalidArgumentError("limit: must be positive");
  return control_pool_->Transact<pqxx::nontransaction>(
      "list pending workloads", [limit](pqxx::nontransaction& txn) {
        return WorkloadsFromResult(txn.exec_prepared("list_pending", limit));
      });
}

absl::StatusOr<std::vector<WorkloadStore::PendingVersion>> PgStore::ListPendingVersions(int limit) {
  if (limit <= 0) return absl::InvalidArgumentError("limit: must be positive");
  return control_pool_->Transact<pqxx::nontransaction>(
      "list pending versions",
      [limit](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<PendingVersion>> {
        std::vector<PendingVersion> out;
        const pqxx::result rows = txn.exec_prepared("list_pending_versions", limit);
        out.reserve(rows.size());
        for (const pqxx::row& row : rows) {
          out.push_back({row[0].as<WorkloadId>(), row[1].as<uint64_t>()});
        }
        return out;
      });
}

absl::StatusOr<std::vector<Workload>> PgStore::GetWorkloads(std::vector<WorkloadId> ids) {
  RETURN_IF_ERROR(CheckGetWorkloads(ids));
  if (ids.empty()) return std::vector<Workload>{};
  return control_pool_->Transact<pqxx::nontransaction>(
      "read workloads", [&ids](pqxx::nontransaction& txn) {
        return WorkloadsFromResult(txn.exec_prepared("get_workloads", IdArray(ids)));
      });
}

absl::StatusOr<std::vector<Workload>> PgStore::ListChangedAfter(const std::string& tenant,
                                                                Timestamp after_time,
                                                                WorkloadId after_id, int limit) {
  if (limit < 1 || limit > 1000) return absl::InvalidArgumentError("limit: must be 1..1000");
  std::optional<std::string> only;
  if (!tenant.empty()) only = tenant;
  return pool_->Transact<pqxx::nontransaction>(
      "list changed workloads", [&](pqxx::nontransaction& txn) {
        return WorkloadsFromResult(
            txn.exec_prepared("list_changed_after", ToMicros(after_time), after_id, only, limit));
      });
}

absl::StatusOr<std::vector<Workload>> PgStore::ListActive(const std::string& cluster) {
  return control_pool_->Transact<pqxx::nontransaction>(
      "list active workloads", [&cluster](pqxx::nontransaction& txn) {
        return WorkloadsFromResult(cluster.empty()
                                       ? txn.exec_prepared("list_active")
                                       : txn.exec_prepared("list_active_on_cluster", cluster));
      });
}

absl::StatusOr<std::vector<WorkloadId>> PgStore::ListHeldIds(const std::string& tenant,
                                                             const std::string& project) {
  return pool_->Transact<pqxx::nontransaction>(
      "list held workload ids",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<WorkloadId>> {
        std::vector<WorkloadId> out;
        for (const auto& row : txn.exec_prepared("list_held_ids", tenant, project)) {
          out.push_back(row[0].as<WorkloadId>());
        }
        return out;
      });
}

// ---- Workload writes -------------------------------------------------------------------------

namespace {

// A batch of transitions made ready for the database: one JSON input per round, the workloads
// to lock, the clusters placements name.
struct PreparedTransitions {
  std::vector<std::string> inputs;
  std::vector<WorkloadId> ids;  // sorted
  std::string placed_on;        // JSON array of cluster names; empty: no placements
  // Per round, the ids of the workloads whose run it may end (transitions from RUNNING).
  std::vector<std::vector<WorkloadId>> ending;
};

absl::StatusOr<PreparedTransitions> PrepareTransitions(const std::vector<Transition>& transitions) {
  for (size_t i = 0; i < transitions.size(); ++i) {
    RETURN_IF_ERROR(ValidateTransition(transitions[i], i));
  }
  PreparedTransitions out;
  // Round k holds the k-th transition of each workload, so several steps of one workload in
  // one batch (PLACED -> RUNNING -> SUCCEEDED) apply in order, each against the state the
  // previous one left.
  std::vector<int> round_of(transitions.size());
  int rounds = 1;
  std::set<std::string> clusters;
  {
    std::unordered_map<WorkloadId, int> seen;
    for (size_t i = 0; i < transitions.size(); ++i) {
      round_of[i] = seen[transitions[i].id]++;
      rounds = std::max(rounds, round_of[i] + 1);
      if (transitions[i].to == WorkloadState::kPlaced) {
        clusters.insert(transitions[i].assignment->cluster);
      }
    }
    for (const auto& [id, count] : seen) out.ids.push_back(id);
    std::sort(out.ids.begin(), out.ids.end());
  }
  if (!clusters.empty()) out.placed_on = json(clusters).dump();
  out.inputs.resize(rounds);
  out.ending.resize(rounds);
  for (size_t i = 0; i < transitions.size(); ++i) {
    if (transitions[i].from == WorkloadState::kRunning) {
      out.ending[round_of[i]].push_back(transitions[i].id);
    }
  }
  std::vector<json> docs(rounds, json::array());
  for (size_t i = 0; i < transitions.size(); ++i) {
    const Transition& t = transitions[i];
    json row = {
        {"ord", i},
        {"id", t.id},
        {"from_state", std::string(StateName(t.from))},
        {"to_state", std::string(StateName(t.to))},
        {"actor", t.actor},
        {"reason", t.reason},
        {"assignment", t.to == WorkloadState::kPlaced ? json::parse(AssignmentToJson(*t.assignment))
                                                      : json(nullptr)},
        {"exit_code", t.exit_code ? json(*t.exit_code) : json(nullptr)},
        {"message", t.message},
        {"at_us", t.time ? json(ToMicros(*t.time)) : json(nullptr)},
        {"on_cluster", t.on_cluster.empty() ? json(nullptr) : json(t.on_cluster)},
        {"at_attempt", t.at_attempt == 0 ? json(nullptr) : json(t.at_attempt)},
        {"unless_evicting", t.unless_evicting},
    };
    // Back to PENDING (a requeue): the reason given, else the actor's words until the scheduler
    // has a better one. ADMITTED keeps waiting, with the reason given.
    PendingReason pending;
    if (t.to == WorkloadState::kAdmitted && t.pending_reason) pending = *t.pending_reason;
    if (t.to == WorkloadState::kPending) {
      pending =
          t.pending_reason ? *t.pending_reason : ReasonWithText(ReasonCode::kRequeued, t.reason);
    }
    row["pending_code"] = std::string(ReasonCodeName(pending.code));
    row["pending_figures"] = json::parse(ReasonFiguresToJson(pending.figures));
    row["pending_message"] = RenderReason(pending);
    docs[round_of[i]].push_back(std::move(row));
  }
  for (int r = 0; r < rounds; ++r) {
    out.inputs[r] = docs[r].dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return out;
}

// ---- Metering ---------------------------------------------------------------------------------

json UsageJson(const std::vector<UsageRecord>& records) {
  json out = json::array();
  for (const UsageRecord& r : records) {
    out.push_back({{"workload_id", r.workload},
                   {"attempt", r.attempt},
                   {"replica", r.replica},
                   {"tenant", r.tenant},
                   {"project", r.project},
                   {"workload_class", std::string(ClassName(r.workload_class))},
                   {"cluster", r.cluster},
                   {"node", r.node},
                   {"gpu_uuid", r.gpu_uuid},
                   {"gpu_model", r.gpu_model},
                   {"mig_profile", r.mig_profile},
                   {"gpu_milli", r.gpu_milli},
                   {"capacity", std::string(CapacityTypeName(r.capacity))},
                   {"from_us", ToMicros(r.from)},
                   {"to_us", ToMicros(r.to)},
                   {"fraction_num", r.fraction.num},
                   {"fraction_den", r.fraction.den},
                   {"price", r.price_micros_per_hour ? json(*r.price_micros_per_hour) : json()},
                   {"profile_priced", r.profile_priced},
                   {"cost", r.cost_micros},
                   {"gpu_line_cost", r.gpu_line_cost_micros}});
  }
  return out;
}

json GuaranteeJson(const std::vector<GuaranteeUse>& uses) {
  json out = json::array();
  for (const GuaranteeUse& u : uses) {
    out.push_back({{"day_us", ToMicros(u.day)},
                   {"tenant", u.key.tenant},
                   {"project", u.key.project},
                   {"resource", u.key.resource},
                   {"reserved", u.reserved_unit_us},
                   {"idle", u.idle_unit_us}});
  }
  return out;
}

json OptionalJson(const std::optional<double>& v) { return v ? json(*v) : json(); }

std::optional<double> OptionalDouble(const pqxx::field& f) {
  if (f.is_null()) return std::nullopt;
  return f.as<double>();
}

json TelemetryJson(const std::vector<TelemetryUse>& uses) {
  json out = json::array();
  for (const TelemetryUse& u : uses) {
    const TelemetryMinute& m = u.minute;
    const GpuMetrics& g = m.metrics;
    out.push_back({{"gpu_uuid", m.gpu_uuid},
                   {"mig_profile", m.mig_profile},
                   {"mig_start", m.mig_start},
                   {"minute_us", ToMicros(m.minute)},
                   {"workload_id", m.workload},
                   {"attempt", m.attempt},
                   {"tenant", u.usage.tenant},
                   {"project", u.usage.project},
                   {"workload_class", std::string(ClassName(u.usage.workload_class))},
                   {"gpu_model", u.usage.gpu_model},
                   {"capacity", std::string(CapacityTypeName(u.usage.capacity))},
                   {"covered_seconds", m.covered_seconds},
                   {"gr_engine_active", OptionalJson(g.gr_engine_active)},
                   {"sm_active", OptionalJson(g.sm_active)},
                   {"sm_occupancy", OptionalJson(g.sm_occupancy)},
                   {"pipe_tensor_active", OptionalJson(g.pipe_tensor_active)},
                   {"dram_active", OptionalJson(g.dram_active)},
                   {"gpu_util", OptionalJson(g.gpu_util)},
                   {"fb_used_mib", OptionalJson(g.fb_used_mib)},
                   {"power_watts", OptionalJson(g.power_watts)},
                   {"gpu_temp_celsius", OptionalJson(g.gpu_temp_celsius)},
                   {"activity", u.activity.value},
                   {"activity_source", std::string(ActivitySourceName(u.activity.source))},
                   {"measured_gpu_us", u.measured_gpu_us},
                   {"effective_gpu_us", u.effective_gpu_us},
                   {"coarse_gpu_us", u.coarse_gpu_us}});
  }
  return out;
}

TelemetryRow TelemetryFromRow(const pqxx::row& row) {
  TelemetryRow r;
  r.cluster = row["cluster"].c_str();
  TelemetryMinute& m = r.minute;
  m.gpu_uuid = row["gpu_uuid"].c_str();
  m.mig_profile = row["mig_profile"].c_str();
  m.mig_start = row["mig_start"].as<uint32_t>();
  m.minute = FromMicros(row["minute_us"].as<int64_t>());
  m.workload = row["workload_id"].as<int64_t>();
  m.attempt = row["attempt"].as<uint32_t>();
  m.covered_seconds = row["covered_seconds"].as<int32_t>();
  GpuMetrics& g = m.metrics;
  g.gr_engine_active = OptionalDouble(row["gr_engine_active"]);
  g.sm_active = OptionalDouble(row["sm_active"]);
  g.sm_occupancy = OptionalDouble(row["sm_occupancy"]);
  g.pipe_tensor_active = OptionalDouble(row["pipe_tensor_active"]);
  g.dram_active = OptionalDouble(row["dram_active"]);
  g.gpu_util = OptionalDouble(row["gpu_util"]);
  g.fb_used_mib = OptionalDouble(row["fb_used_mib"]);
  g.power_watts = OptionalDouble(row["power_watts"]);
  g.gpu_temp_celsius = OptionalDouble(row["gpu_temp_celsius"]);
  r.tenant = row["tenant"].c_str();
  r.project = row["project"].c_str();
  r.activity.value = row["activity"].as<double>();
  r.activity.source =
      ParseActivitySource(row["activity_source"].c_str()).value_or(ActivitySource::kNone);
  r.measured_gpu_us = row["measured_gpu_us"].as<int64_t>();
  r.effective_gpu_us = row["effective_gpu_us"].as<int64_t>();
  r.coarse_gpu_us = row["coarse_gpu_us"].as<int64_t>();
  return r;
}

UsageRecord UsageFromRow(const pqxx::row& row) {
  UsageRecord r;
  r.workload = row["workload_id"].as<int64_t>();
  r.attempt = row["attempt"].as<uint32_t>();
  r.replica = row["replica"].as<uint32_t>();
  r.tenant = row["tenant"].c_str();
  r.project = row["project"].c_str();
  r.workload_class =
      ParseClass(row["workload_class"].c_str()).value_or(WorkloadClass::kUnspecified);
  r.cluster = row["cluster"].c_str();
  r.node = row["node"].c_str();
  r.gpu_uuid = row["gpu_uuid"].c_str();
  r.gpu_model = row["gpu_model"].c_str();
  r.mig_profile = row["mig_profile"].c_str();
  r.gpu_milli = row["gpu_milli"].as<uint32_t>();
  r.capacity = ParseCapacityType(row["capacity"].c_str()).value_or(CapacityType::kOnDemand);
  r.from = FromMicros(row["from_us"].as<int64_t>());
  r.to = FromMicros(row["to_us"].as<int64_t>());
  r.fraction = Fraction{row["fraction_num"].as<int64_t>(), row["fraction_den"].as<int64_t>()};
  if (!row["price_micros_per_hour"].is_null()) {
    r.price_micros_per_hour = row["price_micros_per_hour"].as<int64_t>();
  }
  r.profile_priced = row["profile_priced"].as<bool>();
  r.cost_micros = row["cost_micros"].as<int64_t>();
  r.gpu_line_cost_micros = row["gpu_line_cost_micros"].as<int64_t>();
  return r;
}

// The clusters runs are metered on, read once per transaction (inventory and declaration).
class MeteredClusters {
 public:
  explicit MeteredClusters(pqxx::work& txn) : txn_(txn) {}
  // The cluster `name` as stored, or one with no nodes and no prices when it is gone: its runs
  // are still metered, unpriced.
  absl::StatusOr<const Cluster*> Get(const std::string& name) {
    if (auto it = clusters_.find(name); it != clusters_.end()) return &it->second;
    Cluster& c = clusters_[name];
    c.info.name = name;
    ASSIGN_OR_RETURN(std::optional<Cluster> stored, ReadCluster(txn_, name));
    if (stored) c = *std::move(stored);
    return &c;
  }

 private:
  pqxx::work& txn_;
  std::map<std::string, Cluster> clusters_;
};

Timestamp DatabaseNow(pqxx::work& txn) {
  return FromMicros(txn.exec_prepared1("database_now")[0].as<int64_t>());
}

void InsertUsage(pqxx::work& txn, const std::vector<UsageRecord>& records) {
  if (records.empty()) return;
  txn.exec_prepared("insert_usage_records",
                    UsageJson(records).dump(-1, ' ', false, json::error_handler_t::replace));
}

// A running workload as it was before a change, with its metering mark.
struct RunningBefore {
  Workload workload;
  Timestamp mark{};
};

absl::StatusOr<std::map<WorkloadId, RunningBefore>> ReadRunning(
    pqxx::work& txn, const std::vector<WorkloadId>& ids) {
  std::map<WorkloadId, RunningBefore> out;
  if (ids.empty()) return out;
  for (const pqxx::row& row : txn.exec_prepared("running_marks", IdArray(ids))) {
    ASSIGN_OR_RETURN(Workload w, WorkloadFromRow(row));
    const WorkloadId id = w.id;
    out[id] = RunningBefore{std::move(w), FromMicros(row["mark_us"].as<int64_t>())};
  }
  return out;
}

// Records the last span of every run that `round` (ords into `results`) took out of RUNNING:
// from its mark to the change's time, the latter kept between the mark and the database's clock.
absl::Status MeterEnds(pqxx::work& txn, const std::map<WorkloadId, RunningBefore>& before,
                       const std::vector<TransitionResult>& results,
                       const std::vector<size_t>& round, const MeteringPolicy& policy) {
  if (before.empty()) return absl::OkStatus();
  const Timestamp now = DatabaseNow(txn);
  MeteredClusters clusters(txn);
  std::vector<UsageRecord> records;
  for (size_t ord : round) {
    const TransitionResult& r = results[ord];
    if (!r.applied || !r.event || r.event->from != WorkloadState::kRunning) continue;
    auto it = before.find(r.id);
    if (it == before.end()) continue;
    const RunningBefore& run = it->second;
    const Timestamp end = std::min(std::max(r.event->time, run.mark), now);
    ASSIGN_OR_RETURN(const Cluster* cluster, clusters.Get(run.workload.assignment.cluster));
    std::vector<UsageRecord> span = MeterSpan(run.workload, *cluster, run.mark, end, policy);
    records.insert(records.end(), std::make_move_iterator(span.begin()),
                   std::make_move_iterator(span.end()));
  }
  InsertUsage(txn, records);
  return absl::OkStatus();
}

// Applies prepared transitions inside `txn`, metering the runs they end.
absl::StatusOr<std::vector<TransitionResult>> RunTransitions(
    pqxx::work& txn, const std::vector<Transition>& transitions,
    const PreparedTransitions& prepared, const MeteringPolicy& metering) {
  std::vector<TransitionResult> results(transitions.size());
  for (size_t i = 0; i < transitions.size(); ++i) results[i].id = transitions[i].id;
  if (transitions.empty()) return results;
  if (!prepared.placed_on.empty()) txn.exec_prepared("share_clusters", prepared.placed_on);
  txn.exec_prepared("lock_workloads", IdArray(prepared.ids));
  for (size_t round = 0; round < prepared.inputs.size(); ++round) {
    // A run this round ends is read before the round changes it (a batch may start and end it:
    // PLACED -> RUNNING in one round, RUNNING -> SUCCEEDED in the next).
    using Marks = std::map<WorkloadId, RunningBefore>;
    ASSIGN_OR_RETURN(const Marks running, ReadRunning(txn, prepared.ending[round]));
    std::vector<size_t> applied;
    for (const pqxx::row& row : txn.exec_prepared("apply_transitions", prepared.inputs[round])) {
      const auto ord = row["ord"].as<size_t>();
      applied.push_back(ord);
      ASSIGN_OR_RETURN(Workload w, WorkloadFromRow(row));
      WorkloadEvent event;
      event.from = transitions[ord].from;
      event.to = w.state;
      event.time = FromMicros(row["event_us"].as<int64_t>());
      event.workload = w;
      results[ord].applied = true;
      results[ord].current = std::move(w);
      results[ord].event = std::move(event);
    }
    RETURN_IF_ERROR(MeterEnds(txn, running, results, applied, metering));
  }
  std::vector<WorkloadId> skipped;
  for (const TransitionResult& r : results) {
    if (!r.applied) skipped.push_back(r.id);
  }
  if (!skipped.empty()) {
    ASSIGN_OR_RETURN(std::vector<Workload> now,
                     WorkloadsFromResult(txn.exec_prepared("get_workloads", IdArray(skipped))));
    std::unordered_map<WorkloadId, const Workload*> by_id;
    for (const Workload& w : now) by_id[w.id] = &w;
    for (TransitionResult& r : results) {
      if (r.applied) continue;
      if (auto it = by_id.find(r.id); it != by_id.end()) r.current = *it->second;
    }
  }
  return results;
}

}  // namespace

absl::StatusOr<std::vector<TransitionResult>> PgStore::ApplyTransitions(
    const std::vector<Transition>& transitions) {
  ASSIGN_OR_RETURN(PreparedTransitions prepared, PrepareTransitions(transitions));
  if (transitions.empty()) return std::vector<TransitionResult>{};
  return control_pool_->Transact(
      "apply transitions", [&](pqxx::work& txn) -> absl::StatusOr<std::vector<TransitionResult>> {
        return RunTransitions(txn, transitions, prepared, options_.metering);
      });
}

absl::Status PgStore::SetPendingReasons(
    const std::vector<std::pair<WorkloadId, PendingReason>>& reasons) {
  if (reasons.empty()) return absl::OkStatus();
  std::map<WorkloadId, const PendingReason*> last;  // a later entry for the same id wins
  for (size_t i = 0; i < reasons.size(); ++i) {
    if (reasons[i].first <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("reasons[", i, "].id: must be positive"));
    }
    last[reasons[i].first] = &reasons[i].second;
  }
  json input = json::array();
  for (const auto& [id, reason] : last) {
    json entry = ReasonJson(*reason);
    entry["id"] = id;
    input.push_back(std::move(entry));
  }
  const std::string text = input.dump(-1, ' ', false, json::error_handler_t::replace);
  return control_pool_->Transact("set pending reasons", [&text](pqxx::work& txn) {
    txn.exec_prepared("set_pending_reasons", text);
    return absl::OkStatus();
  });
}

namespace {

// RequestCancel's work in `txn`, recording nothing.
absl::StatusOr<WorkloadStore::CancelResult> CancelIn(pqxx::work& txn, WorkloadId id,
                                                     const std::string& actor,
                                                     const std::string& reason) {
  using CancelResult = WorkloadStore::CancelResult;
  pqxx::result locked = txn.exec_prepared("lock_workload", id);
  if (locked.empty()) {
    // An archived workload has ended: say so, as for one still in the hot table.
    pqxx::result archived = txn.exec_prepared("get_archived_workload", id);
    if (archived.empty()) {
      return absl::NotFoundError(absl::StrCat("workload ", id, " not found"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("workload ", id, " is already ", archived[0]["state"].c_str()));
  }
  ASSIGN_OR_RETURN(Workload before, WorkloadFromRow(locked[0]));
  if (IsTerminal(before.state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("workload ", id, " is already ", std::string(StateName(before.state))));
  }
  CancelResult out;
  if (HoldsCapacity(before.state)) {
    // Its agent must stop it first; the agent's report moves it to CANCELLED.
    if (before.cancel_requested) {
      out.workload = std::move(before);
      return out;
    }
    pqxx::result r = txn.exec_prepared("request_cancel", id);
    ASSIGN_OR_RETURN(out.workload, WorkloadFromRow(r[0]));
    return out;
  }
  pqxx::result r =
      txn.exec_prepared("cancel_now", id, actor, reason, std::string(StateName(before.state)));
  ASSIGN_OR_RETURN(out.workload, WorkloadFromRow(r[0]));
  WorkloadEvent event;
  event.workload = out.workload;
  event.from = before.state;
  event.to = WorkloadState::kCancelled;
  event.time = out.workload.update_time;
  out.event = std::move(event);
  return out;
}

}  // namespace

absl::StatusOr<WorkloadStore::CancelResult> PgStore::RequestCancel(WorkloadId id,
                                                                   const std::string& actor,
                                                                   const std::string& reason,
                                                                   const AuditEvent& record) {
  if (id <= 0) return absl::InvalidArgumentError("id: must be positive");
  return pool_->Transact("cancel workload", [&](pqxx::work& txn) -> absl::StatusOr<CancelResult> {
    ASSIGN_OR_RETURN(CancelResult out, CancelIn(txn, id, actor, reason));
    if (!record.action.empty()) {
      AuditEvent row = record;
      row.detail = CancelAuditDetail(out.workload);
      RecordAudit(txn, row);
    }
    return out;
  });
}

namespace {

json EvictionsJson(const std::vector<WorkloadStore::Eviction>& evictions) {
  json input = json::array();
  for (const WorkloadStore::Eviction& e : evictions) {
    input.push_back({{"id", e.id},
                     {"cluster", e.cluster},
                     {"attempt", e.attempt},
                     {"why", std::string(AttemptEndName(e.why))},
                     {"message", e.message}});
  }
  return input;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

PreemptionRecord PreemptionFromRow(const pqxx::row& row) {
  PreemptionRecord r;
  r.id = row["id"].as<int64_t>();
  r.time = FromMicros(row["at_us"].as<int64_t>());
  r.cause = ParsePreemptionCause(row["cause"].c_str()).value_or(PreemptionCause::kGuaranteeReclaim);
  r.preemptor = row["preemptor"].as<int64_t>();
  r.tenant = row["tenant"].c_str();
  r.project = row["project"].c_str();
  r.resource = row["resource"].c_str();
  r.cluster = row["cluster"].c_str();
  r.needed_milli = row["needed_milli"].as<int64_t>();
  r.evicted_milli = row["evicted_milli"].as<int64_t>();
  r.gpu_seconds_lost = row["gpu_seconds_lost"].as<double>();
  for (const json& v : json::parse(row["victims"].c_str())) {
    r.victims.push_back({v.value("id", int64_t{0}), v.value("tenant", ""), v.value("project", ""),
                         v.value("gpu_milli", int64_t{0})});
  }
  for (const json& s : json::parse(row["shares"].c_str())) {
    r.shares.push_back({s.value("tenant", ""), s.value("before_milli", int64_t{0}),
                        s.value("after_milli", int64_t{0})});
  }
  return r;
}

}  // namespace

absl::StatusOr<std::vector<Workload>> PgStore::RequestEvictions(
    const std::vector<Eviction>& evictions) {
  for (size_t i = 0; i < evictions.size(); ++i) RETURN_IF_ERROR(ValidateEviction(evictions[i], i));
  if (evictions.empty()) return std::vector<Workload>{};
  const std::string text = Dump(EvictionsJson(evictions));
  return control_pool_->Transact(
      "request evictions", [&text](pqxx::work& txn) -> absl::StatusOr<std::vector<Workload>> {
        return WorkloadsFromResult(txn.exec_prepared("request_evictions", text));
      });
}

absl::StatusOr<WorkloadStore::PreemptionResult> PgStore::RequestPreemptions(
    const std::vector<Preemption>& preemptions, const AuditEvent& record) {
  std::vector<Eviction> evictions;
  for (size_t i = 0; i < preemptions.size(); ++i) {
    RETURN_IF_ERROR(ValidatePreemption(preemptions[i], i));
    evictions.insert(evictions.end(), preemptions[i].victims.begin(), preemptions[i].victims.end());
  }
  if (evictions.empty()) return PreemptionResult{};
  const std::string text = Dump(EvictionsJson(evictions));
  const Timestamp now = options_.clock->Now();
  return control_pool_->Transact(
      "request preemptions", [&](pqxx::work& txn) -> absl::StatusOr<PreemptionResult> {
        PreemptionResult out;
        ASSIGN_OR_RETURN(out.marked,
                         WorkloadsFromResult(txn.exec_prepared("request_evictions", text)));
        std::vector<WorkloadId> ids;
        for (const Workload& w : out.marked) ids.push_back(w.id);
        out.recorded = RecordsOfMarked(preemptions, ids, now);
        for (PreemptionRecord& r : out.recorded) {
          r.time = FromMicros(ToMicros(r.time));  // as stored
          json tenants = json::array({r.tenant});
          json victims = json::array();
          for (const PreemptionVictim& v : r.victims) {
            victims.push_back({{"id", v.id},
                               {"tenant", v.tenant},
                               {"project", v.project},
                               {"gpu_milli", v.gpu_milli}});
            if (std::find(tenants.begin(), tenants.end(), v.tenant) == tenants.end()) {
              tenants.push_back(v.tenant);
            }
          }
          json shares = json::array();
          for (const TenantShare& s : r.shares) {
            shares.push_back({{"tenant", s.tenant},
                              {"before_milli", s.before_milli},
                              {"after_milli", s.after_milli}});
          }
          pqxx::result id = txn.exec_prepared(
              "insert_preemption", ToMicros(r.time), std::string(PreemptionCauseName(r.cause)),
              r.preemptor, r.tenant, r.project, r.resource, r.cluster, r.needed_milli,
              r.evicted_milli, r.gpu_seconds_lost, Dump(tenants), Dump(victims), Dump(shares));
          r.id = id[0][0].as<int64_t>();
        }
        for (const AuditEvent& row : PreemptionAuditRows(record, out)) RecordAudit(txn, row);
        return out;
      });
}

absl::StatusOr<std::vector<PreemptionRecord>> PgStore::ListPreemptions(const std::string& tenant,
                                                                       int64_t before_id,
                                                                       int limit) {
  if (limit <= 0 || limit > kMaxPreemptionPage) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit: must be 1 to ", kMaxPreemptionPage, ", got ", limit));
  }
  return pool_->Transact<pqxx::nontransaction>(
      "list preemptions",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<PreemptionRecord>> {
        pqxx::result rows =
            txn.exec_prepared("list_preemptions", tenant, std::max<int64_t>(before_id, 0), limit);
        std::vector<PreemptionRecord> out;
        out.reserve(rows.size());
        for (const pqxx::row& row : rows) out.push_back(PreemptionFromRow(row));
        return out;
      });
}

absl::StatusOr<int> PgStore::ArchiveFinished(Timestamp ended_before, int limit) {
  if (limit <= 0) return absl::InvalidArgumentError("limit: must be positive");
  return control_pool_->Transact(
      "archive finished workloads", [&](pqxx::work& txn) -> absl::StatusOr<int> {
        pqxx::result r = txn.exec_prepared("archive_finished", ToMicros(ended_before), limit);
        return static_cast<int>(r.affected_rows());
      });
}

absl::StatusOr<std::vector<std::pair<WorkloadState, int64_t>>> PgStore::CountByState() {
  using Counts = std::vector<std::pair<WorkloadState, int64_t>>;
  return pool_->Transact<pqxx::nontransaction>(
      "count workloads", [](pqxx::nontransaction& txn) -> absl::StatusOr<Counts> {
        Counts out;
        txn.exec_prepared("fold_state_counts");
        for (const pqxx::row& row : txn.exec_prepared("count_by_state")) {
          std::optional<WorkloadState> state = ParseState(row["state"].c_str());
          if (state) out.emplace_back(*state, row["n"].as<int64_t>());
        }
        return out;
      });
}

// ---- Clusters ----------------------------------------------------------------------------

absl::StatusOr<Cluster> PgStore::RegisterCluster(const ClusterInfo& info,
                                                 const std::vector<NodeInfo>& nodes,
                                                 const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateStorableInventory(info, nodes));
  json node_rows = json::array();
  json gpu_rows = json::array();
  for (const NodeInfo& node : nodes) {
    node_rows.push_back({{"name", node.name},
                         {"rack", node.rack},
                         {"block", node.block},
                         {"cpu_millis", node.cpu_millis},
                         {"memory_mib", node.memory_mib},
                         {"labels", node.labels},
                         {"schedulable", node.schedulable}});
    for (const GpuInfo& gpu : node.gpus) {
      gpu_rows.push_back({{"node", node.name},
                          {"uuid", gpu.uuid},
                          {"index", gpu.index},
                          {"model", gpu.model},
                          {"memory_mib", gpu.memory_mib},
                          {"nvlink_domain", gpu.nvlink_domain},
                          {"numa_node", gpu.numa_node},
                          {"pcie_switch", gpu.pcie_switch},
                          {"mig_capable", gpu.mig_capable},
                          {"healthy", gpu.healthy},
                          {"mig_enabled", gpu.mig_enabled},
                          {"mig_layout", json::parse(MigLayoutToJson(gpu.mig_layout))}});
    }
  }
  const auto dump = [](const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  };
  const std::string nodes_text = dump(node_rows);
  const std::string gpus_text = dump(gpu_rows);
  const std::string labels_text = StringsToJson(info.compliance_labels);

  return control_pool_->Transact(
      "register cluster", [&](pqxx::work& txn) -> absl::StatusOr<Cluster> {
        pqxx::result r = txn.exec_prepared("upsert_cluster", info.name, info.provider, info.region,
                                           info.zone, info.jurisdiction, labels_text);
        ASSIGN_OR_RETURN(Cluster cluster, ClusterFromRow(r[0]));
        txn.exec_prepared("delete_gpus", info.name);
        txn.exec_prepared("delete_nodes", info.name);
        txn.exec_prepared("insert_nodes", info.name, nodes_text);
        txn.exec_prepared("insert_gpus", info.name, gpus_text);
        std::map<std::string, Cluster*> by_name = {{cluster.info.name, &cluster}};
        RETURN_IF_ERROR(ReadInventory(txn, info.name, by_name));
        if (!record.action.empty()) {
          AuditEvent row = record;
          absl::StrAppend(&row.detail, "; epoch: ", cluster.epoch);
          RecordAudit(txn, row);
        }
        return cluster;
      });
}

absl::Status PgStore::RecordHeartbeat(const std::string& cluster, Timestamp at) {
  return control_pool_->Transact<pqxx::nontransaction>(
      "record heartbeat", [&](pqxx::nontransaction& txn) -> absl::Status {
        pqxx::result r = txn.exec_prepared("record_heartbeat", cluster, ToMicros(at));
        if (r.affected_rows() == 0) {
          return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
        }
        return absl::OkStatus();
      });
}

absl::Status PgStore::SetClusterState(const std::string& cluster, ClusterState state) {
  if (state == ClusterState::kUnspecified) {
    return absl::InvalidArgumentError("state: unspecified");
  }
  const std::string name(ClusterStateName(state));
  return control_pool_->Transact<pqxx::nontransaction>(
      "set cluster state", [&](pqxx::nontransaction& txn) -> absl::Status {
        pqxx::result r = txn.exec_prepared("set_cluster_state", cluster, name);
        if (r.affected_rows() == 0) {
          return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
        }
        return absl::OkStatus();
      });
}

absl::StatusOr<ClusterStore::LossResult> PgStore::LoseCluster(const std::string& cluster,
                                                              const LossPlan& plan,
                                                              const AuditEvent& record) {
  return control_pool_->Transact(
      "lose cluster", [&](pqxx::work& txn) -> absl::StatusOr<LossResult> {
        pqxx::result r = txn.exec_prepared("lose_cluster", cluster);
        if (r.empty())
          return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
        LossResult out;
        ASSIGN_OR_RETURN(out.cluster, ClusterFromRow(r[0]));
        // Read after the cluster row is locked: a placement on it either committed before (and is
        // read here) or waits for this transaction and is then fenced by the new epoch.
        ASSIGN_OR_RETURN(std::vector<Workload> held,
                         WorkloadsFromResult(txn.exec_prepared("list_active_on_cluster", cluster)));
        const std::vector<Transition> transitions = plan(out.cluster, held);
        ASSIGN_OR_RETURN(PreparedTransitions prepared, PrepareTransitions(transitions));
        ASSIGN_OR_RETURN(out.transitions,
                         RunTransitions(txn, transitions, prepared, options_.metering));
        if (!record.action.empty()) {
          AuditEvent row = record;
          absl::StrAppend(&row.detail, row.detail.empty() ? "" : "; ", LossAuditDetail(out));
          RecordAudit(txn, row);
        }
        return out;
      });
}

absl::StatusOr<Cluster> PgStore::SetCordon(const std::string& cluster, const std::string& node,
                                           bool cordoned, const AuditEvent& record) {
  return control_pool_->Transact("set cordon", [&](pqxx::work& txn) -> absl::StatusOr<Cluster> {
    auto not_found = [&] {
      return absl::NotFoundError(node.empty() ? absl::StrCat("cluster \"", cluster, "\" not found")
                                              : absl::StrCat("node \"", node, "\" of cluster \"",
                                                             cluster, "\" not found"));
    };
    if (node.empty()) {
      if (txn.exec_prepared("cordon_cluster", cluster, cordoned).empty()) return not_found();
    } else {
      if (txn.exec_prepared("lock_cluster", cluster).empty()) {
        return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
      }
      // A cordon goes on a node the cluster has; one may be lifted from a node it lost.
      if (txn.exec_prepared(cordoned ? "node_exists" : "node_known", cluster, node).empty()) {
        return not_found();
      }
      txn.exec_prepared(cordoned ? "cordon_node" : "uncordon_node", cluster, node);
    }
    RecordAudit(txn, record);
    ASSIGN_OR_RETURN(std::optional<Cluster> out, ReadCluster(txn, cluster));
    if (!out) return absl::InternalError(absl::StrCat("cluster \"", cluster, "\" vanished"));
    return *std::move(out);
  });
}

absl::StatusOr<std::vector<Cluster>> PgStore::ListClusters(bool include_nodes) {
  using SnapshotTxn = pqxx::transaction<pqxx::repeatable_read, pqxx::read_only>;
  return pool_->Transact<SnapshotTxn>(
      "list clusters", [&](SnapshotTxn& txn) -> absl::StatusOr<std::vector<Cluster>> {
        std::vector<Cluster> clusters;
        for (const pqxx::row& row : txn.exec_prepared("list_clusters")) {
          ASSIGN_OR_RETURN(Cluster c, ClusterFromRow(row));
          clusters.push_back(std::move(c));
        }
        if (include_nodes) {
          std::map<std::string, Cluster*> by_name;
          for (Cluster& c : clusters) by_name[c.info.name] = &c;
          RETURN_IF_ERROR(ReadInventory(txn, "", by_name));
        }
        return clusters;
      });
}

absl::StatusOr<Cluster> PgStore::GetCluster(const std::string& name) {
  using SnapshotTxn = pqxx::transaction<pqxx::repeatable_read, pqxx::read_only>;
  return pool_->Transact<SnapshotTxn>(
      "get cluster", [&](SnapshotTxn& txn) -> absl::StatusOr<Cluster> {
        ASSIGN_OR_RETURN(std::optional<Cluster> cluster, ReadCluster(txn, name));
        if (!cluster) return absl::NotFoundError(absl::StrCat("cluster \"", name, "\" not found"));
        return *std::move(cluster);
      });
}

absl::StatusOr<std::vector<ClusterDeclaration>> PgStore::ListDeclarations() {
  return pool_->Transact<pqxx::nontransaction>(
      "list declarations",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<ClusterDeclaration>> {
        std::vector<ClusterDeclaration> out;
        for (const pqxx::row& row : txn.exec_prepared("list_declarations")) {
          ASSIGN_OR_RETURN(ClusterDeclaration d,
                           DeclarationFromRow(row["cluster"].c_str(), row["declaration"]));
          out.push_back(std::move(d));
        }
        return out;
      });
}

absl::Status PgStore::DeleteCluster(const std::string& cluster, const AuditEvent& record) {
  RETURN_IF_ERROR(CheckName("name", cluster));
  return pool_->Transact("delete cluster", [&](pqxx::work& txn) -> absl::Status {
    pqxx::result r = txn.exec_prepared("cluster_dependents", cluster);
    if (!r.empty()) {
      const pqxx::row row = r[0];
      if (!row["cordoned"].as<bool>()) {
        return absl::FailedPreconditionError(
            absl::StrCat("cluster ", cluster, " is not cordoned: cordon or drain it first"));
      }
      if (const auto held = row["held"].as<int64_t>(); held > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "cluster ", cluster, " holds ", held, " workloads: drain it and let them end first"));
      }
      if (const auto tokens = row["tokens"].as<int64_t>(); tokens > 0) {
        return absl::FailedPreconditionError(absl::StrCat("cluster ", cluster, " has ", tokens,
                                                          " live agent tokens: revoke them first"));
      }
      if (const auto certificates = row["certificates"].as<int64_t>(); certificates > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("cluster ", cluster, " has ", certificates,
                         " live certificates: revoke the cluster (clusters revoke) first"));
      }
    }
    if (txn.exec_prepared1("delete_cluster", cluster)[0].as<int64_t>() == 0) {
      return absl::NotFoundError(absl::StrCat("cluster \"", cluster, "\" not found"));
    }
    RecordAudit(txn, record);
    return absl::OkStatus();
  });
}

absl::Status PgStore::PutDeclarations(const std::vector<ClusterDeclaration>& declarations,
                                      const AuditEvent& record) {
  RETURN_IF_ERROR(CheckDeclarations(declarations));
  if (declarations.empty() && record.action.empty()) return absl::OkStatus();
  json rows = json::array();
  for (const ClusterDeclaration& d : declarations) {
    rows.push_back(
        {{"cluster", d.cluster}, {"declaration", json::parse(ClusterDeclarationToJson(d))}});
  }
  const std::string rows_text = rows.dump(-1, ' ', false, json::error_handler_t::replace);
  // One statement: the whole batch is stored, or (an error) none of it.
  return pool_->Transact("put declarations", [&](pqxx::work& txn) -> absl::Status {
    if (!declarations.empty()) txn.exec_prepared("upsert_declarations", rows_text);
    RecordAudit(txn, record);
    return absl::OkStatus();
  });
}

// ---- Tenancy -----------------------------------------------------------------------------

absl::StatusOr<Tenant> PgStore::CreateTenant(const Tenant& tenant, const AuditEvent& record) {
  RETURN_IF_ERROR(CheckName("tenant.name", tenant.name));
  return pool_->Transact(
      "create tenant",
      [&](pqxx::work& txn) -> absl::StatusOr<Tenant> {
        pqxx::result r = txn.exec_prepared("create_tenant", tenant.name, tenant.display_name);
        if (r.empty()) {
          return absl::AlreadyExistsError(
              absl::StrCat("tenant \"", tenant.name, "\" already exists"));
        }
        Tenant out = tenant;
        out.create_time = FromMicros(r[0]["created_us"].as<int64_t>());
        RecordAudit(txn, record);
        return out;
      },
      /*idempotent=*/false);
}

absl::Status PgStore::DeleteProject(const std::string& tenant, const std::string& name,
                                    const AuditEvent& record) {
  return pool_->Transact("delete project", [&](pqxx::work& txn) -> absl::Status {
    if (txn.exec_prepared("lock_project", tenant, name).empty()) {
      return absl::NotFoundError(absl::StrCat("project ", tenant, "/", name, " does not exist"));
    }
    const auto named = txn.exec_prepared1("count_project_workloads", tenant, name)[0].as<int64_t>();
    if (named > 0) {
      return absl::FailedPreconditionError(absl::StrCat("project ", tenant, "/", name,
                                                        " is named by ", named,
                                                        " workloads (ended ones until archived)"));
    }
    if (txn.exec_prepared1("count_project_tokens", tenant, name)[0].as<int64_t>() > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("project ", tenant, "/", name, " has live tokens: revoke them first"));
    }
    txn.exec_prepared0("delete_project", tenant, name);
    RecordAudit(txn, record);
    return absl::OkStatus();
  });
}

absl::Status PgStore::DeleteTenant(const std::string& name, const AuditEvent& record) {
  return pool_->Transact("delete tenant", [&](pqxx::work& txn) -> absl::Status {
    if (txn.exec_prepared("lock_tenant", name).empty()) {
      return absl::NotFoundError(absl::StrCat("tenant ", name, " does not exist"));
    }
    const pqxx::row left = txn.exec_prepared1("tenant_dependents", name);
    if (left["projects"].as<bool>()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tenant ", name, " has projects: delete them first"));
    }
    if (left["tokens"].as<bool>()) {
      return absl::FailedPreconditionError(
          absl::StrCat("tenant ", name, " has live tokens: revoke them first"));
    }
    txn.exec_prepared0("delete_tenant", name);
    RecordAudit(txn, record);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<Tenant>> PgStore::ListTenants() {
  return pool_->Transact<pqxx::nontransaction>(
      "list tenants", [](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<Tenant>> {
        std::vector<Tenant> out;
        for (const pqxx::row& row : txn.exec_prepared("list_tenants")) {
          out.push_back(Tenant{row["name"].c_str(), row["display_name"].c_str(),
                               FromMicros(row["created_us"].as<int64_t>())});
        }
        return out;
      });
}

absl::StatusOr<Project> PgStore::CreateProject(const Project& project, const AuditEvent& record) {
  RETURN_IF_ERROR(CheckName("project.tenant", project.tenant));
  RETURN_IF_ERROR(CheckName("project.name", project.name));
  return pool_->Transact("create project", [&](pqxx::work& txn) -> absl::StatusOr<Project> {
    if (txn.exec_prepared("tenant_exists", project.tenant).empty()) {
      return absl::NotFoundError(
          absl::StrCat("project.tenant: tenant \"", project.tenant, "\" does not exist"));
    }
    pqxx::result r = txn.exec_prepared("create_project", project.tenant, project.name);
    if (r.empty()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "project \"", project.name, "\" already exists in tenant \"", project.tenant, "\""));
    }
    Project out = project;
    out.create_time = FromMicros(r[0]["created_us"].as<int64_t>());
    RecordAudit(txn, record);
    return out;
  });
}

absl::StatusOr<std::vector<Project>> PgStore::ListProjects(const std::string& tenant) {
  return pool_->Transact<pqxx::transaction<pqxx::repeatable_read, pqxx::read_only>>(
      "list projects", [&](auto& txn) -> absl::StatusOr<std::vector<Project>> {
        if (txn.exec_prepared("tenant_exists", tenant).empty()) {
          return absl::NotFoundError(absl::StrCat("tenant \"", tenant, "\" does not exist"));
        }
        std::vector<Project> out;
        for (const pqxx::row& row : txn.exec_prepared("list_projects", tenant)) {
          out.push_back(Project{row["tenant"].c_str(), row["name"].c_str(),
                                FromMicros(row["created_us"].as<int64_t>())});
        }
        return out;
      });
}

namespace {

absl::StatusOr<TokenRecord> TokenFromRow(const pqxx::row& row) {
  // The column's CHECK admits only the names auth::ParseRole knows.
  std::optional<auth::Role> role = auth::ParseRole(row["role"].c_str());
  if (!role) {
    return absl::InternalError(
        absl::StrCat("token: stored role \"", row["role"].c_str(), "\" is unknown"));
  }
  TokenRecord out{row["subject"].c_str(), *role,
                  row["tenant"].c_str(),  row["project"].c_str(),
                  row["cluster"].c_str(), row["id"].as<int64_t>()};
  const auto time = [&row](const char* column) -> std::optional<Timestamp> {
    if (row[column].is_null()) return std::nullopt;
    return FromMicros(row[column].as<int64_t>());
  };
  out.expire_time = time("expires_us");
  out.create_time = time("created_us").value_or(Timestamp{});
  out.last_used_time = time("last_used_us");
  out.revoke_time = time("revoked_us");
  return out;
}

}  // namespace

absl::StatusOr<TokenRecord> PgStore::CreateToken(const std::string& token_hash,
                                                 const TokenRecord& record,
                                                 const AuditEvent& audit) {
  RETURN_IF_ERROR(ValidateTokenRecord(token_hash, record));
  const std::string role(auth::RoleName(record.role));  // stored by its name
  return pool_->Transact("create token", [&](pqxx::work& txn) -> absl::StatusOr<TokenRecord> {
    if (!record.tenant.empty() && txn.exec_prepared("tenant_exists", record.tenant).empty()) {
      return absl::NotFoundError(
          absl::StrCat("tenant: tenant \"", record.tenant, "\" does not exist"));
    }
    if (!record.project.empty() &&
        txn.exec_prepared("project_exists", record.tenant, record.project).empty()) {
      return absl::NotFoundError(absl::StrCat("project: project \"", record.project,
                                              "\" does not exist in tenant \"", record.tenant,
                                              "\""));
    }
    if (record.role != auth::Role::kAgent) {
      // A bound subject's token may not rank above its binding; the subject's scope lock is held
      // until the token is in, so a concurrent change of the binding sees the token.
      txn.exec_prepared("lock_subject_scope", record.subject, record.tenant, record.project);
      pqxx::result bound =
          txn.exec_prepared("share_binding", record.subject, record.tenant, record.project);
      if (!bound.empty()) {
        std::optional<auth::Role> binding_role = auth::ParseRole(bound[0][0].c_str());
        if (binding_role && auth::Outranks(record.role, *binding_role)) {
          return absl::FailedPreconditionError(
              absl::StrCat("role: ", record.subject, " is bound as ", auth::RoleName(*binding_role),
                           " at this scope"));
        }
      }
    }
    std::optional<int64_t> expires_us;
    if (record.expire_time) expires_us = ToMicros(*record.expire_time);
    pqxx::result r = txn.exec_prepared("create_token", token_hash, record.subject, role,
                                       record.tenant, record.project, record.cluster, expires_us);
    if (r.empty()) return absl::AlreadyExistsError("token: a token with this hash already exists");
    ASSIGN_OR_RETURN(TokenRecord stored, TokenFromRow(r[0]));
    AuditEvent row = audit;
    absl::StrAppend(&row.object, stored.id);
    RecordAudit(txn, row);
    return stored;
  });
}

absl::StatusOr<std::vector<TokenRecord>> PgStore::ListTokens(const std::string& tenant,
                                                             const std::string& project) {
  return pool_->Transact<pqxx::nontransaction>(
      "list tokens", [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<TokenRecord>> {
        std::vector<TokenRecord> out;
        for (const auto& row : txn.exec_prepared("list_tokens", tenant, project, kMaxTokenList)) {
          ASSIGN_OR_RETURN(TokenRecord record, TokenFromRow(row));
          out.push_back(std::move(record));
        }
        return out;
      });
}

absl::StatusOr<TokenRecord> PgStore::LookupToken(const std::string& token_hash) {
  return pool_->Transact<pqxx::nontransaction>(
      "look up token", [&](pqxx::nontransaction& txn) -> absl::StatusOr<TokenRecord> {
        pqxx::result r = txn.exec_prepared("lookup_token", token_hash);
        if (r.empty()) return absl::NotFoundError("token not found");
        return TokenFromRow(r[0]);
      });
}

absl::StatusOr<TokenRecord> PgStore::RevokeToken(int64_t id, const std::string& tenant,
                                                 const std::string& project,
                                                 const AuditEvent& record) {
  return pool_->Transact("revoke token", [&](pqxx::work& txn) -> absl::StatusOr<TokenRecord> {
    pqxx::result r = txn.exec_prepared("revoke_token", id, tenant, project);
    if (r.empty()) return absl::NotFoundError("token_id: no such token");
    RecordAudit(txn, record);
    return TokenFromRow(r[0]);
  });
}

namespace {

absl::StatusOr<RoleBinding> BindingFromRow(const pqxx::row& row) {
  // The column's CHECK admits only the names auth::ParseRole knows.
  std::optional<auth::Role> role = auth::ParseRole(row["role"].c_str());
  if (!role) {
    return absl::InternalError(
        absl::StrCat("role binding: stored role \"", row["role"].c_str(), "\" is unknown"));
  }
  RoleBinding out;
  out.subject = row["subject"].c_str();
  out.role = *role;
  out.tenant = row["tenant"].c_str();
  out.project = row["project"].c_str();
  out.create_time = FromMicros(row["created_us"].as<int64_t>());
  out.update_time = FromMicros(row["updated_us"].as<int64_t>());
  return out;
}

std::vector<int64_t> Ids(const pqxx::result& rows) {
  std::vector<int64_t> ids;
  ids.reserve(rows.size());
  for (const pqxx::row& row : rows) ids.push_back(row[0].as<int64_t>());
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

absl::StatusOr<BindingChange> PgStore::SetRoleBinding(const RoleBinding& binding,
                                                      const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateRoleBinding(binding));
  const std::string role(auth::RoleName(binding.role));
  return pool_->Transact("set role binding", [&](pqxx::work& txn) -> absl::StatusOr<BindingChange> {
    if (!binding.tenant.empty()) {
      if (txn.exec_prepared("tenant_exists", binding.tenant).empty()) {
        return absl::NotFoundError(
            absl::StrCat("tenant: tenant \"", binding.tenant, "\" does not exist"));
      }
      if (!binding.project.empty() &&
          txn.exec_prepared("project_exists", binding.tenant, binding.project).empty()) {
        return absl::NotFoundError(absl::StrCat("project: project \"", binding.project,
                                                "\" does not exist in tenant \"", binding.tenant,
                                                "\""));
      }
    }
    txn.exec_prepared("lock_subject_scope", binding.subject, binding.tenant, binding.project);
    const bool existed =
        !txn.exec_prepared("lock_binding", binding.subject, binding.tenant, binding.project)
             .empty();
    // Counted without a lock on the tenant (which would hold up its submissions): concurrent
    // additions may pass the limit by a few.
    if (!existed && txn.exec_prepared1("count_scope_bindings", binding.tenant)[0].as<int64_t>() >=
                        kMaxBindingsPerTenant) {
      return absl::ResourceExhaustedError(
          absl::StrCat("subject: the scope already has ", kMaxBindingsPerTenant, " role bindings"));
    }
    pqxx::result r =
        txn.exec_prepared("upsert_binding", binding.subject, binding.tenant, binding.project, role);
    BindingChange change;
    ASSIGN_OR_RETURN(change.binding, BindingFromRow(r[0]));
    change.tokens = Ids(txn.exec_prepared("lower_subject_tokens", binding.subject, binding.tenant,
                                          binding.project, role));
    AuditEvent row = record;
    AppendAuditIds(row, "tokens lowered", change.tokens);
    RecordAudit(txn, row);
    return change;
  });
}

absl::StatusOr<BindingChange> PgStore::DeleteRoleBinding(const std::string& subject,
                                                         const std::string& tenant,
                                                         const std::string& project,
                                                         const AuditEvent& record) {
  return pool_->Transact(
      "delete role binding", [&](pqxx::work& txn) -> absl::StatusOr<BindingChange> {
        txn.exec_prepared("lock_subject_scope", subject, tenant, project);
        pqxx::result stored = txn.exec_prepared("lock_binding", subject, tenant, project);
        if (stored.empty()) {
          return absl::NotFoundError("subject: no role binding for it at this scope");
        }
        BindingChange change;
        ASSIGN_OR_RETURN(change.binding, BindingFromRow(stored[0]));
        txn.exec_prepared0("delete_binding", subject, tenant, project);
        change.tokens = Ids(txn.exec_prepared("revoke_subject_tokens", subject, tenant, project));
        AuditEvent row = record;
        AppendAuditIds(row, "tokens revoked", change.tokens);
        RecordAudit(txn, row);
        return change;
      });
}

absl::StatusOr<std::vector<RoleBinding>> PgStore::ListRoleBindings(const std::string& tenant,
                                                                   const std::string& project) {
  return pool_->Transact<pqxx::nontransaction>(
      "list role bindings",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<RoleBinding>> {
        std::vector<RoleBinding> out;
        for (const auto& row :
             txn.exec_prepared("list_bindings", tenant, project, kMaxBindingList)) {
          ASSIGN_OR_RETURN(RoleBinding binding, BindingFromRow(row));
          out.push_back(std::move(binding));
        }
        return out;
      });
}

absl::StatusOr<std::vector<RoleBinding>> PgStore::ListSubjectRoleBindings(
    const std::string& subject) {
  return pool_->Transact<pqxx::nontransaction>(
      "list role bindings of a subject",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<RoleBinding>> {
        std::vector<RoleBinding> out;
        for (const auto& row :
             txn.exec_prepared("list_subject_bindings", subject, kMaxBindingList)) {
          ASSIGN_OR_RETURN(RoleBinding binding, BindingFromRow(row));
          out.push_back(std::move(binding));
        }
        return out;
      });
}

absl::StatusOr<int64_t> PgStore::CountTokens() {
  return pool_->Transact<pqxx::nontransaction>(
      "count tokens", [](pqxx::nontransaction& txn) -> absl::StatusOr<int64_t> {
        return txn.exec_prepared1("count_tokens")[0].as<int64_t>();
      });
}

namespace {

ClusterCertificate ClusterCertificateFromRow(const pqxx::row& row) {
  ClusterCertificate c;
  c.serial = row["serial"].c_str();
  c.cluster = row["cluster"].c_str();
  c.not_before = FromMicros(row["not_before_us"].as<int64_t>());
  c.not_after = FromMicros(row["not_after_us"].as<int64_t>());
  c.issue_time = FromMicros(row["issued_us"].as<int64_t>());
  if (!row["revoked_us"].is_null()) c.revoke_time = FromMicros(row["revoked_us"].as<int64_t>());
  return c;
}

}  // namespace

absl::StatusOr<ClusterCertificate> PgStore::AddClusterCertificate(
    const ClusterCertificate& certificate, const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateClusterCertificate(certificate));
  return pool_->Transact(
      "add cluster certificate", [&](pqxx::work& txn) -> absl::StatusOr<ClusterCertificate> {
        pqxx::result r =
            txn.exec_prepared("add_cluster_certificate", certificate.serial, certificate.cluster,
                              ToMicros(certificate.not_before), ToMicros(certificate.not_after));
        if (r.empty()) {
          return absl::AlreadyExistsError("serial: a certificate with this serial exists");
        }
        RecordAudit(txn, record);
        return ClusterCertificateFromRow(r[0]);
      });
}

absl::StatusOr<ClusterCertificate> PgStore::LookupClusterCertificate(const std::string& serial,
                                                                     const std::string& cluster) {
  return pool_->Transact<pqxx::nontransaction>(
      "look up cluster certificate",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<ClusterCertificate> {
        pqxx::result r = txn.exec_prepared("lookup_cluster_certificate", serial, cluster);
        if (r.empty()) return absl::NotFoundError("cluster certificate not found");
        return ClusterCertificateFromRow(r[0]);
      });
}

absl::StatusOr<ClusterCertificateStore::ClusterRevocation> PgStore::RevokeCluster(
    const std::string& cluster, const AuditEvent& record) {
  return pool_->Transact(
      "revoke cluster", [&](pqxx::work& txn) -> absl::StatusOr<ClusterRevocation> {
        ClusterRevocation out;
        out.certificates = static_cast<int>(
            txn.exec_prepared("revoke_cluster_certificates", cluster).affected_rows());
        out.tokens = Ids(txn.exec_prepared("revoke_cluster_tokens", cluster));
        AuditEvent row = record;
        absl::StrAppend(&row.detail, row.detail.empty() ? "" : "; ",
                        "certificates revoked: ", out.certificates);
        AppendAuditIds(row, "tokens revoked", out.tokens);
        RecordAudit(txn, row);
        return out;
      });
}

namespace {

Quota QuotaFromRow(const pqxx::row& row) {
  Quota q;
  q.key = QuotaKey{row["tenant"].c_str(), row["project"].c_str(), row["resource"].c_str()};
  q.guaranteed_milli = row["guaranteed_milli"].as<int64_t>();
  const auto limit = row["limit_milli"].as<int64_t>();
  if (limit >= 0) q.limit_milli = limit;
  q.overcommitted = row["overcommitted"].as<bool>();
  q.update_time = FromMicros(row["updated_us"].as<int64_t>());
  return q;
}

}  // namespace

absl::StatusOr<Quota> PgStore::SetQuota(const Quota& quota, const QuotaCheck& check,
                                        const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateQuota(quota));
  const QuotaKey& key = quota.key;
  return pool_->Transact("set quota", [&](pqxx::work& txn) -> absl::StatusOr<Quota> {
    txn.exec_prepared("lock_quota_tenant", key.tenant);
    txn.exec_prepared("lock_quota_resource", key.resource);
    if (txn.exec_prepared("tenant_exists", key.tenant).empty()) {
      return absl::NotFoundError(absl::StrCat("tenant: \"", key.tenant, "\" does not exist"));
    }
    if (!key.project.empty() &&
        txn.exec_prepared("project_exists", key.tenant, key.project).empty()) {
      return absl::NotFoundError(absl::StrCat("project: \"", key.project,
                                              "\" does not exist in tenant \"", key.tenant, "\""));
    }
    const pqxx::row count =
        txn.exec_prepared1("tenant_quota_count", key.tenant, key.project, key.resource);
    if (count["mine"].as<int64_t>() == 0 && count["n"].as<int64_t>() >= kMaxQuotasPerTenant) {
      return absl::ResourceExhaustedError(absl::StrCat("quota: tenant ", key.tenant, " has ",
                                                       kMaxQuotasPerTenant, " quotas already"));
    }
    std::vector<Quota> same;
    for (const pqxx::row& row : txn.exec_prepared("quotas_on_resource", key.resource)) {
      same.push_back(QuotaFromRow(row));
    }
    Quota out = quota;
    RETURN_IF_ERROR(check(out, same));
    pqxx::row r =
        txn.exec_prepared1("upsert_quota", key.tenant, key.project, key.resource,
                           out.guaranteed_milli, out.limit_milli.value_or(-1), out.overcommitted);
    out.update_time = FromMicros(r["updated_us"].as<int64_t>());
    RecordAudit(txn, record);
    return out;
  });
}

absl::Status PgStore::DeleteQuota(const QuotaKey& key, const AuditEvent& record) {
  return pool_->Transact("delete quota", [&](pqxx::work& txn) -> absl::Status {
    if (txn.exec_prepared("delete_quota", key.tenant, key.project, key.resource).affected_rows() ==
        0) {
      return absl::NotFoundError("quota not found");
    }
    RecordAudit(txn, record);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<Quota>> PgStore::ListQuotas(const std::string& tenant) {
  return pool_->Transact<pqxx::nontransaction>(
      "list quotas", [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<Quota>> {
        std::vector<Quota> out;
        pqxx::result rows = tenant.empty() ? txn.exec_prepared("list_all_quotas")
                                           : txn.exec_prepared("list_tenant_quotas", tenant);
        out.reserve(rows.size());
        for (const pqxx::row& row : rows) out.push_back(QuotaFromRow(row));
        return out;
      });
}

absl::StatusOr<ShareWeight> PgStore::SetShareWeight(const ShareWeight& weight,
                                                    const AuditEvent& record) {
  RETURN_IF_ERROR(ValidateShareWeight(weight));
  return pool_->Transact("set share weight", [&](pqxx::work& txn) -> absl::StatusOr<ShareWeight> {
    if (txn.exec_prepared("tenant_exists", weight.tenant).empty()) {
      return absl::NotFoundError(absl::StrCat("tenant: \"", weight.tenant, "\" does not exist"));
    }
    if (!weight.project.empty() &&
        txn.exec_prepared("project_exists", weight.tenant, weight.project).empty()) {
      return absl::NotFoundError(absl::StrCat(
          "project: \"", weight.project, "\" does not exist in tenant \"", weight.tenant, "\""));
    }
    txn.exec_prepared("upsert_share_weight", weight.tenant, weight.project, weight.weight);
    RecordAudit(txn, record);
    return weight;
  });
}

absl::Status PgStore::SaveUsage(const UsageSnapshot& usage) {
  RETURN_IF_ERROR(ValidateUsage(usage));
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [holder, seconds] : usage.gpu_seconds) {
    rows.push_back(
        {{"tenant", holder.first}, {"project", holder.second}, {"gpu_seconds", seconds}});
  }
  const int64_t as_of_us = ToMicros(usage.as_of);
  return pool_->Transact("save usage", [&](pqxx::work& txn) -> absl::Status {
    txn.exec_prepared("delete_usage");
    if (!rows.empty()) txn.exec_prepared("insert_usage", as_of_us, rows.dump());
    return absl::OkStatus();
  });
}

absl::StatusOr<UsageSnapshot> PgStore::LoadUsage() {
  return pool_->Transact<pqxx::nontransaction>(
      "load usage", [&](pqxx::nontransaction& txn) -> absl::StatusOr<UsageSnapshot> {
        UsageSnapshot out;
        for (const pqxx::row& row : txn.exec_prepared("list_usage")) {
          out.as_of = FromMicros(row["as_of_us"].as<int64_t>());
          out.gpu_seconds[{row["tenant"].c_str(), row["project"].c_str()}] =
              row["gpu_seconds"].as<double>();
        }
        return out;
      });
}

absl::StatusOr<std::vector<ShareWeight>> PgStore::ListShareWeights() {
  return pool_->Transact<pqxx::nontransaction>(
      "list share weights",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<ShareWeight>> {
        std::vector<ShareWeight> out;
        for (const pqxx::row& row : txn.exec_prepared("list_share_weights")) {
          out.push_back(
              {row["tenant"].c_str(), row["project"].c_str(), row["weight"].as<int64_t>()});
        }
        return out;
      });
}

// ---- MeteringStore ----------------------------------------------------------------------------

absl::StatusOr<int> PgStore::MeterRunning(Timestamp until, int limit) {
  if (limit < 1 || limit > 10000) {
    return absl::InvalidArgumentError("limit: must be 1..10000");
  }
  return control_pool_->Transact("meter running", [&](pqxx::work& txn) -> absl::StatusOr<int> {
    // In whole microseconds, as stored: a span ends exactly where the next begins.
    const Timestamp cut = FromMicros(ToMicros(std::min(until, DatabaseNow(txn))));
    pqxx::result due = txn.exec_prepared("meter_due", ToMicros(cut), limit);
    MeteredClusters clusters(txn);
    std::vector<UsageRecord> records;
    std::vector<WorkloadId> ids;
    for (const pqxx::row& row : due) {
      ASSIGN_OR_RETURN(Workload w, WorkloadFromRow(row));
      ASSIGN_OR_RETURN(const Cluster* cluster, clusters.Get(w.assignment.cluster));
      std::vector<UsageRecord> span =
          MeterSpan(w, *cluster, FromMicros(row["mark_us"].as<int64_t>()), cut, options_.metering);
      records.insert(records.end(), std::make_move_iterator(span.begin()),
                     std::make_move_iterator(span.end()));
      ids.push_back(w.id);
    }
    InsertUsage(txn, records);
    if (!ids.empty()) txn.exec_prepared("move_marks", IdArray(ids), ToMicros(cut));
    return static_cast<int>(due.size());
  });
}

absl::StatusOr<std::vector<UsageRecord>> PgStore::ListUsage(const UsageFilter& filter) {
  RETURN_IF_ERROR(ValidateUsageFilter(filter));
  return pool_->Transact<pqxx::nontransaction>(
      "list usage records",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<UsageRecord>> {
        const UsageRecord after = filter.after.value_or(UsageRecord{});
        std::vector<UsageRecord> out;
        for (const pqxx::row& row : txn.exec_prepared(
                 "list_usage_records", filter.tenant, filter.project, filter.cluster,
                 ToMicros(filter.from), ToMicros(filter.to), filter.after.has_value(),
                 ToMicros(after.from), after.workload, static_cast<int64_t>(after.attempt),
                 static_cast<int64_t>(after.replica), after.gpu_uuid, filter.page_size)) {
          out.push_back(UsageFromRow(row));
        }
        return out;
      });
}

absl::StatusOr<std::vector<UsageLine>> PgStore::ReportUsage(const UsageQuery& query) {
  RETURN_IF_ERROR(ValidateUsageQuery(query));
  bool asked[kReportDimensions] = {};
  for (ReportDimension d : query.group_by) asked[static_cast<int>(d)] = true;
  using ReportTxn = pqxx::transaction<pqxx::read_committed, pqxx::read_only>;
  return pool_->Transact<ReportTxn>(
      "report usage", [&](ReportTxn& txn) -> absl::StatusOr<std::vector<UsageLine>> {
        // Memory to sum a month of the rollup by every dimension in one hash table (the default
        // 4 MB spills it to disk), and a plan made for these parameters: the dimensions asked for
        // change the number of groups by orders of magnitude.
        txn.exec0("SET LOCAL work_mem = '64MB'");
        txn.exec0("SET LOCAL plan_cache_mode = force_custom_plan");
        pqxx::result rows =
            txn.exec_prepared("report_usage", ToMicros(query.from), ToMicros(query.to),
                              std::string(ReportPeriodName(query.period)), query.tenant,
                              query.project, query.cluster, asked[0], asked[1], asked[2], asked[3],
                              asked[4], asked[5], asked[6], kMaxReportLines + 1);
        if (rows.size() > static_cast<size_t>(kMaxReportLines)) {
          return absl::FailedPreconditionError(absl::StrCat(
              "group_by: the report would have more than ", kMaxReportLines,
              " lines; ask for a shorter window, a longer period or fewer dimensions"));
        }
        std::vector<UsageLine> out;
        out.reserve(rows.size());
        for (const pqxx::row& row : rows) {
          UsageLine line;
          line.period_start = FromMicros(row["period_us"].as<int64_t>());
          for (ReportDimension d : query.group_by) {
            line.keys.emplace_back(row[std::string(ReportDimensionName(d))].c_str());
          }
          line.gpu_microseconds = row["gpu_us"].as<int64_t>();
          line.unpriced_gpu_microseconds = row["unpriced_us"].as<int64_t>();
          line.cost_micros = row["cost"].as<int64_t>();
          line.records = row["records"].as<int64_t>();
          line.measured_gpu_microseconds = row["measured_us"].as<int64_t>();
          line.effective_gpu_microseconds = row["effective_us"].as<int64_t>();
          line.coarse_gpu_microseconds = row["coarse_us"].as<int64_t>();
          out.push_back(std::move(line));
        }
        std::sort(out.begin(), out.end(), ReportOrder);
        return out;
      });
}

absl::StatusOr<int> PgStore::RecordTelemetry(const std::string& cluster,
                                             const std::vector<TelemetryMinute>& minutes) {
  if (minutes.empty()) return 0;
  std::vector<WorkloadId> ids;
  ids.reserve(minutes.size());
  for (const TelemetryMinute& m : minutes) ids.push_back(m.workload);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return pool_->Transact("record telemetry", [&](pqxx::work& txn) -> absl::StatusOr<int> {
    ASSIGN_OR_RETURN(std::vector<Workload> runs,
                     WorkloadsFromResult(txn.exec_prepared("get_workloads", IdArray(ids))));
    std::unordered_map<WorkloadId, const Workload*> by_id;
    for (const Workload& w : runs) by_id[w.id] = &w;
    MeteredClusters clusters(txn);
    ASSIGN_OR_RETURN(const Cluster* stored, clusters.Get(cluster));
    // A run still going is measured up to now at most: an agent clock running ahead cannot
    // report time that has not passed.
    const Timestamp now = DatabaseNow(txn);
    for (Workload& w : runs) {
      if (!w.end_time || *w.end_time > now) w.end_time = now;
    }
    std::vector<TelemetryUse> uses;
    for (const TelemetryMinute& m : minutes) {
      auto it = by_id.find(m.workload);
      if (it == by_id.end()) continue;
      if (std::optional<TelemetryUse> use =
              AttributeMinute(m, *it->second, *stored, options_.metering)) {
        uses.push_back(std::move(*use));
      }
    }
    if (uses.empty()) return 0;
    return txn
        .exec_prepared1("insert_telemetry", cluster,
                        TelemetryJson(uses).dump(-1, ' ', false, json::error_handler_t::replace))[0]
        .as<int>();
  });
}

absl::StatusOr<std::vector<TelemetryRow>> PgStore::ListTelemetry(WorkloadId workload,
                                                                 Timestamp from, Timestamp to,
                                                                 int limit) {
  if (limit < 1 || limit > 10000) return absl::InvalidArgumentError("limit: must be 1..10000");
  return pool_->Transact<pqxx::nontransaction>(
      "list telemetry",
      [&](pqxx::nontransaction& txn) -> absl::StatusOr<std::vector<TelemetryRow>> {
        std::vector<TelemetryRow> out;
        for (const pqxx::row& row :
             txn.exec_prepared("list_telemetry", workload, ToMicros(from), ToMicros(to), limit)) {
          out.push_back(TelemetryFromRow(row));
        }
        return out;
      });
}

absl::StatusOr<int> PgStore::PruneTelemetry(Timestamp before, int limit) {
  if (limit < 1 || limit > 100000) return absl::InvalidArgumentError("limit: must be 1..100000");
  return control_pool_->Transact("prune telemetry", [&](pqxx::work& txn) -> absl::StatusOr<int> {
    return static_cast<int>(
        txn.exec_prepared("prune_telemetry", ToMicros(before), limit).affected_rows());
  });
}

absl::StatusOr<std::vector<HeldCost>> PgStore::ReportHeldCosts(Timestamp from, Timestamp to,
                                                               const std::string& cluster) {
  UsageQuery window;
  window.from = from;
  window.to = to;
  RETURN_IF_ERROR(ValidateUsageQuery(window));
  using ReportTxn = pqxx::transaction<pqxx::read_committed, pqxx::read_only>;
  return pool_->Transact<ReportTxn>(
      "report held costs", [&](ReportTxn& txn) -> absl::StatusOr<std::vector<HeldCost>> {
        std::vector<HeldCost> out;
        for (const pqxx::row& row :
             txn.exec_prepared("report_held_costs", ToMicros(from), ToMicros(to), cluster)) {
          HeldCost h;
          h.cluster = row["cluster"].c_str();
          h.tenant = row["tenant"].c_str();
          h.gpu_model = row["gpu_model"].c_str();
          h.capacity = ParseCapacityType(row["capacity"].c_str()).value_or(CapacityType::kOnDemand);
          h.gpu_line_micros = row["gpu_line"].as<int64_t>();
          h.billed_micros = row["billed"].as<int64_t>();
          out.push_back(std::move(h));
        }
        // SumHeldCosts's order (bytewise names, then capacity type).
        std::sort(out.begin(), out.end(), [](const HeldCost& a, const HeldCost& b) {
          return std::tie(a.cluster, a.tenant, a.gpu_model, a.capacity) <
                 std::tie(b.cluster, b.tenant, b.gpu_model, b.capacity);
        });
        return out;
      });
}

absl::Status PgStore::RecordGuarantees(const std::vector<GuaranteeUse>& uses) {
  RETURN_IF_ERROR(ValidateGuaranteeUses(uses));
  if (uses.empty()) return absl::OkStatus();
  return control_pool_->Transact("record guarantees", [&](pqxx::work& txn) -> absl::Status {
    txn.exec_prepared0("record_guarantees",
                       GuaranteeJson(uses).dump(-1, ' ', false, json::error_handler_t::replace));
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<GuaranteeLine>> PgStore::ReportGuarantees(const UsageQuery& query) {
  RETURN_IF_ERROR(ValidateUsageQuery(query));
  using ReportTxn = pqxx::transaction<pqxx::read_committed, pqxx::read_only>;
  return pool_->Transact<ReportTxn>(
      "report guarantees", [&](ReportTxn& txn) -> absl::StatusOr<std::vector<GuaranteeLine>> {
        pqxx::result rows =
            txn.exec_prepared("report_guarantees", ToMicros(query.from), ToMicros(query.to),
                              std::string(ReportPeriodName(query.period)), query.tenant,
                              query.project, query.cluster, kMaxReportLines + 1);
        if (rows.size() > static_cast<size_t>(kMaxReportLines)) {
          return absl::FailedPreconditionError(
              absl::StrCat("the report would have more than ", kMaxReportLines,
                           " idle-guarantee lines; ask for a shorter window or a longer period"));
        }
        std::vector<GuaranteeLine> out;
        out.reserve(rows.size());
        for (const pqxx::row& row : rows) {
          GuaranteeLine line;
          line.period_start = FromMicros(row["period_us"].as<int64_t>());
          line.key.tenant = row["tenant"].c_str();
          line.key.project = row["project"].c_str();
          line.key.resource = row["resource"].c_str();
          line.reserved_unit_us = row["reserved"].as<int64_t>();
          line.idle_unit_us = row["idle"].as<int64_t>();
          out.push_back(std::move(line));
        }
        std::sort(out.begin(), out.end(), [](const GuaranteeLine& a, const GuaranteeLine& b) {
          return std::tie(a.period_start, a.key.tenant, a.key.project, a.key.resource) <
                 std::tie(b.period_start, b.key.tenant, b.key.project, b.key.resource);
        });
        return out;
      });
}

}  // namespace gpufed::storage
