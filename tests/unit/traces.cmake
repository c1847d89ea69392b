# The bundled public traces are byte-for-byte what their provenance note says.
add_test(NAME traces.checksums
         COMMAND sha256sum --check --quiet ../SHA256SUMS
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/data/traces/alibaba-gpu-v2023/csv)
set_tests_properties(traces.checksums PROPERTIES LABELS unit)
