#!/usr/bin/env bash
# The GPU check for any GPU node (issues 6 and 7): builds ringtrain (Release, CUDA) against the
# node's own Open MPI and parallel HDF5, or against the carried Debian packages on a machine
# without them (the lent H200), then runs each GPU check under its own time budget inside one
# overall deadline, recording pass/fail/timeout/skip and seconds per step. Results land in
# OUT after every step (results.json, results.md, logs.tar.gz), so a timeout keeps them.
# Usage: tools/device/check.sh [OUT]   (env: OUT; CHECK_DEADLINE_S, default 420; CHECK_ONLY="step
# step ...": the setup steps plus only these, for a rerun on a warm machine; CHECK_DEPS=auto|carry|
# system; CHECK_BUDGET_SCALE, default 1; RINGTRAIN_CUDA_ARCHITECTURES, default the GPU's own;
# CHECK_LAUNCH; see README.md)
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-${OUT:-/tmp/ringtrain-device-check}}"
deadline=$((SECONDS + ${CHECK_DEADLINE_S:-420}))
reserve=8  # seconds kept for writing the results after the last step
build="$root/build-device"
exe="$build/src/cli/ringtrain"
data="$build/data/fashion-mnist"
work="$(mktemp -d /tmp/ringtrain-check.XXXXXX)"
logs="$work/logs"
mkdir -p "$out" "$logs"
steps="$work/steps.tsv"  # name, status, seconds, budget, detail
: >"$steps"
export CTEST_OUTPUT_ON_FAILURE=1 PYTHONUNBUFFERED=1

# results.json / results.md / logs.tar.gz from the steps so far (at most 8 files come back).
write_results() {
  python3 - "$steps" "$out" "$logs" <<'PY'
import json, os, sys
steps_file, out, logs = sys.argv[1:4]
steps = []
for line in open(steps_file):
    name, status, seconds, budget, detail = line.rstrip("\n").split("\t")
    steps.append({"name": name, "status": status, "seconds": int(seconds), "budget_s": int(budget), "detail": detail})
extra = {}
for name in sorted(os.listdir(logs)):
    if name.endswith(".json"):
        try:
            extra[name[:-5]] = json.load(open(os.path.join(logs, name)))
        except ValueError as e:
            extra[name[:-5]] = {"unreadable": str(e)}
result = {"steps": steps, "passed": sum(s["status"] == "pass" for s in steps), "total": len(steps),
          "results": extra}
json.dump(result, open(os.path.join(out, "results.json"), "w"), indent=1)
md = ["| step | status | seconds | budget | detail |", "| --- | --- | ---: | ---: | --- |"]
md += [f"| {s['name']} | {s['status']} | {s['seconds']} | {s['budget_s']} | {s['detail']} |" for s in steps]
for name in ("train_summary", "bench_optim"):
    if name in extra:
        md += ["", f"{name}: `{json.dumps(extra[name])}`"]
if isinstance(extra.get("bench_gemm"), list):  # one row per GEMM and input type
    md += ["", "| gemm | m | n | k | dtype | used TFLOP/s | best TFLOP/s | used/best | candidates |",
           "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |"]
    md += [f"| {g['gemm']} | {g['m']} | {g['n']} | {g['k']} | {g['dtype']} | {g['used_tflops']:.2f} | "
           f"{g['best_tflops']:.2f} | {g['used_vs_best']:.3f} | {g['candidates']} |" for g in extra["bench_gemm"]]
for table in ("gpu_vs_pytorch.md", "gpt2_kernels.md"):
    if os.path.exists(os.path.join(logs, table)):
        md += ["", open(os.path.join(logs, table)).read()]
open(os.path.join(out, "results.md"), "w").write("\n".join(md) + "\n")
PY
  tar -C "$work" -czf "$out/logs.tar.gz" logs
}

