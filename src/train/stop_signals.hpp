// Private: SIGTERM and SIGUSR1 (Slurm's --signal, scancel, a preempting scheduler) ask a run
// to stop at the next step boundary with a checkpoint. The handler only records the signal;
// the trainer polls it between steps and the ranks agree through a reduction, so every rank
// stops after the same step even when only one of them was signalled.
#pragma once

namespace ringtrain {

class StopSignals {
 public:
  StopSignals();   // installs the handlers, keeping the previous ones
  ~StopSignals();  // restores them
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // A run that stopped (exit 75) keeps the handlers to its exit instead of restoring them: when
  // one rank exits 75 first, srun --kill-on-bad-exit sends the others SIGTERM, which would turn
  // their 75 into 143 (seen on the local Slurm: "the launch failed (exit status 143)", and a
  // preemptible job that is not requeued).
  static void keep_until_exit();

  // The signal received so far (the first one), or 0.
  static int received();
  static const char* name(int signal);  // "SIGTERM", "SIGUSR1"
};

}  // namespace ringtrain
