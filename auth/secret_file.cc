#include "auth/secret_file.h"

#include <sys/stat.h>

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace gpufed::auth {

absl::Status CheckSecretFileMode(absl::string_view setting, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return absl::OkStatus();
  const mode_t mode = st.st_mode & 0777;
  const bool group_read_ok = st.st_uid == 0 && (mode & S_IWGRP) == 0;
  if ((mode & 0007) != 0 || (mode & S_IWGRP) != 0 || ((mode & S_IRGRP) != 0 && !group_read_ok)) {
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    return absl::FailedPreconditionError(absl::StrCat(
        setting, ": ", path, " is ", (mode & 0022) != 0 ? "writable" : "readable",
        " by other users (mode ", octal, "): chmod 600 ", path, " (or 640 with owner root)"));
  }
  return absl::OkStatus();
}

}  // namespace gpufed::auth
