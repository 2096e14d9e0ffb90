"""I/O: GGUF headers, model directories, host memory, GPUs."""
