#!/usr/bin/env bash
# selftest.sh - prove the emulated multi-host network: MPI across network namespaces over TCP only,
# and tc tbf rate limiting that really bounds an allreduce. Brings 2 hosts up itself and always
# tears them down (also on failure / Ctrl-C). Uses its own namespace prefix rtst (hosts rtst0, rtst1;
# RT_CLUSTER_SELFTEST_PREFIX), so it never disturbs a set made by netns-up.sh. ~30 s on 2 cores.
#
# Usage (as root):  scripts/cluster/selftest.sh
# Checks:
#   1. netns-up.sh 2 (and again: idempotent)
#   2. MPI hello (mpi_hello.c, mpicc) with -np 2: ranks on 2 distinct hosts rtst0, rtst1, allreduce right;
#      plus `ringtrain info` reports 2 hosts when build/ringtrain exists
#   3. a rank's exit code propagates through mpirun-netns.sh; RT_CLUSTER_TIMEOUT kills a hung job and
#      leaves no process in the namespaces
#   4. 64 MiB float-sum allreduce, unshaped: result ok, >= 64 MiB per timed call crossed host 0's rtnet0
#   5. the same at netns-shape.sh 1gbit: algbw <= 1.0 Gbit/s (wire floor 0.537 s) and >= 1.5x slower
#      than unshaped
#   6. netns-down.sh removes everything (and again: idempotent)
# The allreduce uses the project's build/bench/allreduce/bench_allreduce --backend mpi when built
# (RT_CLUSTER_BENCH=c forces allreduce_bench.c). Prints "N passed, M failed"; exit 1 on any failure.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
die() { echo "selftest: ERROR: $*" >&2; exit 1; }
# its own namespace set (rtst0, rtst1, switch rtstsw), so a set made with netns-up.sh (rt0..) and the
# jobs running in it are left alone
export RT_CLUSTER_PREFIX=${RT_CLUSTER_SELFTEST_PREFIX:-rtst}
. "$HERE/common.sh"
need_root
W=$RT_CLUSTER_DIR/selftest
export RT_CLUSTER_TIMEOUT=${RT_CLUSTER_TIMEOUT:-180}
MB=64; BYTES=$((MB * 1024 * 1024))
pass=0; fail=0
ok()  { echo "PASS: $*"; pass=$((pass+1)); }
bad() { echo "FAIL: $*"; fail=$((fail+1)); }
finish() { echo "$pass passed, $fail failed"; [ "$fail" = 0 ] || exit 1; exit 0; }
trap '"$HERE/netns-down.sh" -q >/dev/null 2>&1 || true' EXIT
T0=$(date +%s.%N)
P=$RT_CLUSTER_PREFIX

rm -rf "$W" && mkdir -p "$W"
command -v mpicc >/dev/null || die "mpicc not found (apt-get install libopenmpi-dev)"
mpicc -O2 -o "$W/hello" "$HERE/mpi_hello.c" || { bad "mpicc mpi_hello.c"; finish; }
BENCH=("$ROOT/build/bench/allreduce/bench_allreduce" --backend mpi --min-bytes "$BYTES" --max-bytes "$BYTES" --iters 3 --trials 3)
TIMED=9                                        # timed calls: iters x trials
if [ "${RT_CLUSTER_BENCH:-project}" = c ] || [ ! -x "${BENCH[0]}" ]; then
  mpicc -O2 -o "$W/allreduce_bench" "$HERE/allreduce_bench.c" || { bad "mpicc allreduce_bench.c"; finish; }
  BENCH=("$W/allreduce_bench" "$MB" 5 "$NS_IF"); TIMED=5
fi
echo "allreduce benchmark: ${BENCH[*]}"
cd "$W"

# 1. up, twice
if "$HERE/netns-up.sh" 2 && "$HERE/netns-up.sh" 2 && [ "$(ns_list | wc -l)" = 3 ]; then ok "netns-up.sh 2 (twice)"
else bad "netns-up.sh 2"; finish; fi

# 2. hello across 2 hosts
rc=0; out=$("$HERE/mpirun-netns.sh" -np 2 -- ./hello 2>&1) || rc=$?
echo "$out" | cut -c1-90
hosts=$( (grep -o "host=${P}[0-9]*" <<<"$out" || true) | sort -u | wc -l)
if [ "$rc" = 0 ] && [ "$hosts" = 2 ] && [ "$(grep -c 'size=2 .*allreduce_sum=1' <<<"$out")" = 2 ]; then
  ok "MPI hello across 2 hosts"
