"""Developer tools around memfit, kept out of the wheel: the GGUF model writers (`gguf_writers`, `families`),
the ground truth and the accuracy check against it (`truth`, `accuracy`), the hostile-file fuzzer (`hostile`)
and the API compatibility checker (`api_compat`). Tests, scripts and benchmarks import them from here.
"""
