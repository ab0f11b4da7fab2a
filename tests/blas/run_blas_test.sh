#!/bin/sh
# run_blas_test.sh DPPROF SHIM SCRIPT: dpprof under an OpenBLAS that falls back to its generic
# kernel (SHIM, LD_PRELOADed: openblas_get_corename() says Prescott unless OPENBLAS_CORETYPE is
# set). Without OPENBLAS_CORETYPE the binary must re-execute itself with the core its CPU's flags
# call for, and say nothing; with OPENBLAS_CORETYPE=Prescott it must keep the user's choice and
# warn once. Off x86 (no core to choose) the first case is skipped.
set -u
dpprof=$1 shim=$2 script=$3
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
# ASan wants its runtime first among the preloaded libraries; the shim is not instrumented
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
unset OPENBLAS_CORETYPE DPPROF_BLAS_CORETYPE
fail() { echo "FAIL: $*"; echo "--- stdout"; cat "$out"; echo "--- stderr"; cat "$err"; exit 1; }

case $(uname -m) in
x86_64 | i?86)
    LD_PRELOAD=$shim "$dpprof" run "$script" >"$out" 2>"$err" || fail "dpprof exited $?"
    grep -q 'chosen_by=dpprof generic=false' "$out" || fail "no re-execution with the CPU's core"
    core=$(sed -n 's/.* core=\([^ ]*\) .*/\1/p' "$out")
    grep -q "guard=$core\$" "$out" || fail "DPPROF_BLAS_CORETYPE is not the chosen core $core"
    case $core in Prescott | unknown | "") fail "chose the generic core '$core'" ;; esac
    grep -q 'generic' "$err" && fail "warned although the CPU's core runs"
    echo "ok: a generic OpenBLAS kernel is replaced by $core"
    ;;
*) echo "skipped: no x86 core to choose on $(uname -m)" ;;
esac

OPENBLAS_CORETYPE=Prescott LD_PRELOAD=$shim "$dpprof" run "$script" >"$out" 2>"$err" || fail "dpprof exited $?"
grep -q 'core=Prescott chosen_by=OPENBLAS_CORETYPE generic=true guard=-' "$out" || fail "the user's OPENBLAS_CORETYPE was overridden"
n=$(grep -c 'warning: OpenBLAS .* runs its generic Prescott kernels' "$err")
[ "$n" = 1 ] || fail "expected one warning about the generic kernel, got $n"
echo "ok: OPENBLAS_CORETYPE=Prescott is kept and warned about once"
