#!/usr/bin/env python3
"""PyTorch DDP reference worker for tools/bench_vs_pytorch.py.

Trains the same models as ringtrain's examples/fashion_mnist configs with
PyTorch DistributedDataParallel (gloo, CPU) and prints one JSON line with
the measured training throughput.

Run it with a Python interpreter that has torch, h5py and numpy:

    python tools/torch_ddp_train.py --model mlp --np 2 --train data/fashion-mnist/train.h5

Without the internal worker environment it acts as a launcher: it starts
--np copies of itself as plain subprocesses (env RANK, WORLD_SIZE,
MASTER_ADDR=127.0.0.1, MASTER_PORT), waits for them, and forwards rank 0's
JSON line on stdout.  Exit status is non-zero if any rank fails.
"""

import argparse
import json
import os
import signal
import sys
import time

from torch_launch import WORKER_ENV, launch, start_worker

TRAIN_SAMPLES_DEFAULT = 60000  # Fashion-MNIST train size, used for the default step count


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("mlp", "cnn", "resnet"), required=True)
    p.add_argument("--train", required=True, help="HDF5 file with images uint8 [N,1,28,28] and labels uint8 [N]")
    p.add_argument("--test", default=None, help="optional HDF5 test file; reports test_accuracy after training")
    p.add_argument("--np", dest="world_size", type=int, default=2, help="number of ranks (processes)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--batch", type=int, default=64, help="per-rank batch size")
    p.add_argument("--steps", type=int, default=None,
                   help="optimizer steps (default: one epoch = N_train // global_batch)")
    p.add_argument("--lr", type=float, default=None,
                   help="default: the example config's (0.05; resnet 0.02)")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--bind", choices=("core", "none"), default="core",
                   help="pin rank r to cores [r*T, (r+1)*T) like mpirun --bind-to core (default core; "
                        "skipped if there are not enough cores)")
    p.add_argument("--timeout", type=float, default=3600.0,
                   help="launcher: kill all ranks after this many seconds")
    return p.parse_args(argv)


# --------------------------------------------------------------------------------------------
# launcher
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# worker
# --------------------------------------------------------------------------------------------

