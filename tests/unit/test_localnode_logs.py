"""The local node's kubelet endpoint: container logs as the kubelet serves them, and its TLS trust."""

import datetime
import http.client
import ipaddress
import ssl
import threading

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from tensorkiln_local.node import logs
from tensorkiln_local.node.kubelet_server import KubeletServer, issue_serving_certificate, server_context
from tensorkiln_local.node.logs import LogError, LogOptions, Run
from tensorkiln_local.node.node import node_status
from tensorkiln_local.node.worker import PodWorker

from .test_localnode_node import FACTS
from .test_localnode_worker import env, make_pod, run_to_end, sh  # noqa: F401 (env is a fixture)

NOW_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
S = 10**9


# -- query ------------------------------------------------------------------------------------


def test_the_query_the_api_server_sends_is_read_as_pod_log_options():
    opts = logs.parse_options("follow=true&limitBytes=100&previous=true&tailLines=5&timestamps=true", NOW_NS)
    assert opts == LogOptions(follow=True, previous=True, timestamps=True, tail_lines=5, limit_bytes=100)
    assert logs.parse_options("", NOW_NS) == LogOptions()
    assert logs.parse_options("sinceSeconds=60", NOW_NS).since_ns == NOW_NS - 60 * S
    assert logs.parse_options("sinceTime=2026-01-01T00:00:00Z", NOW_NS).since_ns == NOW_NS
    assert logs.parse_options("tailLines=0", NOW_NS).tail_lines == 0


@pytest.mark.parametrize(
    "query",
    ["tailLines=-1", "tailLines=x", "limitBytes=0", "sinceSeconds=0", "follow=maybe", "sinceTime=yesterday"],
)
def test_invalid_options_are_a_bad_request(query):
    with pytest.raises(LogError) as err:
        logs.parse_options(query, NOW_NS)
    assert err.value.status == 400


def test_since_seconds_and_since_time_exclude_each_other():
    with pytest.raises(LogError, match="at most one of sinceTime or sinceSeconds"):
        logs.parse_options("sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z", NOW_NS)


# -- which run --------------------------------------------------------------------------------


def pod_with(state, last=None, name="main"):
    cstatus = {"name": name, "state": state, "containerID": "local://20"}
    if last:
        cstatus["lastState"] = {"terminated": last}
    return {"metadata": {"name": "p", "namespace": "ns"}, "status": {"containerStatuses": [cstatus]}}


def test_the_current_run_is_the_running_or_terminated_container():
    assert logs.container_id(pod_with({"running": {}}), "main", previous=False) == "local://20"
    done = {"terminated": {"exitCode": 1, "containerID": "local://20"}}
    assert logs.container_id(pod_with(done), "main", previous=False) == "local://20"


def test_previous_is_the_last_terminated_run_and_an_error_without_one():
    pod = pod_with({"running": {}}, last={"exitCode": 7, "containerID": "local://10"})
    assert logs.container_id(pod, "main", previous=True) == "local://10"
    with pytest.raises(LogError, match='previous terminated container "main" in pod "p_ns" not found'):
        logs.container_id(pod_with({"running": {}}), "main", previous=True)


def test_a_crash_looping_container_shows_its_last_run():
    pod = pod_with({"waiting": {"reason": "CrashLoopBackOff"}}, last={"exitCode": 7, "containerID": "local://10"})
    assert logs.container_id(pod, "main", previous=False) == "local://10"


def test_a_container_that_never_ran_is_waiting_to_start():
    with pytest.raises(LogError, match="is waiting to start: ContainerCreating"):
        logs.container_id(pod_with({"waiting": {"reason": "ContainerCreating"}}), "main", previous=False)
    with pytest.raises(LogError, match="waiting to start - no logs yet"):
        logs.container_id(pod_with({"running": {}}), "sidecar", previous=False)


