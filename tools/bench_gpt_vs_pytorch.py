#!/usr/bin/env python3
"""Benchmark ringtrain's GPT against PyTorch on the Shakespeare byte tokens, side by side (issue 16).

One config is the source of truth: examples/shakespeare/gpt.toml. Its model, batch, seed and
optimizer keys become tools/torch_gpt_train.py's arguments; ringtrain reads the file itself.
Each --set KEY=VALUE overrides a key for both sides (a key the PyTorch side does not know is
passed to ringtrain only, with a note). Both sides train --max-steps steps on --np ranks
(PyTorch: eager, DDP over gloo, --threads torch threads per process, default 1; ringtrain: the same
runtime.threads, mpirun --bind-to core, with --map-by slot:PE=T for T > 1 threads) and evaluate
the whole val set at the end.

Every repeat measures the peak first (`mpirun -np NP ringtrain bench gemm`: aggregate
sgemm GFLOP/s of all ranks at once) and then runs the two sides in alternating order
(ringtrain, PyTorch; PyTorch, ringtrain; ...). Printed, as a markdown table: medians [min-max]
of tokens/s, MFU against the median peak (tokens/s x FLOPs/token / peak; FLOPs/token from
torch_gpt_train.py: 6 N + 12 n_layer block n_embd), val loss, final train loss, peak RSS per
rank and median step time; and the ratios: ringtrain/PyTorch tokens/s (median of per-repeat
ratios), val loss difference, RSS ratio.

run_ringtrain() is the one place that knows ringtrain's side (the command and summary.json's
field names). Both sides' tokens/s are tokens per step / median step time (ringtrain's from
summary.json's global_batch and median_step_ms; its own tokens_per_second, over train_seconds,
is kept in the raw results as summary_tokens_per_second). --only-pytorch runs the PyTorch side alone (the peak is still measured when the
ringtrain binary exists; --peak-gflops gives it by hand). Peak RSS: PyTorch's is getrusage's
ru_maxrss, ringtrain's the largest resident size its monitor sampled (every
monitor.interval_ms, default 1 s), both MiB, the larger rank's.

Stdlib only (Python >= 3.11 for tomllib). The PyTorch interpreter: --torch-python, default the
venv of tools/setup-torch-venv (${RINGTRAIN_TORCH_VENV:-~/.cache/ringtrain/torch-venv}).

    tools/prepare-shakespeare data/shakespeare
    python3 tools/bench_gpt_vs_pytorch.py --only-pytorch --repeats 1 --max-steps 30
    python3 tools/bench_gpt_vs_pytorch.py --repeats 3 --max-steps 200 --out gpt-bench.json
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

from bench_process import (REPO, RunFailed, default_venv, last_json_line, log, mpirun_base, probe_torch,
                           ringtrain_env, run_cmd, run_repeats, save_raw, stats, tail)

try:
    import tomllib
except ImportError:  # Python < 3.11
    sys.exit("error: bench_gpt_vs_pytorch.py needs Python >= 3.11 (tomllib)")

WORKER = os.path.join(REPO, "tools", "torch_gpt_train.py")
DEFAULT_CONFIG = os.path.join("examples", "shakespeare", "gpt.toml")

# config key -> (torch_gpt_train.py option, default when the config leaves the key out)
TORCH_ARGS = {
    "model.n_layer": ("--n-layer", None),
    "model.n_head": ("--n-head", None),
    "model.n_embd": ("--n-embd", None),
    "model.block_size": ("--block", None),
    "train.batch_size": ("--batch", 64),
    "train.seed": ("--seed", 0),
    "optim.lr": ("--lr", 1e-3),
    "optim.beta1": ("--beta1", 0.9),
    "optim.beta2": ("--beta2", 0.999),
    "optim.eps": ("--eps", 1e-8),
    "optim.weight_decay": ("--weight-decay", 0.01),
    "optim.warmup_steps": ("--warmup", 0),
    "optim.min_lr": ("--min-lr", 0.0),
    "optim.clip_grad_norm": ("--clip", 0.0),
}
# what the PyTorch model is; a config that asks for something else is refused
TORCH_FIXED = {
    "model.family": "gpt",
    "model.dropout": 0.0,
    "model.bias": True,
    "model.tie_embeddings": True,
    "optim.name": "adamw",
    "optim.schedule": "cosine",
    "optim.no_decay": ["bias", "norm", "position"],
    "train.accumulation_steps": 1,
    "train.precision": "fp32",
}
# keys that only matter to ringtrain (or are set per run by this script)
RINGTRAIN_ONLY_PREFIXES = ("run.", "checkpoint.", "monitor.", "comm.", "runtime.", "data.")
RINGTRAIN_ONLY_KEYS = {"train.log_every", "train.epochs", "train.max_steps", "train.eval_batch_size",
                       "train.resume", "train.exit_at_step", "train.cuda_graph"}


# ------------------------------------------------------------------------------------------------
# the config, shared by both sides
# ------------------------------------------------------------------------------------------------

def flatten(table, prefix=""):
    out = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def parse_value(text):
    """A --set value as ringtrain reads it: TOML, or a bare word as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def load_config(path, sets):
    try:
        with open(path, "rb") as f:
            cfg = flatten(tomllib.load(f))
    except OSError as e:
        sys.exit(f"error: cannot read {path}: {e}")
    except tomllib.TOMLDecodeError as e:
        sys.exit(f"error: {path}: {e}")
    for kv in sets:
        if "=" not in kv:
            sys.exit(f"error: --set {kv!r}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        cfg[k.strip()] = parse_value(v.strip())
    return cfg


def torch_hyper_args(cfg):
    """torch_gpt_train.py options from the config; exits on a config the PyTorch model is not."""
    bad = [f"{k} = {cfg[k]!r} (PyTorch side: {v!r})" for k, v in TORCH_FIXED.items()
           if k in cfg and cfg[k] != v]
    if cfg.get("model.family") != "gpt":
        bad.append(f"model.family = {cfg.get('model.family')!r} (must be \"gpt\")")
    if bad:
        sys.exit("error: the PyTorch reference cannot follow the config:\n  " + "\n  ".join(dict.fromkeys(bad)))
    argv = []
    for key, (opt, default) in TORCH_ARGS.items():
        value = cfg.get(key, default)
        if value is None:
            sys.exit(f"error: the config has no {key}")
        argv += [opt, str(value)]
    ignored = sorted(k for k in cfg if k not in TORCH_ARGS and k not in TORCH_FIXED
                     and k not in RINGTRAIN_ONLY_KEYS and not k.startswith(RINGTRAIN_ONLY_PREFIXES))
    for k in ignored:
        log(f"note: {k} = {cfg[k]!r} is ringtrain's only; the PyTorch side does not follow it")
    return argv


# ------------------------------------------------------------------------------------------------
# peak, PyTorch, ringtrain
# ------------------------------------------------------------------------------------------------

def run_torch(args, torch_argv):
    cmd = [args.torch_python, WORKER, "--train", args.train, "--val", args.val, "--np", str(args.np),
           "--threads", str(args.threads), "--max-steps", str(args.max_steps),
           "--eval-batches", str(args.eval_batches), "--timeout", str(args.timeout), "--log-every", "0",
           "--json"] + torch_argv
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)
    out, _ = run_cmd(cmd, args.timeout + 60, env=env, what="pytorch gpt")
    obj = last_json_line(out, "tokens_per_second")
    if obj is None:
        raise RunFailed(f"pytorch gpt: no result JSON line in output\n{tail(out)}")
    return obj