def build_model(nn, name):
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 512), nn.ReLU(),
            nn.Linear(512, 256), nn.ReLU(),
            nn.Linear(256, 10),
        )
    if name == "resnet":
        return build_resnet(nn)
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def build_resnet(nn):
    """examples/fashion_mnist/resnet.toml written the ordinary way: a stem, a basic block, a
    stride-2 convolution, a basic block, max-pool, linear."""

    def conv_bn(cin, cout, stride=1):
        return [nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False), nn.BatchNorm2d(cout)]

    class BasicBlock(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.f = nn.Sequential(*conv_bn(channels, channels), nn.ReLU(), *conv_bn(channels, channels))
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(x + self.f(x))

    return nn.Sequential(
        *conv_bn(1, 16), nn.ReLU(), BasicBlock(16),
        *conv_bn(16, 32, stride=2), nn.ReLU(), BasicBlock(32),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
    )


def model_flops_per_sample(torch, nn, model):
    """Analytic training FLOPs per sample: 3 x forward, forward = 2 x MACs of Linear/Conv2d.

    Output shapes come from forward hooks on one dummy sample; MACs are computed
    from the layer hyper-parameters (no profiler involved)."""
    macs = [0]

    def hook(mod, inp, out):
        if isinstance(mod, nn.Linear):
            macs[0] += mod.in_features * mod.out_features
        elif isinstance(mod, nn.Conv2d):
            kh, kw = mod.kernel_size
            cout, hout, wout = out.shape[1], out.shape[2], out.shape[3]
            macs[0] += cout * hout * wout * (mod.in_channels // mod.groups) * kh * kw

    handles = [m.register_forward_hook(hook) for m in model.modules()
               if isinstance(m, (nn.Linear, nn.Conv2d))]
    model.eval()  # batch norm: leave the running statistics alone
    with torch.no_grad():
        model(torch.zeros(1, 1, 28, 28))
    model.train()
    for h in handles:
        h.remove()
    return 3 * 2 * macs[0]


def load_h5(torch, path):
    import h5py
    import numpy as np
    with h5py.File(path, "r") as f:
        images = np.asarray(f["images"][...])
        labels = np.asarray(f["labels"][...])
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != (1, 28, 28):
        raise SystemExit(f"{path}: images must be uint8 [N,1,28,28], got {images.dtype} {images.shape}")
    if labels.shape != (images.shape[0],):
        raise SystemExit(f"{path}: labels must be [N], got {labels.shape} vs {images.shape[0]} images")
    x = torch.from_numpy(images).float().div_(255.0)
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def worker(args):
    torch, dist, rank, world, cpus = start_worker(args)
    import torch.nn as nn

    x_all, y_all = load_h5(torch, args.train)
    n = x_all.shape[0]
    b = args.batch
    gb = b * world
    steps_per_epoch = n // gb
    if steps_per_epoch == 0:
        raise SystemExit(f"{args.train}: {n} samples < global batch {gb}")
    steps = args.steps if args.steps is not None else TRAIN_SAMPLES_DEFAULT // gb
    steps = max(1, steps)

    # Pre-build this rank's batches (contiguous part of each global batch, per-epoch permutation
    # seeded with seed+epoch, tail dropped) so that data preparation is outside the timed loop.
    batches = []
    epoch = 0
    while len(batches) < steps:
        g = torch.Generator()
        g.manual_seed(args.seed + epoch)
        perm = torch.randperm(n, generator=g)
        for i in range(steps_per_epoch):
            if len(batches) == steps:
                break
            idx = perm[i * gb + rank * b: i * gb + (rank + 1) * b]
            batches.append((x_all.index_select(0, idx).contiguous(), y_all.index_select(0, idx).contiguous()))
        epoch += 1
    del x_all, y_all

    torch.manual_seed(args.seed)
    model = build_model(nn, args.model)
    flops = model_flops_per_sample(torch, nn, model)
    ddp = nn.parallel.DistributedDataParallel(model)
    lr = args.lr if args.lr is not None else (0.02 if args.model == "resnet" else 0.05)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=args.momentum)
    loss_fn = nn.CrossEntropyLoss()
    ddp.train()

    dist.barrier()
    t0 = time.perf_counter()
    loss = None
    for xb, yb in batches:
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(xb), yb)
        loss.backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - t0

    # final training loss: last step's local-batch loss averaged over ranks
    last = loss.detach().clone().reshape(1)
    dist.all_reduce(last)
    final_loss = last.item() / world
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    seconds = t.item()

    result = None
    if rank == 0:
        result = {
            "framework": "pytorch",
            "torch_version": torch.__version__,
            "python": sys.executable,
            "model": args.model,
            "world_size": world,
            "threads_per_rank": args.threads,
            "steps": steps,
            "per_rank_batch": b,
            "global_batch": gb,
            "train_seconds": seconds,
            "train_samples_per_second": steps * gb / seconds,
            "final_train_loss": final_loss,
            "model_flops_per_sample": flops,
            "cpu_binding": "core" if cpus is not None else "none",
        }
        if args.test:
            xt, yt = load_h5(torch, args.test)
            model.eval()
            correct = 0
            with torch.no_grad():
                for i in range(0, xt.shape[0], 1000):
                    correct += (model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item()
            result["test_accuracy"] = correct / xt.shape[0]
    dist.barrier()
    dist.destroy_process_group()
    if result is not None:
        print(json.dumps(result), flush=True)
    sys.stderr.flush()
    # All work is done.  Skip interpreter teardown: with torch 2.15 (gloo + DDP) a native
    # thread destructor intermittently aborts at exit ("terminate called without an active
    # exception"), which would turn a finished run into a failure.
    os._exit(0)


def main():
    args = parse_args()
    if args.world_size < 1 or args.threads < 1 or args.batch < 1:
        raise SystemExit("--np, --threads and --batch must be >= 1")
    if os.environ.get(WORKER_ENV) == "1":
        return worker(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return launch(args, __file__, "torch_ddp_train")


if __name__ == "__main__":
    sys.exit(main())
