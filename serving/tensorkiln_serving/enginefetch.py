"""`tensorkiln-engine-fetch`: the Triton pod's init container lays out the model repository.

    tensorkiln-engine-fetch --registry URI --digest DIGEST --model-name NAME
        --config /etc/tensorkiln/triton/config.pbtxt --repository /models
        [--python-backend] [--termination-log PATH]

It fetches the engine from the registry, which verifies every artifact's SHA-256, and writes

    REPOSITORY/NAME/config.pbtxt     a copy of --config (the operator renders it into a ConfigMap)
    REPOSITORY/NAME/1/<engine files> model.xml + model.bin, model.onnx or model.plan
    REPOSITORY/NAME/1/model.py       --python-backend: the runner (python_backend/model.py)
    REPOSITORY/NAME/1/engine.json    --python-backend: the manifest fields the runner reads

--python-backend is for the one engine no native backend serves, the SimulatedServiceTime
SIMULATION of the local cluster (the operator passes it when the config names the python backend).

Everything is staged in REPOSITORY/.NAME.*.partial and renamed into place, so the repository
never holds half a model; running again (a restarted pod) replaces the model the same way.
Exit 0 when the model is in place, 1 when it is not (the termination message says why: an
artifact that does not match its manifest, an unknown digest, an unreachable registry), 2 for
bad arguments. The termination message is JSON, {"model", "engine": {"digest", "compiler",
"precision"}, "files"} or {"error": {"reason", "message"}}, the reason being the exception's
class name (ArtifactIntegrityError names the artifact and both digests). It goes to
--termination-log, by default /dev/termination-log when the kubelet provides that file (never
created on a host's /dev), and to stdout.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tensorkiln_api.registry import EngineManifest, RegistryError, open_registry

EXIT_OK, EXIT_FAILED = 0, 1
VERSION = "1"  # Triton's model version directory
RUNNER = Path(__file__).parent / "python_backend" / "model.py"
ENGINE_JSON = "engine.json"
TERMINATION_LOG = Path("/dev/termination-log")
MESSAGE_LIMIT = 3500  # Kubernetes keeps 4096 bytes of a termination message; the JSON around it fits

log = logging.getLogger("tensorkiln_serving.enginefetch")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s")
    try:
        manifest = lay_out(args.registry, args.digest, args.model_name, args.config, args.repository,
                           python_backend=args.python_backend)  # fmt: skip
    except (RegistryError, OSError) as error:
        reason = type(error).__name__
        log.error("%s: %s", reason, error)
        _report(args.termination_log, {"error": {"reason": reason, "message": str(error)[:MESSAGE_LIMIT]}})
        return EXIT_FAILED
    engine = {"digest": args.digest, "compiler": manifest.compiler, "precision": manifest.precision}
    model_dir = args.repository / args.model_name
    files = sorted(str(p.relative_to(args.repository)) for p in model_dir.rglob("*") if p.is_file())
    log.info("model %s is in %s: %s", args.model_name, args.repository, ", ".join(files))
    _report(args.termination_log, {"model": args.model_name, "engine": engine, "files": files})
    return EXIT_OK


def lay_out(
    registry_uri: str, digest: str, name: str, config: Path, repository: Path, *, python_backend: bool
) -> EngineManifest:
    """Fetch, verify and install the model `name` into `repository`, replacing any earlier copy."""
    repository.mkdir(parents=True, exist_ok=True)
    for leftover in repository.iterdir():  # what a run that was killed midway left
        if leftover.name.startswith(f".{name}."):
            shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".partial", dir=repository))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the model from a server run as another user
        manifest = open_registry(registry_uri).fetch(digest, staging / VERSION)
        shutil.copyfile(config, staging / "config.pbtxt")
        if python_backend:
            shutil.copyfile(RUNNER, staging / VERSION / "model.py")
            (staging / VERSION / ENGINE_JSON).write_text(json.dumps(engine_json(digest, manifest), indent=2) + "\n")
        _replace(repository / name, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return manifest


def engine_json(digest: str, manifest: EngineManifest) -> dict:
    """What the python-backend runner needs: tensors, batch limit and the selected candidate's settings (the
    simulation's service time)."""
    fields = manifest.to_json_dict()
    winner = fields["selection"]["winner"]
    selected = next((c for c in fields["candidates"] if c["id"] == winner), {})
    profiles = fields["profiles"].get("inputs", {}) if manifest.batched else {}  # unbatched: no batch axis to limit
    batch_limits = [shape["max"][0] for shape in profiles.values()]
    return {
        "digest": digest,
        **{key: fields[key] for key in ("modelName", "compiler", "precision", "inputs", "outputs", "profiles")},
        "candidate": winner,
        "settings": selected.get("settings", {}),
        "maxBatchSize": min(batch_limits) if batch_limits else None,
    }


def _replace(target: Path, staging: Path) -> None:
    """Put `staging` at `target`; an existing model is moved aside first (a directory cannot be renamed over)."""
    if target.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent))
        os.replace(target, aside / target.name)
        os.replace(staging, target)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(staging, target)


def _report(path: Path, payload: dict) -> None:
    text = json.dumps(payload, separators=(",", ":"))
    print(text)  # also the log tail that terminationMessagePolicy FallbackToLogsOnError reports
    if path != TERMINATION_LOG or path.exists():
        path.write_text(text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorkiln-engine-fetch", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--registry", required=True, help="registry URI: file:///path, s3://bucket/prefix or oci://host/repository"
    )
    parser.add_argument("--digest", required=True, help="the engine's digest (SHA-256 of its manifest)")
    parser.add_argument("--model-name", required=True, help="Triton model name: the directory under --repository")
    parser.add_argument("--config", required=True, type=Path, help="the config.pbtxt to install with the engine")
    parser.add_argument("--repository", required=True, type=Path, help="Triton's model repository (/models)")
    parser.add_argument(
        "--python-backend", action="store_true", help="add the python-backend runner and engine.json (the simulation)"
    )
    parser.add_argument(
        "--termination-log",
        type=Path,
        default=TERMINATION_LOG,
        help="where the JSON result goes (terminationMessagePath)",
    )
    return parser


if __name__ == "__main__":
    sys.exit(main())