# step NAME BUDGET_S MIN_S DETAIL_CMD -- CMD...: runs CMD (log: logs/NAME.log) under
# `timeout` of min(BUDGET_S, time left); skipped when less than MIN_S is left. DETAIL_CMD
# (a shell snippet, may be empty) prints the one-line detail for the table.
step() {
  local name="$1" budget="$(($2 * ${CHECK_BUDGET_SCALE:-1}))" min="$3" detail_cmd="$4"
  shift 5
  local left=$((deadline - SECONDS - reserve)) status detail rc
  case " deps configure build data ${CHECK_ONLY:-$name} " in *" $name "*) ;; *) return 0 ;; esac
  if [ "$left" -lt "$min" ]; then
    printf '%s\tskipped\t0\t%s\tonly %ss left\n' "$name" "$budget" "$left" >>"$steps"
    echo "== $name: skipped (only ${left}s left)"
    write_results
    return 1
  fi
  [ "$budget" -gt "$left" ] && budget="$left"
  echo "== $name (budget ${budget}s)"
  local start=$SECONDS
  timeout -k 5 "$budget" bash -c '"$@"' step "$@" >"$logs/$name.log" 2>&1
  rc=$?
  case "$rc" in
    0) status=pass ;;
    124 | 137) status=timeout ;;
    *) status="fail($rc)" ;;
  esac
  detail=""
  [ -n "$detail_cmd" ] && detail="$(bash -c "$detail_cmd" 2>/dev/null | tr '\t\n|' '  /' | cut -c1-300)"
  [ "$status" != pass ] && [ -z "$detail" ] && detail="$(tail -n 3 "$logs/$name.log" | tr '\t\n|' '  /' | cut -c1-300)"
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$((SECONDS - start))" "$budget" "$detail" >>"$steps"
  echo "   $status in $((SECONDS - start))s: $detail"
  write_results
  [ "$status" = pass ]
}

# ---- environment: the carried packages, NCCL/cuDNN from the Python wheels if the toolkit lacks them
unpack_deps() {
  [ -d "$root/.device-deps/core/usr" ] && return 0
  mkdir -p "$root/.device-deps"
  if command -v xz >/dev/null; then
    tar -C "$root/.device-deps" -xJf "$root/.device-carry/deps.tar.xz"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$root/.device-carry/deps.tar.xz" "$root/.device-deps"
  fi
}
# Steps run their command in a child bash (timeout needs a program): it sees these.
export root build exe data work logs
export -f unpack_deps
# The system's own: mpirun and parallel HDF5 (h5pcc) on PATH, e.g. after `module load`.
system_deps() {
  local tool
  for tool in mpirun h5pcc; do
    command -v "$tool" >/dev/null || { echo "no $tool on PATH"; return 1; }
  done
  echo "system: $(command -v mpirun) ($(mpirun --version 2>/dev/null | head -1)), $(command -v h5pcc)"
}
export -f system_deps
# auto: the carry when there is one (the lent machine), else the system's packages.
deps_mode="${CHECK_DEPS:-auto}"
if [ "$deps_mode" = auto ]; then
  deps_mode=system
  if [ -f "$root/.device-carry/deps.tar.xz" ] || [ -d "$root/.device-deps/core/usr" ]; then deps_mode=carry; fi
fi
case "$deps_mode" in
  carry)
    step deps 60 10 "du -sh $root/.device-deps | cut -f1" -- unpack_deps
    # shellcheck source=tools/device/deps-env.sh
    source "$root/tools/device/deps-env.sh" || { echo "check.sh: no dependency tree"; exit 1; }
    fashion_mnist="${FASHION_MNIST_DIR:-$root/.device-carry/fashion-mnist}"
    ;;
  system)
    step deps 10 1 "tail -1 $logs/deps.log" -- system_deps ||
      { echo "check.sh: no .device-carry and $(tail -1 "$logs/deps.log") (CHECK_DEPS, README.md)"; exit 1; }
    fashion_mnist="${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
    ;;
  *) echo "check.sh: CHECK_DEPS=$deps_mode: expected auto, carry or system"; exit 1 ;;
