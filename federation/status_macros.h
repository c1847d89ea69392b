#ifndef GPUFED_FEDERATION_STATUS_MACROS_H_
#define GPUFED_FEDERATION_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// RETURN_IF_ERROR(expr): returns the status of `expr` from the enclosing function if not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::absl::Status gpufed_status_ = (expr);          \
    if (!gpufed_status_.ok()) return gpufed_status_; \
  } while (0)

#define GPUFED_CONCAT_INNER_(a, b) a##b
#define GPUFED_CONCAT_(a, b) GPUFED_CONCAT_INNER_(a, b)

// ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; returns its status if not OK,
// else assigns the value to `lhs` (which may be a declaration).
#define ASSIGN_OR_RETURN(lhs, expr) \
  GPUFED_ASSIGN_OR_RETURN_IMPL_(GPUFED_CONCAT_(gpufed_statusor_, __LINE__), lhs, expr)
// `statusor` is an identifier and `lhs` may be a declaration (`auto x`), so neither can be
// parenthesized.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define GPUFED_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return statusor.status();            \
  lhs = std::move(statusor).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // GPUFED_FEDERATION_STATUS_MACROS_H_
