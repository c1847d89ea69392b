#include "federation/mig.h"

#include "federation/gpu_catalog.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace gpufed {
namespace {

using ::gpufed::testing::IsOk;
using ::testing::Not;

const MigGeometry& Geometry(absl::string_view model) {
  const MigGeometry* g = FindMigGeometry(model);
  EXPECT_NE(g, nullptr) << model;
  return *g;
}

absl::Status Layout(absl::string_view model, std::vector<MigInstance> layout) {
  return ValidateMigLayout(Geometry(model), layout);
}

// The rows of reference/nvidia-gpus.md §1.2, spot-checked per product.
TEST(MigGeometryTest, TablesMatchTheReference) {
  struct Row {
    absl::string_view model, profile;
    int id, compute, memory, max;
    std::vector<int> starts;
  };
  const std::vector<Row> rows = {
      {"A100-40GB", "1g.5gb", 19, 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"A100-40GB", "1g.10gb", 15, 1, 2, 4, {0, 2, 4, 6}},
      {"A100-40GB", "3g.20gb", 9, 3, 4, 2, {0, 4}},
      {"A100-40GB", "7g.40gb", 0, 7, 8, 1, {0}},
      {"A100-80GB", "1g.10gb", 19, 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"A100-80GB", "1g.20gb", 15, 1, 2, 4, {0, 2, 4, 6}},
      {"A100-80GB", "2g.20gb", 14, 2, 2, 3, {0, 2, 4}},
      {"A100-80GB", "4g.40gb", 5, 4, 4, 1, {0}},
      {"H100-80GB", "1g.10gb+me", 20, 1, 1, 1, {0, 1, 2, 3, 4, 5, 6}},
      {"H100-80GB", "3g.40gb", 9, 3, 4, 2, {0, 4}},
      {"H100-80GB", "7g.80gb", 0, 7, 8, 1, {0}},
      {"H100-94GB", "1g.12gb", 19, 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"H100-94GB", "1g.24gb", 15, 1, 2, 4, {0, 2, 4, 6}},
      {"H100-94GB", "3g.47gb", 9, 3, 4, 2, {0, 4}},
      {"H100-94GB", "7g.94gb", 0, 7, 8, 1, {0}},
      {"H200", "1g.18gb", 19, 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"H200", "1g.35gb", 15, 1, 2, 4, {0, 2, 4, 6}},
      {"H200", "2g.35gb", 14, 2, 2, 3, {0, 2, 4}},
      {"H200", "4g.71gb", 5, 4, 4, 1, {0}},
      {"H200", "7g.141gb", 0, 7, 8, 1, {0}},
      {"A30", "1g.6gb", 14, 1, 1, 4, {0, 1, 2, 3}},
      {"A30", "2g.12gb+me", 6, 2, 2, 1, {0, 2}},
      {"A30", "4g.24gb", 0, 4, 4, 1, {0}},
  };
  for (const Row& r : rows) {
    const MigProfile* p = Geometry(r.model).Find(r.profile);
    ASSERT_NE(p, nullptr) << r.model << " " << r.profile;
    EXPECT_EQ(p->id, r.id) << r.model << " " << r.profile;
    EXPECT_EQ(p->compute_slices, r.compute) << r.model << " " << r.profile;
    EXPECT_EQ(p->memory_slices, r.memory) << r.model << " " << r.profile;
    EXPECT_EQ(p->max_count, r.max) << r.model << " " << r.profile;
    EXPECT_EQ(p->starts, r.starts) << r.model << " " << r.profile;
  }
  EXPECT_EQ(Geometry("A30").memory_slots, 4);
  EXPECT_EQ(Geometry("H200").memory_slots, 8);
}

TEST(MigGeometryTest, ProfileNamesAreNotPortableBetweenProducts) {
  // "1g.10gb" is the two-slot profile on A100-40GB and the one-slot profile on H100-80GB.
  EXPECT_EQ(Geometry("A100-40GB").Find("1g.10gb")->memory_slices, 2);
  EXPECT_EQ(Geometry("H100-80GB").Find("1g.10gb")->memory_slices, 1);
  EXPECT_EQ(Geometry("H100-80GB").Find("1g.5gb"), nullptr);
  EXPECT_THAT(Layout("H100-80GB", {{"3g.20gb", 0}}), Not(IsOk()));
}

TEST(MigGeometryTest, ValidLayouts) {
  EXPECT_OK(Layout("H100-80GB", {{"7g.80gb", 0}}));
  EXPECT_OK(Layout("H100-80GB", {{"4g.40gb", 0}, {"3g.40gb", 4}}));
  EXPECT_OK(Layout("H100-80GB", {{"3g.40gb", 0}, {"3g.40gb", 4}}));
  EXPECT_OK(Layout("A100-80GB", {{"2g.20gb", 0}, {"2g.20gb", 2}, {"2g.20gb", 4}, {"1g.10gb", 6}}));
  EXPECT_OK(Layout("H200", {{"1g.35gb", 0}, {"1g.35gb", 2}, {"1g.35gb", 4}, {"1g.35gb", 6}}));
  std::vector<MigInstance> seven;
  seven.reserve(7);
  for (int s = 0; s < 7; ++s) seven.push_back({"1g.12gb", s});
  EXPECT_OK(Layout("H100-94GB", seven));
  EXPECT_OK(Layout("A100-40GB", {{"3g.20gb", 0}, {"2g.10gb", 4}, {"1g.5gb+me", 6}}));
  EXPECT_OK(Layout("A30", {{"2g.12gb", 0}, {"1g.6gb", 2}, {"1g.6gb", 3}}));
  EXPECT_OK(Layout("H100-80GB", {}));
}

TEST(MigGeometryTest, InvalidLayoutsSayWhy) {
  absl::Status s = Layout("H100-80GB", {{"4g.40gb", 4}});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("allowed starts are 0"), std::string::npos) << s;
  EXPECT_THAT(Layout("H100-80GB", {{"2g.20gb", 6}}), Not(IsOk()));  // 2g cannot start at 6
  EXPECT_THAT(Layout("H100-80GB", {{"1g.10gb", 7}}), Not(IsOk()));  // slot 7: only 1g.20gb or 7g
  s = Layout("H100-80GB", {{"3g.40gb", 0}, {"2g.20gb", 2}});
  EXPECT_NE(std::string(s.message()).find("overlaps 3g.40gb at slot 0"), std::string::npos) << s;
  EXPECT_THAT(Layout("H100-80GB", {{"7g.80gb", 0}, {"1g.10gb", 0}}), Not(IsOk()));
  EXPECT_THAT(Layout("H100-80GB", {{"1g.10gb+me", 0}, {"1g.10gb+me", 1}}), Not(IsOk()));
  std::vector<MigInstance> eight;
  eight.reserve(7);
  for (int s = 0; s < 7; ++s) eight.push_back({"1g.10gb", s});
  eight.push_back({"1g.20gb", 6});
  EXPECT_THAT(Layout("H100-80GB", eight), Not(IsOk()));
  EXPECT_THAT(Layout("A30", {{"2g.12gb", 1}}), Not(IsOk()));
  EXPECT_THAT(Layout("A30", {{"2g.12gb+me", 0}, {"1g.6gb+me", 2}}),
              Not(IsOk()));  // one +me per GPU
}