esac
# shellcheck source=tools/env.sh
source "$root/tools/env.sh"
# NCCL and cuDNN: a wheel's include/ and lib/libX.so.N; CMake wants lib/libX.so (shim folders).
shim_wheel_lib() {
  local name="$1" var="$2" cuda="${CUDA_HOME:-/usr/local/cuda}" dir so
  [ -n "${!var:-}" ] && { echo "$name: $var=${!var}"; return 0; }  # set by the user or a module
  [ -f "$cuda/include/$name.h" ] && { echo "$name: in $cuda"; return 0; }
  dir="$(python3 -c 'import nvidia, sys; print("\n".join(nvidia.__path__))' 2>/dev/null |
         xargs -I{} find {} -maxdepth 3 -name "$name.h" -path '*/include/*' 2>/dev/null | head -1)"
  [ -n "$dir" ] || { echo "$name: not found"; return 0; }
  dir="$(dirname "$(dirname "$dir")")"
  so="$(find "$dir/lib" -maxdepth 1 -name "lib$name.so.*" 2>/dev/null | sort | head -1)"
  mkdir -p "$work/shim/$name/lib"
  ln -sfn "$dir/include" "$work/shim/$name/include"
  ln -sf "$so" "$work/shim/$name/lib/lib$name.so"
  export "$var=$work/shim/$name" LD_LIBRARY_PATH="$dir/lib:$LD_LIBRARY_PATH"
  echo "$name: $dir (shim $work/shim/$name)"
}
shim_wheel_lib nccl NCCL_HOME >"$logs/shims.log"
shim_wheel_lib cudnn CUDNN_HOME >>"$logs/shims.log"
echo "dependencies: $deps_mode; missing system libraries taken from the carry: ${RINGTRAIN_DEPS_MISSING:-none}" >>"$logs/shims.log"
cat "$logs/shims.log"

step nvidia-smi 20 5 "nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader" \
  -- bash -c 'nvidia-smi && nvidia-smi -q -d CLOCK,MEMORY,PERFORMANCE'

# ---- build: ringtrain and the test executables labelled cuda (the rest of the suite runs in CI),
# for this GPU's architecture (compute capability 9.0 -> 90) unless RINGTRAIN_CUDA_ARCHITECTURES says
cuda_arch="${RINGTRAIN_CUDA_ARCHITECTURES:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
  head -1 | tr -d ' .')}"
[[ "$cuda_arch" =~ ^[0-9]+[af]?(;[0-9]+[af]?)*$ ]] || cuda_arch=90
step configure 90 20 "grep -E 'ringtrain [0-9.]+:|NCCL|cuDNN|cudnn-frontend' $logs/configure.log | tr -s ' ' | head -4" -- \
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRINGTRAIN_WITH_CUDA=ON \
  "-DRINGTRAIN_CUDA_ARCHITECTURES=$cuda_arch" || { echo "check.sh: configure failed"; tail -30 "$logs/configure.log"; exit 1; }
cuda_targets() { ctest --test-dir "$build" -N -L cuda | sed -n 's/^ *Test *#[0-9]*: \([^ .]*\).*/\1/p' | sort -u; }
build_all() {
  local targets
  mapfile -t targets < <(cuda_targets)
  echo "targets: ringtrain ${targets[*]}"
  cmake --build "$build" -j "$(nproc)" --target ringtrain "${targets[@]}" -- -k 0
}
export -f cuda_targets build_all
step build 300 60 "grep -c FAILED: $logs/build.log | sed 's/^/failed edges: /'" -- build_all
[ -x "$exe" ] || { echo "check.sh: no ringtrain executable; see logs"; tail -40 "$logs/build.log"; exit 1; }

step data 40 5 "ls $data" -- env RINGTRAIN_EXE="$exe" FASHION_MNIST_DIR="$fashion_mnist" \
  "$root/tools/prepare-fashion-mnist" "$data"

# ---- checks, most important first: each is skipped, not cut short, when the time is gone
launch="${CHECK_LAUNCH:-mpirun --oversubscribe --bind-to none --mca btl self,vader}"
export launch
# The final test accuracy in a run's summary.json.
summary_accuracy() {
  python3 -c 'import json, sys; print("final_test_accuracy", json.load(open(sys.argv[1]))["final_test_accuracy"])' "$1"
}
# The cuda tests; every test's output then joins the logs (ctest's LastTest.log as
# ctest-cuda-all.log): passing tests print what ran, e.g. whether cuBLASLt fused each epilogue
# (the bias, ReLU, bit-mask and ReLU-gradient ones) or a kernel ran after the plain GEMM.
ctest_cuda() {
  local rc=0
  ctest --test-dir "$build" -L cuda --output-on-failure --timeout 120 -j 4 || rc=$?
  cp "$build/Testing/Temporary/LastTest.log" "$logs/ctest-cuda-all.log" 2>/dev/null
  grep -h '\[ info \]' "$logs/ctest-cuda-all.log" 2>/dev/null | sort | uniq -c
  return "$rc"
}
export -f ctest_cuda
step ctest-cuda 150 30 "grep -E 'tests passed|tests failed' $logs/ctest-cuda.log" -- ctest_cuda

