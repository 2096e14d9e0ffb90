"""The service above the llama.cpp mirror (memfit.estimator): it owns state and files, the model index and its
watchers, the caches of headers read, the measurement history, and the answers to fits, plans and observations.
Imports point down only: the estimator and the readers below it, nothing of HTTP or the CLI above it."""
