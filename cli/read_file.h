#ifndef GPUFED_CLI_READ_FILE_H_
#define GPUFED_CLI_READ_FILE_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpufed::cli {

// The whole file. NOT_FOUND when it does not exist; PERMISSION_DENIED when it cannot be
// opened for that reason; otherwise INVALID_ARGUMENT (e.g. a directory). Messages name the
// path and the OS reason.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// Replaces `path` with `content`, mode `mode` exactly (whatever the umask): written to PATH.tmp,
// synced, then renamed over the file, so a reader sees the old file or the new one, whole, and
// its mode and content change together. INTERNAL naming the path and the OS reason.
absl::Status ReplaceFile(const std::string& path, const std::string& content, mode_t mode);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_READ_FILE_H_
