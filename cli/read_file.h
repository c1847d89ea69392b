#ifndef GPUFED_CLI_READ_FILE_H_
#define GPUFED_CLI_READ_FILE_H_

#include <string>

#include "absl/status/statusor.h"

namespace gpufed::cli {

// The whole file. NOT_FOUND when it does not exist; PERMISSION_DENIED when it cannot be
// opened for that reason; otherwise INVALID_ARGUMENT (e.g. a directory). Messages name the
// path and the OS reason.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace gpufed::cli

#endif  // GPUFED_CLI_READ_FILE_H_
