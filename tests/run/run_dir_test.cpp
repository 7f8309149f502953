// The run directory: its paths, setting an earlier run aside, per-segment configs, the steps
// an interrupted process logged, and the lock that keeps one trainer per directory.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "base/error.h"
#include "base/fsutil.h"
#include "support/files.h"
#include "support/scratch_dir.h"
#include "run/run_dir.h"

using namespace dlrun;
using dlrun::testing::ScratchDir;
using train::RunDir;
using train::RunLock;

namespace {
bool contains(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }
}  // namespace

TEST_CASE("paths of a run directory", "[train][run_dir]") {
  RunDir d("/x/run/");
  CHECK(d.path() == "/x/run");
  CHECK(d.checkpoints() == "/x/run/checkpoints");
  CHECK(d.summary_json() == "/x/run/summary.json");
  CHECK(RunDir("/x/run", "/nvme/ck").checkpoints() == "/nvme/ck");
  Config c;
  c.run.name = "exp";
  CHECK(train::resolve_run_dir(c, "") == "runs/exp");
  c.run.dir = "/data/exp";
  CHECK(train::resolve_run_dir(c, "") == "/data/exp");
  CHECK(train::resolve_run_dir(c, "/cli") == "/cli");
}

TEST_CASE("an earlier run is recognised and set aside whole, nothing deleted", "[train][run_dir]") {
  ScratchDir t;
  RunDir d(t.str());
  CHECK(d.previous_run_files().empty());
  fsutil::make_dirs(t / "checkpoints");
  CHECK(d.previous_run_files().empty());  // an empty checkpoints/ is no run
  t.write("metrics.jsonl", "{\"step\": 3}\n");
  t.write("summary.json", "{}");
  t.write("config.yaml", "run: {}\n");
  t.write("events.out.tfevents.1.host.2.dlrun", "x");
  t.write("checkpoints/step-00000003/model.pt", "w");
  t.write("notes.txt", "the user's own file");
  const auto prev = d.previous_run_files();
  CHECK(prev.size() == 5);
  CHECK(contains(prev, t / "checkpoints"));
  CHECK_FALSE(contains(prev, t / "notes.txt"));

  const std::string aside = d.set_aside_previous_run();
  CHECK(fsutil::base_name(aside).rfind("aside-", 0) == 0);
  CHECK(d.previous_run_files().empty());
  for (const char* f : {"metrics.jsonl", "summary.json", "config.yaml", "checkpoints/step-00000003/model.pt"})
    CHECK(fsutil::is_regular_file(aside + "/" + f));
  CHECK(fsutil::is_regular_file(t / "notes.txt"));
  CHECK(d.furthest_logged_step() == -1);
}

TEST_CASE("a checkpoint.dir outside the run directory is set aside beside itself", "[train][run_dir]") {
  ScratchDir t;
  RunDir d(t / "run", t / "ck");
  t.write("ck/step-00000001/model.pt", "w");
  REQUIRE(d.previous_run_files() == std::vector<std::string>{t / "ck"});
  d.set_aside_previous_run();
  CHECK_FALSE(fsutil::path_exists(t / "ck"));
  int aside = 0;
  for (const auto& n : fsutil::list_names(t.str())) aside += n.rfind("ck.aside-", 0) == 0;
  CHECK(aside == 1);
}

TEST_CASE("furthest_logged_step reads metrics.jsonl", "[train][run_dir]") {
  ScratchDir t;
  RunDir d(t.str());
  CHECK(d.furthest_logged_step() == -1);
  t.write("metrics.jsonl", "{\"event\":\"start\",\"step\":0}\n{\"step\":7,\"loss\":1}\nnot json\n{\"step\":5}\n{\"step\":9");
  CHECK(d.furthest_logged_step() == 7);  // the torn last line of a kill -9 is ignored
  t.write("metrics.jsonl", "{\"step\":7}\n{\"step\":1e9}\n{\"event\":\"checkpoint\",\"step\":8}\n{\"step\":9}");
  CHECK(d.furthest_logged_step() == 9);  // events count, a float never; a last line lacking only its newline counts
}

TEST_CASE("each segment's config is kept when it changes", "[train][run_dir]") {
  ScratchDir t;
  RunDir d(t.str());
  CHECK(d.write_config("dlrun 1", "a: 1\n", 0).empty());
  CHECK(dlrun::testing::read_text(d.config_yaml()) == "# dlrun 1\na: 1\n");
  CHECK(d.write_config("dlrun 1", "a: 1\n", 40).empty());  // unchanged: nothing to keep
  CHECK(d.write_config("dlrun 2 (rebuilt)", "a: 1\n", 50).empty());  // a new binary is no new config
  const std::string kept = d.write_config("dlrun 2", "a: 2\n", 80);
  CHECK(kept == t / "config.before-step-00000080.yaml");
  CHECK(dlrun::testing::read_text(kept) == "# dlrun 2 (rebuilt)\na: 1\n");
  CHECK(dlrun::testing::read_text(d.config_yaml()) == "# dlrun 2\na: 2\n");
  CHECK(d.write_config("dlrun 2", "a: 3\n", 80) == t / "config.before-step-00000080-2.yaml");
}