# Fashion-MNIST CNN, 3 epochs on the GPU (1 rank, the example's batch 64); accuracy from summary.json.
train_cnn() {
  local precision="$1" run="$work/run-cnn-$1"
  $launch -np 1 "$exe" train "$root/examples/fashion_mnist/cnn.toml" --set runtime.backend=cuda \
    --set "train.precision=$precision" --set train.epochs=3 --set "data.train=$data/train.h5" \
    --set "data.test=$data/test.h5" --set "run.dir=$run" --set checkpoint.enabled=false || return
  python3 - "$run/summary.json" "$precision" "$logs/train_summary.json" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
if s.get("backend") != "cuda":  # a fallback to the CPU is a failure of this check
    sys.exit(f"ran on the {s.get('backend')} backend, not the GPU")
path = sys.argv[3]
all_ = json.load(open(path)) if os.path.exists(path) else {}
keep = {k: s[k] for k in ("final_test_accuracy", "test_accuracy_per_epoch", "train_seconds", "steps",
                          "train_samples_per_second", "median_step_ms", "final_train_loss") if k in s}
all_["cnn_" + sys.argv[2]] = keep or s
json.dump(all_, open(path, "w"))
print(json.dumps(keep or s))
PY
}
export -f summary_accuracy train_cnn
# Detail of a training step: its accuracy, else its error line.
run_detail() { echo "summary_accuracy $work/$1/summary.json $2 || grep -m1 '^ringtrain: error' $logs/$3.log"; }
cpu_reference="&& echo '(CPU, docs/BENCHMARKS.md: 0.8964)'"
step train-cnn-fp32 120 30 "$(run_detail run-cnn-fp32 "$cpu_reference" train-cnn-fp32)" -- train_cnn fp32
step train-cnn-bf16 120 30 "$(run_detail run-cnn-bf16 "$cpu_reference" train-cnn-bf16)" -- train_cnn bf16

# The issue's target, right after the tests and the training runs so that a short run still
# measures it: ringtrain (eager and CUDA graph) against PyTorch eager, MLP and CNN, fp32 and bf16,
# batch 256.
gpu_vs_pytorch() {
  python3 "$root/tools/bench_gpu_vs_pytorch.py" --device cuda --ringtrain "$exe" --train "$data/train.h5" \
    --launch "mpirun -np 1 --oversubscribe --bind-to none" --repeats 3 --warmup 10 --steps 50 --cuda-graph \
    --json "$logs/gpu_vs_pytorch.json" --markdown "$logs/gpu_vs_pytorch.md"
}
export -f gpu_vs_pytorch
step gpu-vs-pytorch 240 60 "grep -E '^\\| (mlp|cnn)' $logs/gpu_vs_pytorch.md | awk -F'|' '{printf \"%s %s %s graph %s; \", \$2, \$3, \$6, \$8}'" \
  -- gpu_vs_pytorch

# ---- optional checks, while time is left
# GPT-2 small (124M parameters, block 1024, vocabulary 50257) on the GPU in bf16, batch 8: the GPT's
# CUDA layers (embedding, LayerNorm, attention, residual add) in `bench train --synthetic` (the
# byte-tokenized docs only give the data's shape); tokens/s and MFU against the H200's dense bf16
# peak (989 TFLOP/s; issue 16's goal: >= 40%). A refusal or a crash fails the step.
# gpt2_bench [WRAPPER... --] [ARGS...]: GPT-2 small (124M parameters, block 1024, vocabulary 50257,
# batch 8) in bf16 on the GPU, `bench train --synthetic` on the byte-tokenized README and
# ARCHITECTURE (the data's shape only), the bench's JSON on stdout; WRAPPER (a profiler) runs the
# executable, ARGS follow the model's settings.
gpt2_bench() {
  local wrapper=()
  if [[ " $* " == *" -- "* ]]; then
    while [ "$1" != -- ]; do wrapper+=("$1"); shift; done
    shift
  fi
  [ -f "$work/tokens/val.h5" ] ||
    "$exe" data convert --text "$root/README.md" "$root/docs/ARCHITECTURE.md" --out-dir "$work/tokens" >&2 || return
  $launch -np 1 "${wrapper[@]}" "$exe" bench train "$root/examples/shakespeare/gpt.toml" --synthetic --json \
    --set runtime.backend=cuda --set train.precision=bf16 --set model.n_layer=12 --set model.n_head=12 \
    --set model.n_embd=768 --set model.block_size=1024 --set model.vocab_size=50257 --set train.batch_size=8 \
    --set "data.train=$work/tokens/train.h5" --set "data.test=$work/tokens/val.h5" "$@"
}
train_gpt() { gpt2_bench --steps 10 --warmup 3 >"$logs/train_gpt.json"; }
gpt_detail() {
  python3 - "$logs/train_gpt.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
peak = 989e12  # H200 SXM dense bf16
mfu = j["flops_per_sample"] * j["global_batch"] / (j["step_ms"] / 1e3) / peak
print(f"{j['backend']} {j['precision']} {j['params']:,} params: {j['tokens_per_s']:,.0f} tokens/s, "
      f"step {j['step_ms']:.1f} ms, MFU {100 * mfu:.1f}% of 989 TFLOP/s (goal >= 40%)")
PY
}
export -f gpt2_bench train_gpt gpt_detail
step train-gpt2-bf16 120 40 gpt_detail -- train_gpt

