#include "cli/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gpufed::cli {

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory"));
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    const std::string message =
        absl::StrCat(path, ": ", std::error_code(error, std::generic_category()).message());
    if (error == ENOENT) return absl::NotFoundError(message);
    if (error == EACCES) return absl::PermissionDeniedError(message);
    return absl::InvalidArgumentError(message);
  }
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat(path, ": read failed"));
  return contents.str();
}

absl::Status ReplaceFile(const std::string& path, const std::string& content, mode_t mode) {
  const std::string temp = absl::StrCat(path, ".tmp");
  ::unlink(temp.c_str());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot write ", temp, ": ", std::generic_category().message(errno)));
  }
  ::fchmod(fd, mode);
  bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size());
  ok = ::fsync(fd) == 0 && ok;
  ok = ::close(fd) == 0 && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::generic_category().message(errno);
    ::unlink(temp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", why));
  }
  return absl::OkStatus();
}

}  // namespace gpufed::cli
