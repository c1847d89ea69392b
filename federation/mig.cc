#include "federation/mig.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpufed {
namespace {

// GA100/GH100 8-slot geometry. Placements are verbatim `nvidia-smi mig -lgipp` output for
// A100-40GB and H100-80GB/H100-94GB [V]; A100-80GB and H200 use the same geometry [D] (no -lgipp
// sample was found for them; the reference marks them derived/unverified).
const std::vector<int> kAny1 = {0, 1, 2, 3, 4, 5, 6};
const std::vector<int> kEven2 = {0, 2, 4, 6};
const std::vector<int> kTwo = {0, 2, 4};
const std::vector<int> kHalf = {0, 4};
const std::vector<int> kZero = {0};

std::vector<MigProfile> EightSlot(absl::string_view p1, absl::string_view p1me,
                                  absl::string_view p1x2, absl::string_view p2,
                                  absl::string_view p3, absl::string_view p4,
                                  absl::string_view p7) {
  return {
      {p1, 19, 1, 1, 7, kAny1, false},    {p1me, 20, 1, 1, 1, kAny1, true},
      {p1x2, 15, 1, 2, 4, kEven2, false}, {p2, 14, 2, 2, 3, kTwo, false},
      {p3, 9, 3, 4, 2, kHalf, false},     {p4, 5, 4, 4, 1, kZero, false},
      {p7, 0, 7, 8, 1, kZero, false},
  };
}

const std::vector<MigGeometry>& Geometries() {
  static const auto* const kGeometries = new std::vector<MigGeometry>{
      // A100-40GB: note 1g.10gb is the two-slot profile (ID 15) here.
      {"A100-40GB", 8, 7,
       EightSlot("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")},
      {"A100-80GB", 8, 7,
       EightSlot("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")},
      {"H100-80GB", 8, 7,
       EightSlot("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")},
      {"H100-94GB", 8, 7,
       EightSlot("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb")},
      {"H200", 8, 7,
       EightSlot("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")},
      // A30: 4 memory slots, 4 compute slices; IDs and placements verbatim [V].
      {"A30",
       4,
       4,
       {
           {"1g.6gb", 14, 1, 1, 4, {0, 1, 2, 3}, false},
           {"1g.6gb+me", 21, 1, 1, 1, {0, 1, 2, 3}, true},
           {"2g.12gb", 5, 2, 2, 2, {0, 2}, false},
           {"2g.12gb+me", 6, 2, 2, 1, {0, 2}, true},
           {"4g.24gb", 0, 4, 4, 1, {0}, false},
       }},
  };
  return *kGeometries;
}

std::string Starts(const std::vector<int>& starts) { return absl::StrJoin(starts, ", "); }

}  // namespace

const MigProfile* MigGeometry::Find(absl::string_view profile) const {
  for (const MigProfile& p : profiles) {
    if (p.name == profile) return &p;
  }
  return nullptr;
}

const MigGeometry* FindMigGeometry(absl::string_view model) {
  for (const MigGeometry& g : Geometries()) {
    if (g.model == model) return &g;
  }
  return nullptr;
}

std::vector<absl::string_view> MigModels() {
  std::vector<absl::string_view> out;
  for (const MigGeometry& g : Geometries()) out.push_back(g.model);
  return out;
}

absl::Status ValidateMigLayout(const MigGeometry& geometry, std::span<const MigInstance> layout) {
  std::vector<int> owner(geometry.memory_slots, -1);
  std::map<absl::string_view, int> counts;
  int media = 0;
  int compute = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const MigInstance& inst = layout[i];
    const MigProfile* p = geometry.Find(inst.profile);
    if (p == nullptr) {
      std::vector<absl::string_view> names;
      for (const MigProfile& q : geometry.profiles) names.push_back(q.name);
      return absl::InvalidArgumentError(absl::StrCat("\"", inst.profile,
                                                     "\" is not a MIG profile of ", geometry.model,
                                                     " (", absl::StrJoin(names, ", "), ")"));
    }
    const std::string where = absl::StrCat(inst.profile, " at slot ", inst.start);
    if (std::find(p->starts.begin(), p->starts.end(), inst.start) == p->starts.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": allowed starts are ", Starts(p->starts)));
    }
    for (int s = inst.start; s < inst.start + p->memory_slices; ++s) {
      if (owner[s] >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": overlaps ", layout[owner[s]].profile, " at slot ", layout[owner[s]].start));
      }
      owner[s] = static_cast<int>(i);
    }
    if (++counts[p->name] > p->max_count) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": at most ", p->max_count, " ", p->name, " per ", geometry.model));
    }
    if (p->media_extensions && ++media > 1) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": at most one +me instance per GPU"));
    }
    compute += p->compute_slices;
    if (compute > geometry.compute_slices) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": the layout needs more than ",
                                                     geometry.compute_slices, " compute slices"));
    }
  }
  return absl::OkStatus();
}

std::vector<int> FreeMigStarts(const MigGeometry& geometry, std::span<const MigInstance> layout,
                               absl::string_view profile) {
  std::vector<int> out;
  const MigProfile* p = geometry.Find(profile);
  if (p == nullptr) return out;
  std::vector<MigInstance> trial(layout.begin(), layout.end());
  trial.push_back(MigInstance{std::string(profile), 0});
  for (int start : p->starts) {
    trial.back().start = start;
    if (ValidateMigLayout(geometry, trial).ok()) out.push_back(start);
  }
  return out;
}

}  // namespace gpufed