# Where the GPT-2 step's time goes: the step as train-gpt2-bf16 runs it with phase timing
# (monitor.phase_timing: a host wait after each phase), with the vocabulary padded to 50304 (a
# multiple of 64, as nanoGPT and llm.c pad it), that with the step replayed as a CUDA graph, and
# with blocks of 256 tokens (the same tokens per step, a quarter of the attention per token), each
# recorded as failed rather than stopping the step; then every kernel's duration under Nsight
# Compute (one metric, one pass per kernel, clocks left alone) over one warm-up and one timed
# step, summed by kernel name (gpt2_kernels.md).
# gpt2_try VARIANT ARGS...: 5 timed steps into logs/gpt2_VARIANT.json, {"failed": true} if it fails.
gpt2_try() {
  local variant="$1"
  shift
  gpt2_bench --steps 5 --warmup 2 "$@" >"$logs/gpt2_$variant.json" || echo '{"failed": true}' >"$logs/gpt2_$variant.json"
}
gpt2_kernels() {
  local ncu
  gpt2_try phases --set monitor.phase_timing=true
  gpt2_try vocab50304 --set model.vocab_size=50304
  gpt2_try vocab50304_graph --set model.vocab_size=50304 --set train.cuda_graph=true
  gpt2_try block256 --set model.block_size=256 --set train.batch_size=32
  ncu="$(command -v ncu || find /usr/local/cuda/bin /opt/nvidia -maxdepth 3 -name ncu -type f 2>/dev/null | head -1)"
  [ -n "$ncu" ] || { echo "no ncu"; return 1; }
  gpt2_bench "$ncu" --target-processes all --clock-control none --metrics gpu__time_duration.sum --csv \
    --print-units base --log-file "$work/gpt2_ncu.csv" -- --steps 1 --warmup 1 >/dev/null || return
  python3 - "$work/gpt2_ncu.csv" "$logs" >"$logs/gpt2_kernels.md" <<'PY'
import collections, csv, json, os, sys
rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
        if r.get("Metric Name") == "gpu__time_duration.sum"]
total = collections.Counter()
count = collections.Counter()
for r in rows:
    name = r["Kernel Name"].split("(")[0][:90]
    total[name] += float(r["Metric Value"].replace(",", "")) / 1e6
    count[name] += 1
whole = sum(total.values())
def step(variant):
    j = json.load(open(os.path.join(sys.argv[2], f"gpt2_{variant}.json")))
    if "step_ms" not in j:
        return "failed"
    mfu = j["flops_per_sample"] * j["global_batch"] / (j["step_ms"] / 1e3) / 989e12
    return f"{j['step_ms']:.1f} ms (MFU {100 * mfu:.1f}%)"
p = json.load(open(os.path.join(sys.argv[2], "gpt2_phases.json")))
phases = (f" (forward {p['forward_ms']:.1f}, backward {p['backward_ms']:.1f}, optimizer {p['optimizer_ms']:.1f})"
          if "step_ms" in p else "")
print(f"GPT-2 small bf16, batch 8 x 1024: with phase timing {step('phases')}{phases}; vocabulary 50304: "
      f"{step('vocab50304')}, as a CUDA graph {step('vocab50304_graph')}; batch 32 x 256: {step('block256')}; "
      f"Nsight Compute over 2 steps: {len(rows)} kernels, {whole:.1f} ms of kernel time\n")
