#!/bin/sh
# The second seeds of four `depth --scale gpu` models at their best rates, as plain `sigprop train` runs (the same
# specs, hence the same run ids, as the experiment's), each stopped at a checkpoint after $1 seconds.
cd "$(dirname "$0")/../.." || exit 2
for spec in bench/gpu_seed1/*.json; do
  id=$(basename "$spec" .json)
  timeout -s TERM "$1" env PYTHONPATH=. OMP_NUM_THREADS=1 python3 -m sigprop train --config "$spec" \
    --out "/tmp/seed1/$id" --device cuda > "/tmp/seed1-$id.log" 2>&1 &
done
wait
mkdir -p "$2"
for d in /tmp/seed1/*; do
  mkdir -p "$2/$(basename "$d")"
  cp "$d"/metrics.jsonl "$d"/run.json "$2/$(basename "$d")/" 2>/dev/null
  cp "/tmp/seed1-$(basename "$d").log" "$2/$(basename "$d")/log.txt"
done
