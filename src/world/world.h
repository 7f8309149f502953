// Where this process stands in a multi-process job: its rank, the world size, the local
// layout and the rendezvous address, read from the environment that the launcher set —
// torchrun (and scripts/dlrun-launch, which sets the same variables), else Slurm, else
// Open MPI. No LibTorch: the rules are unit-tested on their own (tests/world/world_test.cpp).
#pragma once

#include <functional>
#include <string>

namespace dlrun::dist {

struct World {
  int rank = 0;        ///< global rank, 0 .. size-1
  int local_rank = 0;  ///< rank on this host: picks cuda:local_rank
  int size = 1;        ///< processes in the job
  int local_size = 1;  ///< processes on this host
  std::string master_addr = "127.0.0.1";  ///< host of the rendezvous store (rank 0's, or torchrun's agent)
  int master_port = 29500;
  int restart_count = 0;     ///< TORCHELASTIC_RESTART_COUNT: the group's restarts so far
  bool agent_store = false;  ///< TORCHELASTIC_USE_AGENT_STORE=True: torchrun hosts the store, every rank is a client
  /// The job's identity, the same on every rank: TORCHELASTIC_RUN_ID (torchrun's --rdzv-id, the id
  /// scripts/dlrun-launch makes), else Slurm's job and step ("slurm-<job>.<step>"); "" for none
  /// (TORCHELASTIC_RUN_ID=none, Open MPI, by hand). It keys the store, and a rank that reached
  /// another job's store (the port taken) tells by it (distributed/group.cpp).
  std::string run_id;
  std::string launcher = "none";  ///< "torchrun" (torchrun or dlrun-launch), "slurm", "openmpi" or "none"

  bool distributed() const { return size > 1; }
  /// Hosts in the job, assuming the same number of processes on each.
  int nodes() const { return (size + local_size - 1) / local_size; }
};

using Getenv = std::function<const char*(const char*)>;

/// The job's layout from `env` (std::getenv by default): torchrun's RANK/WORLD_SIZE/... when
/// RANK or WORLD_SIZE is set, else Slurm's SLURM_PROCID/SLURM_NTASKS/... when SLURM_PROCID
/// and SLURM_NTASKS are set, else Open MPI's OMPI_COMM_WORLD_*, else one process; the run id
/// from the same launcher's variables (World::run_id). A value
/// that is not a number, or a rank outside [0, size), is dlrun::Error (exit 2) naming the
/// variable. `rendezvous`: a world of several processes also needs MASTER_ADDR/MASTER_PORT
/// (false for `dlrun config validate`, which only checks the batch split).
World world_from_env(const Getenv& env = {}, bool rendezvous = true);

/// The first host of a Slurm node list: "gpu[03-05,09],cpu1" -> "gpu03"; "a,b" -> "a".
std::string first_host(const std::string& nodelist);

}  // namespace dlrun::dist