print("| kernel | launches | ms (2 steps) | share |\n| --- | ---: | ---: | ---: |")
for name, ms in total.most_common(40):
    print(f"| {name} | {count[name]} | {ms:.2f} | {100 * ms / whole:.1f}% |")
PY
}
gpt2_kernels_detail() { sed -n 1p "$logs/gpt2_kernels.md"; sed -n 4,6p "$logs/gpt2_kernels.md"; }
export -f gpt2_try gpt2_kernels gpt2_kernels_detail
step gpt2-kernels 180 60 gpt2_kernels_detail -- gpt2_kernels

step doctor-monitor 60 20 "grep -E 'gpu 0:|PASS|doctor failed|FAIL' $logs/doctor-monitor.log | head -2" -- \
  env RINGTRAIN_EXE="$exe" DATA_DIR="$data" "$root/tools/device/check-monitor-doctor.sh" 1

# The fused AdamW over 100M parameters against a device-to-device copy (target >= 80%).
bench_optim() {
  set -o pipefail
  "$exe" bench optim --backend cuda --iterations 20 --repeats 7 --json | tee "$work/bench_optim.out" || return
  grep '^{' "$work/bench_optim.out" | tail -1 >"$logs/bench_optim.json"
  python3 -c 'import json, sys; b = json.load(open(sys.argv[1]))["backend"]; sys.exit(b != "cuda" and f"ran on {b}")' \
    "$logs/bench_optim.json"
}
export -f bench_optim
step bench-optim 60 15 "python3 -c \"import json; j=json.load(open('$logs/bench_optim.json')); print(f\\\"{j['backend']}: adamw {j['adamw_GBps']:.0f} GB/s = {100*j['adamw_vs_copy_bandwidth']:.0f}% of copy {j['copy_GBps']:.0f} GB/s (target >= 80%)\\\")\"" \
  -- bench_optim

# The MLP at batch 256 in `bench train --synthetic`, eager: the default step (decided on the
# device, one host wait after the optimizer is queued, the next batch staged meanwhile) against
# monitor.phase_timing = true (decided on the host, waiting at every phase): samples/s of each and
# their ratio, what the queued step saves at this size (issue 18 item 5).
queued_vs_synced() {
  local mode
  for mode in queued synced; do
    $launch -np 1 "$exe" bench train "$root/examples/fashion_mnist/mlp.toml" --synthetic --steps 300 --warmup 30       --json --set runtime.backend=cuda --set train.batch_size=256 --set "data.train=$data/train.h5"       --set data.test= --set "monitor.phase_timing=$([ "$mode" = synced ] && echo true || echo false)"       >"$logs/mlp_$mode.json" || return
  done
}
queued_detail() {
  python3 - "$logs/mlp_queued.json" "$logs/mlp_synced.json" <<'PY'
import json, sys
q, s = (json.load(open(p)) for p in sys.argv[1:3])
print(f"MLP batch 256: queued {q['samples_per_s']:,.0f} samples/s, synced {s['samples_per_s']:,.0f}: "
      f"{q['samples_per_s'] / s['samples_per_s']:.2f}x")
PY
}
export -f queued_vs_synced queued_detail
step mlp-queued-vs-synced 60 20 queued_detail -- queued_vs_synced

# cuBLASLt GEMMs (the Fashion-MNIST Linear layers at batch 256, 1024^3, 8192^3): TFLOP/s of
# ringtrain's algorithm against the fastest cuBLASLt offers, one JSON line per GEMM and type.
bench_gemm() {
  set -o pipefail
  "$exe" bench gemm --backend cuda --dtype f32,tf32,bf16 --repeats 3 --json | tee "$work/bench_gemm.out"
}
# Its detail, run after it even when it failed or timed out: the lines so far into bench_gemm.json
# (folded into results.json, a table in results.md), then the 8192^3 figures and the lowest ratio.
gemm_detail() {
  python3 - "$work/bench_gemm.out" "$logs/bench_gemm.json" <<'PY'
import json, sys
g = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
json.dump(g, open(sys.argv[2], "w"))
peak = "; ".join(f"{r['dtype']} {r['used_tflops']:.0f}/{r['best_tflops']:.0f}" for r in g if r["gemm"] == "square8192")
worst = min(g, key=lambda r: r["used_vs_best"])
print(f"8192^3 used/best TFLOP/s: {peak}; lowest used/best {worst['used_vs_best']:.2f} ({worst['gemm']} {worst['dtype']})")
PY
}
export -f bench_gemm gemm_detail
step bench-gemm 90 30 gemm_detail -- bench_gemm

