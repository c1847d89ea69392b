#ifndef GPUFED_AUTH_SECRET_FILE_H_
#define GPUFED_AUTH_SECRET_FILE_H_

// The one rule for files that hold secrets (keys, tokens, connection strings), as PostgreSQL
// applies it to its key files: no write for the group or others, no read for others, and group
// read only when root owns the file.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gpufed::auth {

// FAILED_PRECONDITION naming `setting` and `path` (and saying how to fix it) when the file at
// `path` breaks the rule. OK when it keeps it, and when it cannot be looked at: reading it
// reports that.
absl::Status CheckSecretFileMode(absl::string_view setting, const std::string& path);

}  // namespace gpufed::auth

#endif  // GPUFED_AUTH_SECRET_FILE_H_
