#!/usr/bin/env bash
# Verifies deploy/gpufed-server.service and deploy/gpufed-agent@.service with systemd-analyze.
#
# `systemd-analyze verify` exits 0 for unknown keys and unparsable values (it only logs them),
# so any output at all fails the test. It also checks that ExecStart binaries exist, so the
# units are copied with /usr/local/bin/ replaced by the build's bin folder. Works without
# systemd as PID 1 (containers, CI).
#
# usage: verify_units.sh SOURCE_DIR BIN_DIR
set -euo pipefail

src=${1:?usage: $0 SOURCE_DIR BIN_DIR}
bin=${2:?usage: $0 SOURCE_DIR BIN_DIR}
# Exposure score (x10) above which `systemd-analyze security` fails: the units score 1.7 today;
# this catches hardening lines being dropped without pinning the exact score.
max_exposure=25

[[ "$bin" != *[[:space:]]* ]] || {
  echo "FAIL: bin folder '$bin' contains whitespace; ExecStart cannot be rewritten safely"
  exit 1
}
command -v systemd-analyze >/dev/null || {
  echo "FAIL: systemd-analyze not found (Debian package: systemd; run make deps)"
  exit 1
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for unit in gpufed-server.service gpufed-agent@.service; do
  [[ -f "$src/deploy/$unit" ]] || {
    echo "FAIL: $src/deploy/$unit is missing"
    exit 1
  }
  sed "s#/usr/local/bin/#$bin/#g" "$src/deploy/$unit" >"$work/$unit"
done

failures=0

# verify UNIT...: must exit 0 and print nothing.
verify() {
  local out rc=0
  out=$(systemd-analyze verify --man=no "$@" 2>&1) || rc=$?
  if [[ $rc -ne 0 || -n "$out" ]]; then
    echo "FAIL: systemd-analyze verify $* (exit $rc):"
    echo "$out"
    return 1
  fi
  echo "ok: verify $(basename "$1")"
}

# The template is verified through an instance in the same folder, so that %i expands.
verify "$work/gpufed-server.service" || failures=$((failures + 1))
verify "$work/gpufed-agent@onprem-dgx.service" || failures=$((failures + 1))

for unit in gpufed-server.service gpufed-agent@onprem-dgx.service; do
  out=$(systemd-analyze security --offline=true --threshold=$max_exposure "$work/$unit" 2>&1) || {
    echo "FAIL: $unit is exposed above $((max_exposure / 10)).$((max_exposure % 10)):"
    echo "$out" | tail -n 12
    failures=$((failures + 1))
    continue
  }
  echo "ok: security $unit: $(echo "$out" | tail -n 1)"
done

# Canary: this check is only worth something if verify really reports mistakes here. A unit with
# a misspelt key and a missing binary must produce complaints.
sed -e 's/^ProtectSystem=/ProtectSystm=/' -e "s#$bin/gpufed-server#$bin/no-such-binary#" \
  "$work/gpufed-server.service" >"$work/broken.service"
if verify "$work/broken.service" >/dev/null; then
  echo "FAIL: systemd-analyze verify accepted a broken unit; this check cannot be trusted here"
  failures=$((failures + 1))
else
  echo "ok: a broken unit is rejected"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all unit checks passed"
