#!/usr/bin/env bash
# Check of the GPU paths of `ringtrain doctor` and resource monitoring (issue 10): on a
# GPU machine, doctor --require-gpu --json must pass and list the GPU, and a short training must
# write NVML readings (utilization, memory, power, temperature, SM clock) to metrics.jsonl.
# Usage: tools/device/check-monitor-doctor.sh [RANKS]   (env: RINGTRAIN_EXE, DATA_DIR, MPIRUN)
# Exit 0 when everything holds; otherwise one "check-monitor-doctor: FAIL: ..." line, exit 1.
set -euo pipefail
# shellcheck source=tools/env.sh
source "$(dirname "$0")/../env.sh"
ranks="${1:-1}"
exe="${RINGTRAIN_EXE:-$RINGTRAIN_BUILD/src/cli/ringtrain}"
data="${DATA_DIR:-$RINGTRAIN_ROOT/data/fashion-mnist}"
out="$(mktemp -d /tmp/check-monitor-doctor.XXXXXX)"
fail() { echo "check-monitor-doctor: FAIL: $*" >&2; exit 1; }
[ -x "$exe" ] || fail "no ringtrain executable at $exe (build first or set RINGTRAIN_EXE)"
# mpirun when present (and always for several ranks); one rank also runs as an MPI singleton.
launch=()
if command -v "${MPIRUN:-mpirun}" >/dev/null; then
  launch=("${MPIRUN:-mpirun}" -np "$ranks" --oversubscribe --bind-to none)
elif [ "$ranks" -gt 1 ]; then
  fail "$ranks ranks need mpirun (set MPIRUN)"
fi

echo "== doctor --require-gpu --json ($ranks rank(s))"
status=0
"${launch[@]}" "$exe" doctor --require-gpu --json --selftest-mib 16 >"$out/doctor.json" 2>"$out/doctor.err" || status=$?
cat "$out/doctor.err" >&2
python3 - "$out/doctor.json" "$status" <<'PY' || fail "doctor: see above (output in $out/doctor.json)"
import json, sys
text = open(sys.argv[1]).read()
try:
    d = json.loads(text)
except ValueError:
    sys.exit(f"doctor --json did not print one JSON object:\n{text}")
for c in d["checks"]:
    print(f"  {c['verdict']:<5} {c['name']:<17} {c['detail']}")
failed = [c["name"] for c in d["checks"] if c["verdict"] == "fail"]
if failed or sys.argv[2] != "0":
    sys.exit(f"doctor failed (exit {sys.argv[2]}): {', '.join(failed) or 'no failed check listed'}; "
             f"gpus: {d['gpus'] or d['gpus_missing_reason']}")
if not d["gpus"]:
    sys.exit("doctor lists no GPU")
for g in d["gpus"]:
    print(f"  gpu {g['ordinal']}: {g['name']}, {g['memory_bytes'] / 2**30:.0f} GiB, cc {g['compute_capability']}")
    if not g["name"] or g["memory_bytes"] <= 0 or g["compute_capability"] == "0.0":
        sys.exit(f"incomplete GPU entry: {g}")
v = d["versions"]
for key in ("cuda_runtime", "cuda_driver", "cublas", "nvidia_driver"):
    if not v.get(key) or v[key] == "not compiled":
        sys.exit(f"versions.{key} missing: {v.get(key)}")
if v["nvml"] != "loaded":
    sys.exit(f"NVML: {v['nvml']}")
PY

echo "== training with monitor.interval_ms=50"
if [ ! -f "$data/train.h5" ]; then
  RINGTRAIN_EXE="$exe" "$RINGTRAIN_ROOT/tools/prepare-fashion-mnist" "$data"
fi
"${launch[@]}" "$exe" train "$RINGTRAIN_ROOT/examples/fashion_mnist/mlp.toml" --set "data.train=$data/train.h5" \
  --set "data.test=$data/test.h5" --set train.max_steps=200 --set train.log_every=50 \
  --set monitor.interval_ms=50 --set checkpoint.enabled=false --set "run.dir=$out/run" >"$out/train.log" 2>&1 ||
  { tail -20 "$out/train.log" >&2; fail "training failed (log: $out/train.log)"; }
grep -E "^monitor:|^  rank [0-9]+:" "$out/train.log"
python3 - "$out/run" <<'PY' || fail "monitoring: see above (run dir $out/run)"
import json, math, sys
run = sys.argv[1]
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
samples = [l for l in lines if l["type"] == "resource"]
if not samples:
    sys.exit("no resource lines in metrics.jsonl")
with_gpu = [s for s in samples if "gpu" in s]
if not with_gpu:
    sys.exit(f"resource lines carry no GPU reading, e.g. {samples[0]}")
fields = ("util_percent", "mem_used_mib", "power_w", "temp_c", "sm_clock_mhz")
missing = [f for f in fields if all(s["gpu"].get(f) is None for s in with_gpu)]
if missing:
    sys.exit(f"NVML fields never reported: {missing}; e.g. {with_gpu[-1]['gpu']}")
print(f"  {len(with_gpu)} samples with GPU readings, last: {with_gpu[-1]['gpu']}")
summary = json.load(open(f"{run}/summary.json"))
ranks = summary["resources"]["ranks"]
if not all("gpu" in r for r in ranks):
    sys.exit(f"summary.json resources lack a gpu entry: {ranks}")
PY
echo "check-monitor-doctor: PASS ($out)"