else bad "MPI hello across 2 hosts (rc=$rc, distinct hosts=$hosts)"; fi
if [ -x "$ROOT/build/ringtrain" ]; then
  rc=0; out=$("$HERE/mpirun-netns.sh" -np 2 -- "$ROOT/build/ringtrain" info 2>&1) || rc=$?
  echo "$out" | head -n 3
  if [ "$rc" = 0 ] && grep -q '2 rank(s) on 2 host(s)' <<<"$out"; then ok "ringtrain info: 2 ranks on 2 hosts"
  else bad "ringtrain info across 2 hosts (rc=$rc)"; fi
fi

# 3. exit codes and the timeout
rc=0; "$HERE/mpirun-netns.sh" -np 2 -- /bin/sh -c 'exit 7' >/dev/null 2>&1 || rc=$?
[ "$rc" = 7 ] && ok "rank exit code 7 propagates" || bad "rank exit code: got rc=$rc, want 7"
rc=0; s=$(date +%s)
RT_CLUSTER_TIMEOUT=3 "$HERE/mpirun-netns.sh" -np 2 -- sleep 300 >/dev/null 2>&1 || rc=$?
left=""; end=$(( $(date +%s) + 10 ))
while :; do   # orteds in the other namespaces go away shortly after mpirun
  left=$(for n in $(ns_list); do ip netns pids "$n"; done | tr '\n' ' ')
  [ -z "${left// /}" ] || [ "$(date +%s)" -ge "$end" ] && break
  sleep 0.2
done
if [ "$rc" = 124 ] && [ -z "${left// /}" ]; then ok "RT_CLUSTER_TIMEOUT=3 kills a hung job in $(( $(date +%s) - s )) s, nothing left"
else bad "timeout: rc=$rc (want 124), processes left in namespaces: ${left:-none}"; fi

# 4./5. allreduce unshaped vs 1 Gbit/s. bench: sets SECS (s per allreduce) and TXB (bytes rank 0 sent)
txb() { ip netns exec "${P}0" cat "/sys/class/net/$NS_IF/statistics/tx_bytes" 2>/dev/null || echo 0; }
bench() {
  local out rc=0 t0; t0=$(txb)
  out=$("$HERE/mpirun-netns.sh" -np 2 -- "${BENCH[@]}" 2>&1) || rc=$?
  TXB=$(( $(txb) - t0 ))
  echo "$out" | grep -v '^#' | sed 's/^/  /'
  if [[ "${BENCH[0]}" == */bench_allreduce ]]; then
    SECS=$(awk -v b="$BYTES" '$1 == b && $3 == "mpi" && $8 == "ok" {printf "%.4f", $5 / 1e6}' <<<"$out")
  else
    SECS=$(sed -n 's/.*: avg \([0-9.]*\) s .*check=ok.*/\1/p' <<<"$out")
  fi
  [ "$rc" = 0 ] && [ -n "$SECS" ]
}
gbit() { awk -v b="$BYTES" -v s="$1" 'BEGIN{printf "%.2f", b * 8 / s / 1e9}'; }
FREE=
if bench; then
  FREE=$SECS
  if awk -v t="$TXB" -v n="$TIMED" -v b="$BYTES" 'BEGIN{exit !(t >= n * b)}'; then
    ok "unshaped: $FREE s per 64 MiB allreduce ($(gbit "$FREE") Gbit/s algbw); rank 0 sent $((TXB / 1000000)) MB over $NS_IF"
  else bad "only $TXB bytes crossed ${P}0/$NS_IF (want >= $TIMED x $BYTES): traffic did not use the veth"; fi
else bad "allreduce benchmark (unshaped) failed or check not ok"; fi

if "$HERE/netns-shape.sh" 1gbit && bench; then
  SHAPED=$SECS
  if awk -v s="$SHAPED" -v f="${FREE:-1e9}" -v b="$BYTES" 'BEGIN{exit !(b * 8 / s / 1e9 <= 1.0 && s >= 1.5 * f)}'; then
    ok "tbf 1gbit: $SHAPED s per 64 MiB allreduce ($(gbit "$SHAPED") Gbit/s; wire floor 0.537 s) vs $FREE s unshaped ($(awk -v a="$SHAPED" -v b="$FREE" 'BEGIN{printf "%.1f", a / b}')x slower)"
  else bad "rate limit not visible: shaped $SHAPED s ($(gbit "$SHAPED") Gbit/s) vs unshaped ${FREE:-?} s"; fi
else bad "netns-shape.sh 1gbit / allreduce benchmark (shaped)"; fi
"$HERE/netns-shape.sh" none 2>/dev/null || bad "netns-shape.sh none"

# 6. down, twice
if "$HERE/netns-down.sh" && "$HERE/netns-down.sh" && [ -z "$(ns_list)" ] && [ ! -e "$NS_DIR" ]; then ok "netns-down.sh (twice), nothing left"
else bad "netns-down.sh left $(ns_list | tr '\n' ' ')"; fi
echo "selftest: $(elapsed "$T0") s"
finish
