"""The engine registry: content-addressed, hardware-tagged compiled engines."""

from tensorkiln_api.registry.base import (
    ArtifactIntegrityError,
    EngineNotFound,
    Registry,
    RegistryError,
    RegistryUnavailable,
)
from tensorkiln_api.registry.locations import open_registry
from tensorkiln_api.registry.manifest import Artifact, CacheKey, EngineManifest

__all__ = [
    "Artifact",
    "ArtifactIntegrityError",
    "CacheKey",
    "EngineManifest",
    "EngineNotFound",
    "Registry",
    "RegistryError",
    "RegistryUnavailable",
    "open_registry",
]