# Same parameters three ways: the CNN for 2 epochs at batch 256 in fp32 (an evaluation between
# them, after which the graph is captured again), eager with host augmentation, eager with GPU
# augmentation, and as a CUDA graph with GPU augmentation. The param_checksum of the three runs
# must be equal: same decoded values, the same kernels in the same order, deterministic cuDNN.
same_three_ways() {
  local name sets
  for name in eager-hostaug eager-gpuaug graph-gpuaug; do
    case $name in
      eager-hostaug) sets=(--set data.augment_on=cpu --set train.cuda_graph=false) ;;
      eager-gpuaug) sets=(--set data.augment_on=gpu --set train.cuda_graph=false) ;;
      graph-gpuaug) sets=(--set data.augment_on=gpu --set train.cuda_graph=true) ;;
    esac
    $launch -np 1 "$exe" train "$root/examples/fashion_mnist/cnn.toml" --set runtime.backend=cuda \
      --set train.epochs=2 --set train.batch_size=256 --set "data.train=$data/train.h5" \
      --set "data.test=$data/test.h5" --set "run.dir=$work/run-$name" --set checkpoint.enabled=false "${sets[@]}" \
      || return
  done
  python3 - "$work" "$logs/same_three_ways.json" <<'PY'
import json, sys
runs = {n: json.load(open(f"{sys.argv[1]}/run-{n}/summary.json")) for n in ("eager-hostaug", "eager-gpuaug", "graph-gpuaug")}
out = {n: {k: s.get(k) for k in ("backend", "param_checksum", "final_test_accuracy", "train_samples_per_second",
                                  "median_step_ms", "cuda_graph_replays")}
       for n, s in runs.items()}
json.dump(out, open(sys.argv[2], "w"))
print(json.dumps(out))
if any(s["backend"] != "cuda" for s in out.values()):
    sys.exit("a run did not run on the GPU")
if not out["graph-gpuaug"]["cuda_graph_replays"]:
    sys.exit("the graph run replayed no graph")
if len({s["param_checksum"] for s in out.values()}) != 1:
    sys.exit("the parameters differ between the three ways")
print("same param_checksum three ways")
PY
}
export -f same_three_ways
step same-three-ways 90 30 "grep -E 'same param_checksum|differ|did not run|^ringtrain: error' $logs/same-three-ways.log | tail -1" \
  -- same_three_ways

# NCCL: the 1-rank communicator test (device buffers), and bench allreduce where it has an nccl backend.
nccl() {
  ctest --test-dir "$build" -R '^test_comm_nccl\.np1$' -V --timeout 60 || return
  if "$exe" bench allreduce --help | grep -q nccl; then
    $launch -np 1 "$exe" bench allreduce --backends nccl --max-bytes 268435456 --json
  else
    echo "bench allreduce: no nccl backend in this build (only the communicator test ran)"
  fi
}
export -f nccl
step nccl 60 15 "grep -E 'tests passed|tests failed|no nccl backend' $logs/nccl.log" -- nccl

# Two ranks sharing the one GPU, gradients through the MPI backend (NCCL refuses two ranks on one GPU).
two_ranks() {
  $launch -np 2 "$exe" train "$root/examples/fashion_mnist/cnn.toml" --set runtime.backend=cuda \
    --set comm.allreduce=mpi --set train.max_steps=300 --set "data.train=$data/train.h5" \
    --set "data.test=$data/test.h5" --set "run.dir=$work/run-2ranks" --set checkpoint.enabled=false || return
  python3 -c 'import json, sys; b = json.load(open(sys.argv[1]))["backend"]; sys.exit(b != "cuda" and f"ran on {b}")' \
    "$work/run-2ranks/summary.json"
}
export -f two_ranks
step two-ranks-one-gpu 90 20 "$(run_detail run-2ranks "" two-ranks-one-gpu)" -- two_ranks

