"""Report step: the Pod's termination message, a compact JSON that the operator parses.

Kubernetes keeps at most 4096 bytes of it, so long messages are cut to fit.
success: {"engine": {"digest", "uri"}, "selected", "speedupVsBaseline", "accuracyPassed", "rejected"}
         ({"engine": ..., "cached": true} when the registry already had the engine)
failure: {"error": {"reason": "CamelCase", "message": "... names the field or file"}}
"""

from __future__ import annotations

import json
from pathlib import Path

from tensorkiln_api.registry.manifest import EngineManifest

LIMIT_BYTES = 4096


def success(digest: str, uri: str, manifest: EngineManifest) -> dict:
    statuses = [c.status for c in manifest.candidates]
    speedup = manifest.selection.speedup_vs_baseline
    return {
        "engine": {"digest": digest, "uri": uri},
        "selected": manifest.selection.winner,
        "speedupVsBaseline": round(speedup, 3) if speedup is not None else None,
        "accuracyPassed": sum(s in ("Passed", "Selected") for s in statuses),
        "rejected": statuses.count("RejectedAccuracy"),
    }


def cached(digest: str, uri: str) -> dict:
    return {"engine": {"digest": digest, "uri": uri}, "cached": True}


def failure(reason: str, message: str) -> dict:
    return {"error": {"reason": reason, "message": message}}


def render(payload: dict) -> str:
    text = _dumps(payload)
    if "error" not in payload:  # success messages are small by construction
        return text
    reason, message = payload["error"]["reason"], payload["error"]["message"]
    while len(text.encode()) >= LIMIT_BYTES:  # cutting N message bytes shortens the JSON by >= N bytes
        cut = len(message.encode()) - (len(text.encode()) - LIMIT_BYTES) - 8
        message = message.encode()[: max(0, cut)].decode(errors="ignore")
        text = _dumps(failure(reason, message + " ..."))
    return text


def _dumps(payload: dict) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def write(path: Path, payload: dict) -> None:
    path.write_text(render(payload))
