// write_file_atomically: temporary file + fsync + rename + directory fsync (POSIX).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace headroom {
namespace {

std::string errno_text(int err) { return std::generic_category().message(err); }

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw Error(str_cat("cannot write '", path, "': ", what, errno_text(err)));
}

// Removes the temporary file unless the rename has consumed it.
class TempFileGuard {
 public:
  explicit TempFileGuard(std::string name) : name_(std::move(name)) {}
  TempFileGuard(const TempFileGuard&) = delete;
  TempFileGuard& operator=(const TempFileGuard&) = delete;
  ~TempFileGuard() {
    if (fd_ >= 0) ::close(fd_);
    if (!released_) ::unlink(name_.c_str());
  }
  void set_fd(int fd) { fd_ = fd; }
  // Closes the descriptor and returns close()'s errno (0 on success): on NFS a failed close
  // can be the first report of a failed write.
  int close_fd() {
    int err = 0;
    if (::close(fd_) != 0) err = errno;
    fd_ = -1;
    return err;
  }
  void release() { released_ = true; }
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int fd_ = -1;
  bool released_ = false;
};

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::filesystem::path target(path);
  if (target.filename().empty()) {
    throw Error(str_cat("cannot write '", path, "': the path names a directory, not a file"));
  }
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";

  // The temporary lives in the target's directory because rename() is atomic only within one
  // file system. O_EXCL makes a name clash (another writer, a stale leftover) a retry, not a
  // shared file; the counter and clock keep retries rare.
  static std::atomic<unsigned> counter{0};
  int fd = -1;
  std::string temp_name;
  for (int attempt = 0; fd < 0; ++attempt) {
    const auto ticks = std::chrono::steady_clock::now().time_since_epoch().count();
    temp_name = (dir / str_cat(".", target.filename().string(), ".tmp-", ::getpid(), "-",
                               counter.fetch_add(1), "-", ticks % 1000000))
                    .string();
    fd = ::open(temp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100)) {
      const int err = errno;  // before str_cat can touch errno
      fail(path, str_cat("cannot create a temporary file in '", dir.string(), "': "), err);
    }
  }
  TempFileGuard guard(temp_name);
  guard.set_fd(fd);

  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(path, "writing the temporary file failed: ", errno);
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail(path, "fsync of the temporary file failed: ", errno);
  if (const int err = guard.close_fd(); err != 0) {
    fail(path, "closing the temporary file failed: ", err);
  }
  if (::rename(temp_name.c_str(), path.c_str()) != 0) fail(path, "rename failed: ", errno);
  guard.release();

  // Without this the rename may be lost in a crash even though the data blocks were synced.
  fsync_directory(dir.string(), str_cat("cannot write '", path, "'"));
}

void fsync_directory(const std::string& dir, const std::string& what) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    throw Error(str_cat(what, ": cannot open '", dir, "' to fsync it: ", errno_text(errno)));
  }
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) {
    throw Error(str_cat(what, ": fsync of '", dir, "' failed: ", errno_text(err)));
  }
}

void write_directory_atomically(const std::string& path,
                                const std::function<void(const std::string& dir)>& write_files) {
  namespace fs = std::filesystem;
  const fs::path target = fs::absolute(path).lexically_normal();
  const fs::path name = target.has_filename() ? target.filename() : target.parent_path().filename();
  const fs::path dir = target.has_filename() ? target : target.parent_path();
  const fs::path parent = dir.parent_path();
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    throw Error(str_cat("cannot write directory '", path, "': a file of that name exists"));
  }
  fs::create_directories(parent);
  const std::string pid = std::to_string(::getpid());
  // str_cat, not "." + string: GCC 12 warns falsely (-Wrestrict) on that inlined concatenation.
  const fs::path tmp = parent / str_cat(".", name.string(), ".tmp-", pid);
  const fs::path old = parent / str_cat(".", name.string(), ".old-", pid);
  fs::remove_all(tmp);
  fs::create_directory(tmp);
  try {
    write_files(tmp.string());
    fsync_directory(tmp.string());
    if (fs::exists(dir)) {
      fs::remove_all(old);
      fs::rename(dir, old);
    }
    fs::rename(tmp, dir);
    fsync_directory(parent.string());
  } catch (...) {
    std::error_code ignored;
    // The old directory back where it was when the new one did not take its place.
    if (!fs::exists(dir, ignored) && fs::exists(old, ignored)) fs::rename(old, dir, ignored);
    fs::remove_all(tmp, ignored);
    throw;
  }
  fs::remove_all(old, ec);  // a leftover at worst: the new directory is in place
}

void append_line(const std::string& path, const std::string& line) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    throw Error(str_cat(
        path, ": cannot open it to append a log line: ", std::generic_category().message(errno)));
  }
  const off_t end = ::lseek(fd, 0, SEEK_END);
  size_t written = 0;
  int error = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : ENOSPC;
      break;
    }
    written += static_cast<size_t>(n);
  }
  if (error != 0 && written > 0 && end >= 0) (void)::ftruncate(fd, end);
  if (::close(fd) != 0 && error == 0) error = errno;
  if (error != 0) {
    throw Error(str_cat(path,
                        ": writing a log line failed: ", std::generic_category().message(error),
                        " (the run stops: its metrics would be lost)"));
  }
}

}  // namespace headroom
