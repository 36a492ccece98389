#!/usr/bin/env bash
# The GPU path's figures on one GPU, in one script of under 5 minutes:
#   1. the loop's time per step: bare, wrapped (the nsyscomm hook), under --profiler torch
#      (CPU+CUDA activities, and CUDA only);
#   2. per preset (light, default): the job's time under nsyscomm run, the report's size;
#   3. NVTX payload rows in the export with and without the payload flag, and the summary of the
#      light report (its setup line);
#   4. per nsys OS-runtime option tried on its own: the capture's size after at most 30 s, and
#      whether the job got out by then; the threads and calls that fill a full capture.
# Usage (from the repository root): bash benchmarks/gpu_check.sh
# Needs torch with CUDA and NCCL, and Nsight Systems (NSYS=..., else on PATH, else the copy inside
# Nsight Compute). On a machine without duckdb/nvtx, wheels in .whl/ are installed into /tmp/site;
# shared libraries QdstrmImporter lacks can be put in .gpulib/. Files land in $OUT (or /tmp/gpu_check).
set -u
export PYTHONUNBUFFERED=1
R=$PWD
O=${OUT:-/tmp/gpu_check}
mkdir -p "$O"
W=/tmp/gpu_check_work
rm -rf "$W"
mkdir -p "$W"
exec > >(tee "$O/gpu_check.log") 2>&1

if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$R
else
  export PYTHONPATH=$R
fi
[ -d .gpulib ] && export LD_LIBRARY_PATH=$R/.gpulib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
NSYS=${NSYS:-$(command -v nsys || find /opt /usr/local -name nsys -type f -path '*target-linux-x64*' 2> /dev/null | head -1)}
[ -x "$NSYS" ] || { echo "no nsys found: set NSYS=/path/to/nsys"; exit 2; }
export NSYS NSYSCOMM_NSYS=$NSYS
NSC=(python3 -c 'from nsyscomm.cli import entry; entry()')
JOB=$R/benchmarks/gpu_train.py
export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1
port=29650

echo "== versions"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))'
"$NSYS" --version
IMP=$(python3 -c 'from nsyscomm.capture.post import find_importer; import os; print(find_importer(os.environ["NSYS"]) or "")')
echo "QdstrmImporter: ${IMP:-not found}"

loop() { grep -ho 'loop_ms_per_step [0-9.]*' "$1" | awk '{print $2}'; }
size() { du -sb "$@" 2> /dev/null | awk '{s += $1} END {printf "%.1f MB", s / 1e6}'; }

echo "== 1. loop time per step (30 steps, mean of steps 5..29), interleaved"
for i in 1 2; do
  port=$((port + 1)); MASTER_PORT=$port STEPS=30 timeout 60 python3 "$JOB" > "$W/bare$i.log" 2>&1
  echo "bare    run $i: $(loop "$W/bare$i.log") ms"
  port=$((port + 1)); MASTER_PORT=$port STEPS=30 NSYSCOMM_ANNOTATE=1 PYTHONPATH=$R/nsyscomm/capture/_hook:$PYTHONPATH \
    timeout 60 python3 "$JOB" > "$W/wrapped$i.log" 2>&1
  echo "wrapped run $i: $(loop "$W/wrapped$i.log") ms"
done
for acts in cpu,cuda cuda; do
  port=$((port + 1))
  MASTER_PORT=$port STEPS=30 NSYSCOMM_TORCH_ACTIVITIES=$acts timeout -k 10 90 "${NSC[@]}" run --profiler torch --no-summary \
    --output "$W/torch_$acts" -- python3 "$JOB" > "$W/torch_$acts.log" 2>&1
  echo "--profiler torch ($acts): $(loop "$W/torch_$acts.log") ms, trace $(size "$W/torch_$acts"/*.json.gz)," \
    "torch warnings in the job's output: $(grep -c 'Warning' "$W/torch_$acts.log")"
done

