#include "auth/token.h"

#include "auth/principal.h"
#include "gtest/gtest.h"

namespace gpufed::auth {
namespace {

TEST(TokenTest, TokensAreRandomAndHashesStable) {
  std::string a = GenerateToken();
  std::string b = GenerateToken();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind("gpf_", 0), 0u);
  EXPECT_GE(a.size(), 40u);
  EXPECT_EQ(HashToken(a), HashToken(a));
  EXPECT_NE(HashToken(a), HashToken(b));
  EXPECT_EQ(HashToken(a).size(), 64u);
  // SHA-256 of "abc", a published test vector.
  EXPECT_EQ(HashToken("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(RoleTest, NamesRoundTrip) {
  EXPECT_EQ(ParseRole(RoleName(Role::kTenantAdmin)), Role::kTenantAdmin);
  EXPECT_FALSE(ParseRole("root").has_value());
}

}  // namespace
}  // namespace gpufed::auth
