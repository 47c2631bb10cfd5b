#!/usr/bin/env python3
"""ringtrain `bench train` vs PyTorch eager on the same device, side by side.

For each config (default: examples/fashion_mnist/mlp.toml and cnn.toml) and precision
(fp32, bf16), interleaved over --repeats rounds: ringtrain's `bench train --synthetic`
(runtime.backend = --device, train.batch_size = --batch, train.precision) and the same model
in PyTorch, built from the config's [[model.layers]] with the config's [optim], trained on
random inputs of the same shape (bf16: torch.autocast). Both copy each step's batch from host
memory (pinned for torch on cuda; ringtrain stages it in pinned memory). Both report samples/s
from the median step time; the table gives the median over repeats and the ratio
ringtrain / torch. With --cuda-graph ringtrain also runs with train.cuda_graph = true (forward,
loss and backward replayed as one CUDA graph), reported in its own columns. A ringtrain run
that fell back to another backend is an error.

    python3 tools/bench_gpu_vs_pytorch.py --device cuda --train data/fashion-mnist/train.h5 \\
        --json out.json --markdown out.md

--device cpu rehearses the whole thing without a GPU. The data file only gives ringtrain the
sample shape (--synthetic reads no samples). Needs torch (and tomllib: Python >= 3.11).
"""

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PHASE_KEYS = ("step_ms", "data_wait_ms", "forward_ms", "backward_ms", "exposed_comm_ms", "optimizer_ms")
SAMPLE_SHAPE = (1, 28, 28)  # Fashion-MNIST, what the example configs train on
CLASSES = 10


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--configs", nargs="+", default=[str(ROOT / "examples/fashion_mnist/mlp.toml"),
                                                    str(ROOT / "examples/fashion_mnist/cnn.toml")])
    p.add_argument("--precisions", nargs="+", choices=("fp32", "bf16"), default=["fp32", "bf16"])
    p.add_argument("--batch", type=int, default=256, help="samples per step (one GPU)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--steps", type=int, default=50, help="timed steps per measurement")
    p.add_argument("--repeats", type=int, default=3, help="interleaved rounds (median reported)")
    p.add_argument("--train", default=str(ROOT / "data/fashion-mnist/train.h5"),
                   help="Fashion-MNIST train.h5 (ringtrain reads its sample shape)")
    p.add_argument("--ringtrain", default=str(ROOT / "build/src/cli/ringtrain"))
    p.add_argument("--launch", default="", help="prefix for ringtrain, e.g. 'mpirun -np 1 --allow-run-as-root'")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for both sides (0: their defaults)")
    p.add_argument("--cuda-graph", action="store_true", help="also run ringtrain with train.cuda_graph = true")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per ringtrain run")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--markdown", help="write the table here")
    return p.parse_args(argv)


def load_config(path):
    with open(path, "rb") as f:
        return tomllib.load(f)


