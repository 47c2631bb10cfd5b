#!/usr/bin/env python3
"""torch.distributed gloo allreduce timings for tools/bench_allreduce_vs_gloo.py.

Starts --np processes (multiprocessing, spawn), each pinned to one core with one torch thread,
joined through a FileStore. For each size (float32, --min-bytes to --max-bytes by --factor)
it runs --warmup untimed and --iters timed in-place all_reduce(SUM) calls on one tensor
allocated (and touched) once at the largest size; an iteration's time is the slowest rank's,
the reported time the median over iterations. Rank 0 prints one JSON line per size with the
fields of `ringtrain bench allreduce --json` (backend "gloo").

    python tools/torch_allreduce_worker.py --np 2 --min-bytes 8 --max-bytes 268435456
"""

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--np", type=int, default=2, help="processes (ranks)")
    p.add_argument("--min-bytes", type=int, default=8)
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--factor", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--timeout", type=float, default=3600.0, help="kill the ranks after this many seconds")
    return p.parse_args(argv)


def sizes(args):
    b = args.min_bytes
    while b <= args.max_bytes:
        yield b
        b *= args.factor


def run_rank(rank, args, store_path):
    # Pin before torch starts its threads, so that they inherit the one core (like mpirun --bind-to core).
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= args.np:
        os.sched_setaffinity(0, {cpus[rank]})
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=args.np)
    n = args.np
    buf = torch.ones(args.max_bytes // 4, dtype=torch.float32)  # touched: written by ones()
    times = torch.zeros(args.iters, dtype=torch.float64)
    for nbytes in sizes(args):
        count = nbytes // 4
        if count == 0:
            continue
        t = buf[:count]
        t.fill_(1.0)  # sums grow n-fold per call: every size starts from the same values
        for _ in range(args.warmup):
            dist.all_reduce(t)
        dist.barrier()
        for i in range(args.iters):
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
        seconds = statistics.median(times.tolist())
        algbw = count * 4 / seconds / 1e9
        if rank == 0:
            print(json.dumps({"bench": "allreduce", "backend": "gloo", "comm": f"torch {torch.__version__} gloo",
                              "ranks": n, "bytes": count * 4, "count": count, "dtype": "f32", "iters": args.iters,
                              "time_us": seconds * 1e6, "algbw_gbs": algbw, "busbw_gbs": algbw * 2 * (n - 1) / n}),
                  flush=True)
    dist.destroy_process_group()


def main(argv=None):
    args = parse_args(argv)
    if args.np < 1 or args.min_bytes < 1 or args.max_bytes < args.min_bytes or args.factor < 2 or args.iters < 1:
        sys.exit("error: need --np >= 1, 1 <= --min-bytes <= --max-bytes, --factor >= 2, --iters >= 1")
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="ringtrain-gloo-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=run_rank, args=(r, args, store)) for r in range(args.np)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + args.timeout
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
        failed = [r for r, p in enumerate(procs) if p.exitcode != 0]
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        if failed:
            sys.exit(f"error: gloo ranks {failed} failed or timed out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