TEST(MigGeometryTest, FreeStartsFollowFragmentation) {
  const MigGeometry& h100 = Geometry("H100-80GB");
  // A 1g at slot 1 blocks the first 3g and the 4g, but not the 3g at 4.
  std::vector<MigInstance> layout = {{"1g.10gb", 1}};
  EXPECT_EQ(FreeMigStarts(h100, layout, "3g.40gb"), (std::vector<int>{4}));
  EXPECT_TRUE(FreeMigStarts(h100, layout, "4g.40gb").empty());
  EXPECT_TRUE(FreeMigStarts(h100, layout, "7g.80gb").empty());
  EXPECT_EQ(FreeMigStarts(h100, layout, "2g.20gb"), (std::vector<int>{2, 4}));
  EXPECT_TRUE(FreeMigStarts(h100, layout, "nonsense").empty());
  EXPECT_EQ(FreeMigStarts(h100, {}, "1g.20gb"), (std::vector<int>{0, 2, 4, 6}));
}

TEST(MigGeometryTest, EveryGeometryIsAMigCapableCatalogueModel) {
  for (absl::string_view model : MigModels()) {
    std::optional<GpuModel> m = FindGpuModel(model);
    ASSERT_TRUE(m.has_value()) << model;
    EXPECT_TRUE(m->mig_capable) << model;
  }
  EXPECT_EQ(FindMigGeometry("L4"), nullptr);
}

}  // namespace
}  // namespace gpufed
