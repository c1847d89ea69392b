#include "storage/pg_errors.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "pqxx/except"

namespace gpufed::storage {
namespace {

// libpqxx messages end with a newline and sometimes carry "DETAIL:" lines; keep the first line.
std::string FirstLine(absl::string_view text) {
  text = absl::StripLeadingAsciiWhitespace(text);
  size_t end = text.find('\n');
  return std::string(absl::StripTrailingAsciiWhitespace(text.substr(0, end)));
}

absl::Status FromSqlState(const pqxx::sql_error& e, absl::string_view context) {
  const std::string& state = e.sqlstate();
  std::string message = absl::StrCat(context, ": ", FirstLine(e.what()));
  if (state == "23505") return absl::AlreadyExistsError(message);
  if (state == "23503") return absl::NotFoundError(message);
  if (state == "23514" || state == "23502" || state.rfind("22", 0) == 0) {
    return absl::InvalidArgumentError(message);
  }
  if (state == "40001" || state == "40P01" || state == "55P03") return absl::AbortedError(message);
  if (state == "57014") return absl::DeadlineExceededError(message);
  // 08: connection exception; 53: insufficient resources; 57P0x: admin/crash shutdown,
  // cannot connect now.
  if (state.rfind("08", 0) == 0 || state.rfind("53", 0) == 0 || state.rfind("57P", 0) == 0) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(absl::StrCat(message, " (SQLSTATE ", state, ")"));
}

}  // namespace

absl::Status StatusFromException(const std::exception& e, absl::string_view context) {
  // Most specific first: several of these derive from one another.
  if (dynamic_cast<const pqxx::in_doubt_error*>(&e) != nullptr ||
      dynamic_cast<const pqxx::statement_completion_unknown*>(&e) != nullptr) {
    return absl::UnavailableError(absl::StrCat(
        context, ": the database connection failed while committing; the outcome is unknown: ",
        FirstLine(e.what())));
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) {
    return absl::UnavailableError(
        absl::StrCat(context, ": database unavailable: ", FirstLine(e.what())));
  }
  if (dynamic_cast<const pqxx::serialization_failure*>(&e) != nullptr ||
      dynamic_cast<const pqxx::deadlock_detected*>(&e) != nullptr) {
    return absl::AbortedError(
        absl::StrCat(context, ": transaction conflict: ", FirstLine(e.what())));
  }
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e); sql != nullptr) {
    return FromSqlState(*sql, context);
  }
  return absl::InternalError(absl::StrCat(context, ": ", FirstLine(e.what())));
}

bool IsConnectionBroken(const std::exception& e) {
  if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr ||
      dynamic_cast<const pqxx::in_doubt_error*>(&e) != nullptr) {
    return true;
  }
  if (const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e); sql != nullptr) {
    const std::string& state = sql->sqlstate();
    return state.rfind("08", 0) == 0 || state.rfind("57P", 0) == 0;
  }
  return false;
}

}  // namespace gpufed::storage
