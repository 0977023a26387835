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