def test_runs_are_read_from_the_runs_file_and_named_by_pid(tmp_path):
    (tmp_path / "log").write_bytes(b"first\nsecond\n")
    (tmp_path / "runs").write_text("0 10\n6 20\n")
    runs = logs.read_runs(tmp_path)
    assert runs == [Run(0, 6, 10), Run(6, None, 20)]
    assert logs.find_run(runs, "local://10") == Run(0, 6, 10)
    assert logs.find_run(runs, "local://20") == Run(6, None, 20)
    assert logs.find_run(runs, "local://30") is None


def test_a_log_from_before_runs_were_recorded_is_one_run(tmp_path):
    (tmp_path / "log").write_bytes(b"old\n")
    assert logs.read_runs(tmp_path) == [Run(0, None, None)]
    assert logs.find_run(logs.read_runs(tmp_path), "local://5") == Run(0, None, None)
    assert logs.read_runs(tmp_path / "nothing") == []


# -- reading a run ----------------------------------------------------------------------------


@pytest.fixture
def container_dir(tmp_path):
    """Two runs: "old" (pid 10), then lines one..four, the last unterminated (pid 20), one a second."""
    (tmp_path / "log").write_bytes(b"old\none\ntwo\nthree\nfour")
    (tmp_path / "runs").write_text("0 10\n4 20\n")
    (tmp_path / "log.times").write_text("".join(f"{off} {NOW_NS + i * S}\n" for i, off in enumerate([0, 4, 8, 12, 18])))
    return tmp_path


def read(container_dir, run, **opts):
    return b"".join(logs.stream(container_dir, run, LogOptions(**opts))).decode()


def test_a_run_is_its_own_part_of_the_log(container_dir):
    previous, current = logs.read_runs(container_dir)
    assert read(container_dir, previous) == "old\n"
    assert read(container_dir, current) == "one\ntwo\nthree\nfour"


def test_tail_lines_counts_an_unterminated_last_line(container_dir):
    current = logs.read_runs(container_dir)[1]
    assert read(container_dir, current, tail_lines=2) == "three\nfour"
    assert read(container_dir, current, tail_lines=0) == ""
    assert read(container_dir, current, tail_lines=100) == "one\ntwo\nthree\nfour"
    previous = logs.read_runs(container_dir)[0]
    assert read(container_dir, previous, tail_lines=1) == "old\n"  # not into the next run


def test_tail_over_more_than_one_read_block(tmp_path, monkeypatch):
    monkeypatch.setattr(logs, "READ_CHUNK", 7)
    lines = [f"line {i}\n" for i in range(50)]
    (tmp_path / "log").write_text("".join(lines))
    assert read(tmp_path, Run(0, None, None), tail_lines=3) == "".join(lines[-3:])
    assert read(tmp_path, Run(0, None, None)) == "".join(lines)


def test_timestamps_prefix_each_line_with_when_it_arrived(container_dir):
    current = logs.read_runs(container_dir)[1]
    assert read(container_dir, current, timestamps=True, tail_lines=2).splitlines() == [
        "2026-01-01T00:00:03.000000000Z three",
        "2026-01-01T00:00:04.000000000Z four",
    ]
    assert logs.rfc3339_nano(NOW_NS + 5) == "2026-01-01T00:00:00.000000005Z"


def test_since_drops_older_lines_after_the_tail(container_dir):
    current = logs.read_runs(container_dir)[1]
    assert read(container_dir, current, since_ns=NOW_NS + 2 * S) == "two\nthree\nfour"
    assert read(container_dir, current, since_ns=NOW_NS + 2 * S, tail_lines=1) == "four"


def test_limit_bytes_cuts_the_output_timestamps_included(container_dir):
    current = logs.read_runs(container_dir)[1]
    assert read(container_dir, current, limit_bytes=6) == "one\ntw"
    assert read(container_dir, current, limit_bytes=33, timestamps=True) == "2026-01-01T00:00:01.000000000Z on"


def test_follow_streams_what_the_run_writes_until_it_ends(tmp_path):
    log = tmp_path / "log"
    log.write_bytes(b"start\n")
    writes = [b"half", b" line\nmore\n", b"last"]

    def sleep(_):
        with open(log, "ab") as f:
            f.write(writes.pop(0))

    chunks = list(
        logs.stream(tmp_path, Run(0, None, 1), LogOptions(follow=True), running=lambda: bool(writes), sleep=sleep)
    )
    assert chunks == [b"start\n", b"half line\n", b"more\n", b"last"]