# What run_ringtrain() reads from summary.json (README "summary.json"): tokens_per_second (global,
# training steps only), val_loss (mean cross-entropy over data.test after the last step),
# resources.ranks[].rss_peak_mib (monitor.interval_ms sampling; max over ranks = peak_rss_mb)
# and, when present, the optional fields below.
RINGTRAIN_OPTIONAL = ("final_train_loss", "median_step_ms", "parameters", "steps", "world_size",
                      "global_batch", "achieved_gflops", "ringtrain_version")


def run_ringtrain(args):
    """ringtrain's side: `mpirun ringtrain train CONFIG --set ...`, then its run's summary.json."""
    rundir = tempfile.mkdtemp(prefix="ringtrain-bench-gpt-")
    try:
        cmd = mpirun_base(args) + [args.ringtrain, "train", args.config,
                                   "--set", f"train.max_steps={args.max_steps}",
                                   "--set", f"run.dir={rundir}",
                                   "--set", f"runtime.threads={args.threads}",
                                   "--set", "train.log_every=100000",
                                   "--set", f"data.train={args.train}",
                                   "--set", f"data.test={args.val}",
                                   # one validation, at the end, over what the PyTorch side reads
                                   "--set", "train.eval_every=0",
                                   "--set", f"train.eval_batches={args.eval_batches}"]
        for kv in args.set:
            cmd += ["--set", kv]
        run_cmd(cmd, args.timeout, env=ringtrain_env(), what="ringtrain gpt")
        path = os.path.join(rundir, "summary.json")
        try:
            with open(path) as f:
                summ = json.load(f)
        except (OSError, ValueError) as e:
            raise RunFailed(f"ringtrain gpt: cannot read {path}: {e}")
        missing = [k for k in ("tokens_per_second", "val_loss") if summ.get(k) is None]
        if missing:
            raise RunFailed(f"ringtrain gpt: {path} lacks {', '.join(missing)} (fields: {', '.join(sorted(summ))})")
        result = {"tokens_per_second": summ["tokens_per_second"], "val_loss": summ["val_loss"],
                  "summary_tokens_per_second": summ["tokens_per_second"]}
        block = args.cfg.get("data.block_size", args.cfg.get("model.block_size"))
        # tokens/s as the PyTorch worker counts it: tokens per step / median step time
        if summ.get("median_step_ms") and summ.get("global_batch") and block:
            result["tokens_per_second"] = summ["global_batch"] * block / (summ["median_step_ms"] / 1e3)
        if summ.get("model_flops_per_sample") and block:
            result["flops_per_token"] = summ["model_flops_per_sample"] / block
        rss = [r.get("rss_peak_mib") for r in (summ.get("resources") or {}).get("ranks", [])]
        rss = [x for x in rss if x is not None and x > 0]
        result["peak_rss_mb"] = max(rss) if rss else None  # none with monitor.interval_ms = 0
        result["per_rank_peak_rss_mb"] = rss
        result.update({k: summ[k] for k in RINGTRAIN_OPTIONAL if k in summ})
        result["framework"] = "ringtrain"
        result["summary"] = summ
        return result
    finally:
        if args.keep_runs:
            log(f"  run dir kept: {rundir}")
        else:
            shutil.rmtree(rundir, ignore_errors=True)


