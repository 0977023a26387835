"""The engine registry unavailable, then back: the CompileJob says so in a condition, asks again
with a growing backoff (5 s doubling, at most 80 s), creates no Job meanwhile, and converges once
the registry is back.

The operator's registry is a directory of this test (registry_uri: the namespace's claim, at a path
of its own), made unavailable twice: moved away (a volume that is not mounted) and replaced by a
file, by this machine in the volume's directory, where the compile pods see it too.
"""

import re
import shutil
import time

from tensorkiln_local import install

from .support import (
    compile_jobs,
    condition,
    create,
    get_model,
    jobs_of,
    publish_simulated,
    ready,
    simulated_model,
    wait_healthy,
    wait_until,
)


def registry_condition(api, namespace: str, model: str) -> dict | None:
    cjs = compile_jobs(api, namespace, model)
    found = condition(cjs[0], "Compiled") if cjs else {}
    return found if found.get("reason") == "RegistryUnavailable" else None


def retries_seen(api, namespace: str, model: str, seconds: float) -> list[tuple[int, int]]:
    """(attempt, announced delay) pairs from the condition message, watched for `seconds`."""
    seen: list[tuple[int, int]] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = registry_condition(api, namespace, model) or {}
        match = re.search(r"attempt (\d+) failed, next in (\d+) s", found.get("message", ""))
        if match and (not seen or seen[-1][0] != int(match[1])):
            seen.append((int(match[1]), int(match[2])))
        time.sleep(0.5)
    return seen


def test_registry_moved_away_or_replaced_by_a_file_is_reported_retried_with_backoff_then_converges(
    api, namespace, operator, tmp_path, registry_uri
):
    root = install.claims_view() / registry_uri.removeprefix("pvc://")
    first, second = simulated_model(namespace, "first", variant=21), simulated_model(namespace, "second", variant=22)
    for model in (first, second):
        publish_simulated(api, registry_uri, model, tmp_path / "engines")
    wait_healthy(operator)  # its registry is open (and prepared) from now on

    for model, outage in ((first, "moved away"), (second, "replaced by a file")):
        name = model["metadata"]["name"]
        away = root.with_name(f"{root.name}-away")
        root.rename(away)
        if outage == "replaced by a file":
            root.write_text("not a registry\n")
        try:
            create(api, model)
            found = wait_until(
                lambda name=name: registry_condition(api, namespace, name), 60, f"{name}: RegistryUnavailable"
            )
            assert found["status"] == "Unknown"
            assert registry_uri in found["message"], found["message"]  # the name the user wrote
            assert ("not a directory" if outage == "replaced by a file" else "missing") in found["message"]
            seen = retries_seen(api, namespace, name, seconds=40)
            print(f"\n{name} ({outage}): attempts and announced delays {seen}")
            assert len(seen) >= 3, seen
            delays = [delay for _, delay in seen]
            assert delays == sorted(delays) and delays[-1] > delays[0], f"no backoff: {seen}"
            (cj,) = compile_jobs(api, namespace, name)
            assert jobs_of(api, namespace, cj["metadata"]["name"]) == [], "no Job while the cache cannot be asked"
            assert get_model(api, namespace, name)["status"]["phase"] == "Compiling"
        finally:
            if root.is_file():
                root.unlink()
            if away.exists():
                away.rename(root)
        back = time.monotonic()
        converged = wait_until(
            lambda name=name: ready(m := get_model(api, namespace, name)) and m, 180, f"{name} Ready"
        )
        (cj,) = compile_jobs(api, namespace, name)
        print(f"{name}: Ready {time.monotonic() - back:.0f} s after the registry came back")
        assert cj["status"]["phase"] == "Succeeded" and cj["status"]["cacheHit"] is True
        assert condition(cj, "Compiled")["reason"] == "CacheHit"
        assert converged["status"]["targets"][0]["engine"]["digest"] == cj["status"]["engine"]["digest"]
    shutil.rmtree(tmp_path / "engines", ignore_errors=True)
