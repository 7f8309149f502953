// The run directory and its lock (see run_dir.h). Plain POSIX calls and no LibTorch.
#include "run/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "base/clock.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/host.h"
#include "base/log.h"
#include "run/metrics_log.h"

namespace dlrun::train {

std::string resolve_run_dir(const Config& cfg, const std::string& cli_run_dir) {
  if (!cli_run_dir.empty()) return cli_run_dir;
  if (!cfg.run.dir.empty()) return cfg.run.dir;
  return "runs/" + cfg.run.name;
}

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

/// `base`, or `base`-2, -3, ... whichever does not exist yet.
std::string free_name(const std::string& base, const std::string& ext = {}) {
  std::string p = base + ext;
  for (int n = 2; fsutil::path_exists(p); ++n) p = base + "-" + std::to_string(n) + ext;
  return p;
}

bool inside(const std::string& path, const std::string& dir) { return starts_with(path, (dir + "/").c_str()); }

}  // namespace

RunDir::RunDir(std::string path, const std::string& checkpoint_dir) : path_(std::move(path)) {
  while (path_.size() > 1 && path_.back() == '/') path_.pop_back();
  checkpoints_ = checkpoint_dir.empty() ? path_ + "/checkpoints" : checkpoint_dir;
}

std::vector<std::string> RunDir::previous_run_files() const {
  std::vector<std::string> out;
  for (const auto& name : fsutil::list_names(path_)) {
    const std::string p = path_ + "/" + name;
    if (p == checkpoints_) continue;  // counted below, only when it holds something
    if (name == "config.yaml" || name == "metrics.jsonl" || name == "summary.json" ||
        starts_with(name, "config.before-step-") || starts_with(name, "events.out.tfevents."))
      out.push_back(p);
  }
  if (fsutil::is_directory(checkpoints_) && !fsutil::list_names(checkpoints_).empty()) out.push_back(checkpoints_);
  return out;
}

std::string RunDir::set_aside_previous_run() const {
  const std::string stamp = utc_stamp();
  const std::string aside = free_name(path_ + "/aside-" + stamp);
  fsutil::make_dirs(aside);
  for (const auto& p : previous_run_files()) {
    if (p == checkpoints_ && !inside(checkpoints_, path_)) {
      fsutil::rename_durable(checkpoints_, free_name(checkpoints_ + ".aside-" + stamp));
      continue;
    }
    fsutil::rename_durable(p, aside + "/" + fsutil::base_name(p));
  }
  fsutil::fsync_dir(path_);
  return aside;
}

int64_t RunDir::furthest_logged_step() const {
  int64_t furthest = -1;
  MetricsLog(metrics_jsonl()).drain([&furthest](const MetricsRecord& r) {  // events count too
    if (const auto step = r.step()) furthest = std::max(furthest, *step);
  });
  return furthest;
}

namespace {
/// A config file's text without its leading comment lines (the version line).
std::string without_comments(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && text[i] == '#') {
    const size_t nl = text.find('\n', i);
    i = nl == std::string::npos ? text.size() : nl + 1;
  }
  return text.substr(i);
}
}  // namespace

std::string RunDir::write_config(const std::string& header, const std::string& yaml, int64_t step) const {
  std::string kept;
  if (fsutil::is_regular_file(config_yaml()) && without_comments(fsutil::read_file(config_yaml())) != yaml) {
    kept = free_name(fmt::format("{}/config.before-step-{:08d}", path_, step), ".yaml");
    fsutil::rename_durable(config_yaml(), kept);
  }
  fsutil::write_file_atomic(config_yaml(), "# " + header + "\n" + yaml);
  return kept;
}

void RunDir::write_summary(const nlohmann::json& summary) const { fsutil::write_json_atomic(summary_json(), summary); }

// ---- the lock ------------------------------------------------------------------------------

