// Fault injection for the crash tests: the one reader of DLRUN_FAULT (docs/testing.md).
//
//   DLRUN_FAULT=abort_at_step:K    abort() right after optimizer step K, as kill -9 would
//   DLRUN_FAULT=signal_at_step:K   raise SIGTERM right after step K (the real signal path)
//   DLRUN_FAULT=ckpt:POINT         abort() on reaching POINT of a checkpoint commit
//   DLRUN_FAULT=upload:POINT       abort() on reaching POINT of a remote checkpoint upload:
//                                  files (all files sent, not the manifest), manifest (the
//                                  manifest sent, not LATEST), latest (LATEST sent)
//   DLRUN_FAULT=signal_during:PHASE  raise SIGTERM inside a phase of the trainer: startup
//                                  (data loaded, nothing written yet), eval (an evaluation
//                                  has begun), save (a snapshot taken, the write not done)
//   DLRUN_FAULT=slow_batch:MS      every training batch arrives MS milliseconds late (a slow loader)
//   DLRUN_FAULT=disk_error:ERR[:N[-M]]  writes of checkpoint files (into step-K.tmp/, K >= N, and
//                                  K <= M when given) fail as a disk would: ENOSPC and EIO after
//                                  half the bytes, EROFS at open
//
//   DLRUN_FAULT=nonfinite_loss_at_step:K  step K's loss is +inf on this rank, its gradients
//                                  untouched (a loss that overflows where the gradients do not)
//
//   DLRUN_FAULT=oom_at_step:K     the first attempt of step K runs out of device memory (after its
//                                  first micro-batch's forward), as c10::OutOfMemoryError
//   DLRUN_FAULT=oom_above:N        every micro-batch of more than N samples runs out of device
//                                  memory (a card that holds N); oom_above:0, every one
//
//   DLRUN_FAULT=fused_mismatch     the fused-kernel self-check sees the fused operators' output
//                                  off by 10 % (a kernel defect on this GPU; src/kernels/self_check.h)
//
//   DLRUN_FAULT=forget_on_resume:PART  a resume leaves that checkpoint part unloaded (rng,
//                                  optimizer, ema, ...: src/train/state/parts.cpp names them), so the
//                                  resumed run drifts from an uninterrupted one (what
//                                  `dlrun check-resume` must find and name)
//
//   DLRUN_FAULT_RANK=R             in a multi-process run, only rank R (its RANK variable) is hit
//   DLRUN_FAULT_RESTART=N          only in the group's N-th restart (TORCHELASTIC_RESTART_COUNT)
//
// Unset, it does nothing. It is read from the environment at each check (cheap), so a test
// may set it in-process. An unrecognized value is reported once on stderr and ignored.
#pragma once

#include <cstdint>
#include <string>

namespace dlrun::fault {

/// DLRUN_FAULT split at its first ':' ({"ckpt", "manifest"}); empty when unset.
struct Spec {
  std::string name;
  std::string arg;
};
Spec current();

/// abort() when DLRUN_FAULT is `ckpt:<point>`.
void at_checkpoint_point(const char* point);
/// abort() when DLRUN_FAULT is `upload:<point>`.
void at_upload_point(const char* point);

/// After optimizer step `step`: abort() for abort_at_step:step, raise(SIGTERM) for
/// signal_at_step:step.
void after_step(int64_t step);

/// True when DLRUN_FAULT is `forget_on_resume:<part>`.
bool forget_on_resume(const std::string& part);

/// True when DLRUN_FAULT is `nonfinite_loss_at_step:<step>`.
bool nonfinite_loss(int64_t step);

/// Whether a micro-batch of `samples` in attempt `attempt` (0: the first) of step `step` runs out
/// of memory: DLRUN_FAULT=oom_at_step:step with attempt 0, or oom_above:N with samples > N.
bool out_of_memory(int64_t step, int attempt, int64_t samples);

/// Sleep MS milliseconds when DLRUN_FAULT is `slow_batch:<MS>` (the trainer calls it as it
/// takes each training batch, inside the time it counts as waiting for data).
void slow_batch();

/// The errno a durable write of `path` must fail with under DLRUN_FAULT=disk_error:ERR[:N[-M]]
/// (ERR: ENOSPC, EIO or EROFS), or 0. Only files of a checkpoint being written are hit: a path
/// inside "step-K.tmp/" with N <= K (<= M); N defaults to 0, M to no end.
int write_error(const std::string& path);

/// raise(SIGTERM) when DLRUN_FAULT is `signal_during:<phase>`.
void during(const char* phase);

}  // namespace dlrun::fault
