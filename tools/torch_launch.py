"""Shared by tools/torch_ddp_train.py and tools/torch_gpt_train.py: launching one process per
rank on this machine (DDP over gloo, rendezvous on a free loopback port), pinning each rank's
threads to its cores, and a worker's start (torch's threads, the gloo process group). Stdlib
only at import: torch is imported by start_worker, in the workers.
"""

import os
import socket
import subprocess
import sys
import time

WORKER_ENV = "_RINGTRAIN_TORCH_WORKER"  # set in the ranks' environment: the script is a worker


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args, script, name):
    """Runs `script` (this file, again) once per rank with its own arguments and the rendezvous
    environment; rank 0's stdout is passed through. Returns the exit status."""
    port = free_port()
    procs = []
    base_env = dict(os.environ)
    base_env.update({
        WORKER_ENV: "1",
        "WORLD_SIZE": str(args.world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": str(args.threads),
        "MKL_NUM_THREADS": str(args.threads),
        "OPENBLAS_NUM_THREADS": str(args.threads),
    })
    # gloo otherwise picks the interface of the hostname, which may not be loopback
    base_env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    cmd = [sys.executable, os.path.abspath(script)] + sys.argv[1:]
    try:
        for r in range(args.world_size):
            env = dict(base_env, RANK=str(r), LOCAL_RANK=str(r))
            procs.append(subprocess.Popen(
                cmd, env=env,
                stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                text=True))
        deadline = time.monotonic() + args.timeout
        out0 = None
        while True:
            codes = [p.poll() for p in procs]
            bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                r, c = bad[0]
                print(f"{name}: rank {r} exited with status {c}", file=sys.stderr)
                return c if c > 0 else 1
            if procs[0].poll() is not None and out0 is None:
                out0 = procs[0].stdout.read()
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                print(f"{name}: timeout after {args.timeout:.0f} s", file=sys.stderr)
                return 124
            time.sleep(0.05)
        if out0 is None:
            out0 = procs[0].stdout.read()
        sys.stdout.write(out0)
        sys.stdout.flush()
        return 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def bind_cpus(rank, threads):
    if not hasattr(os, "sched_setaffinity"):
        return None
    avail = sorted(os.sched_getaffinity(0))
    lo, hi = rank * threads, (rank + 1) * threads
    if hi > len(avail):
        return None  # oversubscribed: leave it to the OS
    cpus = avail[lo:hi]
    os.sched_setaffinity(0, cpus)
    return cpus


def start_worker(args):
    """A rank's start, from launch()'s environment: its cores pinned (args.bind == "core",
    args.threads of them), torch on args.threads threads, the gloo process group joined (timeout
    args.timeout, at least 60 s). Returns (torch, torch.distributed, rank, world, cpus)."""
    import faulthandler
    faulthandler.enable()  # Python traceback on SIGABRT/SIGSEGV from native code
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    cpus = bind_cpus(rank, args.threads) if args.bind == "core" else None

    from datetime import timedelta

    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timedelta(seconds=max(60.0, args.timeout)))
    return torch, dist, rank, world, cpus
