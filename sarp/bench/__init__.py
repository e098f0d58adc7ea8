"""Benchmark workloads: the shipped LMCache agent trace, synthetic datasets, Mooncake traces."""

from sarp.bench.mooncake import read_mooncake, write_mooncake
from sarp.bench.synthetic import synthetic
from sarp.bench.trace import load_trace
from sarp.bench.workloads import Request, Workload, iter_requests, workload_stats

__all__ = [
    "Request",
    "Workload",
    "iter_requests",
    "load_trace",
    "read_mooncake",
    "synthetic",
    "workload_stats",
    "write_mooncake",
]
