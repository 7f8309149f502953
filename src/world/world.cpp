// The job layout from the environment (see world.h).
#include "world/world.h"

#include <cctype>
#include <cstdlib>

#include "base/error.h"

namespace dlrun::dist {
namespace {

struct Env {
  const Getenv& get;
  const char* raw(const char* name) const {
    const char* v = get ? get(name) : std::getenv(name);
    return v && *v ? v : nullptr;
  }
  bool has(const char* name) const { return raw(name) != nullptr; }
  std::string str(const char* name, const std::string& fallback) const {
    const char* v = raw(name);
    return v ? v : fallback;
  }
  /// The leading integer of the variable ("8(x2)" -> 8 for Slurm's task counts).
  int num(const char* name, int fallback, bool leading_only = false) const {
    const char* v = raw(name);
    if (!v) return fallback;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    const bool ok = end != v && (leading_only || *end == '\0') && n >= 0 && n < (1L << 30);
    DLRUN_CHECK_INPUT(ok, "environment variable {}={} is not a non-negative integer", name, v);
    return static_cast<int>(n);
  }
};

void check_layout(const World& w, const char* rank_var, const char* size_var) {
  DLRUN_CHECK_INPUT(w.size >= 1, "environment variable {}={}: the world size must be at least 1", size_var, w.size);
  DLRUN_CHECK_INPUT(w.rank < w.size, "environment variable {}={} is not below the world size {} ({})", rank_var,
                    w.rank, w.size, size_var);
  DLRUN_CHECK_INPUT(w.local_size >= 1 && w.local_rank < w.local_size,
                    "the local rank {} is not below the number of local processes {}", w.local_rank, w.local_size);
  DLRUN_CHECK_INPUT(w.master_port > 0 && w.master_port < 65536, "MASTER_PORT={} is not a TCP port", w.master_port);
}

}  // namespace

std::string first_host(const std::string& nodelist) {
  // Hosts are separated by commas outside brackets; a bracket holds ranges "03-05" or
  // single numbers, whose first one (with its zero padding) names the first host.
  std::string host;
  for (size_t i = 0; i < nodelist.size(); ++i) {
    const char c = nodelist[i];
    if (c == ',') break;
    if (c != '[') {
      host += c;
      continue;
    }
    const size_t close = nodelist.find(']', i);
    std::string range = nodelist.substr(i + 1, close == std::string::npos ? std::string::npos : close - i - 1);
    size_t n = 0;
    while (n < range.size() && std::isdigit(static_cast<unsigned char>(range[n]))) ++n;
    host += range.substr(0, n);
    if (close == std::string::npos) break;
    i = close;
  }
  return host;
}

World world_from_env(const Getenv& getenv, bool rendezvous) {
  const Env env{getenv};
  World w;
  // Whatever the launcher, MASTER_ADDR / MASTER_PORT name the rendezvous when set.
  w.master_addr = env.str("MASTER_ADDR", w.master_addr);
  w.master_port = env.num("MASTER_PORT", w.master_port);
  if (env.has("RANK") || env.has("WORLD_SIZE")) {  // torchrun, dlrun-launch, or set by hand
    // dlrun-launch names itself (DLRUN_LAUNCHER_PID); torchrun's agent sets TORCHELASTIC_RUN_ID.
    w.launcher = env.has("DLRUN_LAUNCHER_PID")     ? "dlrun-launch"
                 : env.has("TORCHELASTIC_RUN_ID") || env.has("TORCHELASTIC_RESTART_COUNT") ? "torchrun"
                                                   : "RANK/WORLD_SIZE variables";
    w.rank = env.num("RANK", 0);
    w.size = env.num("WORLD_SIZE", 1);
    w.local_rank = env.num("LOCAL_RANK", w.rank);
    w.local_size = env.num("LOCAL_WORLD_SIZE", w.size);
    w.restart_count = env.num("TORCHELASTIC_RESTART_COUNT", 0);
    w.agent_store = env.str("TORCHELASTIC_USE_AGENT_STORE", "") == "True";
    // torchrun's default --rdzv-id is "none": no id, as when the variable is not set.
    w.run_id = env.str("TORCHELASTIC_RUN_ID", "");
    if (w.run_id == "none") w.run_id.clear();
    if (w.size > 1 && rendezvous) {
      DLRUN_CHECK_INPUT(env.has("MASTER_ADDR") && env.has("MASTER_PORT"),
                        "WORLD_SIZE={} but MASTER_ADDR or MASTER_PORT is not set (the address of rank 0's "
                        "rendezvous store; torchrun and scripts/dlrun-launch set both)",
                        w.size);
    }
    check_layout(w, "RANK", "WORLD_SIZE");
  } else if (env.has("SLURM_PROCID") && env.has("SLURM_NTASKS")) {
    w.launcher = "slurm";
    w.rank = env.num("SLURM_PROCID", 0);
    w.size = env.num("SLURM_NTASKS", 1);
    w.local_rank = env.num("SLURM_LOCALID", 0);
    w.local_size = env.has("SLURM_NTASKS_PER_NODE") ? env.num("SLURM_NTASKS_PER_NODE", 1, true)
                                                    : env.num("SLURM_TASKS_PER_NODE", w.size, true);
    w.restart_count = env.num("SLURM_RESTART_COUNT", 0);
    // Every task of one srun step shares the job and step ids (a heterogeneous job's components
    // have job ids of their own, and share SLURM_HET_JOB_ID); a requeued job keeps its id, but
    // the job it was is gone by then.
    const std::string job = env.str("SLURM_HET_JOB_ID", env.str("SLURM_JOB_ID", env.str("SLURM_JOBID", "")));
    const std::string step = env.str("SLURM_STEP_ID", env.str("SLURM_STEPID", ""));
    if (!job.empty()) w.run_id = "slurm-" + job + (step.empty() ? "" : "." + step);
    const std::string nodes = env.str("SLURM_JOB_NODELIST", env.str("SLURM_NODELIST", ""));
    if (!nodes.empty() && !env.has("MASTER_ADDR")) w.master_addr = first_host(nodes);
    check_layout(w, "SLURM_PROCID", "SLURM_NTASKS");
  } else if (env.has("OMPI_COMM_WORLD_RANK") && env.has("OMPI_COMM_WORLD_SIZE")) {
    w.launcher = "openmpi";
    w.rank = env.num("OMPI_COMM_WORLD_RANK", 0);
    w.size = env.num("OMPI_COMM_WORLD_SIZE", 1);
    w.local_rank = env.num("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    w.local_size = env.num("OMPI_COMM_WORLD_LOCAL_SIZE", w.size);
    if (w.size > 1 && rendezvous)
      DLRUN_CHECK_INPUT(env.has("MASTER_ADDR"),
                        "OMPI_COMM_WORLD_SIZE={} but MASTER_ADDR is not set: export the address of rank 0's host "
                        "(mpirun -x MASTER_ADDR=... -x MASTER_PORT=...)",
                        w.size);
    check_layout(w, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE");
  }
  return w;
}

}  // namespace dlrun::dist