echo "== 2. nsyscomm run per preset (30 steps): job time, loop time, report size"
for preset in light default; do
  port=$((port + 1))
  MASTER_PORT=$port STEPS=30 timeout -k 10 100 "${NSC[@]}" run --preset "$preset" --export sqlite --no-summary \
    --output "$W/run_$preset" -- python3 "$JOB" > "$W/run_$preset.log" 2>&1
  rc=$?
  echo "preset $preset: exit $rc; $(grep -ho 'job exited.*' "$W/run_$preset/nsyscomm-run.log" 2> /dev/null);" \
    "loop $(loop "$W/run_$preset.log") ms; report $(size "$W/run_$preset"/report.nsys-rep "$W/run_$preset"/report.qdstrm)," \
    "export $(size "$W/run_$preset"/report.sqlite)"
  grep -h "warning" "$W/run_$preset.log" | head -3
done

echo "== 3. NVTX payloads in the export (light preset report)"
rep=$W/run_light/report.nsys-rep
timeout 60 "$NSYS" export --type sqlite -f true -o "$W/plain.sqlite" "$rep" > /dev/null 2>&1
echo "-- plain nsys export:"; python3 "$R/benchmarks/gpu_tables.py" "$W/plain.sqlite"
echo "-- nsyscomm run's export:"; python3 "$R/benchmarks/gpu_tables.py" "$W/run_light/report.sqlite"
timeout 60 "$NSYS" export --type arrow --include-blobs=true -f true -o "$W/run_light/report.arrow" "$rep" > /dev/null 2>&1
echo "-- summary of the light report:"
timeout 90 "${NSC[@]}" summarize "$W/run_light/report.sqlite" 2>&1 | head -45
echo "== 4. the OS-runtime trace's options, each alone (12 steps; SIGINT at 30 s)"
variant() {
  local name=$1 vport=$2; shift 2
  local d=$W/v_$name; mkdir -p "$d"
  local t0; t0=$(date +%s.%N)
  (cd "$d" && TMPDIR=$d MASTER_PORT=$vport STEPS=12 NSYSCOMM_ANNOTATE=1 PYTHONPATH=$R/nsyscomm/capture/_hook:$PYTHONPATH \
    timeout -k 15 -s INT 30 "$NSYS" profile "$@" -s none --cpuctxsw=none -o "$d/report" -f true python3 "$JOB" > "$d/log" 2>&1)
  local rc=$?
  echo "$name ($*): exit $rc after $(python3 -c "import time; print(round(time.time() - $t0, 1))") s," \
    "capture $(size "$d"/*.qdstrm "$d"/*.nsys-rep), loop $(loop "$d/log") ms $( [ $rc -ne 0 ] && tail -c 160 "$d/log" | tr '\n' ' ')"
}
# each its own port, given here: a background function's port=$((port + 1)) stays in its subshell
pids=()
variant light 29701 --trace=cuda,nvtx & pids+=($!)
variant full 29702 --trace=cuda,nvtx,osrt & pids+=($!)
variant threshold_100us 29703 --trace=cuda,nvtx,osrt --osrt-threshold=100000 & pids+=($!)
variant no_stacks 29704 --trace=cuda,nvtx,osrt --osrt-backtrace-threshold=1000000000 & pids+=($!)
variant small_stacks 29705 --trace=cuda,nvtx,osrt --osrt-backtrace-stack-size=1024 & pids+=($!)
variant default 29706 --trace=cuda,nvtx,osrt --osrt-threshold=100000 --osrt-backtrace-threshold=1000000000 & pids+=($!)
# the variants by pid: a bare `wait` also waits for the log's tee (a process substitution) forever
wait "${pids[@]}"
echo "-- what fills the full capture (its first 30 s, imported):"
q=$(ls "$W"/v_full/*.qdstrm 2> /dev/null | head -1)
if [ -n "$q" ] && [ -n "$IMP" ] && [ "$(stat -c %s "$q")" -lt 800000000 ]; then
  timeout 45 "$IMP" -i "$q" > "$W/v_full/import.log" 2>&1
  timeout 30 "$NSYS" export --type sqlite -f true -o "$W/v_full/full.sqlite" "${q%.qdstrm}.nsys-rep" > /dev/null 2>&1
  python3 "$R/benchmarks/gpu_tables.py" "$W/v_full/full.sqlite"
else
  echo "(not imported: capture ${q:-missing}, importer ${IMP:-missing})"
fi

cp "$W/run_light/report.sqlite" "$O/h100_light_blobs.sqlite" 2> /dev/null
cp "$W/run_light/report.arrow" "$O/h100_light_blobs.arrow" 2> /dev/null
cp "$W/run_default/report.sqlite" "$O/h100_default.sqlite" 2> /dev/null
true
