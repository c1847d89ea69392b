#ifndef GPUFED_FEDERATION_POLICY_H_
#define GPUFED_FEDERATION_POLICY_H_

// Placement policies (docs/domain.md#scheduling). A policy scores one candidate placement of one
// replica on one node; the engine (federation/placement.h) enumerates the candidates, applies
// the hard filters, packs gangs and picks the best. All seven policies sit behind this one
// interface and are chosen by name.

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "federation/pool.h"

namespace gpufed {

// What one replica takes, derived from a WorkloadSpec.
struct Demand {
  enum class Kind { kNone, kWhole, kShare, kMig };
  Kind kind = Kind::kWhole;
  uint32_t gpus = 1;              // whole GPUs (kWhole); 1 for kShare/kMig; 0 for kNone
  uint32_t milli = kMilliPerGpu;  // per GPU: 1000 for whole GPUs, the share for kShare
  std::string mig_profile;        // kMig
  uint64_t cpu_millis = 0;
  uint64_t memory_mib = 0;

  // Milli-GPUs one replica takes (gpus x milli; a MIG instance counts as 0 here).
  [[nodiscard]] uint64_t TotalMilli() const {
    return kind == Kind::kMig ? 0 : uint64_t{gpus} * milli;
  }
  static Demand Of(const WorkloadSpec& spec);
};

// The state of one node as policies see it: host resources and the share left on each GPU
// that the demand may use (healthy, right model and memory, not in MIG mode).
struct NodeView {
  uint16_t model = 0;  // model of the node's first eligible GPU
  uint64_t cpu_free = kUnlimited;
  uint64_t cpu_total = 0;  // 0: not reported
  uint64_t memory_free = kUnlimited;
  uint64_t memory_total = 0;
  uint32_t gpu_total = 0;  // GPUs in the view
  absl::InlinedVector<uint32_t, 8> milli_free;
  // For whole-GPU demands: the GPUs to take (indices into milli_free), chosen by the engine.
  absl::InlinedVector<uint8_t, 8> whole_pick;

  [[nodiscard]] uint64_t MilliFree() const;
  [[nodiscard]] uint32_t WholeFree() const;
  // Whether `d` could go here now (GPU shares and host resources; model filters are already
  // applied when the view is built).
  [[nodiscard]] bool Fits(const Demand& d) const;
  // The view after taking `d` on the GPUs at `gpus` (indices into milli_free).
  [[nodiscard]] NodeView After(const Demand& d, absl::Span<const uint8_t> gpus) const;
};

// A typical workload and how common it is: the distribution fragmentation is measured against
// (the "target workload" of FGD). Weights need not sum to 1.
struct MixEntry {
  Demand demand;
  std::vector<uint16_t> models;  // allowed model ids; empty: any
  double weight = 0;
};
using WorkloadMix = std::vector<MixEntry>;

// Where one replica goes on one node, and how good that is.
struct NodeChoice {
  double score = 0;                      // higher is better
  absl::InlinedVector<uint8_t, 8> gpus;  // indices into NodeView::milli_free
};

// A policy scores one node for one replica and picks the GPUs on it. The engine has already
// checked that the replica fits (NodeView::Fits) and passes, for whole-GPU demands, the GPUs it
// should take (`whole_pick`: the smallest NVLink domain that holds them, else the lowest
// indices). Ties between nodes are broken by the engine.
class PlacementPolicy {
 public:
  virtual ~PlacementPolicy() = default;
  [[nodiscard]] virtual absl::string_view name() const = 0;
  virtual NodeChoice Choose(const NodeView& node, const Demand& demand, uint32_t node_order) = 0;
  // The distribution of typical workloads; policies that do not use it ignore it.
  virtual void SetMix(const WorkloadMix& mix) {}
  // True when Choose depends on nothing but its arguments and the mix (no random draw, no
  // other state): the engine then reuses a node's choice while the node and the request are
  // the same. A policy that draws or remembers must leave this false.
  [[nodiscard]] virtual bool Pure() const { return false; }
  // Random source for policies that draw (random); seeded for determinism.
  void Seed(uint64_t seed) { rng_.seed(seed); }
  // Its state: the engine puts it back after an attempt that fails, so that skipping attempts
  // that cannot succeed changes no later draw.
  [[nodiscard]] const std::mt19937_64& random_state() const { return rng_; }
  void RestoreRandomState(const std::mt19937_64& state) { rng_ = state; }

 protected:
  std::mt19937_64 rng_{1};
};

// "random", "first-fit", "best-fit", "dot-product", "gpu-packing", "fgd", "gpufed".
std::vector<std::string> PolicyNames();
// INVALID_ARGUMENT naming the known policies for an unknown name.
absl::StatusOr<std::unique_ptr<PlacementPolicy>> MakePolicy(absl::string_view name);

// How fragmentation is measured (NodeFragmentation).
enum class FragmentationMeasure {
  // The FGD paper's: a typical workload that can run on the node once can use every free GPU
  // with enough share left; host memory is not looked at.
  kFgd,
  // gpufed's: the host feeds the GPUs. A typical workload cannot run where free host memory is
  // below its own, and a typical share workload (one replica per GPU share) can use at most as
  // many GPUs as the replicas the node's free CPU and memory still hold: the share left on the
  // rest is stranded for it. A node with eight free GPUs and CPU for two more replicas offers
  // two GPUs' worth, not eight. Whole-GPU workloads are not limited that way (measured: limiting
  // them too lost to FGD where multi-GPU pods dominate; docs/simulator.md).
  kHostAware,
};

// Expected fragmentation of a node with respect to a workload mix (FGD, Weng et al. ATC '23):
// for each typical workload, the free milli-GPUs on the node it cannot use — all of them if it
// cannot run there at all (wrong model, too little CPU or, kHostAware, memory, too few GPUs with
// enough share left), and all of them for CPU-only workloads — weighted by how common it is.
// kHostAware also counts what a share workload could reach but the host cannot feed (above);
// where it may use only some of the GPUs with enough share left, it uses those with the most.
double NodeFragmentation(const NodeView& node, const WorkloadMix& mix,
                         FragmentationMeasure measure = FragmentationMeasure::kFgd);

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_POLICY_H_