# ZeRO stages 2 and 3 on the same two ranks, gradients reduce-scattered and parameters allgathered
# through pinned memory on the MPI ring, which sums as its allreduce does; stage 3 also keeps each
# rank's arena in reserved device memory with the other rank's shards unmapped and gathers every
# bucket's layers before use (exact copies). The parameters must equal two-ranks-one-gpu's.
two_ranks_zero() {
  local stage="$1"
  $launch -np 2 "$exe" train "$root/examples/fashion_mnist/cnn.toml" --set runtime.backend=cuda \
    --set comm.allreduce=mpi --set train.max_steps=300 --set "data.train=$data/train.h5" \
    --set "data.test=$data/test.h5" --set "run.dir=$work/run-2ranks-zero$stage" --set checkpoint.enabled=false \
    --set "train.zero_stage=$stage" || return
  python3 - "$stage" "$work/run-2ranks/summary.json" "$work/run-2ranks-zero$stage/summary.json" <<'PY'
import json, sys
stage = sys.argv[1]
stage0, sharded = (json.load(open(p)) for p in sys.argv[2:4])
print(json.dumps({"stage0": stage0.get("param_checksum"), f"stage{stage}": sharded.get("param_checksum"),
                  "median_step_ms": [s.get("median_step_ms") for s in (stage0, sharded)],
                  "memory_stage0": stage0.get("memory"), f"memory_stage{stage}": sharded.get("memory")}))
if sharded.get("backend") != "cuda":
    sys.exit(f"ran on {sharded.get('backend')}")
if stage0.get("param_checksum") != sharded.get("param_checksum"):
    sys.exit(f"zero stage {stage} parameters differ from stage 0's")
print(f"zero stage {stage} == stage 0 param_checksum")
PY
}
export -f two_ranks_zero
for stage in 2 3; do
  step "two-ranks-zero$stage" 90 25 \
    "grep -E 'param_checksum|differ|ran on|^ringtrain: error' $logs/two-ranks-zero$stage.log | tail -1" \
    -- two_ranks_zero "$stage"
done

# compute-sanitizer TOOL on the GPU test executables whose names match PATTERN (not the MPI ones),
# fastest first, while time lasts: memcheck on all, racecheck and synccheck on the kernel tests.
# sanitize TOOL PATTERN [FILTER]: compute-sanitizer TOOL on each cuda test executable matching
# PATTERN (60 s each), gtest FILTER if given. API errors are not reported: every CUDA call is
# checked by the code itself, and the out-of-memory tests provoke cudaMalloc failures on purpose.
sanitize() {
  local tool="$1" pattern="$2" filter="${3:-*}" failed=0 t sanitizer
  sanitizer="$(command -v compute-sanitizer || echo "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer")"
  for t in $(cuda_targets | grep -v nccl | grep -E "$pattern"); do
    local bin
    bin="$(find "$build/tests" -type f -name "$t" -perm -u+x | head -1)"
    [ -n "$bin" ] || { echo "$t: not built"; failed=1; continue; }
    echo "== $tool $t"
    timeout -k 5 60 "$sanitizer" --tool "$tool" --report-api-errors no --error-exitcode 99 "$bin" --gtest_brief=1 \
      "--gtest_filter=$filter" || {
      echo "$t: $tool exit $?"
      failed=1
    }
  done
  return "$failed"
}
export -f sanitize
# Its detail: the sanitizer's summaries and failures in the step's log.
sanitize_detail() { echo "grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|$1 exit|not built' $logs/$1.log | sort | uniq -c | tr -s ' '"; }
step memcheck 120 30 "$(sanitize_detail memcheck)" -- sanitize memcheck .
# The kernels with shared memory and barriers (reductions, layer norm, softmax); the casts and
# element-wise maps and optimizer updates over 16M elements have neither and take minutes under
# racecheck.
shared_memory_kernels='-CudaTensorKernels.*:CudaDropoutKernels.*:DropoutRule.*:CudaOptimizerKernels.*:CudaAugmentKernels.*'
step racecheck 60 20 "$(sanitize_detail racecheck)" -- sanitize racecheck kernels "$shared_memory_kernels"
step synccheck 60 20 "$(sanitize_detail synccheck)" -- sanitize synccheck kernels "$shared_memory_kernels"

write_results
echo "check.sh: $(grep -c $'\tpass\t' "$steps") of $(wc -l <"$steps") steps passed in ${SECONDS}s; results in $out"
cat "$out/results.md"
