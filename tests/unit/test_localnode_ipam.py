"""Loopback pod IP allocator."""

from ipaddress import IPv4Address

import pytest
from tensorkiln_local.node.ipam import IpAllocator, IpExhausted, parse_range


def test_allocation_is_stable_and_survives_a_restart(tmp_path):
    path = tmp_path / "ipam.json"
    ipam = IpAllocator(path)
    a, b = ipam.allocate("uid-a"), ipam.allocate("uid-b")
    assert (a, b) == ("127.0.0.10", "127.0.0.11")
    assert ipam.allocate("uid-a") == a
    assert IpAllocator(path).allocate("uid-b") == b


def test_released_ip_is_reused(tmp_path):
    ipam = IpAllocator(tmp_path / "ipam.json")
    first = ipam.allocate("uid-a")
    ipam.allocate("uid-b")
    ipam.release("uid-a")
    ipam.release("uid-unknown")
    assert ipam.uids() == {"uid-b"}
    assert ipam.allocate("uid-c") == first


def test_exhausted_pool_says_so(tmp_path):
    ipam = IpAllocator(tmp_path / "ipam.json", IPv4Address("127.0.0.10"), IPv4Address("127.0.0.11"))
    ipam.allocate("a")
    ipam.allocate("b")
    with pytest.raises(IpExhausted, match=r"no free pod IP in 127.0.0.10-127.0.0.11 \(2 addresses"):
        ipam.allocate("c")


def test_pod_ip_ranges_parse_and_refuse_what_is_not_a_loopback_range():
    assert parse_range("127.0.1.10-127.0.1.250") == (IPv4Address("127.0.1.10"), IPv4Address("127.0.1.250"))
    for bad in ("10.0.0.1-10.0.0.9", "127.0.1.9-127.0.1.2", "127.0.1.10"):
        with pytest.raises(ValueError):
            parse_range(bad)
