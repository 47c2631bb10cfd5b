#!/usr/bin/env python3
"""Benchmark ringtrain against PyTorch DDP on the same data, side by side.

For each model and repeat, in interleaved order (ringtrain, torch A, torch B, ringtrain, ...)
it runs
  * ringtrain under mpirun (reads <run dir>/summary.json),
  * tools/torch_ddp_train.py under each PyTorch interpreter (same model/steps/batch/np),
  * `ringtrain bench gemm` once per repeat as the machine's peak (gflops_aggregate),
and prints median samples/s, the ringtrain/torch ratio (median of per-repeat ratios) and
each one's fraction of peak = samples/s * model_flops_per_sample / (gflops_aggregate * 1e9).

Stdlib only.  PyTorch interpreters: --torch-python (repeatable), default the venv made by
tools/setup-torch-venv (${RINGTRAIN_TORCH_VENV:-~/.cache/ringtrain/torch-venv}) if it exists,
plus /usr/bin/python3 if it can import torch and h5py.
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

WORKER = os.path.join(REPO, "tools", "torch_ddp_train.py")
TRAIN_SAMPLES = 60000  # Fashion-MNIST; default --steps is one epoch = TRAIN_SAMPLES // global_batch


# ------------------------------------------------------------------------------------------------

def resolve_torch_pythons(args):
    cands = list(args.torch_python or [])
    explicit = bool(cands)
    if not explicit:
        vpy = os.path.join(default_venv(), "bin", "python")
        if os.path.exists(vpy):
            cands.append(vpy)
        cands.append("/usr/bin/python3")
    seen, out = set(), []
    for py in cands:
        if py in seen:
            continue
        seen.add(py)
        ver = probe_torch(py, args.probe_timeout)
        if ver is None:
            if explicit:
                sys.exit(f"error: --torch-python {py} cannot import torch, h5py and numpy")
            log(f"note: {py} cannot import torch/h5py/numpy; skipped")
            continue
        out.append({"python": py, "torch_version": ver, "label": f"torch {ver}"})
    labels = [t["label"] for t in out]
    for t in out:  # disambiguate identical versions
        if labels.count(t["label"]) > 1:
            t["label"] = f"{t['label']} ({t['python']})"
    return out


# ------------------------------------------------------------------------------------------------

def run_ringtrain(args, model, steps):
    cfg = os.path.join("examples", "fashion_mnist", f"{model}.toml")
    if not os.path.exists(os.path.join(REPO, cfg)):
        raise RunFailed(f"ringtrain {model}: config {cfg} not found")
    # 1 unless --steps asks for more than one epoch (ringtrain stops at max_steps anyway)
    epochs = max(1, -(-steps // max(1, TRAIN_SAMPLES // (args.batch * args.np))))
    rundir = tempfile.mkdtemp(prefix=f"ringtrain-bench-{model}-")
    try:
        cmd = mpirun_base(args) + ["--oversubscribe", args.ringtrain, "train", cfg,
                                   "--set", f"train.max_steps={steps}",
                                   "--set", f"train.epochs={epochs}",
                                   "--set", f"run.dir={rundir}",
                                   "--set", f"runtime.threads={args.threads}",
                                   "--set", "train.log_every=100000",
                                   # same data and per-rank batch as the PyTorch worker
                                   "--set", f"train.batch_size={args.batch}",
                                   "--set", f"data.train={os.path.join(args.data_dir, 'train.h5')}",
                                   "--set", f"data.test={os.path.join(args.data_dir, 'test.h5')}"]
        for kv in args.ringtrain_set or []:
            cmd += ["--set", kv]
        run_cmd(cmd, args.timeout, env=ringtrain_env(), what=f"ringtrain {model}")
        path = os.path.join(rundir, "summary.json")
        try:
            with open(path) as f:
                summ = json.load(f)
        except (OSError, ValueError) as e:
            raise RunFailed(f"ringtrain {model}: cannot read {path}: {e}")
        missing = [k for k in ("train_samples_per_second", "model_flops_per_sample", "final_train_loss",
                               "world_size", "global_batch", "steps") if k not in summ]
        if missing:
            raise RunFailed(f"ringtrain {model}: summary.json lacks {', '.join(missing)}")
        summ["framework"] = "ringtrain"
        return summ
    finally:
        if args.keep_runs:
            log(f"  run dir kept: {rundir}")
        else:
            shutil.rmtree(rundir, ignore_errors=True)


def run_torch(args, tp, model, steps):
    cmd = [tp["python"], WORKER, "--model", model, "--train", os.path.join(args.data_dir, "train.h5"),
           "--np", str(args.np), "--threads", str(args.threads), "--batch", str(args.batch),
           "--steps", str(steps), "--timeout", str(args.timeout)]
    if args.eval:
        cmd += ["--test", os.path.join(args.data_dir, "test.h5")]
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)
    out, _ = run_cmd(cmd, args.timeout + 60, env=env, what=f"{tp['label']} {model}")
    obj = last_json_line(out, "train_samples_per_second")
    if obj is None:
        raise RunFailed(f"{tp['label']} {model}: no result JSON line in output\n{tail(out)}")
    return obj


# ------------------------------------------------------------------------------------------------

def fmt_rate(st):
    if st is None:
        return "-"
    if st["n"] == 1:
        return f"{st['median']:.0f}"
    return f"{st['median']:.0f} [{st['min']:.0f}-{st['max']:.0f}]"


def summarize(args, models, torch_pys, runs, peaks):
    peak = statistics.median([p["gflops_aggregate"] for p in peaks]) if peaks else args.peak_gflops
    if args.peak_gflops is not None:
        peak = args.peak_gflops
    summary = {"peak_gflops_aggregate": peak, "models": {}}
    for m in models:
        ms = {"frameworks": {}}
        rt = [r for r in runs if r["model"] == m and r["framework"] == "ringtrain"]
        by_rep_rt = {r["repeat"]: r["result"]["train_samples_per_second"] for r in rt}
        entries = []
        if rt:
            entries.append(("ringtrain", rt))
        for tp in torch_pys:
            tr = [r for r in runs if r["model"] == m and r.get("label") == tp["label"]]
            if tr:
                entries.append((tp["label"], tr))
        for name, rs in entries:
            rates = [r["result"]["train_samples_per_second"] for r in rs]
            flops = rs[0]["result"].get("model_flops_per_sample")
            e = {"samples_per_second": stats(rates), "model_flops_per_sample": flops,
                 "final_train_loss": statistics.median([r["result"]["final_train_loss"] for r in rs])}
            if peak and flops:
                e["fraction_of_peak"] = e["samples_per_second"]["median"] * flops / (peak * 1e9)
            if name != "ringtrain" and by_rep_rt:
                ratios = [by_rep_rt[r["repeat"]] / r["result"]["train_samples_per_second"]
                          for r in rs if r["repeat"] in by_rep_rt]
                if ratios:
                    e["ratio_ringtrain_over_this"] = stats(ratios)
            ms["frameworks"][name] = e
        fl = {n: e["model_flops_per_sample"] for n, e in ms["frameworks"].items()}
        distinct = set(v for v in fl.values() if v is not None)
        ms["flops_match"] = len(distinct) <= 1
        summary["models"][m] = ms
    return summary


def print_table(args, summary):
    peak = summary["peak_gflops_aggregate"]
    print()
    print(f"np={args.np}  threads/rank={args.threads}  per-rank batch={args.batch}  repeats={args.repeats}  "
          f"peak (ringtrain bench gemm, aggregate sgemm) = "
          + (f"{peak:.1f} GFLOP/s" if peak else "not measured"))
    hdr = f"{'model':<5} {'framework':<34} {'samples/s median [min-max]':>28} {'rt/this':>8} " \
          f"{'FLOPs/sample':>13} {'%peak':>7} {'loss':>7}"
    print(hdr)
    print("-" * len(hdr))
    for m, ms in summary["models"].items():
        for name, e in ms["frameworks"].items():
            ratio = e.get("ratio_ringtrain_over_this")
            rs = f"{ratio['median']:.2f}x" if ratio else "-"
            fp = e.get("fraction_of_peak")
            fps = f"{100 * fp:.1f}%" if fp is not None else "-"
            fl = e["model_flops_per_sample"]
            print(f"{m:<5} {name:<34} {fmt_rate(e['samples_per_second']):>28} {rs:>8} "
                  f"{(f'{fl / 1e6:.3f}M' if fl else '-'):>13} {fps:>7} {e['final_train_loss']:>7.4f}")
        if not ms["flops_match"]:
            fl = {n: e["model_flops_per_sample"] for n, e in ms["frameworks"].items()}
            print(f"      NOTE: model_flops_per_sample differ for {m}: {fl}")
    print("rt/this = ringtrain samples/s / this framework's samples/s (median of per-repeat ratios); "
          "%peak = samples/s x FLOPs/sample / peak")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ringtrain", default=os.path.join("build", "src", "cli", "ringtrain"),
                    help="ringtrain binary (relative paths are relative to the repo root)")
    ap.add_argument("--data-dir", default=os.path.join("data", "fashion-mnist"),
                    help="directory with train.h5 and test.h5 for both frameworks (relative to repo root)")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1,
                    help="compute threads per rank, both sides (torch threads, runtime.threads; default 1)")
    ap.add_argument("--batch", type=int, default=64, help="per-rank batch (both frameworks)")
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default: one epoch)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--torch-python", action="append", default=None, metavar="PYTHON",
                    help="PyTorch interpreter (repeatable)")
    ap.add_argument("--only", choices=("ringtrain", "pytorch"), default=None,
                    help="run only one side (the peak is still measured if the ringtrain binary exists)")
    ap.add_argument("--ringtrain-set", action="append", default=None, metavar="KEY=VALUE",
                    help="extra --set passed to ringtrain train (repeatable)")
    ap.add_argument("--peak-gflops", type=float, default=None,
                    help="use this aggregate GFLOP/s as peak instead of running ringtrain bench gemm")
    ap.add_argument("--eval", action="store_true", help="torch worker also reports test accuracy (test.h5)")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds per training run")
    ap.add_argument("--gemm-timeout", type=float, default=600.0)
    ap.add_argument("--probe-timeout", type=float, default=120.0)
    ap.add_argument("--keep-runs", action="store_true", help="keep ringtrain run directories")
    ap.add_argument("--out", default=None, metavar="FILE.json", help="write all raw results here")
    args = ap.parse_args()

    if args.np < 1 or args.repeats < 1 or args.threads < 1 or args.batch < 1:
        sys.exit("error: --np, --repeats, --threads and --batch must be >= 1")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    for m in models:
        if m not in ("mlp", "cnn", "resnet"):
            sys.exit(f"error: unknown model {m!r} (mlp, cnn, resnet)")
    args.ringtrain = os.path.join(REPO, args.ringtrain) if not os.path.isabs(args.ringtrain) else args.ringtrain
    args.data_dir = os.path.join(REPO, args.data_dir) if not os.path.isabs(args.data_dir) else args.data_dir
    if args.out:
        args.out = os.path.abspath(args.out)
    steps = args.steps if args.steps is not None else TRAIN_SAMPLES // (args.batch * args.np)

    want_rt = args.only != "pytorch"
    want_torch = args.only != "ringtrain"
    have_rt = os.path.isfile(args.ringtrain) and os.access(args.ringtrain, os.X_OK)
    if want_rt and not have_rt:
        sys.exit(f"error: ringtrain binary not found: {args.ringtrain}\n"
                 f"       build it first (cmake --build build), pass --ringtrain PATH, "
                 f"or run only the PyTorch half with --only pytorch")
    need_mpirun = want_rt or (have_rt and args.peak_gflops is None)
    if need_mpirun and shutil.which(args.mpirun) is None:
        sys.exit(f"error: {args.mpirun} not found on PATH")

    for name in ("train.h5", "test.h5"):
        path = os.path.join(args.data_dir, name)
        if (name == "train.h5" or want_rt or args.eval) and not os.path.isfile(path):
            sys.exit(f"error: {path} not found (--data-dir; write it with tools/quickstart "
                     f"or `ringtrain data convert`)")
    torch_pys = []
    if want_torch:
        torch_pys = resolve_torch_pythons(args)
        if not torch_pys:
            sys.exit("error: no Python with torch, h5py and numpy found; run tools/setup-torch-venv "
                     "or pass --torch-python")
        for tp in torch_pys:
            log(f"using {tp['label']}: {tp['python']}")

    measure_peak = have_rt and args.peak_gflops is None
    if not measure_peak and args.peak_gflops is None:
        log("note: no ringtrain binary, peak not measured (fraction of peak omitted; see --peak-gflops)")

    runs, peaks = [], []
    raw = {"config": {k: v for k, v in vars(args).items()}, "steps": steps, "torch_pythons": torch_pys,
           "peaks": peaks, "runs": runs}
    def one_repeat(rep):
        for m in models:
            if want_rt:
                r = run_ringtrain(args, m, steps)
                runs.append({"repeat": rep, "model": m, "framework": "ringtrain", "label": "ringtrain", "result": r})
                log(f"  ringtrain {m}: {r['train_samples_per_second']:.0f} samples/s")
            for tp in torch_pys:
                r = run_torch(args, tp, m, steps)
                runs.append({"repeat": rep, "model": m, "framework": "pytorch", "label": tp["label"],
                             "python": tp["python"], "result": r})
                log(f"  {tp['label']} {m}: {r['train_samples_per_second']:.0f} samples/s")

    status = run_repeats(args, peaks, measure_peak, one_repeat)
    if status == 0:
        for r in runs:
            res = r["result"]
            if res.get("steps") != steps or res.get("world_size") != args.np:
                log(f"warning: {r['label']} {r['model']} ran steps={res.get('steps')} "
                    f"world_size={res.get('world_size')} (expected {steps}, {args.np})")
            if res.get("threads_per_rank", args.threads) != args.threads:
                log(f"warning: {r['label']} {r['model']} used threads_per_rank={res.get('threads_per_rank')}, "
                    f"torch uses --threads {args.threads}")
        gbs = {r["label"]: r["result"].get("global_batch") for r in runs}
        if len(set(gbs.values())) > 1:
            log(f"warning: global batch differs between frameworks: {gbs}")
        raw["summary"] = summarize(args, models, torch_pys, runs, peaks)
        print_table(args, raw["summary"])
    return save_raw(args, raw, status)


if __name__ == "__main__":
    sys.exit(main())
