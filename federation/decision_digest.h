#ifndef GPUFED_FEDERATION_DECISION_DIGEST_H_
#define GPUFED_FEDERATION_DECISION_DIGEST_H_

// A digest of placement decisions that is the same on every machine, compiler and standard
// library: tests pin the engine's decisions with it (tests/unit/federation/decision_pin_test.cc)
// and `gpufed-bench placement --digest` prints it. Only what a decision does counts — the
// cluster, each replica's node, GPUs, share and MIG instance, the MIG layout changes, and
// whether a request never fits — not the words of reasons, which may be reworded freely.

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "federation/placement.h"

namespace gpufed {

// The canonical text of one decision, one line without its newline, for example
//   "fit dgx 1 | dgx-0 GPU-dgx-0-0,GPU-dgx-0-1 0 - | mig dgx-1 GPU-dgx-1-3 on 3g.40gb@0,1g.10gb@4"
// ("fit", cluster, epoch; per replica: node, GPU UUIDs, milli share (0: whole GPUs), MIG
// instance as profile@slot or "-"; per MIG change: node, GPU UUID, on/off, layout), or "wait"
// or "never" when nothing is assigned. Names appear verbatim.
std::string DecisionText(const PlacementDecision& decision);

// FNV-1a (64 bits) over the canonical text of each decision in turn, newline-terminated. A
// value type; not thread-safe to share while adding.
class DecisionDigest {
 public:
  void Add(const PlacementDecision& decision);
  // Folds raw bytes (a caller's own separator, say).
  void AddBytes(absl::string_view bytes);
  [[nodiscard]] uint64_t value() const { return value_; }
  // The value as 16 lower-case hex digits.
  [[nodiscard]] std::string Hex() const;

 private:
  static constexpr uint64_t kOffsetBasis = 14695981039346656037ULL;
  static constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t value_ = kOffsetBasis;
};

}  // namespace gpufed

#endif  // GPUFED_FEDERATION_DECISION_DIGEST_H_
