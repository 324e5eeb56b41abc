# A rank that fails makes every rank end: rank 1 of `headroom train` under mpirun runs with the
# same options under a 64 KiB memory cap (HEADROOM_MEMORY_LIMIT), so it runs out of memory while
# rank 0 waits for it in a collective; mpirun must exit non-zero within the test's timeout,
# naming rank 1. Arguments: -DMPIEXEC=... -DHEADROOM=... -DOUT=<scratch dir>.
file(REMOVE_RECURSE ${OUT})
file(MAKE_DIRECTORY ${OUT})
file(WRITE ${OUT}/data.txt "It was the best of times, it was the worst of times, it was the age of wisdom.\n")
set(common train --model gpt2-tiny --max_steps 2 --per_device_train_batch_size 1 --data ${OUT}/data.txt
    --validation_split_percentage 0 --save_strategy no --sample_max_new_tokens 0 --disable_tqdm
    --output_dir ${OUT}/out)
execute_process(
  COMMAND ${MPIEXEC} --oversubscribe --allow-run-as-root --bind-to none
          -np 1 ${HEADROOM} ${common} --max_seq_length 8 :
          -np 1 env HEADROOM_MEMORY_LIMIT=64KiB ${HEADROOM} ${common} --max_seq_length 8
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output TIMEOUT 120)
if(result EQUAL 0)
  message(FATAL_ERROR "mpirun exited 0 although rank 1 failed:\n${output}")
endif()
if(NOT output MATCHES "rank 1 failed")
  message(FATAL_ERROR "no message naming rank 1 (exit ${result}):\n${output}")
endif()
file(REMOVE_RECURSE ${OUT})
