#!/usr/bin/env bash
# The nightly workflow's commands for e2b, daytona and modal against replay, no credentials: a first
# replay run as the baseline, then shards, merge, compare, gate and the summary, as the jobs
# of .github/workflows/nightly.yml run them. REPEAT sets the repetitions (default 3);
# the argument, a folder for the runs (default: a new one under /tmp).
exec "$(dirname "$0")/nightly.sh" local "$@"
