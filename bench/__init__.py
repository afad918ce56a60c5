"""tfformer's benchmarks, run from the repository root as
`python -m bench.<group>.<script>` (see bench/README.md). Not installed."""