# ------------------------------------------------------------------------------------------------
# summary
# ------------------------------------------------------------------------------------------------

def summarize(runs, peaks, args):
    peak = args.peak_gflops if args.peak_gflops is not None else (
        statistics.median(p["gflops_aggregate"] for p in peaks) if peaks else None)
    torch_runs = [r for r in runs if r["framework"] == "pytorch"]
    # the model's FLOPs per token: the PyTorch worker's count (ringtrain's, if it reports one,
    # is only checked against it)
    flops = torch_runs[0]["result"]["flops_per_token"] if torch_runs else None
    s = {"peak_gflops_aggregate": peak, "peak_library": peaks[-1].get("library") if peaks else None,
         "flops_per_token": flops, "sides": {}}
    for side in ("ringtrain", "pytorch"):
        rs = [r["result"] for r in runs if r["framework"] == side]
        if not rs:
            continue
        tps = stats([r["tokens_per_second"] for r in rs])
        e = {"runs": len(rs), "tokens_per_second": tps,
             "val_loss": stats([r.get("val_loss") for r in rs]),
             "final_train_loss": stats([r.get("final_train_loss") for r in rs]),
             "peak_rss_mb": stats([r.get("peak_rss_mb") for r in rs]),
             "median_step_ms": stats([r.get("median_step_ms") for r in rs]),
             "flops_per_token": rs[0].get("flops_per_token", flops)}
        if side == "pytorch":
            e["torch_version"] = rs[0].get("torch_version")
        if peak and flops:
            e["mfu"] = stats([r["tokens_per_second"] * flops / (peak * 1e9) for r in rs])
        s["sides"][side] = e
    if len(s["sides"]) == 2:
        by_rep = {}
        for r in runs:
            by_rep.setdefault(r["repeat"], {})[r["framework"]] = r["result"]
        pairs = [v for v in by_rep.values() if len(v) == 2]
        s["ratio_tokens_per_second"] = stats(
            [p["ringtrain"]["tokens_per_second"] / p["pytorch"]["tokens_per_second"] for p in pairs])
        s["val_loss_difference"] = stats(
            [p["ringtrain"]["val_loss"] - p["pytorch"]["val_loss"] for p in pairs
             if p["ringtrain"].get("val_loss") is not None and p["pytorch"].get("val_loss") is not None])
        s["ratio_peak_rss"] = stats(
            [p["ringtrain"]["peak_rss_mb"] / p["pytorch"]["peak_rss_mb"] for p in pairs
             if p["ringtrain"].get("peak_rss_mb") and p["pytorch"].get("peak_rss_mb")])
        rt_flops = s["sides"]["ringtrain"].get("flops_per_token")
        if rt_flops and flops and abs(rt_flops - flops) > 1e-6 * flops:
            s["note"] = (f"FLOPs/token: ringtrain's summary counts {rt_flops:.0f}, torch_gpt_train.py {flops:.0f} "
                         f"({100 * (rt_flops / flops - 1):+.2f}%); MFU uses the latter for both")
    return s


