"""Operator log lines: JSON (or text) carrying the namespace and name of the object they are about."""

import json
import logging

import pytest
from tensorkiln.observability import logs

BODY = {
    "apiVersion": "tensorkiln.dev/v1alpha1",
    "kind": "CompileJob",
    "metadata": {"name": "resnet50-nvidia-l4", "namespace": "team-a", "uid": "u-1"},
}


@pytest.fixture
def configured():
    """Runs logs.configure(format), then puts the root logger back as it was."""
    root, quieted = logging.getLogger(), logging.getLogger("asyncio")  # kopf.configure quiets asyncio
    saved = (root.handlers[:], root.level, quieted.handlers[:], quieted.propagate)

    def configure(log_format: str) -> None:
        logs.configure(log_format)

    yield configure
    root.handlers[:], level, quieted.handlers[:], quieted.propagate = saved
    root.setLevel(level)


def test_json_lines_carry_the_object_from_a_plain_module_logger(configured, capsys):
    configured("json")
    logger = logging.getLogger("tensorkiln.controllers.compilejob")

    with logs.about(BODY):
        logger.info("created Job %s/%s", "team-a", "resnet50-nvidia-l4-x")
    logger.warning("not about any object")

    about, plain = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert about["message"] == "created Job team-a/resnet50-nvidia-l4-x"
    assert about["object"]["namespace"] == "team-a"
    assert about["object"]["name"] == "resnet50-nvidia-l4"
    assert about["object"]["kind"] == "CompileJob"
    assert about["severity"] == "info"
    assert about["logger"] == "tensorkiln.controllers.compilejob"
    assert "object" not in plain and plain["severity"] == "warn"


def test_kopfs_own_object_logger_keeps_its_reference(configured, capsys):
    import kopf

    configured("json")
    other = {**BODY, "metadata": {"name": "other", "namespace": "team-b"}}
    with logs.about(BODY):
        kopf.LocalObjectLogger(body=other, settings=kopf.OperatorSettings()).info("Handler succeeded.")

    line = json.loads(capsys.readouterr().err)
    assert (line["object"]["namespace"], line["object"]["name"]) == ("team-b", "other")


def test_text_lines_are_prefixed_with_namespace_and_name(configured, capsys):
    configured("full")
    with logs.about(BODY):
        logging.getLogger("tensorkiln.controllers.inferencemodel").info("reconciled")

    assert "[team-a/resnet50-nvidia-l4] reconciled" in capsys.readouterr().err


def test_the_context_ends_with_the_block(configured, capsys):
    configured("json")
    with logs.about(BODY):
        pass
    logging.getLogger("tensorkiln").info("after")

    assert "object" not in json.loads(capsys.readouterr().err)


def test_unknown_format_is_refused():
    with pytest.raises(ValueError, match="expected one of json, full, plain"):
        logs.configure("yaml")
