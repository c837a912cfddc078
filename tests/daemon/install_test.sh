#!/usr/bin/env bash
# `cmake --install` to a temporary prefix, then the installed binaries on their own: --version,
# the templates and tables under share/ktune (not the checkout's), the systemd unit pointing at
# the prefix, and the installed ktuned serving a lookup from the installed table to the installed
# ktune. Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1
SRC=$2
T=$(mktemp -d /tmp/ktune-install-XXXXXX)
PID=""
cleanup() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; [ -f "$T/ktuned.log" ] && { echo "--- ktuned log:"; cat "$T/ktuned.log"; }; exit 1; }

cmake --install "$BUILD" --prefix "$T/prefix" >"$T/install.log" 2>&1 || { cat "$T/install.log"; fail "install"; }
P=$T/prefix
cd "$T"           # nowhere near the checkout
unset KTUNE_HOME  # which would point the binaries elsewhere

"$P/bin/ktuned" --version | grep -Eq '^ktuned [0-9]+\.[0-9]+\.[0-9]+ \(.+\)$' || fail "ktuned --version"
"$P/bin/ktune" --version | grep -Eq '^ktune [0-9]+\.[0-9]+\.[0-9]+ \(.+\)$' || fail "ktune --version"

[ -f "$P/share/ktune/templates/gemm/gemm.yaml" ] || fail "templates not installed"
[ -f "$P/share/ktune/templates/common/ktune_common.cuh" ] || fail "template headers not installed"
[ -f "$P/share/ktune/tables/h200.json" ] || fail "tables not installed"
[ -f "$P/share/ktune/config/ktuned-node.yaml" ] || fail "example configuration not installed"
C=$P/share/bash-completion/completions/ktune
[ -f "$C" ] || fail "bash completion not installed"
bash -c "source '$C'; COMP_WORDS=(ktune lo); COMP_CWORD=1; _ktune; [ \"\${COMPREPLY[*]}\" = lookup ]" ||
  fail "installed bash completion does not complete 'ktune lo'"
grep -q "^ExecStart=$P/bin/ktuned --config" "$P/lib/systemd/system/ktuned.service" ||
  fail "systemd unit missing or not pointing at $P/bin/ktuned"

config=$("$P/bin/ktuned" --config /dev/null --print-config)
echo "$config" | grep -q "$P/share/ktune/templates" || fail "installed ktuned does not use share/ktune/templates: $config"
echo "$config" | grep -q "$P/share/ktune/tables/h200.json" || fail "installed ktuned does not seed share/ktune/tables"
if echo "$config" | grep -q "$SRC/"; then fail "installed ktuned still points into the checkout: $config"; fi

"$P/bin/ktuned" --config /dev/null --socket "$T/k.sock" --data-dir "$T/data" \
  --set server.metrics=127.0.0.1:0 >"$T/ktuned.log" 2>&1 &
PID=$!
for _ in $(seq 200); do  # until it answers (it has bound its socket before loading anything)
  "$P/bin/ktune" --socket "$T/k.sock" status >/dev/null 2>&1 && break
  kill -0 "$PID" 2>/dev/null || fail "installed ktuned exited"
  sleep 0.05
done
out=$("$P/bin/ktune" --socket "$T/k.sock" lookup gemm --dtype bf16 --layout rc \
      --shape M=4096,N=4096,K=4096 --device nvidia-h200) || fail "lookup: $out"
echo "$out" | grep -q "exact" || fail "the installed table did not answer exactly: $out"
echo "ok"
