"""Hourly prices of hardware classes, from an annotation on their Nodes (pure).

A Node carries `tensorkiln.dev/price-per-hour: "<decimal>"`: what one GPU of the node costs an
hour (GPU classes), or one CPU core (CPU classes), in whatever currency the cluster's owner
counts in (one currency for the whole cluster; no unit or symbol is written). The value is a
plain positive decimal, such as "2.48" or "0.035": no sign, exponent, unit or thousands separator.

A class's price is its Nodes' price. Nodes of one class that carry no annotation leave the class
without a price; nodes that disagree (different values, or some with a price and some without)
and values that are not positive decimals are errors that name the node: the class then has no
price, and the error says why (HardwareClass.price_error).

A serving replica of a GPU class uses one GPU (the serving builder adds nvidia.com/gpu: 1, unless
spec.serving.resources asks for more), so its price per hour is the GPU's; a replica of a CPU class
costs its CPU request in cores times the price per core.
"""

import re
from decimal import Decimal

PRICE_ANNOTATION = "tensorkiln.dev/price-per-hour"
PRICE_PATTERN = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,9})?$")


class PriceError(ValueError):
    """A price annotation that cannot be used; the message names the node."""


def _name(node: dict) -> str:
    return node.get("metadata", {}).get("name", "<unnamed>")


def node_price(node: dict) -> float | None:
    """The node's hourly price per GPU or CPU core; None when it carries no annotation."""
    value = (node.get("metadata", {}).get("annotations") or {}).get(PRICE_ANNOTATION)
    if value is None:
        return None
    text = value.strip()
    if not PRICE_PATTERN.fullmatch(text) or Decimal(text) <= 0:
        raise PriceError(
            f"node {_name(node)}: {PRICE_ANNOTATION} {value!r} is not a positive decimal number "
            "(an hourly price per GPU or CPU core, such as 2.48)"
        )
    return float(text)


def class_price(nodes: list[dict]) -> tuple[float | None, str | None]:
    """(price, error) of a class from its nodes: (None, None) when no node has a price; (None,
    message naming the node) when one is malformed or the nodes disagree."""
    prices: dict[float | None, str] = {}  # price -> first node (by name) that carries it
    for node in sorted(nodes, key=_name):
        try:
            price = node_price(node)
        except PriceError as error:
            return None, str(error)
        prices.setdefault(price, _name(node))
    if len(prices) > 1:
        listed = ", ".join(
            f"node {name}: {'none' if price is None else f'{price:g}'}"
            for price, name in sorted(prices.items(), key=lambda item: item[1])
        )
        return None, f"nodes of one class disagree on {PRICE_ANNOTATION}: {listed}"
    (price,) = prices or (None,)
    return price, None


def replica_price(kind: str, price: float | None, cpu_cores: float, gpus: float = 1) -> float | None:
    """Price per replica-hour: a GPU class's replica uses `gpus` GPUs (one, unless spec.serving.resources
    asks for more), a CPU class's `cpu_cores` cores."""
    if price is None:
        return None
    return price * gpus if kind == "GPU" else price * cpu_cores


_CPU_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m?)$")


def cpu_cores(quantity: str | int | float) -> float:
    """Cores in a Kubernetes CPU quantity: "2", "500m", "1.5", 2."""
    if isinstance(quantity, int | float):
        return float(quantity)
    match = _CPU_QUANTITY.fullmatch(str(quantity).strip())
    if not match:
        raise ValueError(f"unsupported CPU quantity {quantity!r}")
    number, milli = match.groups()
    return float(number) / 1000 if milli else float(number)
