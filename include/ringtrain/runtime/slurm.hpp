// The Slurm context of this process, read from the variables Slurm sets for a job and its
// steps (no Slurm library). Outside Slurm everything is empty and active() is false. Under
// `srun` the task variables describe the step; under `mpirun` inside a job they describe the
// launcher's daemons, so ranks and sizes always come from MPI (Context), never from here.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace ringtrain {

class Context;

struct SlurmInfo {
  std::string job_id;                // SLURM_JOB_ID; empty: not under Slurm
  std::string array_job_id;          // SLURM_ARRAY_JOB_ID (array jobs only)
  std::string array_task_id;         // SLURM_ARRAY_TASK_ID (array jobs only)
  int num_nodes = 0;                 // SLURM_JOB_NUM_NODES (0: unknown)
  int ntasks = 0;                    // SLURM_NTASKS (0: unknown)
  int procid = -1;                   // SLURM_PROCID (-1: unknown)
  int localid = -1;                  // SLURM_LOCALID (-1: unknown)
  std::string nodelist;              // SLURM_JOB_NODELIST, compressed: "node[1-2]"
  std::string step_gpus;             // SLURM_STEP_GPUS (GPUs of this step on this node)
  std::string cuda_visible_devices;  // CUDA_VISIBLE_DEVICES
  std::string nodename;              // SLURMD_NODENAME (the node as Slurm names it)

  bool active() const { return !job_id.empty(); }
  // What names this job's run directory: "123", or "45_7" for task 7 of array job 45.
  std::string run_id() const;
  // One line: "job 123 (2 nodes, 4 tasks, nodes node[1-2])"; "" when not active.
  std::string describe() const;
};

// Reads the variables through `getenv` (tests pass their own lookup; nullptr = unset).
using EnvLookup = std::function<const char*(const char*)>;
SlurmInfo slurm_info_from(const EnvLookup& getenv);
SlurmInfo slurm_info();  // from this process's environment

// This rank's node: SLURMD_NODENAME when set (several slurmd "nodes" can share one host, and
// Slurm's node names are what users see in squeue), else the host name.
std::string node_name();

// Collective over the context's world: the distinct node names of all ranks, in the order of
// the first rank on each. Every rank must call it; the result is complete on rank 0 only
// (other ranks get their own name).
std::vector<std::string> gather_node_names(const Context& ctx);

// "node1, node2"; beyond max_shown names: the first max_shown, then "... (N nodes)".
std::string join_node_names(const std::vector<std::string>& names, std::size_t max_shown = 8);

}  // namespace ringtrain
