#!/usr/bin/env bash
# The nightly workflow's commands for datalayer-runtimes, e2b, daytona and modal against replay,
# no credentials: a first replay run as the baseline, then shards (each variant in PARTITIONS
# partitions, default 2), merge, compare, gate and the summary, as the jobs of
# .github/workflows/nightly.yml run them. Replay keeps to the scenarios with a cassette and
# names those it leaves out. REPEAT sets the repetitions (default 3); the argument, a folder
# for the runs (default: a new one under /tmp). It builds sandbox-matrix in the debug profile
# and runs that, unless SANDBOX_MATRIX names a binary (such as target/release/sandbox-matrix).
exec "$(dirname "$0")/nightly.sh" local "$@"