TEST_CASE("one trainer per run directory; the holder is named", "[train][run_dir]") {
  ScratchDir t;
  const std::string run = t / "run";
  {
    RunLock first(run);
    CHECK(fsutil::is_regular_file(run + "/dlrun.lock"));
    try {
      RunLock second(run);
      FAIL("a second lock was granted");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::kBadInput);
      CHECK_THAT(e.message(), Catch::Contains("in use by another dlrun train (pid " + std::to_string(::getpid())));
      CHECK_THAT(e.hint(), Catch::Contains("--run-dir"));
    }
    t.write("run/metrics.jsonl", "{}\n");
  }
  CHECK_FALSE(fsutil::path_exists(run + "/dlrun.lock"));  // released
  CHECK(fsutil::is_directory(run));                        // not empty: kept
  RunLock again(run);
}

TEST_CASE("a refused start leaves no directory behind", "[train][run_dir]") {
  ScratchDir t;
  const std::string run = t / "a/b/run";
  { RunLock lock(run); }
  CHECK_FALSE(fsutil::path_exists(t / "a"));  // every directory it created was empty again
}

TEST_CASE("a lock left by a killed process is taken over", "[train][run_dir]") {
  ScratchDir t;
  const std::string run = t / "run";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    RunLock lock(run);
    ::raise(SIGKILL);  // as kill -9: no destructor, the lock file stays
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(fsutil::is_regular_file(run + "/dlrun.lock"));
  CHECK_THAT(dlrun::testing::read_text(run + "/dlrun.lock"), Catch::Contains("pid " + std::to_string(child)));
  RunLock lock(run);  // the kernel released the dead holder's flock
  CHECK_THAT(dlrun::testing::read_text(run + "/dlrun.lock"), Catch::Contains("pid " + std::to_string(::getpid())));
}

namespace {
/// A lock held on `run` as a dlrun on host `host` holds it (an flock through its own open file).
struct HeldElsewhere {
  int fd = -1;
  HeldElsewhere(const std::string& run, const std::string& host) {
    fsutil::make_dirs(run);
    fd = ::open((run + "/dlrun.lock").c_str(), O_RDWR | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
    const std::string text = "pid 4242\nhost " + host + "\nsince 1764000000\n";
    REQUIRE(::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size()));
  }
  void release() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  ~HeldElsewhere() { release(); }
};
}  // namespace

TEST_CASE("a lock held from another host is waited for, then exit 75; from this host it is refused", "[train][run_dir]") {
  ScratchDir t;
  const std::string run = t / "run";
  {
    HeldElsewhere held(run, "reclaimed-vm-7");
    try {
      RunLock lock(run, 0.3);
      FAIL("a lock held from another host was taken");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::kInterrupted);  // try again later, not a final refusal
      CHECK_THAT(e.message(), Catch::Contains("still locked by a dlrun on host reclaimed-vm-7") &&
                                  Catch::Contains("run.lock_wait_s"));
    }
    bool asked = false;  // a stop request ends the wait at once
    CHECK_THROWS_AS(RunLock(run, 3600, [&] { return asked = true; }), Error);
    CHECK(asked);
    std::thread later([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      held.release();  // the server's lease ran out
    });
    RunLock lock(run, 60);  // taken once it is free
    later.join();
    CHECK_THAT(dlrun::testing::read_text(run + "/dlrun.lock"), Catch::Contains("pid " + std::to_string(::getpid())));
  }
  char me[256] = {0};
  ::gethostname(me, sizeof(me) - 1);
  {
    // This host's name, an earlier boot (a VM recreated under the same name): waited for, 75.
    HeldElsewhere earlier(run, std::string(me) + "\nboot 00000000-0000-0000-0000-000000000000");
    try {
      RunLock lock(run, 0.2);
      FAIL("a lock held by an earlier boot was taken");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::kInterrupted);
      CHECK_THAT(e.message(), Catch::Contains("an earlier boot of it"));
    }
  }
  HeldElsewhere here(run, me);
  try {
    RunLock lock(run, 60);  // not waited for: a live trainer on this host
    FAIL("a lock held on this host was taken");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
  }
}