def test_follow_stops_at_the_start_of_a_later_run(tmp_path):
    (tmp_path / "log").write_bytes(b"first\n")
    (tmp_path / "runs").write_text("0 10\n")

    def sleep(_):  # run 10 ended without its pid file going (a lost agent); run 20 starts
        (tmp_path / "runs").write_text("0 10\n6 20\n")
        with open(tmp_path / "log", "ab") as f:
            f.write(b"second\n")

    out = logs.stream(tmp_path, Run(0, None, 10), LogOptions(follow=True), running=lambda: True, sleep=sleep)
    assert b"".join(out) == b"first\n"


# -- the runtime records runs and times -------------------------------------------------------


def test_restarted_container_runs_are_recorded_for_previous(env):  # noqa: F811 (the fixture)
    pod = make_pod(sh("test -f marker && { echo second; exit 0; }; touch marker; echo first; exit 7"))
    pod["spec"]["restartPolicy"] = "OnFailure"
    status = run_to_end(PodWorker(pod, env))
    cstatus = status["containerStatuses"][0]
    container_dir = env.state_dir / "pods/uid-1/main"
    runs = logs.read_runs(container_dir)
    ids = [cstatus["lastState"]["terminated"]["containerID"], cstatus["containerID"]]
    assert [f"local://{r.pid}" for r in runs] == ids
    full = {**pod, "status": status}
    previous = logs.find_run(runs, logs.container_id(full, "main", previous=True))
    current = logs.find_run(runs, logs.container_id(full, "main", previous=False))
    assert read(container_dir, previous) == "first\n"
    assert read(container_dir, current) == "second\n"
    offsets, stamps = logs.read_times(container_dir)
    assert offsets == [0, 6] and stamps == sorted(stamps)


# -- certificates and the HTTPS endpoint ------------------------------------------------------


