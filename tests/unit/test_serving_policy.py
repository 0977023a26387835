from tensorkiln.status.pods import container_problem
from tensorkiln.status.serving import Rollout, desired_engine, desired_replicas, observe, with_problem

D1, D2 = "1" * 64, "2" * 64


def deployment(engine=D1, spec_replicas=2, generation=3, **status):
    return {
        "metadata": {"generation": generation},
        "spec": {
            "replicas": spec_replicas,
            "template": {"metadata": {"annotations": {"tensorkiln.dev/engine-digest": engine}}},
        },
        "status": status,
    }


def test_observe_reads_engine_and_rollout_completeness():
    done = observe(
        deployment(observedGeneration=3, replicas=2, updatedReplicas=2, availableReplicas=2, readyReplicas=2)
    )
    assert done == Rollout(D1, 2, 2, True)
    surging = observe(
        deployment(observedGeneration=3, replicas=3, updatedReplicas=1, availableReplicas=2, readyReplicas=2)
    )
    assert not surging.updated and surging.serving and not surging.scaling  # an old pod still runs
    assert observe(None) is None


def test_replicas_added_to_a_rolled_out_deployment_are_scaling_not_a_rollout():
    scaled = observe(
        deployment(observedGeneration=3, replicas=2, updatedReplicas=2, availableReplicas=1, readyReplicas=1)
    )
    assert not scaled.updated and scaled.scaling
    first = deployment(spec_replicas=1, observedGeneration=3, replicas=1, updatedReplicas=1, availableReplicas=0)
    assert not observe(first).scaling  # nothing serves yet: the first pods are a rollout
    unseen = deployment(observedGeneration=2, replicas=2, updatedReplicas=2, availableReplicas=1, readyReplicas=1)
    assert not observe(unseen).scaling  # the controller has not seen the new template


def test_replicas_removed_from_a_rolled_out_deployment_are_scaling_not_a_rollout():
    # 3 -> 2, the third pod not gone yet: a trial's phase went Ready -> Deploying -> Ready at each scale-down.
    removing = observe(
        deployment(observedGeneration=3, replicas=3, updatedReplicas=3, availableReplicas=3, readyReplicas=3)
    )
    assert not removing.updated and removing.scaling


def test_a_new_engine_replaces_the_served_one_only_once_compiled():
    serving = Rollout(D1, 1, 1, True)
    assert desired_engine({"status": {"phase": "Succeeded", "engine": {"digest": D2}}}, serving) == D2
    assert desired_engine({"status": {"phase": "Running"}}, serving) == D1
    assert desired_engine({"status": {"phase": "Failed"}}, serving) == D1
    assert desired_engine({"status": {"phase": "Running"}}, None) is None


def test_replicas_start_at_the_minimum_and_stay_within_bounds():
    spec = {"slo": {"minReplicas": 2, "maxReplicas": 5}}
    assert desired_replicas(spec, None) == 2
    assert desired_replicas(spec, Rollout(D1, 4, 4, True)) == 4
    assert desired_replicas(spec, Rollout(D1, 9, 9, True)) == 5
    assert desired_replicas({}, None) == 1


def test_a_failing_engine_fetch_is_the_rollout_problem():
    pod = {
        "metadata": {"name": "m-l4-abc"},
        "status": {
            "initContainerStatuses": [
                {
                    "name": "engine-fetch",
                    "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    "lastState": {"terminated": {"exitCode": 1, "message": "model.xml: sha256 mismatch"}},
                }
            ]
        },
    }
    rollout = with_problem(Rollout(D1, 1, 1, False), [pod])
    assert rollout.problem == "pod m-l4-abc: container engine-fetch exited 1: model.xml: sha256 mismatch"
    assert with_problem(Rollout(D1, 1, 1, False), []).problem is None


# The tail of a Triton log that could not load its model (FallbackToLogsOnError), as the kubelet keeps it.
TRITON_TAIL = """\
+-----------+---------+----------------------------------------------------------------------------------------+
| Model     | Version | Status                                                                                 |
+-----------+---------+----------------------------------------------------------------------------------------+
| akiki-vad | 1       | UNAVAILABLE: Invalid argument: model 'akiki-vad', tensor 'audio_with_context': for the |
|           |         | model to support batching the shape should have at least 1 dimension |
+-----------+---------+----------------------------------------------------------------------------------------+

I1207 10:44:52.564879 1 server.cc:345] "Timeout 30: Found 0 live models and 0 in-flight non-inference requests"
error: creating server: Internal - failed to load all models
"""


def test_a_triton_that_cannot_load_its_model_says_which_and_why():
    status = {"name": "triton", "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": TRITON_TAIL}}}
    assert container_problem("m-cpu-abc", status) == (
        "pod m-cpu-abc: container triton exited 1: model akiki-vad: UNAVAILABLE: Invalid argument: model "
        "'akiki-vad', tensor 'audio_with_context': for the model to support batching the shape should have at "
        "least 1 dimension"
    )
    tail_only = {
        **status,
        "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": TRITON_TAIL[-80:]}},
    }
    assert container_problem("p", tail_only) == (
        "pod p: container triton exited 1: error: creating server: Internal - failed to load all models"
    )
    no_message = {**status, "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    assert container_problem("p", no_message) == "pod p: container triton exited 1: Error"
