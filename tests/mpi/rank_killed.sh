#!/usr/bin/env bash
# A rank killed mid-run (SIGKILL, no chance to clean up) ends the whole job in bounded time with a
# message naming it: 2 ranks of `headroom train` train until rank 0 has logged 3 steps, rank 1
# is killed, and mpirun must exit non-zero within 60 s (rank 0 is then waiting for rank 1 in a
# collective), saying that rank 1 was killed by signal 9.
#   tests/mpi/rank_killed.sh MPIEXEC HEADROOM SCRATCH_DIR
set -uo pipefail
mpiexec=$1 headroom=$2 out=$3
rm -rf "$out" && mkdir -p "$out"
for _ in $(seq 200); do
  echo "It was the best of times, it was the worst of times, it was the age of wisdom."
done > "$out/data.txt"

"$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$headroom" train --model gpt2-tiny --max_steps 100000 --per_device_train_batch_size 1 \
  --max_seq_length 32 --data "$out/data.txt" --validation_split_percentage 0 --save_strategy no \
  --sample_max_new_tokens 0 --disable_tqdm --logging_steps 1 --output_dir "$out/out" \
  > "$out/log" 2>&1 &
job=$!
fail() { echo "KilledRankEndsTheJob: $*"; cat "$out/log"; kill -9 "$job" 2>/dev/null; exit 1; }

# Rank 1: the headroom process whose environment says so (OpenMPI sets OMPI_COMM_WORLD_RANK).
rank1=
for _ in $(seq 600); do
  if [ "$(grep -c "'loss'" "$out/log" 2>/dev/null)" -ge 3 ]; then
    for pid in $(pgrep -f "$headroom train"); do
      if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1; then
        rank1=$pid
      fi
    done
    break
  fi
  kill -0 "$job" 2>/dev/null || fail "the job ended before 3 steps"
  sleep 0.1
done
[ -n "$rank1" ] || fail "no rank 1 process found after 3 logged steps"
kill -9 "$rank1"
start=$(date +%s)
for _ in $(seq 600); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$job" 2>/dev/null && fail "the job still runs 60 s after rank 1 was killed"
wait "$job"
status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" -ne 0 ] || fail "mpirun exited 0 although rank 1 was killed"
grep -Eiq "rank 1.*(signal 9|killed)" "$out/log" || fail "no message naming rank 1 and its signal"
echo "KilledRankEndsTheJob: mpirun exited $status ${elapsed} s after rank 1 was killed"
grep -Ei "rank 1" "$out/log" | head -3
rm -rf "$out"
