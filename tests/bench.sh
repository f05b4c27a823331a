#!/bin/sh
# bench.sh — `cpdit bench` prints its tables (one row per variant and grid, numeric columns,
# the BLAS core in the header) and rejects bad grids with exit 2. Not a timing test: the
# numbers are only checked to be numbers.
CPDIT=${CPDIT:-./cpdit}
MPI_RUN=${MPI_RUN:-tests/mpi-run.sh}
out=$(mktemp); trap 'rm -f "$out"' EXIT
fail=0

$MPI_RUN -np 4 "$CPDIT" bench attention --txt 13 --img 50 --heads 6 --head-dim 16 \
    --iters 2 --warmup 1 --sgemm-n 64 --anything >"$out" 2>&1
rc=$?
[ $rc -eq 77 ] && exit 77
if [ $rc -ne 0 ]; then echo "FAIL: bench attention exit $rc"; cat "$out"; exit 1; fi
cat "$out"
grep -q "^# .*BLAS .*core" "$out" || { echo "FAIL: no BLAS core in the header"; fail=1; }
# every column named in the header after variant and grid must be a number in each row
ncols=$(grep -E "^# variant" "$out" | awk '{print NF - 3}')
[ -n "$ncols" ] && [ "$ncols" -ge 8 ] || { echo "FAIL: table header missing or short"; fail=1; }
for row in "ring  *4x1" "ring-allgather  *4x1" "ulysses  *1x4" "unified  *2x2" "unified-allgather  *2x2"; do
    line=$(grep -E "^$row " "$out")
    if [ -z "$line" ]; then echo "FAIL: no row '$row'"; fail=1; continue; fi
    n=$(echo "$line" | awk '{c=0; for (i=3;i<=NF;i++) if ($i ~ /^[0-9]+(\.[0-9]+)?$/) c++; print c}')
    [ "$n" -eq "$ncols" ] || { echo "FAIL: row '$line' has $n numeric columns, expected $ncols"; fail=1; }
done

# a grid that does not divide the job: clear error, exit 2
$MPI_RUN -np 4 "$CPDIT" bench attention --ring 3 --ulysses 1 --txt 4 --img 16 --heads 2 \
    --head-dim 16 --iters 1 --sgemm-n 0 >"$out" 2>&1
rc=$?
grep -q "divide" "$out" || { echo "FAIL: bad grid message missing"; cat "$out"; fail=1; }
[ $rc -ne 0 ] || { echo "FAIL: bad grid accepted"; fail=1; }

"$CPDIT" bench kernel --heads 2 --head-dims 16,32 --seq-lens 64 --reps 1 >"$out" 2>&1 ||
    { echo "FAIL: bench kernel"; cat "$out"; fail=1; }
cat "$out"
grep -q "SGEMM" "$out" || { echo "FAIL: kernel table lacks the SGEMM rate"; fail=1; }
# the VAE decode table: one row per size and weight format (fp32, native), the ranks and 4
# numeric columns after them; --weight-format keeps one format
$MPI_RUN -np 2 "$CPDIT" bench vae --sizes 16,24 >"$out" 2>&1 ||
    { echo "FAIL: bench vae"; cat "$out"; fail=1; }
cat "$out"
rows=$(grep -cE "^(16x16|24x24) +(fp32|native) +2 +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9]+$" "$out")
[ "$rows" -eq 4 ] || { echo "FAIL: bench vae rows: $rows, want 4"; fail=1; }
"$CPDIT" bench vae --sizes 16 --weight-format fp32 >"$out" 2>&1
rows=$(grep -cE "^16x16 +fp32 +1 +[0-9.]+ +[0-9.]+ +[0-9.]+% +[0-9]+$" "$out")
[ "$rows" -eq 1 ] && ! grep -q native "$out" || { echo "FAIL: bench vae --weight-format fp32"; cat "$out"; fail=1; }
"$CPDIT" bench vae --weight-format fp16 >/dev/null 2>&1; [ $? -eq 2 ] ||
    { echo "FAIL: bench vae --weight-format fp16 not exit 2"; fail=1; }
"$CPDIT" bench vae --sizes 20 >/dev/null 2>&1; [ $? -eq 2 ] ||
    { echo "FAIL: bench vae size 20 not exit 2"; fail=1; }
"$CPDIT" bench frob >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: unknown benchmark not exit 2"; fail=1; }
exit $fail
