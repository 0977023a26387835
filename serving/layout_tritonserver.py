"""Lay out the Triton server of an nvidia-pytriton wheel as NGC's image does (build time only).

    python3 layout_tritonserver.py nvidia_pytriton-0.7.0-...whl /opt/tritonserver

The wheel keeps the server in pytriton/tritonserver/ (bin/, backends/python/, one python backend
stub per Python version in python_backend_stubs/) and its shared libraries in
nvidia_pytriton.libs/. The result is bin/tritonserver, lib/ (those libraries: the server finds
them by its RPATH $ORIGIN/../lib, the backend by LD_LIBRARY_PATH) and backends/python/ with the
stub of the Python that runs this script, which is the image's, and lib/libtritonserver.so, the name
the native backends (serving/triton_backends) link the server library by.
"""

import os
import shutil
import sys
import zipfile
from pathlib import Path

SERVER = "pytriton/tritonserver/"
LIBS = "nvidia_pytriton.libs/"
EXECUTABLES = {f"{SERVER}bin/tritonserver"}


def layout(wheel: Path, target: Path) -> None:
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = f"{SERVER}python_backend_stubs/{python}/triton_python_backend_stub"
    places = {f"{SERVER}bin/": "bin", f"{SERVER}backends/python/": "backends/python", LIBS: "lib"}
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        if stub not in names:
            raise SystemExit(f"{wheel.name} has no python backend stub for Python {python}")
        for name in [*names, stub]:
            if name.endswith("/") or "__pycache__" in name:
                continue
            if name == stub:
                destination = target / "backends" / "python" / Path(name).name
            else:
                prefix = next((p for p in places if name.startswith(p)), None)
                if prefix is None:
                    continue
                destination = target / places[prefix] / name[len(prefix) :]
            destination.parent.mkdir(parents=True, exist_ok=True)
            with archive.open(name) as source, open(destination, "wb") as out:
                shutil.copyfileobj(source, out)
            # Read-only for everyone but root: the wheel records some files as world-writable.
            os.chmod(destination, 0o755 if name in EXECUTABLES or name == stub else 0o644)
    # The wheel names the server library libtritonserver-<hash>.so; native backends link libtritonserver.so.
    (server_library,) = (target / "lib").glob("libtritonserver-*.so")
    (target / "lib" / "libtritonserver.so").symlink_to(server_library.name)


if __name__ == "__main__":
    layout(Path(sys.argv[1]), Path(sys.argv[2]))
