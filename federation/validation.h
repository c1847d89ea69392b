#ifndef GPUFED_FEDERATION_VALIDATION_H_
#define GPUFED_FEDERATION_VALIDATION_H_

// Every rule a name, a spec or an inventory must follow, in one place: the API handlers, the
// agent's topology parser and the storage layer all call these. docs/interfaces.md#limits lists
// the same limits in a table. Every function is pure and thread-safe; every error is
// INVALID_ARGUMENT whose message starts with the field it names ("spec.run.env: ...").

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "federation/store.h"
#include "federation/types.h"

namespace gpufed {

// ---- Limits (bytes are UTF-8 bytes, not characters) -------------------------------------------

// Names of tenants, projects and clusters, node names, and the other DNS-label-like names.
inline constexpr size_t kMaxNameLength = 63;
// A workload's name (spec.name).
inline constexpr size_t kMaxWorkloadNameLength = 63;
// spec.idempotency_key.
inline constexpr size_t kMaxIdempotencyKeyLength = 128;
// A tenant's display name.
inline constexpr size_t kMaxDisplayNameBytes = 200;
// The subject of an API token (a person, a program or a cluster).
inline constexpr size_t kMaxSubjectBytes = 200;
// The reason given with a cancel.
inline constexpr size_t kMaxReasonBytes = 1024;
// spec.run.image: a registry reference (Docker allows 255 for the name, 128 for the tag).
inline constexpr size_t kMaxImageBytes = 512;
// spec.run.command: at most this many arguments ...
inline constexpr size_t kMaxCommandArgs = 1024;
// ... of at most this many bytes together.
inline constexpr size_t kMaxCommandBytes = size_t{32} * 1024;
// spec.run.env: at most this many variables ...
inline constexpr size_t kMaxEnvEntries = 256;
// ... each named by at most this many bytes of [A-Za-z_][A-Za-z0-9_]* ...
inline constexpr size_t kMaxEnvKeyBytes = 128;
// ... with a value of at most this many bytes.
inline constexpr size_t kMaxEnvValueBytes = size_t{16} * 1024;
// A whole spec: the bytes of all its strings together (names, key, image, command, env, models,
// MIG profile). Bounds what one workload costs in every List and Watch that carries it.
inline constexpr size_t kMaxSpecBytes = size_t{64} * 1024;
inline constexpr uint32_t kMaxReplicas = 1024;
inline constexpr uint32_t kMaxGpusPerReplica = 64;
inline constexpr int32_t kMaxPriority = 1000;
// gpu_milli is a share of one GPU in milli-GPUs: 1..999 (1000 would be the whole GPU).
inline constexpr uint32_t kMaxGpuMilli = 999;
// spec.estimated_duration, spec.checkpoint_interval: at most one year.
inline constexpr int64_t kMaxEstimatedDurationSeconds = 365LL * 24 * 3600;

// Inventory (an agent's Register, and its topology file).
// GPUs on one node, and the bound of a GPU's index.
inline constexpr uint32_t kMaxGpusPerNode = 64;
// NUMA nodes of one node, and the bound of a GPU's numa_node.
inline constexpr uint32_t kMaxNumaNodes = 64;
// A GPU UUID ("GPU-5f7a..." from nvidia-smi is 40 bytes).
inline constexpr size_t kMaxGpuUuidBytes = 128;
// Fabric identifiers: rack, block, NVLink domain, PCIe switch.
inline constexpr size_t kMaxFabricIdBytes = 63;
// Node label keys and values (Kubernetes' bound for a label's prefix).
inline constexpr size_t kMaxNodeLabelBytes = 253;
// Labels per node, and compliance labels per cluster.
inline constexpr size_t kMaxLabels = 64;

// ---- Predicates, for callers that word their own errors (the topology parser) ---------------

// A resource name (tenants, projects, clusters): 1..63 of [a-z0-9-], starting with a letter.
bool IsName(absl::string_view value);
// A label (node names, provider, region, zone, jurisdiction, compliance labels): 1..63 of
// [a-z0-9-], starting with a letter or digit.
bool IsLabel(absl::string_view value);
// An opaque identifier (GPU UUIDs, fabric ids, node label keys): 1..max_bytes printable ASCII
// characters, no spaces.
bool IsToken(absl::string_view value, size_t max_bytes);
// Valid UTF-8 of at most max_bytes without control characters (C0, DEL, C1); with
// `allow_newlines`, tab and line feed are allowed (scripts in commands and env values).
bool IsText(absl::string_view value, size_t max_bytes, bool allow_newlines = false);
// An environment variable name: 1..kMaxEnvKeyBytes of [A-Za-z_][A-Za-z0-9_]* (POSIX portable).
bool IsEnvKey(absl::string_view value);

// ---- Checks --------------------------------------------------------------------------------

// IsName, or INVALID_ARGUMENT naming `field` and saying which rule failed.
absl::Status ValidateName(absl::string_view field, absl::string_view value);
// IsLabel, or INVALID_ARGUMENT naming `field`.
absl::Status ValidateLabel(absl::string_view field, absl::string_view value);
// A one-line text of at most max_bytes (IsText without newlines); empty is allowed.
absl::Status ValidateText(absl::string_view field, absl::string_view value, size_t max_bytes);
// An API token's subject: one-line text of 1..kMaxSubjectBytes; the field is "subject".
absl::Status ValidateSubject(absl::string_view value);

// Checks everything a spec can get wrong on its own (not whether tenant/project exist).
// INVALID_ARGUMENT naming the field, e.g. "spec.replicas: must be 1..1024, got 0". A replica
// takes at most one of mig_profile and gpu_milli, and then gpus_per_replica is 1; the MIG profile
// must exist on at least one allowed model (any MIG model when gpu_models is empty):
//   spec.per_replica.mig_profile: "3g.41gb" is not a MIG profile of H100-80GB (valid: ...)
// Every string has a size limit (above), and the spec as a whole kMaxSpecBytes; run.command args
// and env values may hold tabs and newlines, no other string a control character.
absl::Status ValidateSpec(const WorkloadSpec& spec);

// The bytes of every string of `spec` together: what kMaxSpecBytes bounds.
size_t SpecTextBytes(const WorkloadSpec& spec);

// An agent's inventory, by the rules the agent's topology parser applies (agent/topology.h):
// cluster name, info labels, node names (labels, unique), fabric ids, node labels, GPU uuids
// (unique in the cluster), indices (unique on the node, below kMaxGpusPerNode), known models, and
// MIG: a mig_enabled GPU is mig_capable with a model whose geometry mig.h knows, and its
// mig_layout is valid for that geometry; a layout without mig_enabled is refused. Fields are
// named "register.cluster", "register.info.region", "register.inventory.nodes[3].gpus[1].uuid".
absl::Status ValidateInventory(const ClusterInfo& info, const std::vector<NodeInfo>& nodes);

// Routing (docs/routing.md).
// Price book lines per cluster, and client regions with a declared RTT.
inline constexpr size_t kMaxPriceEntries = 1024;
inline constexpr size_t kMaxRttEntries = 256;
// Declarations in one apply.
inline constexpr size_t kMaxDeclarationsPerApply = 4096;
// A price per hour: at most 10^6 currency units (in micro-units).
inline constexpr int64_t kMaxPriceMicros = int64_t{1'000'000} * 1'000'000;
// A round-trip time: at most 10 s (in microseconds).
inline constexpr int64_t kMaxRttMicros = int64_t{10'000'000};
// Names in a workload's placement lists (jurisdictions, labels, providers, regions, clusters):
// at most this many in each.
inline constexpr size_t kMaxPlacementListEntries = 64;

// A workload's placement rules, fields named "spec.placement.<field>": every list entry IsLabel
// (cluster names IsName), no duplicates, at most kMaxPlacementListEntries; a cluster not both
// allowed and denied; max price 0..kMaxPriceMicros; max RTT 0..kMaxRttMicros and, when set, a
// client region; objective latency or balanced needs a client region. ValidateSpec calls it.
absl::Status ValidatePlacement(const PlacementConstraints& placement);

// An admin's declaration, fields named "<field>.<name>" under `field` (e.g. "declarations[2]"):
// cluster IsName; provider, region, zone, jurisdiction empty or IsLabel; compliance labels as an
// inventory's; at most kMaxPriceEntries price lines, each with a known model (and, with a MIG
// profile, one of that model's profiles), a price 0..kMaxPriceMicros, an effective date, and no
// two for the same (model, profile, capacity type, effective date); at most kMaxRttEntries RTTs,
// regions IsLabel, 0..kMaxRttMicros.
absl::Status ValidateDeclaration(absl::string_view field, const ClusterDeclaration& declared);

// ---- What a store must refuse (federation/store.h): every store applies these ------------------

// "<field>: too large" when `value` does not fit in an int64 (a PostgreSQL bigint), the widest
// figure a store promises to hold.
absl::Status ValidateFitsInt64(absl::string_view field, uint64_t value);

// ValidateInventory, then the figures it does not bound — nodes' cpu_millis and memory_mib,
// GPUs' memory_mib — must fit in an int64: "register.inventory.nodes[0].memory_mib: too large".
absl::Status ValidateStorableInventory(const ClusterInfo& info, const std::vector<NodeInfo>& nodes);

// The `i`th transition of an ApplyTransitions call, named "transitions[i]": id, from and to set,
// to differs from from, PLACED carries an assignment with a cluster, and its epoch fits in an
// int64.
absl::Status ValidateTransition(const Transition& t, size_t i);
// An eviction both stores accept (`i` names it in the message, "evictions[i].field"): a
// positive id, a cluster, a message of at most kMaxReasonBytes.
absl::Status ValidateEviction(const WorkloadStore::Eviction& e, size_t i);
// A preemption both stores accept ("preemptions[i]..."): a preemptor, its tenant, resource and
// cluster, a known cause, victims that are its evictions (same ids, in order), each eviction
// valid.
absl::Status ValidatePreemption(const WorkloadStore::Preemption& p, size_t i);
// A fair-share weight: tenant (and project, when set) names, 1 <= weight <= kMaxShareWeight;
// INVALID_ARGUMENT naming the field.
absl::Status ValidateShareWeight(const ShareWeight& w);
// The records to store once `marked` (ids) were marked: each with only its marked victims,
// stamped `now` where it has no time; records with no victim marked are left out.
std::vector<PreemptionRecord> RecordsOfMarked(
    const std::vector<WorkloadStore::Preemption>& preemptions,
    const std::vector<WorkloadId>& marked, Timestamp now);

// CreateToken's input: token_hash set and ValidateTokenBinding.
absl::Status ValidateTokenRecord(absl::string_view token_hash, const TokenRecord& record);
// A token's subject and binding: a role inside auth::Role; a tenant for the tenant roles and
// none for platform-admin and agent; a project only with its tenant; a cluster for agents only;
// names well formed.
absl::Status ValidateTokenBinding(const TokenRecord& record);
// A role binding: its subject (ValidateSubject), a role other than agent, and a scope the role
// may be bound at (as ValidateTokenBinding).
absl::Status ValidateRoleBinding(const RoleBinding& binding);
// A cluster certificate to record: an upper-case hexadecimal serial of 1..40 digits, a cluster,
// and a validity that ends after it starts.
absl::Status ValidateClusterCertificate(const ClusterCertificate& certificate);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_VALIDATION_H_
