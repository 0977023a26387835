"""spec.source.credentials as the compile pod holds them: the Secret's keys as files in a read-only
volume (TENSORKILN_SOURCE_CREDENTIALS names its directory), or the pod's ServiceAccount, whose token the
cloud's workload identity exchanges (EKS IRSA's web-identity token file, GKE's metadata server).

A source reads the keys of its scheme (SourceCredentials.secretName's description lists them) and
nothing else: never the engine registry's credentials, which the pod also holds (its environment for
S3, $DOCKER_CONFIG for OCI). Values are never part of a message: `described` names where they come
from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV = "TENSORKILN_SOURCE_CREDENTIALS"
FIELD = "spec.source.credentials"


@dataclass(frozen=True)
class Credentials:
    secret_name: str | None = None
    service_account_name: str | None = None
    directory: Path | None = None  # the Secret's keys, one file each

    @classmethod
    def of(cls, credentials, env: Mapping[str, str] = os.environ) -> Credentials:
        """From spec.source.credentials (a SourceCredentials, or None) and the pod's environment."""
        if credentials is None:
            return NONE
        directory = Path(env[ENV]) if credentials.secret_name and env.get(ENV) else None
        return cls(credentials.secret_name, credentials.service_account_name, directory)

    @property
    def ambient(self) -> bool:
        """The pod's own identity (its ServiceAccount) stands for the credentials."""
        return self.service_account_name is not None

    def path(self, key: str) -> Path | None:
        """The file of the Secret's key `key`, when the Secret has it."""
        if self.directory is None:
            return None
        path = self.directory / key
        return path if path.is_file() else None

    def read(self, key: str) -> str | None:
        """The Secret's key `key`, stripped of surrounding whitespace (a token written with a newline)."""
        path = self.path(key)
        return path.read_text().strip() if path else None

    @property
    def described(self) -> str:
        """Where the credentials come from, in words that hold no secret."""
        if self.secret_name:
            return f"{FIELD}.secretName {self.secret_name!r}"
        if self.service_account_name:
            return f"{FIELD}.serviceAccountName {self.service_account_name!r}"
        return f"no {FIELD} (anonymous)"


NONE = Credentials()
