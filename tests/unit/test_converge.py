from tensorkiln_local.converge import pending


def model(generation=1, observed=1, targets=()):
    return {
        "metadata": {"namespace": "d", "name": "m", "generation": generation},
        "status": {"observedGeneration": observed, "targets": list(targets)},
    }


def cj(name, scheduled):
    return {
        "metadata": {"namespace": "d", "name": name},
        "status": {"conditions": [{"type": "Scheduled", "status": scheduled}]},
    }


def test_unobserved_generation_is_pending():
    assert "generation 2 not yet observed" in pending([model(generation=2)], [])[0]


def test_converged_when_every_target_with_nodes_is_scheduled():
    targets = [{"hardwareClass": "l4", "nodeCount": 8, "compileJob": "m-l4"}, {"hardwareClass": "x", "nodeCount": 0}]
    assert pending([model(targets=targets)], [cj("m-l4", "True")]) == []
    assert pending([model(targets=targets)], [cj("m-l4", "False")]) == [
        "inferencemodel d/m: compile pod for l4 not scheduled yet"
    ]


def test_a_compile_job_that_ended_without_a_pod_is_converged():
    # An engine reused from the registry: no compile pod, ever (make demo on a warm machine waited for one).
    targets = [{"hardwareClass": "cpu", "nodeCount": 1, "compileJob": "m-cpu"}]
    reused = {"metadata": {"namespace": "d", "name": "m-cpu"}, "status": {"phase": "Succeeded", "conditions": []}}
    assert pending([model(targets=targets)], [reused]) == []
