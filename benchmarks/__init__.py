"""cpctl benchmarks: ``python -m benchmarks [startup|roundtrip|watch|drift|fanout|all]``.

Each benchmark runs cpctl and the tool a user would pick instead side by side in the same run
and reports medians and ratios. Results go to benchmarks/RESULTS.md (with machine and date).
Time-sensitive figures live here, never in timed test asserts.
"""
