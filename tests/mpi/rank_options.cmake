# Ranks started with different options are refused before they train (Note [Every rank runs rank
# 0's options]): rank 1 of `headroom train` under mpirun is given another max_steps (which made
# the ranks wait for each other forever); every rank must exit at once, non-zero, with one error
# line naming the option, both values and rank 1.
# Arguments: -DMPIEXEC=... -DHEADROOM=... -DOUT=<scratch dir>.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
file(WRITE ${OUT}/data.txt "It was the best of times, it was the worst of times, it was the age of wisdom.\n")
set(common train --model gpt2-tiny --per_device_train_batch_size 1 --data ${OUT}/data.txt
    --max_seq_length 8 --validation_split_percentage 0 --save_strategy no
    --sample_max_new_tokens 0 --disable_tqdm --output_dir ${OUT}/out)
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe --allow-run-as-root --bind-to none
          -np 1 ${HEADROOM} ${common} --max_steps 2 :
          -np 1 ${HEADROOM} ${common} --max_steps 3
  RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(result EQUAL 0)
  message(FATAL_ERROR "mpirun exited 0 with ranks of different options:\n${out}${err}")
endif()
# (The line holds a semicolon, a list separator to CMake: the lines are counted by their start.)
string(REGEX MATCHALL "headroom: error:" starts "${err}")
list(LENGTH starts count)
if(NOT count EQUAL 1)
  message(FATAL_ERROR "expected one error line, got ${count} (exit ${result}):\n${err}")
endif()
if(NOT err MATCHES "headroom: error: [^\n]*max_steps is 3 on rank 1 and 2 on rank 0 \\(rank 1 differs from rank 0\\)")
  message(FATAL_ERROR "the error does not name max_steps, both values and rank 1:\n${err}")
endif()
if(EXISTS ${OUT}/out/metrics.jsonl)
  message(FATAL_ERROR "a rank trained although the options differ")
endif()
file(REMOVE_RECURSE ${OUT})
