"""The SLO scaler end to end on local-0: real Triton pods, real Prometheus, the operator scaling
the Deployment through its scale subresource, under an open-loop step load (low, x4, low).

The workloads (tensorkiln_local.cluster.slo_workloads): a SIMULATION of a GPU-bound engine (fixed
service time, computes nothing) that scales out to 6+ replicas, and PP-OCR's real text detector,
compiled on local-0, whose load and target are sized in the same run from what one replica was
measured to sustain (serving.capacity), so that one replica must miss the step on a quiet machine
or a busy one.
"""

import pytest
from tensorkiln_local.cluster.slo_workloads import DETECTOR, SIMULATED, Workload, prepare, triton_latency
from tensorkiln_local.load.evaluation import report, violation_seconds
from tensorkiln_local.load.loadgen import run_step_load

from .workloads import scale_events

pytestmark = [pytest.mark.cluster, pytest.mark.serving]


def step_load(api, operator, namespace, workload: Workload, tmp_path, ready_within: float, source: str, measured):
    prepared = prepare(api, operator.registry_uri, namespace, workload, tmp_path, ready_within)
    if prepared.capacity is not None:
        measured(f"{workload.name}: {prepared.capacity.describe()}")
        load = ", ".join(f"{p.name} {p.rate:.1f} req/s for {p.seconds:g} s" for p in prepared.phases)
        measured(f"{workload.name}: load {load}")
    deployment, phases = prepared.deployment, prepared.phases
    server = triton_latency(api, namespace, deployment, workload)
    requests, points = run_step_load(api, namespace, workload.name, deployment, workload.inputs(), phases, 0, server)
    slo = prepared.workload.slo
    reports, series = report(phases, requests, points, slo["targetMilliseconds"], slo["percentile"], source=source)
    events = [f"{e.reason}: {e.message}" for e in scale_events(api, namespace, workload.name)]
    late = violation_seconds(series, slo["targetMilliseconds"], 1.0, reports[1].end_s - LATE_S, reports[1].end_s)
    return reports, events, points, late


# The step's last minute: after scaling out, the SLO holds there but for one transient at most. The
# clients' latency is over a 10 s sliding window, so one spike (a pod starting or going on the 2
# shared CPUs) reads as up to 10 violated seconds: CI once saw 38 s violated in all, the end included.
LATE_S, TRANSIENT_S = 60.0, 10.0


def assert_scaled_to_the_slo(reports, events, late: float, most_replicas: int, restore_within: float):
    low, high, back = reports
    context = f"{[(r.name, r.replicas, r.violation_s, r.restore_s) for r in reports]}, late {late}; events {events}"
    # The step is met by scaling out: the SLO is violated for a bounded time and holds through the
    # phase's last minute. (Bounding the violated seconds, not the last violation: clients' latency on
    # 2 shared CPUs has transient spikes that reset "restored since" late in a quiet run.)
    assert max(high.replicas) >= most_replicas, context
    assert high.violation_s <= restore_within and late <= TRANSIENT_S, context
    # After the load drops, replicas come down after the stabilisation window, and the SLO holds.
    assert back.replicas[-1] < max(high.replicas), context
    assert back.restore_s is not None, context
    # No flapping: at most 2 direction changes per phase.
    assert all(r.direction_changes <= 2 for r in reports), context
    assert any(e.startswith("ScaledUp") for e in events) and any(e.startswith("ScaledDown") for e in events), context


def test_simulated_gpu_engine_scales_out_to_the_step_and_back(api, operator, namespace, tmp_path, measured):
    reports, events, _, late = step_load(
        api, operator, namespace, SIMULATED, tmp_path, ready_within=180, source="client", measured=measured
    )
    figures = [(r.name, r.replicas, r.violation_s, r.restore_s) for r in reports]
    measured(
        f"{SIMULATED.name}: (phase, replicas, violated s, restored after s): {figures}; step's last minute {late:g} s violated"
    )
    assert_scaled_to_the_slo(reports, events, late, most_replicas=5, restore_within=90)


@pytest.mark.timeout(1500)  # compile, capacity ramp, Triton's window draining, then the 345 s step load
def test_real_detector_scales_from_one_to_two_replicas_and_back(api, operator, namespace, tmp_path, measured):
    # Judged on the latency Triton reports, the SLO's definition: each request carries a 2.7 MB
    # image, and the clients' own time on the 2 shared CPUs is not the server's to meet.
    reports, events, points, _ = step_load(
        api, operator, namespace, DETECTOR, tmp_path, ready_within=900, source="server", measured=measured
    )
    low, high, back = reports
    context = f"{[(r.name, r.replicas, r.violation_s, r.restore_s) for r in reports]}; events {events}"
    # The load is 0.5x and 1.6x of what one replica was measured to sustain, so these hold
    # whatever else runs on the machine:
    assert low.replicas == [1], context  # the low load fits in one replica
    assert high.violation_s > 0 and high.replicas == [1, 2], context  # one misses the step: the second is added, once
    assert any(e.startswith("ScaledUp") for e in events), context
    assert all(r.direction_changes == 0 for r in reports), context  # no flapping
    # Whether two replicas restore the SLO at 0.8x each of one replica's capacity depends on what
    # the clients and the rest of the cluster leave of local-0's 2 shared CPUs; the simulated
    # workload asserts the restoration. Say which it was, from Triton's own latency:
    two = [p.server_ms for p in points if high.start_s + 60 <= p.at < high.end_s and p.ready == 2]
    restored = "restored" if high.restore_s is not None else "did not restore"
    worst = f"{max(v for v in two if v is not None):.0f} ms" if any(v is not None for v in two) else "no reading"
    measured(
        f"{DETECTOR.name}: two replicas {restored} the SLO at the step (worst Triton p95 with both ready: {worst})"
    )
    measured(f"{DETECTOR.name}: {context}")
