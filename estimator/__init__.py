"""The domain: what llama.cpp would allocate for a model under a workload, and the verdict. Knows nothing of HTTP."""
