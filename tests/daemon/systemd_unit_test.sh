#!/usr/bin/env bash
# ctest (label unit): `systemd-analyze verify` on the shipped unit.
#   systemd_unit_test.sh UNIT              the unit must verify cleanly
#   systemd_unit_test.sh UNIT --self-test  broken copies of it must be rejected (the check bites)
# Exits 77 (ctest: skipped) where systemd-analyze is missing; 1 under .ci/run
# (KTUNE_REQUIRE_TEST_TOOLS). verify reports bad values and
# unknown keys as "..., ignoring" and still exits 0, so any output at all counts as a failure.
# The unit is verified as a copy whose ExecStart binary is /bin/true: verify insists that binary
# exists, and /usr/local/bin/ktuned is not installed on a build machine.
set -euo pipefail
unit=$1
mode=${2:-}
if ! command -v systemd-analyze >/dev/null; then
  [ "${KTUNE_REQUIRE_TEST_TOOLS:-0}" != 0 ] && { echo "systemd-analyze not found, and KTUNE_REQUIRE_TEST_TOOLS is set" >&2; exit 1; }
  echo "systemd-analyze not found: skipped"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# verify_copy SED_EXPR: 0 when the unit, edited by SED_EXPR, verifies with no output.
verify_copy() {
  sed -e 's|^ExecStart=/usr/local/bin/ktuned|ExecStart=/bin/true|' -e "$1" "$unit" > "$work/ktuned.service"
  local out rc=0
  out=$(systemd-analyze verify --man=no "$work/ktuned.service" 2>&1) || rc=$?
  [ -n "$out" ] && printf '%s\n' "$out"
  [ "$rc" -eq 0 ] && [ -z "$out" ]
}

if [ "$mode" != --self-test ]; then
  verify_copy '' && echo "ok: $unit verifies cleanly"
  exit
fi
status=0
for broken in 's|^Type=notify|Type=notfiy|' 's|^ProtectSystem=strict|ProtektSystem=strict|' \
              's|^DevicePolicy=closed|DevicePolicy=sealed|'; do
  if verify_copy "$broken" >/dev/null; then echo "NOT rejected: $broken"; status=1
  else echo "rejected as it should be: $broken"; fi
done
exit $status
