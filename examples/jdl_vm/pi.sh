#!/bin/sh
# Leibniz series for pi with $1 terms: CPU-bound, prints the estimate.
terms=${1:-50000000}
awk -v n="$terms" 'BEGIN { s = 0; sign = 1; for (k = 0; k < n; k++) { s += sign / (2 * k + 1); sign = -sign }; printf "pi ~= %.10f after %d terms\n", 4 * s, n }'