def torch_model(nn, layers):
    """The torch.nn.Sequential for a ringtrain [[model.layers]] list (same defaults as
    src/nn/model_builder.cpp) on SAMPLE_SHAPE inputs."""
    c, h, w = SAMPLE_SHAPE
    features = None  # after flatten: the running feature count
    mods = []
    for layer in layers:
        kind = layer["type"]
        if kind == "conv2d":
            k, s, pad = layer.get("kernel", 3), layer.get("stride", 1), layer.get("padding", 0)
            mods.append(nn.Conv2d(c, layer["out_channels"], k, s, pad, bias=layer.get("bias", True)))
            c, h, w = layer["out_channels"], (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
        elif kind == "maxpool2d":
            k = layer.get("kernel", 2)
            s = layer.get("stride", k)
            mods.append(nn.MaxPool2d(k, s))
            h, w = (h - k) // s + 1, (w - k) // s + 1
        elif kind == "batchnorm2d":
            mods.append(nn.BatchNorm2d(c, eps=layer.get("eps", 1e-5), momentum=layer.get("momentum", 0.1)))
        elif kind == "relu":
            mods.append(nn.ReLU())
        elif kind == "dropout":
            mods.append(nn.Dropout(layer.get("p", 0.5)))
        elif kind == "flatten":
            mods.append(nn.Flatten())
            features = c * h * w
        elif kind == "linear":
            if features is None:
                raise SystemExit(f"linear layer before flatten: not supported here ({layer})")
            mods.append(nn.Linear(features, layer["out"], bias=layer.get("bias", True)))
            features = layer["out"]
        else:
            raise SystemExit(f"layer type {kind!r}: no PyTorch equivalent here")
    return nn.Sequential(*mods)


def torch_optimizer(torch, params, optim):
    """The config's [optim] (defaults of src/optim/optimizer_builder.cpp), PyTorch's default
    (foreach) implementation."""
    name = optim.get("name", "sgd")
    if name == "sgd":
        return torch.optim.SGD(params, lr=optim.get("lr", 0.01), momentum=optim.get("momentum", 0.0),
                               nesterov=optim.get("nesterov", False), weight_decay=optim.get("weight_decay", 0.0))
    if name == "adamw":
        return torch.optim.AdamW(params, lr=optim.get("lr", 1e-3),
                                 betas=(optim.get("beta1", 0.9), optim.get("beta2", 0.999)),
                                 eps=optim.get("eps", 1e-8), weight_decay=optim.get("weight_decay", 0.01))
    raise SystemExit(f"optim.name {name!r}: unknown")


def measure_torch(torch, args, config, precision):
    """(samples/s, parameter count) of PyTorch eager training on random inputs; samples/s is
    batch / median step time."""
    device = torch.device(args.device)
    torch.manual_seed(1)
    model = torch_model(torch.nn, config["model"]["layers"]).to(device)
    model.train()
    opt = torch_optimizer(torch, model.parameters(), config.get("optim", {}))
    loss_fn = torch.nn.CrossEntropyLoss()
    # Each step copies its batch from (pinned) host memory, as a DataLoader with pin_memory
    # feeds a training loop, and as ringtrain's bench train uploads its host batch.
    x_host = torch.rand((args.batch,) + SAMPLE_SHAPE) * 2 - 1
    y_host = torch.randint(0, CLASSES, (args.batch,))
    if args.device == "cuda":
        x_host, y_host = x_host.pin_memory(), y_host.pin_memory()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def step():
        x = x_host.to(device, non_blocking=True)
        y = y_host.to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=args.device, dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    times = []
    for i in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        if i >= args.warmup:
            times.append(time.perf_counter() - t0)
    return args.batch / statistics.median(times), sum(p.numel() for p in model.parameters())


def measure_ringtrain(args, config_path, precision, graph=False):
    cmd = shlex.split(args.launch) + [
        args.ringtrain, "bench", "train", config_path, "--synthetic", "--json",
        "--warmup", str(args.warmup), "--steps", str(args.steps),
        "--set", f"runtime.backend={args.device}", "--set", f"train.batch_size={args.batch}",
        "--set", f"train.precision={precision}", "--set", f"data.train={args.train}", "--set", "data.test="]
    if args.threads:
        cmd += ["--set", f"runtime.threads={args.threads}"]
    if graph:
        cmd += ["--set", "train.cuda_graph=true"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    for line in r.stdout.splitlines():
        if line.startswith("{") and '"bench":"train"' in line.replace(" ", ""):
            j = json.loads(line)
            if j.get("backend") != args.device:  # a fallback to the CPU would be a meaningless ratio
                raise RuntimeError(f"ringtrain ran on the {j.get('backend')} backend, not {args.device}")
            if graph and args.device == "cuda" and not (j.get("cuda_graph") and j.get("cuda_graph_replays", 0) > 0):
                raise RuntimeError(f"train.cuda_graph did not take effect (no graph replayed):\n{r.stderr[-2000:]}")
            return j
    raise RuntimeError(f"no bench train JSON line from {shlex.join(cmd)}:\n{r.stdout}{r.stderr}")


def markdown(rows, args, torch_version):
    out = [f"ringtrain vs PyTorch {torch_version} eager on {args.device}, batch {args.batch}, "
           f"median of {args.repeats} interleaved repeats of {args.steps} steps\n",
           "| config | precision | ringtrain samples/s | torch samples/s | ringtrain / torch |"
           + (" ringtrain + graph samples/s | graph / torch |" if args.cuda_graph else ""),
           "| --- | --- | ---: | ---: | ---: |" + (" ---: | ---: |" if args.cuda_graph else "")]

    def rate(v):
        return f"{v:.0f}" if v else "failed"

    def ratio(v):
        return f"{v:.2f}" if v else "-"
    for r in rows:
        line = (f"| {Path(r['config']).stem} | {r['precision']} | {rate(r['ringtrain_samples_per_s'])} | "
                f"{r['torch_samples_per_s']:.0f} | {ratio(r['ratio'])} |")
        if args.cuda_graph:
            line += f" {rate(r['graph_samples_per_s'])} | {ratio(r['graph_ratio'])} |"
        out.append(line)
    return "\n".join(out) + "\n"


def main():
    args = parse_args()
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no GPU")
    configs = {c: load_config(c) for c in args.configs}
    cases = [(c, p) for c in args.configs for p in args.precisions]
    variants = {"ringtrain": False} | ({"graph": True} if args.cuda_graph else {})
    runs = {case: {"torch": [], "errors": [], "params": {}, "phases": {v: [] for v in variants}}
            | {v: [] for v in variants} for case in cases}
    for rep in range(args.repeats):
        for case in cases:
            config_path, precision = case
            said = []
            for variant, graph in variants.items():
                try:
                    j = measure_ringtrain(args, config_path, precision, graph)
                    runs[case][variant].append(j["samples_per_s"])
                    # where ringtrain's step time goes, to see what to fix when a ratio falls short
                    runs[case]["phases"][variant].append({k: j.get(k) for k in PHASE_KEYS})
                    runs[case]["params"][variant] = j["params"]
                    said.append(f"{variant} {j['samples_per_s']:.0f}")
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    runs[case]["errors"].append(str(e)[-2000:])
                    said.append(f"{variant} failed")
                    print(f"bench_gpu_vs_pytorch: {variant} {Path(config_path).stem} {precision}: {e}", file=sys.stderr)
            rate, runs[case]["params"]["torch"] = measure_torch(torch, args, configs[config_path], precision)
            runs[case]["torch"].append(rate)
            print(f"repeat {rep + 1}/{args.repeats} {Path(config_path).stem} {precision}: {', '.join(said)}, "
                  f"torch {runs[case]['torch'][-1]:.0f} samples/s", flush=True)
    rows = []
    for (config_path, precision), r in runs.items():
        tt = statistics.median(r["torch"])
        median = {v: statistics.median(r[v]) if r[v] else None for v in variants}
        row = {"config": config_path, "precision": precision, "ringtrain_samples_per_s": median["ringtrain"],
               "torch_samples_per_s": tt, "ratio": median["ringtrain"] / tt if median["ringtrain"] else None,
               "params": r["params"], "ringtrain_runs": r["ringtrain"], "torch_runs": r["torch"],
               "ringtrain_errors": r["errors"], "ringtrain_phases_ms": r["phases"]}
        if args.cuda_graph:
            row |= {"graph_samples_per_s": median["graph"], "graph_ratio": median["graph"] / tt if median["graph"] else None,
                    "graph_runs": r["graph"]}
        rows.append(row)
        if len(set(r["params"].values())) > 1:
            print(f"bench_gpu_vs_pytorch: {config_path}: the models differ: {r['params']} parameters", file=sys.stderr)
    result = {"bench": "gpu_vs_pytorch", "device": args.device, "batch": args.batch, "warmup": args.warmup,
              "steps": args.steps, "repeats": args.repeats, "torch_version": torch.__version__,
              "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None, "rows": rows}
    table = markdown(rows, args, torch.__version__)
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.markdown:
        Path(args.markdown).write_text(table)
    same = all(len(set(r["params"].values())) == 1 for r in rows)
    ran = all(r["ringtrain_samples_per_s"] and (not args.cuda_graph or r["graph_samples_per_s"]) for r in rows)
    return 0 if same and ran else 1


if __name__ == "__main__":
    sys.exit(main())
