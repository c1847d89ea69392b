#ifndef GPUFED_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define GPUFED_TESTS_SUPPORT_STATUS_MATCHERS_H_

// gtest/gMock helpers for absl::Status and absl::StatusOr<T> (Debian 12's Abseil, 20220623,
// ships no absl/status/status_matchers.h). Header-only; link GTest::gmock. EXPECT_OK,
// ASSERT_OK, IsOk and StatusIs also take a grpc::Status (any type with ok(), error_code() and
// error_message(); gRPC's codes are the canonical ones Abseil uses), without including gRPC.
//
//   EXPECT_OK(store.SetClusterState("c1", ClusterState::kReady));
//   ASSERT_OK(store.Get(id));                      // a StatusOr: only its status is checked
//   ASSERT_OK_AND_ASSIGN(Workload w, store.Get(id));
//   ASSERT_OK_AND_ASSIGN(auto page, store.List(filter));
//   EXPECT_THAT(store.Get(0), StatusIs(absl::StatusCode::kInvalidArgument));
//   EXPECT_THAT(store.Get(7), Not(IsOk()));
//   EXPECT_THAT(store.ListActive("c1"), IsOkAndHolds(IsEmpty()));
//   EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound, HasSubstr("tenant")));
//
// A failure prints the expression and the whole status (code and message). Tests should
// compare codes, not message prose; the message form exists for the rare field-name check.
//
// ASSERT_OK_AND_ASSIGN returns from the enclosing function on failure, like every ASSERT_*:
// use it in TEST bodies and void helpers. `lhs` is one macro argument: a structured binding
// (auto [a, b]) does not fit; assign to a variable first.

#include <concepts>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gpufed::testing {
namespace status_internal {

inline const absl::Status& GetStatus(const absl::Status& status) { return status; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}
// grpc::Status and the like, without including gRPC: their codes are the same canonical codes.
template <typename T>
requires requires(const T& s) {
  { s.ok() } -> std::convertible_to<bool>;
  static_cast<int>(s.error_code());
  std::string(s.error_message());
}
absl::Status GetStatus(const T& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(static_cast<int>(status.error_code())),
                      std::string(status.error_message()));
}

// For EXPECT_PRED_FORMAT1: "`expr` is not OK: NOT_FOUND: ...".
template <typename T>
::testing::AssertionResult AssertOk(const char* expr_text, const T& value) {
  const absl::Status status = GetStatus(value);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << expr_text << " is not OK: " << status;
}

class IsOkMatcher {
 public:
  template <typename T>
  bool MatchAndExplain(const T& value, ::testing::MatchResultListener* listener) const {
    const absl::Status status = GetStatus(value);
    if (!status.ok()) *listener << "whose status is " << status;
    return status.ok();
  }
  void DescribeTo(std::ostream* os) const { *os << "is OK"; }
  void DescribeNegationTo(std::ostream* os) const { *os << "is not OK"; }
};

class StatusIsMatcher {
 public:
  StatusIsMatcher(absl::StatusCode code, ::testing::Matcher<const std::string&> message)
      : code_(code), message_(std::move(message)) {}

  template <typename T>
  bool MatchAndExplain(const T& value, ::testing::MatchResultListener* listener) const {
    const absl::Status status = GetStatus(value);
    *listener << "whose status is " << status;
    if (status.code() != code_) return false;
    const std::string message(status.message());
    ::testing::StringMatchResultListener inner;
    if (!message_.MatchAndExplain(message, &inner)) {
      if (!inner.str().empty()) *listener << ", and the message " << inner.str();
      return false;
    }
    return true;
  }
  void DescribeTo(std::ostream* os) const {
    *os << "has status code " << absl::StatusCodeToString(code_) << " and a message that ";
    message_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const {
    *os << "does not have status code " << absl::StatusCodeToString(code_)
        << " or has a message that ";
    message_.DescribeNegationTo(os);
  }

 private:
  absl::StatusCode code_;
  ::testing::Matcher<const std::string&> message_;
};

template <typename StatusOrType>
class IsOkAndHoldsImpl : public ::testing::MatcherInterface<StatusOrType> {
 public:
  using Value = typename std::remove_cv_t<std::remove_reference_t<StatusOrType>>::value_type;

  template <typename InnerMatcher>
  // NOLINTNEXTLINE(bugprone-forwarding-reference-overload): explicit, built only from matchers.
  explicit IsOkAndHoldsImpl(InnerMatcher&& inner)
      : inner_(::testing::SafeMatcherCast<const Value&>(std::forward<InnerMatcher>(inner))) {}