def fmt(st, spec, scale=1.0, suffix=""):
    if st is None:
        return "-"
    m = format(st["median"] * scale, spec) + suffix
    if st["n"] == 1:
        return m
    return f"{m} [{format(st['min'] * scale, spec)}-{format(st['max'] * scale, spec)}]"


def print_table(args, s):
    peak = s["peak_gflops_aggregate"]
    rt = s["sides"].get("ringtrain", {})
    pt = s["sides"].get("pytorch", {})
    torch_name = f"PyTorch {pt.get('torch_version')}" if pt else "PyTorch"
    print()
    print(f"GPT on Shakespeare ({os.path.relpath(args.config, REPO)}): {args.np} ranks x {args.threads} "
          f"thread(s), {args.max_steps} steps, repeats {args.repeats}; peak = ringtrain bench gemm "
          + (f"{peak:.1f} GFLOP/s (aggregate sgemm, {s['peak_library'] or 'library not reported'})" if peak
             else "not measured")
          + (f"; {s['flops_per_token'] / 1e6:.2f} MFLOP/token" if s["flops_per_token"] else ""))
    print()

    def ratio(key, spec, suffix=""):
        return fmt(s.get(key), spec, suffix=suffix) if key in s else "-"

    rows = [
        ("tokens/s, median [min-max]", fmt(rt.get("tokens_per_second"), ".0f"),
         fmt(pt.get("tokens_per_second"), ".0f"), ratio("ratio_tokens_per_second", ".2f", "x")),
        ("MFU (of the gemm peak)", fmt(rt.get("mfu"), ".1f", 100, "%"), fmt(pt.get("mfu"), ".1f", 100, "%"), "-"),
        ("val loss (nats/token)", fmt(rt.get("val_loss"), ".4f"), fmt(pt.get("val_loss"), ".4f"),
         ratio("val_loss_difference", "+.4f")),
        ("final train loss", fmt(rt.get("final_train_loss"), ".4f"), fmt(pt.get("final_train_loss"), ".4f"), "-"),
        ("peak RSS per rank (MiB)", fmt(rt.get("peak_rss_mb"), ".0f"), fmt(pt.get("peak_rss_mb"), ".0f"),
         ratio("ratio_peak_rss", ".2f", "x")),
        ("median step (ms)", fmt(rt.get("median_step_ms"), ".1f"), fmt(pt.get("median_step_ms"), ".1f"), "-"),
    ]
    print(f"| | ringtrain | {torch_name} | ringtrain vs PyTorch |")
    print("| --- | ---: | ---: | ---: |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    print("ringtrain vs PyTorch: tokens/s and RSS as ratios (median of per-repeat ratios), val loss as the "
          "difference ringtrain - PyTorch. MFU = tokens/s x FLOPs/token / peak.")
    if "note" in s:
        print(f"NOTE: {s['note']}")
    if not rt:
        print("(ringtrain side not run: --only-pytorch)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringtrain", default=os.path.join("build", "src", "cli", "ringtrain"),
                    help="ringtrain binary (relative paths are relative to the repo root)")
    ap.add_argument("--config", default=DEFAULT_CONFIG, help="ringtrain config, also read for the PyTorch side")
    ap.add_argument("--data-dir", default=os.path.join("data", "shakespeare"),
                    help="train.h5 and val.h5 for both sides (tools/prepare-shakespeare; relative to the repo root)")
    ap.add_argument("--np", type=int, default=2, help="ranks on each side")
    ap.add_argument("--threads", type=int, default=1,
                    help="compute threads per rank, both sides (torch threads, runtime.threads; default 1)")
    ap.add_argument("--max-steps", type=int, default=200, help="optimizer steps per run (also the cosine horizon)")
    ap.add_argument("--eval-batches", type=int, default=0,
                    help="PyTorch val batches per rank (0: the whole val set, as ringtrain; anything else makes "
                         "the val losses incomparable)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config key for both sides (repeatable)")
    side = ap.add_mutually_exclusive_group()
    side.add_argument("--only-pytorch", action="store_true", help="run only the PyTorch side")
    side.add_argument("--only-ringtrain", action="store_true", help="run only ringtrain's side")
    ap.add_argument("--torch-python", default=None, metavar="PYTHON",
                    help="interpreter with torch, h5py, numpy (default: tools/setup-torch-venv's venv)")
    ap.add_argument("--peak-gflops", type=float, default=None,
                    help="aggregate GFLOP/s to use as the peak instead of running ringtrain bench gemm")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per training run")
    ap.add_argument("--gemm-timeout", type=float, default=600.0)
    ap.add_argument("--probe-timeout", type=float, default=120.0)
    ap.add_argument("--keep-runs", action="store_true", help="keep ringtrain's run directories")
    ap.add_argument("--out", default=None, metavar="FILE.json", help="write all raw results here")
    args = ap.parse_args()

    if args.np < 1 or args.repeats < 1 or args.threads < 1 or args.max_steps < 1 or args.eval_batches < 0:
        sys.exit("error: --np, --repeats, --threads and --max-steps must be >= 1, --eval-batches >= 0")

    def repo_path(p):
        return p if os.path.isabs(p) else os.path.join(REPO, p)

    args.ringtrain = repo_path(args.ringtrain)
    args.config = repo_path(args.config)
    data_dir = repo_path(args.data_dir)
    args.train = os.path.join(data_dir, "train.h5")
    args.val = os.path.join(data_dir, "val.h5")
    if args.out:
        args.out = os.path.abspath(args.out)
    for path in (args.train, args.val):
        if not os.path.isfile(path):
            sys.exit(f"error: {path} not found (--data-dir; write it with tools/prepare-shakespeare {args.data_dir})")

    cfg = load_config(args.config, args.set)
    args.cfg = cfg
    want_rt = not args.only_pytorch
    want_torch = not args.only_ringtrain
    torch_argv = torch_hyper_args(cfg) if want_torch else []

    have_rt = os.path.isfile(args.ringtrain) and os.access(args.ringtrain, os.X_OK)
    if want_rt and not have_rt:
        sys.exit(f"error: ringtrain binary not found: {args.ringtrain}\n"
                 f"       build it (cmake --build build --target ringtrain), pass --ringtrain PATH, "
                 f"or run only the PyTorch side with --only-pytorch")
    measure_peak = have_rt and args.peak_gflops is None
    if (want_rt or measure_peak) and shutil.which(args.mpirun) is None:
        sys.exit(f"error: {args.mpirun} not found on PATH")
    if not measure_peak and args.peak_gflops is None:
        log("note: no ringtrain binary: the peak is not measured (no MFU; see --peak-gflops)")

    if want_torch:
        args.torch_python = args.torch_python or os.path.join(default_venv(), "bin", "python")
        ver = probe_torch(args.torch_python, args.probe_timeout)
        if ver is None:
            sys.exit(f"error: {args.torch_python} cannot import torch, h5py and numpy; run tools/setup-torch-venv "
                     f"or pass --torch-python")
        log(f"using torch {ver}: {args.torch_python}")

    runs, peaks = [], []
    raw = {"config": {k: v for k, v in vars(args).items() if k != "cfg"}, "resolved_config": cfg, "torch_args": torch_argv,
           "peaks": peaks, "runs": runs}
    def one_repeat(rep):
        order = ["ringtrain", "pytorch"] if rep % 2 == 0 else ["pytorch", "ringtrain"]
        for side in order:
            if side == "ringtrain" and want_rt:
                r = run_ringtrain(args)
            elif side == "pytorch" and want_torch:
                r = run_torch(args, torch_argv)
            else:
                continue
            runs.append({"repeat": rep, "framework": side, "result": r})
            log(f"  {side}: {r['tokens_per_second']:.0f} tokens/s, val loss {r.get('val_loss')}, "
                f"peak RSS {r.get('peak_rss_mb')} MB")

    status = run_repeats(args, peaks, measure_peak, one_repeat)
    if status == 0:
        raw["summary"] = summarize(runs, peaks, args)
        print_table(args, raw["summary"])
    return save_raw(args, raw, status)

if __name__ == "__main__":
    sys.exit(main())
