#!/usr/bin/env bash
# Soak test (bench/soak.py): `pagoda serve` on loopback under a seeded mix of clients, aborts and
# preemption, checking every greedy reply against its reference, the status codes, /metrics, and
# at the end zero blocks in use and bounded memory growth.
#   bench/soak.sh --minutes M [--seed S] [--clients C] [--faults]    (needs `make build`; --faults:
#   host + disk tiers and a Redis pool of its own, with faults injected: bench/soak_faults.py)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec python3 "$root/bench/soak.py" "$@"
