#!/usr/bin/env bash
# Framework-compatibility fixtures: each folder under test/frameworks/ is a tiny
# app with its own pinned package.json and committed package-lock.json. The root
# package is packed once (prepack builds it; EML_API_TARBALL names one packed
# already) and installed into each fixture the way users install it, then the
# fixture's `npm test` runs.
#
# Usage (from anywhere; the root needs `npm ci` first, for the build):
#   bash test/frameworks/run.sh                  # every fixture
#   bash test/frameworks/run.sh nestjs-mailer    # some of them
# Exits non-zero when any fixture fails to install or fails a test.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
npm_flags=(--no-audit --no-fund --loglevel=error)

if [ "$#" -gt 0 ]; then
  fixtures=("$@")
else
  fixtures=()
  for dir in "$here"/*/; do
    [ -f "$dir/package.json" ] && fixtures+=("$(basename "$dir")")
  done
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

now() { date +%s; }
checksum() { (cd "$1" && sha256sum package.json package-lock.json 2>/dev/null); }

t0=$(now)
if [ -n "${EML_API_TARBALL:-}" ]; then
  # Packed already (.ci/run packs once for every step).
  echo "== framework fixtures: $(basename "$EML_API_TARBALL")"
  tarball="$EML_API_TARBALL"
else
  echo "== framework fixtures: packing nodemailer-eml-api"
  if ! (cd "$root" && npm pack --pack-destination "$tmp" "${npm_flags[@]}") >"$tmp/pack.log" 2>&1; then
    cat "$tmp/pack.log"
    echo "   npm pack FAILED"
    echo "frameworks: 0 passed, ${#fixtures[@]} failed"
    exit 1
  fi
  tarball="$(ls "$tmp"/*.tgz)"
fi
# The emulator's optional peer, as apps that test against the emulator install it.
mailparser="mailparser@$(node -p "require('$root/package.json').devDependencies.mailparser")"
echo "   $(basename "$tarball") in $(($(now) - t0)) s"

total_pass=0
total_fail=0
failed=()
summary=()
for name in "${fixtures[@]}"; do
  dir="$here/$name"
  log="$tmp/$name.log"
  echo "== fixture $name"
  if [ ! -f "$dir/package.json" ] || [ ! -f "$dir/package-lock.json" ]; then
    echo "   no package.json + package-lock.json in $dir"
    failed+=("$name")
    summary+=("$name: not a fixture")
    total_fail=$((total_fail + 1))
    continue
  fi
  before="$(checksum "$dir")"
  t0=$(now)
  # npm ci: exactly the committed lock; then the packed package (and mailparser) on top, without
  # writing it into package.json or the lock (its path exists only on this machine).
  if ! (cd "$dir" && timeout 600 npm ci "${npm_flags[@]}" &&
    timeout 300 npm install --no-save "${npm_flags[@]}" "$tarball" "$mailparser") >"$log" 2>&1; then
    cat "$log"
    echo "   install FAILED"
    failed+=("$name")
    summary+=("$name: install failed")
    total_fail=$((total_fail + 1))
    continue
  fi
  t_install=$(($(now) - t0))
  if [ "$(checksum "$dir")" != "$before" ]; then
    echo "   installing changed package.json or package-lock.json:"
    (cd "$root" && git diff --stat -- "$dir") || true
    failed+=("$name")
    summary+=("$name: install changed the lock")
    total_fail=$((total_fail + 1))
    continue
  fi

  t0=$(now)
  status=0
  # A process left running (an open handle after close) is killed by the timeout.
  (cd "$dir" && timeout 300 npm test --silent) >"$log" 2>&1 || status=$?
  t_test=$(($(now) - t0))
  # node --test prints TAP when stdout is not a terminal; keep it readable.
  grep -vE '^\s*(---|\.\.\.|duration_ms:|type:|TAP version)|^# (tests|suites|pass|fail|cancelled|skipped|todo|duration_ms) ' "$log" |
    sed 's/^/   /'
  pass="$(sed -nE 's/^# pass ([0-9]+)$/\1/p' "$log" | tail -1)"
  fail="$(sed -nE 's/^# fail ([0-9]+)$/\1/p' "$log" | tail -1)"
  cancelled="$(sed -nE 's/^# cancelled ([0-9]+)$/\1/p' "$log" | tail -1)"
  pass="${pass:-0}"
  fail=$((${fail:-0} + ${cancelled:-0}))
  if [ "$status" -ne 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi # crashed or timed out
  if [ "$pass" -eq 0 ] && [ "$fail" -eq 0 ]; then fail=1; fi  # ran no test
  total_pass=$((total_pass + pass))
  total_fail=$((total_fail + fail))
  line="$name: $pass passed, $fail failed (install ${t_install} s, tests ${t_test} s)"
  [ "$status" -eq 124 ] && line="$line, TIMED OUT"
  [ "$fail" -gt 0 ] && failed+=("$name")
  summary+=("$line")
  echo "   $line"
done

echo "== framework fixtures summary"
for line in "${summary[@]}"; do echo "   $line"; done
if [ "${#failed[@]}" -gt 0 ]; then echo "   FAILED: ${failed[*]}"; fi
echo "frameworks: $total_pass passed, $total_fail failed"
[ "${#failed[@]}" -eq 0 ]
