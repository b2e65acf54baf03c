#!/usr/bin/env bash
# Two trainings sharing the machine: times one `kiln train --model digits_cnn --epochs 2`, then
# two started together, and reports the ratio (two at once / one alone). Each run uses kiln's
# default thread count (every core it may use), as two users starting two trainings would. With
# threads that sleep instead of spinning while they wait, two runs on N cores should take about
# twice as long as one, not more: the limit is 2.3 (issue 11). The result is printed and written
# as JSON to bench/results/concurrent_training_<date>_<commit>.json.
#
#   bench/concurrent_training.sh [--kiln BIN] [--commit C] [--data DIR] [--limit R] [-- kiln train args]
#
# --commit names the commit BIN was built from (default: this checkout's HEAD), for the JSON.
#
# Exits 1 when the ratio is above the limit. Run it on an otherwise idle machine: the 1-minute
# load average before the runs is recorded next to the times (after them it would count the
# runs themselves).
set -euo pipefail
cd "$(dirname "$0")/.."

kiln=build/release/kiln
data=data/digits
limit=2.3
commit=
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --kiln) kiln="$2"; shift 2 ;;
    --commit) commit="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --limit) limit="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "concurrent_training.sh: unknown argument '$1' (--kiln BIN, --commit C, --data DIR, --limit R, -- kiln args)" >&2
       exit 2 ;;
  esac
done
[[ -x "$kiln" ]] || { echo "concurrent_training.sh: no kiln binary at $kiln (build it, or pass --kiln BIN)" >&2; exit 2; }
[[ -f "$data/train-images-idx3-ubyte" ]] || { echo "concurrent_training.sh: no digits in $data (scripts/setup.sh makes them)" >&2; exit 2; }

args=(train --model digits_cnn --data "$data" --epochs 2 --batch 64 --device cpu "${extra[@]}")
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

now() { date +%s.%N; }
# Runs kiln with args, its output into the named log; fails loudly if kiln fails.
train() {
  if ! "$kiln" "${args[@]}" > "$logs/$1.log" 2>&1; then
    echo "concurrent_training.sh: kiln failed ($1):" >&2
    cat "$logs/$1.log" >&2
    return 1
  fi
}

load_before=$(cut -d' ' -f1 /proc/loadavg)
echo "kiln ${args[*]}"
echo "load average before: $load_before"

start=$(now)
train one
one=$(echo "$(now) - $start" | bc -l)
printf 'one training:        %.2f s\n' "$one"

start=$(now)
train first & a=$!
train second & b=$!
wait $a
wait $b
two=$(echo "$(now) - $start" | bc -l)
printf 'two at once:         %.2f s (both finished)\n' "$two"

ratio=$(echo "$two / $one" | bc -l)
printf 'ratio two / one:     %.2f (limit %s)\n' "$ratio" "$limit"

# The same seed trains the same model alone and side by side: the final losses must agree.
loss() { grep '^final loss' "$logs/$1.log" | awk '{print $3}'; }
if [[ "$(loss one)" != "$(loss first)" || "$(loss one)" != "$(loss second)" ]]; then
  echo "concurrent_training.sh: final losses differ: $(loss one) alone, $(loss first) and $(loss second) together" >&2
  exit 1
fi

[[ -n "$commit" ]] || commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
day=$(date +%Y-%m-%d)
cpu=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
mkdir -p bench/results
out=bench/results/concurrent_training_${day}_${commit}.json
cat > "$out" <<EOF
{
  "benchmark": "concurrent_training",
  "date": "$day",
  "commit": "$commit",
  "machine": {"nproc": $(nproc), "cpu": "$cpu", "threads_per_run": "default (kiln --threads)"},
  "command": "kiln ${args[*]}",
  "load_average_before": $load_before,
  "one_seconds": $(printf '%.3f' "$one"),
  "two_at_once_seconds": $(printf '%.3f' "$two"),
  "ratio": $(printf '%.3f' "$ratio"),
  "limit": $limit,
  "final_loss": "$(loss one)"
}
EOF
echo "wrote $out"
if (( $(echo "$ratio > $limit" | bc -l) )); then
  printf "concurrent_training.sh: two trainings at once took %.2fx one's time, above the limit %s\n" "$ratio" "$limit" >&2
  exit 1
fi
