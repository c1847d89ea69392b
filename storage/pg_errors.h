#ifndef GPUFED_STORAGE_PG_ERRORS_H_
#define GPUFED_STORAGE_PG_ERRORS_H_

// Where libpqxx exceptions stop: every exception thrown while talking to PostgreSQL becomes an
// absl::Status whose code carries its retry meaning (federation/store.h).

#include <exception>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpufed::storage {

// Maps an exception thrown by libpqxx (or anything else) to a status:
//   unique_violation                         -> ALREADY_EXISTS
//   foreign_key_violation                    -> NOT_FOUND
//   check/not-null violation, data exception -> INVALID_ARGUMENT
//   serialization failure, deadlock, lock timeout -> ABORTED (retry the transaction)
//   broken connection, too many connections, server shutting down, out of resources
//                                            -> UNAVAILABLE (retry the call)
//   commit outcome unknown (in doubt)        -> UNAVAILABLE, saying so
//   statement timeout                        -> DEADLINE_EXCEEDED
//   anything else                            -> INTERNAL
// `context` (e.g. "submit") prefixes the message. The SQL text is never included: it may be
// long and it may hold parameters.
absl::Status StatusFromException(const std::exception& e, absl::string_view context);

// True if the connection that threw `e` must be discarded and reopened.
bool IsConnectionBroken(const std::exception& e);

}  // namespace gpufed::storage

#endif  // GPUFED_STORAGE_PG_ERRORS_H_
