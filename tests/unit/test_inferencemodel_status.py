from datetime import UTC, datetime

from tensorkiln.hardware.classes import HardwareClass
from tensorkiln.status.inferencemodel import inference_model_status

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MODEL = {"metadata": {"name": "m", "generation": 3}, "spec": {}}


def target(name, nodes=("n1",)):
    return HardwareClass(name=name, kind="GPU", product=name.upper(), node_selector={}, nodes=nodes, simulated=True)


def cj(name, phase, engine=None):
    status = {"phase": phase}
    if engine:
        status["engine"] = {"digest": engine, "uri": "file:///r"}
    return {"metadata": {"name": name}, "status": status}


def conds(status):
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def test_no_hardware_names_the_products_seen():
    status = inference_model_status(MODEL, [], {}, ["NVIDIA-L4"], NOW)
    assert status["phase"] == "Pending"
    assert conds(status)["Ready"] == ("False", "NoMatchingHardware")
    assert "NVIDIA-L4" in status["conditions"][0]["message"]
    assert status["observedGeneration"] == 3


def test_compiling_rollup_and_summary():
    targets = [target("h100"), target("l4")]
    status = inference_model_status(
        MODEL, targets, {"h100": cj("m-h100", "Running"), "l4": cj("m-l4", "Pending")}, [], NOW
    )
    assert status["phase"] == "Compiling"
    assert status["targetSummary"] == "0/2 compiled"
    assert [t["compileJob"] for t in status["targets"]] == ["m-h100", "m-l4"]
    assert conds(status)["Compiled"] == ("False", "Compiling")


def test_partial_failure_is_degraded_and_all_failed_is_failed():
    targets = [target("h100"), target("l4")]
    degraded = inference_model_status(
        MODEL,
        targets,
        {
            "h100": cj("a", "Failed"),
            "l4": cj("b", "Succeeded", "1111111111111111111111111111111111111111111111111111111111111111"),
        },
        [],
        NOW,
    )
    assert degraded["phase"] == "Degraded"
    assert conds(degraded)["Compiled"] == ("False", "CompileFailed")
    failed = inference_model_status(MODEL, targets, {"h100": cj("a", "Failed"), "l4": cj("b", "Failed")}, [], NOW)
    assert failed["phase"] == "Failed"


def test_all_engines_published_waits_for_rollout():
    status = inference_model_status(
        MODEL,
        [target("l4")],
        {"l4": cj("b", "Succeeded", "1111111111111111111111111111111111111111111111111111111111111111")},
        [],
        NOW,
    )
    assert status["phase"] == "Deploying"
    assert status["targetSummary"] == "1/1 compiled"
    assert conds(status)["Compiled"] == ("True", "EnginesPublished")
    assert conds(status)["Ready"] == ("False", "RolloutPending")


def test_explicit_pool_without_nodes_is_reported():
    status = inference_model_status(MODEL, [target("b200", nodes=())], {}, ["NVIDIA-L4"], NOW)
    assert "pools b200 match no node" in status["conditions"][0]["message"]
