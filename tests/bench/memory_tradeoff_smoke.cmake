# A smoke run of bench/memory_tradeoff (CTest: bench.MemoryTradeoffSmoke): a tiny GPT-2 for a few
# steps under some of the table's rows, the PyTorch peer off; checks that the program succeeds,
# that its CSV has the header and exactly the requested rows, in the table's order, with every
# field, and that the PNG plot is there. Timing figures are not checked: this is not a benchmark.
#
# cmake -DBENCH=<memory_tradeoff> -DOUT=<dir> -DTEXT=<file> "-DROWS=a,b,..." -P this file
foreach(var BENCH OUT TEXT ROWS)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "memory_tradeoff_smoke: -D${var}=... is required")
  endif()
endforeach()

file(REMOVE_RECURSE "${OUT}")
execute_process(
  COMMAND "${BENCH}" --layers 2 --d-model 32 --heads 2 --context 16 --batch 4 --vocab 256
          --steps 2 --no-peer --text "${TEXT}" --rows "${ROWS}" --out "${OUT}"
  RESULT_VARIABLE status
  OUTPUT_VARIABLE output
  ERROR_VARIABLE errors)
message("${output}${errors}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "memory_tradeoff exited with ${status}")
endif()

set(csv "${OUT}/memory_tradeoff.csv")
if(NOT EXISTS "${csv}")
  message(FATAL_ERROR "no ${csv}")
endif()
file(STRINGS "${csv}" lines)
list(POP_FRONT lines header)
set(expected_header "configuration,precision,optim,checkpointing,accumulation,peak_allocated_bytes,peak_reserved_bytes,step_ms,tokens_per_s,final_loss,torch_step_ms,torch_peak_rss_growth_bytes")
if(NOT header STREQUAL expected_header)
  message(FATAL_ERROR "CSV header is\n  ${header}\nexpected\n  ${expected_header}")
endif()

string(REPLACE "," ";" requested "${ROWS}")
set(names "")
foreach(line IN LISTS lines)
  # 12 fields, the peer's two last ones empty (a CMake list would drop them: count commas).
  string(REGEX MATCHALL "," commas "${line}")
  list(LENGTH commas count)
  if(NOT count EQUAL 11)
    message(FATAL_ERROR "CSV row has ${count} commas, expected 11 (12 fields): ${line}")
  endif()
  string(REPLACE "," ";" fields "${line}")
  list(GET fields 0 name)
  list(GET fields 5 peak_allocated)
  list(GET fields 9 final_loss)
  if(NOT peak_allocated MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "row '${name}': peak_allocated_bytes '${peak_allocated}'")
  endif()
  if(NOT final_loss MATCHES "^[0-9]+(\\.[0-9]+)?$")
    message(FATAL_ERROR "row '${name}': final_loss '${final_loss}'")
  endif()
  list(APPEND names "${name}")
endforeach()
if(NOT names STREQUAL requested)
  message(FATAL_ERROR "CSV rows are '${names}', requested '${requested}'")
endif()

set(png "${OUT}/memory_tradeoff.png")
if(NOT EXISTS "${png}")
  message(FATAL_ERROR "no ${png}")
endif()
file(READ "${png}" signature LIMIT 8 HEX)
if(NOT signature STREQUAL "89504e470d0a1a0a")
  message(FATAL_ERROR "${png} is not a PNG (starts with ${signature})")
endif()
message("memory_tradeoff smoke run: rows ${names} in ${csv}; ${png}")
