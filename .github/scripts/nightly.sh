#!/usr/bin/env bash
# The nightly matrix's sandbox-matrix commands, shared by .github/workflows/nightly.yml and
# a local run against replay (no credentials):
#
#   nightly.sh shard VARIANT live|replay REPEAT DIR [K/N]
#                                                     run one variant's shard (with K/N, its
#                                                     partition K of N) into DIR/<run-id>/
#   nightly.sh plan VARIANT live|replay REPEAT [K/N]  what that shard runs, one
#                                                     variant::scenario::step a line (`list`)
#   nightly.sh merge SHARDS_DIR OUT                   merge every results.json under SHARDS_DIR
#   nightly.sh compare OUT [BASELINE_RESULTS_JSON]    OUT/compare.md; no baseline is a note
#   nightly.sh gate POLICY OUT [BASELINE_RESULTS_JSON] OUT/gate.txt; exits 1 on hold
#   nightly.sh report OUT [BASELINE_DIR]              OUT/report.html with the history the
#                                                     baseline carried plus the baseline
#                                                     itself, kept in OUT/history/ (30 at most)
#   nightly.sh summary OUT                            verdict, table, comparison to
#                                                     $GITHUB_STEP_SUMMARY (stdout without it)
#   nightly.sh local [WORK_DIR]                       all of the above for datalayer-runtimes,
#                                                     e2b, daytona, modal against replay, each
#                                                     in PARTITIONS partitions (default 2), with
#                                                     a first replay run as the baseline
#
# A shard runs every scenario in scenarios/: live, all of them (each variant's own skips
# aside); replayed, those its variant has a cassette for (`run` passes over the others and
# `local` names them).
#
# SANDBOX_MATRIX names the binary (default: sandbox-matrix on PATH; `local` builds it).
set -euo pipefail

SM=${SANDBOX_MATRIX:-sandbox-matrix}

die() { echo "nightly.sh: $*" >&2; exit 2; }

# Sets SELECTION to the `run` and `list` options of VARIANT's shard: live or replay,
# REPEAT times, and, given K/N, partition K of N. No --scenario: every scenario in scenarios/.
selection() {
  local variant=$1 mode=$2 repeat=$3 partition=${4:-}
  SELECTION=(--variant "$variant" --repeat "$repeat")
  case $mode in
    live) SELECTION+=(--live) ;;
    replay) ;;
    *) die "mode is live or replay, not \`$mode\`" ;;
  esac
  if [ -n "$partition" ]; then SELECTION+=(--partition "$partition"); fi
}

