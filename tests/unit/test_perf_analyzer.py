"""perf_analyzer's CSV report read back (tensorkiln_local.perf_analyzer, bench_serving's second load generator)."""

from tensorkiln_local.perf_analyzer import Measured, parse

# The header perf_analyzer 2.51.0 writes with -f, and one concurrency's row (latencies in µs).
REPORT = """Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,\
Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency,Avg latency,\
request/response,response wait
32,723.2,21,1183,38911,22,2315,9,3,43702,50114,53040,55121,44104,723,41003
"""


def test_a_report_gives_each_concurrencys_throughput_and_latencies_in_ms():
    assert parse(REPORT) == [Measured(concurrency=32, throughput=723.2, p50_ms=43.702, p95_ms=53.04, p99_ms=55.121)]