def make_ca(tmp_path, name="test-ca"):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=10))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        # Not the SHA-1 of the key that cryptography would compute, as kwokctl's is not either.
        .add_extension(x509.SubjectKeyIdentifier(b"\x42" * 20), critical=False)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def client_cert(tmp_path, ca):
    """A client certificate from the CA, as kwokctl's admin certificate (what the API server presents)."""
    ca_cert = x509.load_pem_x509_certificate(ca[0].read_bytes())
    ca_key = serialization.load_pem_private_key(ca[1].read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=10))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (tmp_path / "client.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "client.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return tmp_path / "client.crt", tmp_path / "client.key"


def test_the_serving_certificate_names_the_node_and_its_address_and_is_signed_by_the_ca(tmp_path):
    ca = make_ca(tmp_path)
    cert_pem, _ = issue_serving_certificate(ca[0].read_bytes(), ca[1].read_bytes(), "local-0", ["127.0.0.1"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["local-0"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.subject.rfc4514_string() == "CN=system:node:local-0,O=system:nodes"
    assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == x509.ExtendedKeyUsage(
        [ExtendedKeyUsageOID.SERVER_AUTH]
    )
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca[0].read_bytes()))
    authority = cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert authority.key_identifier == b"\x42" * 20  # the CA's, which OpenSSL matches the issuer by


@pytest.fixture
def endpoint(tmp_path):
    """The endpoint over TLS, the CA's, serving pod ns/p (uid u) whose container main ran twice."""
    ca = make_ca(tmp_path)
    container_dir = tmp_path / "state/pods/u/main"
    container_dir.mkdir(parents=True)
    (container_dir / "log").write_bytes(b"crashed\nline 1\nline 2\nline 3\n")
    (container_dir / "runs").write_text("0 10\n8 20\n")
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
        "spec": {"containers": [{"name": "main"}]},
        "status": {
            "containerStatuses": [
                {
                    "name": "main",
                    "containerID": "local://20",
                    "state": {"terminated": {"exitCode": 1, "containerID": "local://20"}},
                    "lastState": {"terminated": {"exitCode": 2, "containerID": "local://10"}},
                }
            ]
        },
    }
    context = server_context(*ca, "local-0", ["127.0.0.1"], tmp_path / "pki")
    server = KubeletServer(tmp_path / "state", lambda ns, name: pod if (ns, name) == ("ns", "p") else None, context)
    server.start()
    yield server, ca
    server.stop()


def get(server, ca, path, method="GET", cert=None):
    context = ssl.create_default_context(cafile=str(ca[0]))
    if cert:
        context.load_cert_chain(*cert)
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_the_endpoint_serves_logs_to_a_client_of_the_ca(endpoint, tmp_path):
    server, ca = endpoint
    cert = client_cert(tmp_path, ca)
    assert get(server, ca, "/containerLogs/ns/p/main", cert=cert) == (200, "line 1\nline 2\nline 3\n")
    assert get(server, ca, "/containerLogs/ns/p/main?tailLines=1&follow=true", cert=cert) == (200, "line 3\n")
    assert get(server, ca, "/containerLogs/ns/p/main?previous=true", cert=cert) == (200, "crashed\n")
    status, body = get(server, ca, "/containerLogs/ns/p/main?timestamps=true&tailLines=1", cert=cert)
    assert status == 200 and body.endswith("Z line 3\n") and len(body) == len("2026-01-01T00:00:00.000000000Z line 3\n")


def test_unknown_pods_and_containers_are_not_found_and_exec_is_not_implemented(endpoint, tmp_path):
    server, ca = endpoint
    cert = client_cert(tmp_path, ca)
    assert get(server, ca, "/containerLogs/ns/q/main", cert=cert) == (404, 'pod "ns/q" does not exist on this node\n')
    assert get(server, ca, "/containerLogs/ns/p/side", cert=cert) == (
        404,
        'container "side" not found in pod "ns/p"\n',
    )
    assert get(server, ca, "/containerLogs/ns/p/main?tailLines=-2", cert=cert)[0] == 400
    status, body = get(server, ca, "/exec/ns/p/main?command=ls&stdout=true", method="POST", cert=cert)
    assert status == 501 and "exec is not supported" in body


def test_the_endpoint_refuses_clients_without_a_certificate_of_the_ca(endpoint, tmp_path):
    server, ca = endpoint
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        get(server, ca, "/containerLogs/ns/p/main")
    (tmp_path / "other").mkdir()
    other = client_cert(tmp_path / "other", make_ca(tmp_path / "other", "other-ca"))
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        get(server, ca, "/containerLogs/ns/p/main", cert=other)


def test_a_client_that_does_not_trust_the_ca_does_not_trust_the_endpoint(endpoint, tmp_path):
    server, ca = endpoint
    (tmp_path / "o").mkdir()
    other_ca = make_ca(tmp_path / "o", "other-ca")
    with pytest.raises(ssl.SSLCertVerificationError):
        get(server, other_ca, "/containerLogs/ns/p/main", cert=client_cert(tmp_path, ca))


def test_follow_ends_when_the_client_goes_away(endpoint, tmp_path):
    server, ca = endpoint
    (tmp_path / "state/pods/u/main/pid").write_text("20 0\n")  # the run still runs
    pod = server.lookup("ns", "p")
    pod["status"]["containerStatuses"][0]["state"] = {"running": {}}
    context = ssl.create_default_context(cafile=str(ca[0]))
    context.load_cert_chain(*client_cert(tmp_path, ca))
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=10)
    conn.request("GET", "/containerLogs/ns/p/main?follow=true&tailLines=1")
    response = conn.getresponse()
    assert response.status == 200
    assert response.read1() == b"line 3\n"
    before = threading.active_count()
    conn.close()
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=5)
    while threading.active_count() >= before and datetime.datetime.now() < deadline:
        threading.Event().wait(0.1)
    assert threading.active_count() < before


def test_node_status_advertises_the_endpoint_port():
    status = node_status("local-0", FACTS, now="t", ready_since="t", memory_limits=(True, "how"), kubelet_port=10250)
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert status["addresses"][0] == {"type": "InternalIP", "address": "127.0.0.1"}
