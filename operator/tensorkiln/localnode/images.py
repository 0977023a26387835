"""Container images on a node without images: the local machine is the image.

A container normally runs its own `command` + `args`, resolved on the pod's PATH (the
project venv's bin first, then the host's). An image whose entrypoint matters, or whose
software lives somewhere else on this machine, gets a rule in `IMAGE_RULES`: the first rule
whose glob matches the image repository (registry/path, no tag or digest; Docker Hub's
`docker.io/library/` prefix removed) rewrites the container's command, args and env.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class Launch:
    """What a container asks to run, before $(VAR) expansion and path rewriting."""

    command: list[str]
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)


ImageRewrite = Callable[[Launch], Launch]


@dataclass(frozen=True)
class ImageRule:
    pattern: str  # fnmatch glob over `repository(image)`
    rewrite: ImageRewrite


def docker_defaults(*, entrypoint: Sequence[str] = (), cmd: Sequence[str] = ()) -> ImageRewrite:
    """Docker's rule: `command` replaces ENTRYPOINT; `args`, or else CMD when `command` is unset."""

    def rewrite(launch: Launch) -> Launch:
        if launch.command:
            return launch
        return replace(launch, command=list(entrypoint), args=launch.args or list(cmd))

    return rewrite


IMAGE_RULES: tuple[ImageRule, ...] = (
    ImageRule("busybox", docker_defaults(cmd=["sh"])),
    ImageRule("alpine", docker_defaults(cmd=["/bin/sh"])),
    ImageRule("debian", docker_defaults(cmd=["bash"])),
    ImageRule("ubuntu", docker_defaults(cmd=["/bin/bash"])),
    ImageRule("python", docker_defaults(cmd=["python3"])),
    # "nvcr.io/nvidia/tritonserver": a later issue adds the rule that maps `tritonserver` onto
    # the server binary of the nvidia-pytriton wheel (LD_LIBRARY_PATH, --backend-directory).
)


def repository(image: str) -> str:
    name = image.split("@", 1)[0]
    last_slash = name.rfind("/")
    if ":" in name[last_slash + 1 :]:
        name = name[: name.rfind(":")]
    for prefix in ("docker.io/library/", "docker.io/", "library/"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def rule_for(image: str, rules: tuple[ImageRule, ...] = IMAGE_RULES) -> ImageRule | None:
    repo = repository(image)
    return next((rule for rule in rules if fnmatchcase(repo, rule.pattern)), None)
