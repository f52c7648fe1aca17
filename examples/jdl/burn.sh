#!/bin/sh
# CPU-bound work of a fixed size: $1 iterations of an awk loop (about 17 million per CPU-second
# on the reference machine), so a VWN's CPU cap shows directly in the job's wall time.
n=${1:-100000000}
start=$(date +%s)
awk -v n="$n" 'BEGIN { s = 0; for (i = 0; i < n; i++) s += i % 7; printf "burned %d iterations, checksum %d\n", n, s }'
end=$(date +%s)
echo "wall time $((end - start)) s on $(hostname)"