plan() {
  [ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: plan VARIANT live|replay REPEAT [K/N]"
  selection "$@"
  "$SM" list "${SELECTION[@]}"
}

# The scenarios a replay of VARIANT leaves out for want of a cassette, comma-separated.
left_out() {
  "$SM" list --variant "$1" 2>&1 >/dev/null |
    sed -n "s/^$1::\([^:]*\): not run: .*/\1/p" | paste -sd, - | sed 's/,/, /g'
}

shard() {
  [ $# -eq 4 ] || [ $# -eq 5 ] || die "usage: shard VARIANT live|replay REPEAT DIR [K/N]"
  local variant=$1 mode=$2 repeat=$3 dir=$4 partition=${5:-}
  selection "$variant" "$mode" "$repeat" "$partition"
  local code=0
  "$SM" run "${SELECTION[@]}" --out "$dir" || code=$?
  # 1 is a failed step: the shard is complete and the gate judges it. Anything else
  # (bad input, reports not written, interrupted) leaves no shard to trust.
  if [ "$code" -gt 1 ]; then
    echo "nightly.sh: sandbox-matrix run for $variant${partition:+ (partition $partition)} exited $code" >&2
    return "$code"
  fi
  # One copy of the run folder in the artifact: drop the `latest` link.
  local run
  run=$(readlink "$dir/latest")
  rm "$dir/latest"
  echo "shard $variant${partition:+ $partition}: $dir/$run (exit $code)"
}

merge() {
  [ $# -eq 2 ] || die "usage: merge SHARDS_DIR OUT"
  local files=()
  mapfile -t files < <(find "$1" -name results.json | sort)
  [ ${#files[@]} -gt 0 ] || die "merge: no results.json under $1"
  "$SM" merge "${files[@]}" --out "$2"
}

compare() {
  [ $# -ge 1 ] || die "usage: compare OUT [BASELINE_RESULTS_JSON]"
  local out=$1 baseline=${2:-}
  {
    echo "## Compared with the last nightly"
    echo
    if [ -n "$baseline" ] && [ -f "$baseline" ]; then
      "$SM" compare --baseline "$baseline" "$out/results.json"
    else
      echo "Note: no baseline (${baseline:-none given} does not exist), so nothing was compared and regressions were not checked."
    fi
  } >"$out/compare.md"
  cat "$out/compare.md"
}

gate() {
  [ $# -ge 2 ] || die "usage: gate POLICY OUT [BASELINE_RESULTS_JSON]"
  local policy=$1 out=$2 baseline=${3:-} args=()
  if [ -n "$baseline" ] && [ -f "$baseline" ]; then args+=(--baseline "$baseline"); fi
  local code=0
  "$SM" gate --policy "$policy" "${args[@]}" "$out/results.json" >"$out/gate.txt" 2>&1 || code=$?
  cat "$out/gate.txt"
  echo "$code" >"$out/gate.exit"
  return "$code"
}

# The history travels with the merged artifact: each nightly's OUT/history/ is the last
# one's history plus the last one's results, named by start time so they sort in order.
report() {
  [ $# -ge 1 ] || die "usage: report OUT [BASELINE_DIR]"
  local out=$1 baseline=${2:-} started
  mkdir -p "$out/history"
  if [ -n "$baseline" ] && [ -f "$baseline/results.json" ]; then
    if [ -d "$baseline/history" ]; then
      find "$baseline/history" -maxdepth 1 -name '*.json' -exec cp {} "$out/history/" \;
    fi
    started=$(sed -n 's/^ *"started_at": *"\([^"]*\)".*/\1/p' "$baseline/results.json" | head -1)
    cp "$baseline/results.json" "$out/history/${started:-previous}.json"
  fi
  find "$out/history" -maxdepth 1 -name '*.json' | sort | head -n -30 | xargs -r rm --
  "$SM" report --out "$out/report.html" "$out/results.json" --history "$out/history"
}

summary() {
  [ $# -eq 1 ] || die "usage: summary OUT"
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    summary_text "$1" >>"$GITHUB_STEP_SUMMARY"
  else
    summary_text "$1"
  fi
}

summary_text() {
  local out=$1 verdict="the gate did not run"
  if [ -f "$out/gate.exit" ]; then
    case $(cat "$out/gate.exit") in
      # A variant shipped on replays alone says so in gate.txt; the heading says it too.
      0) if grep -q '(replay only)' "$out/gate.txt" 2>/dev/null; then
           verdict="ship (replay only)"
         else
           verdict="ship"
         fi ;;
      1) verdict="hold" ;;
      *) verdict="gate error" ;;
    esac
  fi
  echo "# Nightly sandbox matrix: $verdict"
  echo
  if [ -f "$out/gate.txt" ]; then
    echo '```text'
    cat "$out/gate.txt"
    echo '```'
    echo
  fi
  cat "$out/summary.md"
  echo
  [ ! -f "$out/compare.md" ] || cat "$out/compare.md"
}

local_run() {
  local work=${1:-}
  [ -n "$work" ] || work=$(mktemp -d /tmp/sandbox-matrix-nightly.XXXXXX)
  local root repeat=${REPEAT:-3} partitions=${PARTITIONS:-2}
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  cd "$root"
  if [ -z "${SANDBOX_MATRIX:-}" ]; then
    cargo build --locked -q -p sandbox-matrix
    SM=${CARGO_TARGET_DIR:-$root/target}/debug/sandbox-matrix
  fi
  # Replay needs no credentials; make sure none is used.
  unset DATALAYER_API_KEY E2B_API_KEY DAYTONA_API_KEY DAYTONA_JWT_TOKEN DAYTONA_ORGANIZATION_ID MODAL_TOKEN_ID MODAL_TOKEN_SECRET GITHUB_STEP_SUMMARY
  echo "== local nightly against replay in $work, repeat $repeat, $partitions partition(s) per variant"
  local v k skipped
  for v in datalayer-runtimes e2b daytona modal; do
    skipped=$(left_out "$v")
    if [ -n "$skipped" ]; then
      echo "== $v replays what has a cassette; left out: $skipped (no cassette in fixtures/cassettes/$v/)"
    fi
  done
  echo "== baseline: a first replay run"
  for v in datalayer-runtimes e2b daytona modal; do
    shard "$v" replay "$repeat" "$work/baseline-shards/$v" >/dev/null 2>&1 || die "the baseline's $v shard failed"
  done
  merge "$work/baseline-shards" "$work/baseline"
  echo "== the nightly's jobs, replayed"
  for v in datalayer-runtimes e2b daytona modal; do
    for k in $(seq "$partitions"); do
      shard "$v" replay "$repeat" "$work/shards/$v-$k" "$k/$partitions" 2>/dev/null | tail -1
    done
  done
  merge "$work/shards" "$work/merged"
  compare "$work/merged" "$work/baseline/results.json" >/dev/null
  # The gate ships nothing on replays unless the policy allows them, and replayed timings
  # are not the services' (at instant pace they time the harness alone): the local gate uses
  # the nightly policy without its budgets and regression check, with allow_replay, so it
  # judges the required steps, success rates, leaks and secrets of the replays, and its
  # verdicts read "ship (replay only)".
  awk '/^[a-z_0-9]+:/ { skip = ($1 == "p90_budgets:" || $1 == "regression:") } !skip' \
    policies/nightly.yaml >"$work/policy.yaml"
  echo "allow_replay: true" >>"$work/policy.yaml"
  local code=0
  gate "$work/policy.yaml" "$work/merged" >/dev/null || code=$?
  report "$work/merged" "$work/baseline"
  echo "== summary"
  summary "$work/merged"
  echo "== gate exit $code"
  return "$code"
}

[ $# -ge 1 ] || die "usage: nightly.sh shard|plan|merge|compare|gate|report|summary|local ARGS..."
command=$1
shift
case $command in
  shard | plan | merge | compare | gate | report | summary) "$command" "$@" ;;
  local) local_run "$@" ;;
  *) die "unknown command \`$command\`" ;;
esac
