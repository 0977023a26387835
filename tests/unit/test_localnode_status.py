"""Pod status builders: phases, container states, conditions, termination messages."""

from tensorkiln_local.node.status import (
    ContainerState,
    exit_code,
    pod_conditions,
    pod_phase,
    pod_status,
    restarts,
    running,
    terminated,
    termination_message,
    timestamp,
    waiting,
)

T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"


def done(name, code, message=""):
    return ContainerState(
        name,
        "busybox",
        state=terminated(code, started_at=T0, finished_at=T1, message=message, container_id="local://42"),
    )


def test_exit_0_succeeds():
    c = done("main", 0)
    assert pod_phase("Never", [], [c]) == "Succeeded"
    assert pod_phase("OnFailure", [], [c]) == "Succeeded"
    assert c.state["terminated"]["reason"] == "Completed"


def test_exit_3_fails_with_code_and_message():
    c = done("main", 3, message="done\n")
    status = pod_status(
        phase=pod_phase("Never", [], [c]),
        inits=[],
        apps=[c],
        conditions=[],
        pod_ip="127.0.0.10",
        host_ip="127.0.0.1",
        start_time=T0,
    )
    assert status["phase"] == "Failed"
    term = status["containerStatuses"][0]["state"]["terminated"]
    assert term == {
        "exitCode": 3,
        "reason": "Error",
        "message": "done\n",
        "startedAt": T0,
        "finishedAt": T1,
        "containerID": "local://42",
    }
    cs = status["containerStatuses"][0]
    assert cs["imageID"] == "local://busybox" and cs["restartCount"] == 0 and cs["ready"] is False
    assert status["podIPs"] == [{"ip": "127.0.0.10"}] and status["hostIPs"] == [{"ip": "127.0.0.1"}]
    assert "initContainerStatuses" not in status


def test_no_pod_ip_before_setup():
    status = pod_status(
        phase="Pending",
        inits=[],
        apps=[ContainerState("m", "i")],
        conditions=[],
        pod_ip=None,
        host_ip="127.0.0.1",
        start_time=T0,
    )
    assert "podIP" not in status and "podIPs" not in status


def test_phases_while_running_and_restarting():
    fresh = ContainerState("a", "i")
    assert pod_phase("Always", [], [fresh]) == "Pending"
    live = ContainerState("a", "i", state=running(T0))
    assert pod_phase("Always", [], [live]) == "Running"
    crashing = ContainerState("a", "i", state=waiting("CrashLoopBackOff"), last_state=done("a", 1).state)
    assert pod_phase("OnFailure", [], [crashing]) == "Running"
    assert pod_phase("Always", [], [done("a", 0)]) == "Running"  # it restarts
    assert pod_phase("Always", [], [done("a", 0)], final=True) == "Succeeded"
    assert pod_phase("Always", [], [done("a", 1), live], final=False) == "Running"
    assert pod_phase("Always", [], [done("a", 143)], final=True) == "Failed"


def test_init_containers_gate_the_pod():
    assert pod_phase("Never", [done("init", 0), ContainerState("b", "i")], [ContainerState("m", "i")]) == "Pending"
    assert pod_phase("Never", [done("init", 2)], [ContainerState("m", "i")]) == "Failed"
    assert pod_phase("OnFailure", [done("init", 2)], [ContainerState("m", "i")]) == "Pending"


def test_restart_rules():
    assert restarts("Always", init=False, exit_code=0)
    assert not restarts("Always", init=True, exit_code=0)
    assert restarts("Always", init=True, exit_code=1)
    assert restarts("OnFailure", init=False, exit_code=1)
    assert not restarts("OnFailure", init=False, exit_code=0)
    assert not restarts("Never", init=False, exit_code=1)


def test_conditions_keep_transition_time_while_unchanged():
    ready = ContainerState("a", "i", state=running(T0), ready=True)
    first = pod_conditions("Running", [], [ready], {}, T0)
    assert {c["type"]: c["status"] for c in first} == {
        "Initialized": "True",
        "ContainersReady": "True",
        "Ready": "True",
    }
    second = pod_conditions("Running", [], [ready], {c["type"]: c for c in first}, T1)
    assert [c["lastTransitionTime"] for c in second] == [T0, T0, T0]
    unready = ContainerState("a", "i", state=running(T0))
    third = {c["type"]: c for c in pod_conditions("Running", [], [unready], {c["type"]: c for c in second}, T1)}
    assert third["Ready"]["status"] == "False" and third["Ready"]["lastTransitionTime"] == T1
    assert third["Ready"]["message"] == "containers with unready status: [a]"
    assert third["Initialized"]["lastTransitionTime"] == T0


def test_terminal_pod_is_not_ready_and_init_blocks_initialized():
    conditions = {c["type"]: c for c in pod_conditions("Failed", [done("init", 1)], [ContainerState("m", "i")], {}, T0)}
    assert conditions["Ready"]["reason"] == "PodCompleted"
    assert conditions["Initialized"]["status"] == "False"
    assert conditions["Initialized"]["message"] == "containers with incomplete status: [init]"


def test_termination_message_from_file_or_log_fallback():
    log = "".join(f"line {i}\n" for i in range(100))
    assert termination_message("done\n", log, exit_code=3, fallback_to_logs=True) == "done\n"
    assert termination_message("", log, exit_code=3, fallback_to_logs=False) == ""
    assert termination_message("", log, exit_code=0, fallback_to_logs=True) == ""
    tail = termination_message("", log, exit_code=3, fallback_to_logs=True)
    assert tail.splitlines() == [f"line {i}" for i in range(20, 100)]
    assert len(termination_message("x" * 10000, "", exit_code=1, fallback_to_logs=False)) == 4096


def test_exit_codes_of_signals():
    assert exit_code(0) == 0 and exit_code(3) == 3
    assert exit_code(-15) == 143 and exit_code(-9) == 137


def test_timestamps():
    assert timestamp(0) == "1970-01-01T00:00:00Z"
    assert timestamp(1.5, micro=True) == "1970-01-01T00:00:01.500000Z"