namespace {

std::string holder_text(int fd) {
  char buf[512] = {0};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  for (auto& ch : s)
    if (ch == '\n') ch = ',';
  return s.empty() ? "another process" : s;
}

/// A field of the lock file's text ("pid 12,host vm-3,boot 5f..,since 1764..."; "host" -> "vm-3"),
/// or "".
std::string holder_field(const std::string& holder, const std::string& name) {
  for (size_t at = 0; at < holder.size();) {
    const size_t end = std::min(holder.find(',', at), holder.size());
    if (holder.compare(at, name.size() + 1, name + " ") == 0) return holder.substr(at + name.size() + 1, end - at - name.size() - 1);
    at = end + 1;
  }
  return "";
}

/// This boot of this machine (a VM recreated under the same host name boots anew).
std::string boot_id() {
  std::string id;
  try {
    id = fsutil::read_file("/proc/sys/kernel/random/boot_id");
  } catch (const Error&) {
  }
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

}  // namespace

RunLock::RunLock(const std::string& run_dir, double other_host_wait_s, const std::function<bool()>& stop) {
  std::vector<std::string> missing;
  for (std::string p = run_dir; !p.empty() && p != "." && p != "/" && !fsutil::path_exists(p); p = fsutil::parent_of(p))
    missing.push_back(p);
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) == 0) {
      created_.push_back(*it);
      continue;
    }
    const int err = errno;  // before is_directory's stat() replaces it
    if (!fsutil::is_directory(*it)) {
      release();
      // The run directory is the user's choice (--run-dir, run.dir): one that cannot be made
      // (read-only file system, no permission, a file in the way) is bad input, exit 2.
      throw Error(ExitCode::kBadInput, fmt::format("{}: cannot create the run directory: {}", *it, std::strerror(err)),
                  "choose a writable --run-dir (or run.dir)");
    }
  }
  path_ = run_dir + "/dlrun.lock";
  const double wait_until = mono_now() + other_host_wait_s;
  bool waiting_logged = false;
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      const int err = errno;
      release();
      fail_runtime("{}: cannot create the lock file: {}", path_, std::strerror(err));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == ENOSYS || err == ENOLCK || err == EOPNOTSUPP || err == EINVAL) {
        // Some shared file systems (Lustre without -o flock, some NFS setups) have no locks.
        log::warn("{}: the file system does not support locks ({}); running without the one-trainer-per-directory "
                  "check",
                  path_, std::strerror(err));
        ::close(fd);
        ::unlink(path_.c_str());
        return;
      }
      const std::string holder = holder_text(fd);
      ::close(fd);
      // Held from another host: on a shared file system a reclaimed VM's lock outlives it until
      // the server's lease ends, so that is worth waiting for -- and, past the wait, "try again
      // later" (75), not a refusal a scheduler takes as final.
      std::string other = err == EWOULDBLOCK ? holder_field(holder, "host") : std::string();
      const std::string boot = holder_field(holder, "boot");
      if (other == hostname("?") && !boot.empty() && boot != boot_id()) other += " (an earlier boot of it)";
      if (!other.empty() && other != hostname("?")) {
        const bool stopping = stop && stop();
        if (mono_now() < wait_until && !stopping) {
          if (!waiting_logged)
            log::warn("{} is locked by a dlrun on host {} ({}); waiting up to {:g} s for it (run.lock_wait_s)",
                      run_dir, other, holder, other_host_wait_s);
          waiting_logged = true;
          --attempt;  // (the count is for replaced lock files, below)
          ::usleep(250000);
          continue;
        }
        release();
        throw Error(ExitCode::kInterrupted,
                    fmt::format("{} is still locked by a dlrun on host {} ({}){}; exiting 75 to be tried again later",
                                run_dir, other, holder,
                                stopping ? " and a stop was requested"
                                         : fmt::format(" after {:g} s (run.lock_wait_s)", other_host_wait_s)),
                    "a VM that was taken away holds its lock on a shared file system until the server's lease "
                    "ends (NFSv4: 90 s by default); if that host still runs it, stop it there");
      }
      release();
      if (err == EWOULDBLOCK)
        throw Error(ExitCode::kBadInput, fmt::format("{} is in use by another dlrun train ({})", run_dir, holder),
                    "wait for it to finish, stop it, or use another --run-dir");
      fail_runtime("{}: cannot lock: {}", path_, std::strerror(err));
    }
    // A holder that released between our open and flock unlinked the file we hold: retry.
    struct stat held {}, named {};
    if (::fstat(fd, &held) != 0 || ::stat(path_.c_str(), &named) != 0 || held.st_ino != named.st_ino ||
        held.st_dev != named.st_dev) {
      ::close(fd);
      continue;
    }
    const std::string me = fmt::format("pid {}\nhost {}\nboot {}\nsince {:.0f}\n", ::getpid(), hostname("?"), boot_id(),
                                       wall_now());
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size()))
      log::warn("{}: cannot record this process in the lock file: {}", path_, std::strerror(errno));
    fd_ = fd;
    return;
  }
  release();
  fail_runtime("{}: the lock file keeps being replaced; is another trainer starting and stopping?", path_);
}

RunLock::~RunLock() { release(); }

void RunLock::release() {
  if (fd_ >= 0) {
    ::unlink(path_.c_str());  // while still holding the lock: see the inode check above
    ::close(fd_);
    fd_ = -1;
  }
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) ::rmdir(it->c_str());  // only if empty
  created_.clear();
}

}  // namespace dlrun::train
