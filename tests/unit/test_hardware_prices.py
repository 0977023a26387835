import pytest
from tensorkiln.hardware.classes import GPU_PRODUCT, discover
from tensorkiln.hardware.prices import (
    PRICE_ANNOTATION,
    PriceError,
    class_price,
    cpu_cores,
    node_price,
    replica_price,
)
from tensorkiln.hardware.selection import select_explicit

from .fleet import default_fleet, local_node


def priced(node: dict, price: str | None) -> dict:
    if price is not None:
        node["metadata"].setdefault("annotations", {})[PRICE_ANNOTATION] = price
    return node


def gpu_node(name: str, price: str | None, product: str = "NVIDIA-L4") -> dict:
    return priced(local_node(name, {GPU_PRODUCT: product}), price)


def test_a_node_price_is_a_positive_decimal():
    assert node_price(gpu_node("l4-0", "0.8")) == 0.8
    assert node_price(gpu_node("l4-0", " 12 ")) == 12.0
    assert node_price(gpu_node("l4-0", None)) is None


@pytest.mark.parametrize("value", ["0", "0.000", "-1", "1e3", "$2", "2.5/h", "", "nan", "inf", "1,5", "2."])
def test_a_price_that_is_not_a_positive_number_is_refused_naming_the_node(value):
    with pytest.raises(PriceError, match=f"node l4-7: {PRICE_ANNOTATION} .* is not a positive decimal number"):
        node_price(gpu_node("l4-7", value))


def test_a_class_price_is_its_nodes_price_and_none_without_annotations():
    assert class_price([gpu_node("a", "0.8"), gpu_node("b", "0.80")]) == (0.8, None)
    assert class_price([gpu_node("a", None), gpu_node("b", None)]) == (None, None)
    assert class_price([]) == (None, None)


def test_nodes_that_disagree_are_an_error_naming_them():
    price, error = class_price([gpu_node("b", "0.9"), gpu_node("a", "0.8"), gpu_node("c", "0.8")])
    assert price is None
    assert error == f"nodes of one class disagree on {PRICE_ANNOTATION}: node a: 0.8, node b: 0.9"
    price, error = class_price([gpu_node("a", "0.8"), gpu_node("b", None)])
    assert price is None and error.endswith("node a: 0.8, node b: none")


def test_a_malformed_price_makes_the_class_error_name_the_node():
    price, error = class_price([gpu_node("a", "0.8"), gpu_node("b", "-0.8")])
    assert price is None and error.startswith("node b: ")


def test_discovered_classes_carry_their_price_or_its_error():
    nodes = [gpu_node("l4-0", "0.8"), gpu_node("l4-1", "0.8"), gpu_node("h100-0", "free", "NVIDIA-H100")]
    nodes.append(priced(local_node("cpu-0"), "0.035"))
    classes = {c.name: c for c in discover(nodes)}
    assert (classes["nvidia-l4"].price_per_hour, classes["nvidia-l4"].price_error) == (0.8, None)
    assert classes["nvidia-h100"].price_per_hour is None
    assert classes["nvidia-h100"].price_error.startswith("node h100-0: ")
    assert classes["cpu-amd64-intel-amx"].price_per_hour == 0.035


def test_unpriced_fleet_has_no_prices():
    assert all(c.price_per_hour is None and c.price_error is None for c in discover(default_fleet()))


def test_explicit_pools_carry_their_nodes_price():
    nodes = [gpu_node("l4-0", "0.8"), gpu_node("l4-1", "0.9")]
    hardware = {"pools": [{"name": "cheap", "kind": "GPU", "nodeSelector": {GPU_PRODUCT: "NVIDIA-L4"}}]}
    (pool,) = select_explicit(hardware, nodes)
    assert pool.price_per_hour is None and "node l4-0: 0.8, node l4-1: 0.9" in pool.price_error
    (pool,) = select_explicit(hardware, nodes[:1])
    assert pool.price_per_hour == 0.8


def test_replica_price_is_one_gpu_or_the_cpu_request_in_cores():
    assert replica_price("GPU", 2.5, cpu_cores("2")) == 2.5
    assert replica_price("CPU", 0.04, cpu_cores("500m")) == pytest.approx(0.02)
    assert replica_price("CPU", None, 1.0) is None
    assert cpu_cores("1.5") == 1.5 and cpu_cores(2) == 2.0
    with pytest.raises(ValueError):
        cpu_cores("1Gi")
