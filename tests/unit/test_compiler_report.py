import json

from tensorkiln_compiler import report


def test_failure_message_fits_the_termination_log(tmp_path):
    path = tmp_path / "termination-log"
    report.write(path, report.failure("ModelMalformed", "spec.source.uri: " + "é" * 5000))
    text = path.read_text()
    assert len(text.encode()) < report.LIMIT_BYTES
    error = json.loads(text)["error"]
    assert error["reason"] == "ModelMalformed" and error["message"].startswith("spec.source.uri: éé")
    assert error["message"].endswith(" ...")


def test_short_messages_are_kept_whole():
    payload = report.failure("DigestMismatch", "spec.modelDigest: expected sha256 00")
    assert json.loads(report.render(payload)) == payload
    assert (
        report.render(report.cached("a" * 64, "file:///r/e"))
        == '{"engine":{"digest":"' + "a" * 64 + '","uri":"file:///r/e"},"cached":true}'
    )
