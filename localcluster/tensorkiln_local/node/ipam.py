"""Pod IPs from the loopback range, one per pod UID.

Linux routes all of 127.0.0.0/8 to `lo`, so each pod can bind its own 127.0.0.x address and
many pods can serve on the same port. Allocations live in a JSON file in the state dir, so an
agent restart gives a pod the IP it already reported.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from ipaddress import IPv4Address
from pathlib import Path

FIRST = IPv4Address("127.0.0.10")
LAST = IPv4Address("127.0.0.250")


class IpExhausted(RuntimeError):
    pass


def parse_range(text: str) -> tuple[IPv4Address, IPv4Address]:
    """`FIRST-LAST`, two loopback addresses, FIRST <= LAST (for argparse: ValueError on bad input)."""
    first, _, last = text.partition("-")
    low, high = IPv4Address(first.strip()), IPv4Address(last.strip())
    if not (low.is_loopback and high.is_loopback and low <= high):
        raise ValueError(f"{text!r}: want FIRST-LAST, two loopback addresses with FIRST <= LAST")
    return low, high


def free_address_below_pods(ports: tuple[int, ...]) -> str:
    """A 127.0.0.x below the pod range (2-9) where every port is free: for servers started outside pods."""
    for host in range(2, int(FIRST) - int(IPv4Address("127.0.0.0"))):
        address = f"127.0.0.{host}"
        try:
            for port in ports:
                with socket.socket() as probe:
                    probe.bind((address, port))
        except OSError:
            continue
        return address
    raise IpExhausted(f"no loopback address in 127.0.0.2-{FIRST} has ports {ports} free")


class IpAllocator:
    def __init__(self, path: Path, first: IPv4Address = FIRST, last: IPv4Address = LAST):
        self._path = path
        self._pool = [str(IPv4Address(i)) for i in range(int(first), int(last) + 1)]
        self._lock = threading.Lock()
        self._by_uid: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}

    def allocate(self, uid: str) -> str:
        with self._lock:
            if uid in self._by_uid:
                return self._by_uid[uid]
            used = set(self._by_uid.values())
            free = next((ip for ip in self._pool if ip not in used), None)
            if free is None:
                raise IpExhausted(
                    f"no free pod IP in {self._pool[0]}-{self._pool[-1]} ({len(self._pool)} addresses, all in use)"
                )
            self._by_uid[uid] = free
            self._save()
            return free

    def release(self, uid: str) -> None:
        with self._lock:
            if self._by_uid.pop(uid, None) is not None:
                self._save()

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._by_uid)

    def _save(self) -> None:
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._by_uid, indent=1, sort_keys=True))
        os.replace(tmp, self._path)  # atomic: a crash never leaves a half-written file
