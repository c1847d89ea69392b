# Included by the top-level CMakeLists.txt before any library when GPUFED_FUZZ is ON, so that
# every project library a fuzz target links is built with libFuzzer's coverage instrumentation,
# AddressSanitizer and UndefinedBehaviorSanitizer. The normal build never includes this file.
#
# Debian's clang only: configure with -DCMAKE_CXX_COMPILER=clang++ (make fuzz does).
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "GPUFED_FUZZ needs clang (libFuzzer); configure with "
                      "-DCMAKE_CXX_COMPILER=clang++ (see docs/fuzzing.md)")
endif()
# -fno-sanitize-recover: a UBSan finding ends the run like a crash, so libFuzzer keeps the input.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
