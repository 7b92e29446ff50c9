#!/usr/bin/env bash
# Runs test suites RUNS times while BUSY busy-loop processes load the cores, to shake out races (issue: flaky tests).
# Usage: scripts/stress-test.sh [RUNS] [pytest args...]   (defaults: 5 runs of tests/integration tests/e2e)
# Prints one line a run (seconds, outcome) and a JSON summary; exits 1 if any run failed. Keeps each run's pytest
# output and component logs under $STRESS_DIR (default _output/stress).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
shift || true
targets=("$@")
((${#targets[@]})) || targets=(tests/integration tests/e2e)
busy=${BUSY:-2}
out=${STRESS_DIR:-_output/stress}
mkdir -p "$out"

pids=()
stop_busy() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done; }
trap stop_busy EXIT
for ((i = 0; i < busy; i++)); do
  # A shell loop that never sleeps: one busy core each. Killed by PID on exit.
  bash -c 'while :; do :; done' &
  pids+=($!)
done

failed=0
times=()
for ((run = 1; run <= runs; run++)); do
  start=$(date +%s)
  rm -rf "$out/run$run" && mkdir -p "$out/run$run"
  if .venv/bin/pytest -q -p no:cacheprovider --basetemp="$out/run$run/tmp" "${targets[@]}" >"$out/run$run.log" 2>&1; then
    outcome=passed
  else
    outcome=FAILED
    failed=$((failed + 1))
  fi
  elapsed=$(($(date +%s) - start))
  times+=("$elapsed")
  echo "stress run $run/$runs: $outcome in ${elapsed}s ($(tail -1 "$out/run$run.log"))"
  # What the run's clusters left behind: pod network namespaces recorded under its directory, processes naming it.
  left=()
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    [[ $ns == pkvpod-* ]] || continue
    [ -n "$(find "$out/run$run" -path "*/cni/pods/${ns#pkvpod-}.json" -print -quit 2>/dev/null)" ] && left+=("netns $ns")
  done
  for pid in $(pgrep -f -- "$(realpath "$out/run$run")/" || true); do
    left+=("process $pid $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)")
  done
  if ((${#left[@]})); then
    printf 'stress run %d left behind: %s\n' "$run" "${left[@]}"
    [ "$outcome" = passed ] && failed=$((failed + 1))
    outcome=LEAKED
  fi
  [ "$outcome" = passed ] && rm -rf "$out/run$run/tmp"
done
printf '{"runs": %d, "failed_runs": %d, "busy_loops": %d, "seconds": [%s]}\n' \
  "$runs" "$failed" "$busy" "$(IFS=,; echo "${times[*]}")"
((failed == 0))