  bool MatchAndExplain(StatusOrType actual,
                       ::testing::MatchResultListener* listener) const override {
    if (!actual.ok()) {
      *listener << "whose status is " << actual.status();
      return false;
    }
    ::testing::StringMatchResultListener inner;
    const bool matches = inner_.MatchAndExplain(*actual, &inner);
    if (!inner.str().empty()) *listener << "which holds a value " << inner.str();
    return matches;
  }
  void DescribeTo(std::ostream* os) const override {
    *os << "is OK and has a value that ";
    inner_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "is not OK or has a value that ";
    inner_.DescribeNegationTo(os);
  }

 private:
  const ::testing::Matcher<const Value&> inner_;
};

template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  // Implicit by design: gMock converts it to the Matcher<StatusOr<T>> an expectation needs.
  template <typename StatusOrType>
  operator ::testing::Matcher<StatusOrType>() const {
    return ::testing::Matcher<StatusOrType>(new IsOkAndHoldsImpl<const StatusOrType&>(inner_));
  }

 private:
  const InnerMatcher inner_;
};

}  // namespace status_internal

// Matches an OK absl::Status or an absl::StatusOr<T> holding a value.
inline ::testing::PolymorphicMatcher<status_internal::IsOkMatcher> IsOk() {
  return ::testing::MakePolymorphicMatcher(status_internal::IsOkMatcher());
}

// Matches an absl::StatusOr<T> holding a value that matches `inner` (a matcher or a value).
template <typename InnerMatcher>
status_internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>> IsOkAndHolds(
    InnerMatcher&& inner) {
  return status_internal::IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>(
      std::forward<InnerMatcher>(inner));
}

// Matches an absl::Status or absl::StatusOr<T> whose code is `code` (any message).
inline ::testing::PolymorphicMatcher<status_internal::StatusIsMatcher> StatusIs(
    absl::StatusCode code) {
  return ::testing::MakePolymorphicMatcher(
      status_internal::StatusIsMatcher(code, ::testing::A<const std::string&>()));
}

// As above, and the message matches `message` (a string or a string matcher).
template <typename MessageMatcher>
::testing::PolymorphicMatcher<status_internal::StatusIsMatcher> StatusIs(absl::StatusCode code,
                                                                         MessageMatcher&& message) {
  return ::testing::MakePolymorphicMatcher(status_internal::StatusIsMatcher(
      code, ::testing::MatcherCast<const std::string&>(std::forward<MessageMatcher>(message))));
}

}  // namespace gpufed::testing

// gtest prints a StatusOr as its bytes unless told otherwise; Abseil 20220623 has no
// operator<< for it. Found by argument-dependent lookup.
#if defined(ABSL_LTS_RELEASE_VERSION) && ABSL_LTS_RELEASE_VERSION <= 20220623
namespace absl {
ABSL_NAMESPACE_BEGIN
template <typename T>
void PrintTo(const StatusOr<T>& status_or, std::ostream* os) {
  if (status_or.ok()) {
    *os << "OK with value " << ::testing::PrintToString(*status_or);
  } else {
    *os << status_or.status();
  }
}
ABSL_NAMESPACE_END
}  // namespace absl
#endif

#define GPUFED_STATUS_MATCHERS_CONCAT_INNER_(a, b) a##b
#define GPUFED_STATUS_MATCHERS_CONCAT_(a, b) GPUFED_STATUS_MATCHERS_CONCAT_INNER_(a, b)

// The status of `expr` (absl::Status or absl::StatusOr<T>) is OK.
#define EXPECT_OK(expr) EXPECT_PRED_FORMAT1(::gpufed::testing::status_internal::AssertOk, expr)
#define ASSERT_OK(expr) ASSERT_PRED_FORMAT1(::gpufed::testing::status_internal::AssertOk, expr)

// Evaluates the StatusOr `rexpr`; fails the test and returns if it is not OK, else moves the
// value into `lhs` (which may be a declaration).
#define ASSERT_OK_AND_ASSIGN(lhs, rexpr)                                                        \
  GPUFED_ASSERT_OK_AND_ASSIGN_IMPL_(GPUFED_STATUS_MATCHERS_CONCAT_(gpufed_statusor_, __LINE__), \
                                    lhs, rexpr)
// `statusor` is an identifier and `lhs` may be a declaration: neither can be parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define GPUFED_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, rexpr)                   \
  auto statusor = (rexpr);                                                        \
  if (!statusor.ok()) GTEST_FAIL() << #rexpr " is not OK: " << statusor.status(); \
  lhs = std::move(statusor).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // GPUFED_TESTS_SUPPORT_STATUS_MATCHERS_H_
