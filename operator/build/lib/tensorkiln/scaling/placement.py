"""Least-cost placement of a model's load across its hardware classes (pure).

spec.slo.placement: LeastCost serves an InferenceModel as a whole: given the demand D (requests/s
the model receives) and, per hardware class i,
- c_i: requests/s one replica sustains with the latency percentile under target (measured at
  compile, or observed; the caller passes what it counts on, headroom included),
- p_i: price per replica-hour (tensorkiln.hardware.prices), or None,
- l_i, u_i: min and max replicas,
- s_i = running_i + free_i: replicas the pool can run (those running now plus as many more as
  its free allocatable GPUs or cores fit); unlimited when free capacity is not known,
it returns replicas n_i per class that solve, exactly,

    minimise   sum_i p_i * n_i
    subject to N * min{c_i : n_i > 0} >= D,   N = sum_i min(n_i, s_i),
               l_i <= n_i <= u_i,   n_i integer,

ties between floors broken by fewer replicas in all, then by fewer replicas changed from those
running (no churn between equally good placements), then by more capacity, then by class name
(within a floor, by the fill's order below).

Why min, not a sum of capacities: the model's Service spreads requests evenly over its ready pods
(kube-proxy, and any client that follows the EndpointSlices), whatever their class, so each replica
takes D / N. A placement is safe only if that share is within the capacity of the slowest class it
uses; a fast class's extra capacity is not used by an even spread. Kubernetes Services have no
weights (topology-aware routing only prefers a zone), so the placement fits the spread every cluster
has rather than a weighted one it would need a Gateway for. A class of unknown capacity (c_i = 0)
counts for none and limits nothing: it runs its minimum.

Solved per capacity floor f, each c_i > 0 in turn: only classes with c_i >= f may run replicas (a
slower one that must serve, min(l_i, s_i) > 0, rules the floor out), and the constraint becomes
N >= M_f = ceil(D / f). The best over the floors is the optimum: an optimal placement's slowest
used class is one of the floors, and every floor's placement is safe (each replica's share
D / N <= f <= its c_i).

Replicas above s_i would stay Pending and serve nothing, so a full pool (free 0, pods pending) is
capped at what it runs, and the demand it cannot take goes to the next-cheapest classes: the
placement says which classes spilled (the least-cost placement without the pool limits wants
more replicas there than fit) and to which.

Prices missing: LeastCost needs a price on every class it places. When any class lacks one,
costs cannot be compared, so every replica counts as costing 1: the placement is then the
fewest replicas that meet the demand (reason FewestReplicas), with no cost figure, and it names
the classes without a price.

No floor meets the demand (at every floor, the allowed classes at max(l_i, min(u_i, s_i)) serve fewer
than M_f replicas): the floor whose classes, each at as many replicas as can serve, sustain the most
(N * f) is used, the other classes at their minimum, and the outcome is InsufficientCapacity with the
shortfall in requests/s.

What runs is kept (place's keep_within, the scaler's KEEP_WITHIN) while it meets the demand at a
cost within a small fraction of the least: capacity figures are measured, so two placements of
about the same cost would otherwise take turns as the figures move (and every turn starts pods).

Burst capacity (spec.slo.burstRequestsPerSecond, B): the placement is solved for D + B, so that a burst of
B requests/s is carried within the target before scaling can see it and new replicas become ready. When
no placement carries D + B, the one with the most capacity is used; only D counts for the SLO.

Zero demand with every minimum 0 would leave the model with no replica, which then never sees
the demand come back: the placement keeps one replica on the cheapest class that can run one.

Each floor's problem is solved exactly by filling: every class starts at its minimum, then one
replica at a time goes to the cheapest allowed class with room (under its maximum and its pool's
fit), until M_f serve. Every added replica serves exactly one unit of N at its class's price, so the
problem is a knapsack of unit items, where taking the cheapest first is optimal; replicas above a
class's fit would cost without serving, so none is added there. Equal prices go first to a class
below what it runs (fewer changes), then by name. That is at most (classes) x (replicas) steps per
floor: a dozen classes of a hundred replicas take milliseconds.
Arithmetic is exact (fractions of the given floats), so ties and the demand's edge are decided
without rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

LEAST_COST = "LeastCost"
FEWEST_REPLICAS = "FewestReplicas"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"


def places_least_cost(spec: dict) -> bool:
    """spec.slo.placement LeastCost under slo.mode Operator (the CRD admits it with that mode only)."""
    slo = spec.get("slo") or {}
    return slo.get("placement") == LEAST_COST and slo.get("mode", "Operator") == "Operator"


@dataclass(frozen=True)
class ClassOffer:
    """What one hardware class offers a model: capacity, price, bounds and room in its pool."""

    hardware_class: str
    capacity: float  # requests/s one replica sustains under the target; 0: unknown, only minimums placed
    price: float | None  # per replica-hour; None: no price
    min_replicas: int
    max_replicas: int
    running: int = 0  # replicas scheduled on the pool now
    free: int | None = None  # how many more replicas its pool fits; None: not known, not limiting
    price_error: str | None = None  # why a price that was set counts as none (named in the message)

    @property
    def fits(self) -> float:
        """Replicas the pool can run: those running plus those that fit; inf when not known."""
        return math.inf if self.free is None else self.running + self.free


@dataclass(frozen=True)
class Spill:
    """A class whose pool is full: the least-cost placement wants more replicas there than fit."""

    hardware_class: str
    wanted: int  # replicas the placement would give it if its pool had room
    fits: int  # replicas its pool runs: running plus free
    message: str


@dataclass(frozen=True)
class Placement:
    replicas: dict[str, int]
    reason: str  # LeastCost, FewestReplicas (a price is missing) or InsufficientCapacity
    message: str
    slo_met: bool  # the placement's capacity meets the demand
    capacity: float  # requests/s the placement sustains
    shortfall: float  # requests/s of the demand it cannot sustain; 0 when met
    cost_per_hour: float | None  # None when a price is missing
    shares: dict[str, float] = field(default_factory=dict)  # share of the load per class, by capacity
    spills: tuple[Spill, ...] = ()


@dataclass
class _Class:
    offer: ClassOffer
    c: Fraction
    p: Fraction
    low: int
    high: int  # replicas worth placing: max(low, min(max, fits))
    serving: float  # replicas that serve: min(n, fits)


def _prepare(offers: list[ClassOffer], priced: bool, pool_limits: bool) -> list[_Class]:
    classes = []
    for o in offers:
        fits = o.fits if pool_limits else math.inf
        low = o.min_replicas
        high = max(low, int(min(o.max_replicas, fits)))
        c = Fraction(o.capacity) if o.capacity > 0 else Fraction(0)
        p = Fraction(o.price) if priced else Fraction(1)
        classes.append(_Class(o, c, p, low, high, fits))
    return classes


def _order(cls: _Class) -> tuple:
    ratio = cls.p / cls.c if cls.c else math.inf
    return (ratio, cls.offer.hardware_class)


def _key(classes: list[_Class], chosen: list[int], cost: Fraction, capacity: Fraction, running: dict[str, int]):
    """The order of equally cheap placements (module doc): fewer replicas, fewer changes, more capacity, name."""
    names = [cls.offer.hardware_class for cls in classes]
    changes = sum(abs(n - running.get(name, 0)) for name, n in zip(names, chosen))
    by_name = tuple(n for _, n in sorted(zip(names, chosen)))
    return (cost, sum(chosen), changes, -capacity, by_name)


def _floors(classes: list[_Class]) -> list[Fraction | None]:
    """The capacity floors to solve for (module doc); [None] when no class's capacity is known."""
    return sorted({cls.c for cls in classes if cls.c}) or [None]


def _fill(classes: list[_Class], floor: Fraction | None, demand: Fraction, running: dict[str, int]) -> list[int] | None:
    """The floor's least-cost replicas (module doc), in the order of `classes`; None if it cannot meet
    the demand. No floor (no capacity known): the minimums, if the demand is none."""
    chosen = [cls.low for cls in classes]
    if floor is None:
        return chosen if demand <= 0 else None
    if any(min(cls.low, cls.serving) and 0 < cls.c < floor for cls in classes):
        return None  # a slower class that must serve replicas would take D / N over its capacity
    allowed = [i for i, cls in enumerate(classes) if cls.c >= floor]
    need = math.ceil(demand / floor) - sum(int(min(classes[i].low, classes[i].serving)) for i in allowed)
    names = [cls.offer.hardware_class for cls in classes]
    while need > 0:
        room = [i for i in allowed if chosen[i] < classes[i].high and chosen[i] < classes[i].serving]
        if not room:
            return None
        i = min(room, key=lambda i: (classes[i].p, chosen[i] >= running.get(names[i], 0), names[i]))
        chosen[i] += 1
        need -= 1
    return chosen


def _solve(classes: list[_Class], demand: Fraction, running: dict[str, int]) -> list[int] | None:
    """The optimal replicas under the Service's even spread (in the order of `classes`), or None
    when no floor meets the demand."""
    best: tuple | None = None
    for floor in _floors(classes):
        chosen = _fill(classes, floor, demand, running)
        if chosen is None:
            continue
        key = _key(classes, chosen, _cost(classes, chosen), _figures(classes, chosen)[0], running)
        if best is None or key < best[0]:
            best = (key, chosen)
    return None if best is None else best[1]


def _most_capacity(classes: list[_Class]) -> list[int]:
    """No placement meets the demand: the one that sustains the most under the even spread, every
    class at or above a floor as many replicas as can serve, the rest at their minimum."""
    options = []
    for floor in _floors(classes):
        chosen = [
            max(cls.low, int(min(cls.high, cls.serving))) if floor is not None and cls.c >= floor else cls.low
            for cls in classes
        ]
        options.append((-_figures(classes, chosen)[0], sum(chosen), chosen))
    return min(options)[2]


def _one_replica(classes: list[_Class]) -> list[int]:
    """No demand and no minimum: one replica on the cheapest class that runs one (then the most
    capacity, then by name), so that the model can still take the demand when it comes back."""
    room = [i for i, cls in enumerate(classes) if cls.high >= 1 and cls.serving >= 1]
    chosen = [0] * len(classes)
    if room:
        chosen[min(room, key=lambda i: (classes[i].p, -classes[i].c, classes[i].offer.hardware_class))] = 1
    return chosen


def _figures(classes: list[_Class], replicas: list[int]) -> tuple[Fraction, dict[str, float]]:
    """What the placement sustains under the even spread (the slowest used known capacity times the
    replicas of known capacity that serve), and each class's share of the load (of its serving pods)."""
    serving = [int(min(n, cls.serving)) for cls, n in zip(classes, replicas)]
    used = [cls.c for cls, n in zip(classes, serving) if n and cls.c]
    known = sum(n for cls, n in zip(classes, serving) if cls.c)
    total = min(used) * known if used else Fraction(0)
    pods = sum(serving)
    shares = {cls.offer.hardware_class: n / pods if pods else 0.0 for cls, n in zip(classes, serving)}
    return total, shares


def _describe(classes: list[_Class], replicas: list[int], priced: bool) -> str:
    parts = []
    for cls, n in zip(classes, replicas):
        o = cls.offer
        text = f"{o.hardware_class} {n} x {_rate(o.capacity)} req/s"
        if priced:
            text += f" at {o.price:g}/h each"
        parts.append(text)
    return ", ".join(parts)


def place(offers: list[ClassOffer], demand: float, keep_within: float = 0.0, burst: float = 0.0) -> Placement:
    """Replicas per class meeting `demand` (requests/s) at the least cost per hour; see the module doc.

    `keep_within`: what runs (each class's `running`, within its bounds) is kept while it meets the
    demand and costs at most this fraction more than the least cost, so that two placements of about
    the same cost, between which noisy capacity figures would flip, do not take turns.
    `burst`: spare requests/s to carry above the demand (spec.slo.burstRequestsPerSecond); the placement
    carries demand + burst, and when no placement can, the most capacity. Only the demand counts for
    the SLO: a burst capacity the classes cannot carry is said in the message, not as a shortfall."""
    unpriced = sorted(
        o.hardware_class + (f" ({o.price_error})" if o.price_error else "") for o in offers if o.price is None
    )
    priced = not unpriced
    classes = sorted(_prepare(offers, priced, pool_limits=True), key=_order)
    running = {o.hardware_class: o.running for o in offers}
    demanded = Fraction(max(demand, 0.0))
    wanted = demanded + Fraction(max(burst, 0.0))
    if wanted <= 0 and all(cls.low == 0 for cls in classes):
        chosen = _one_replica(classes)
    else:
        chosen = _solve(classes, wanted, running)
    carries_all = chosen is not None
    if chosen is None:
        chosen = _most_capacity(classes)
    least = _cost(classes, chosen)
    kept = _kept(classes, chosen, wanted, keep_within) if priced else None
    chosen = kept or chosen
    capacity, shares = _figures(classes, chosen)
    shortfall = max(demanded - capacity, Fraction(0))
    cost = _cost(classes, chosen) if priced else None
    spills = _spills(offers, classes, chosen, wanted, priced, running)
    arithmetic = _describe(classes, chosen, priced)
    if shortfall > 0:
        reason = INSUFFICIENT_CAPACITY
        message = (
            f"demand {_rate(demand)} req/s exceeds the most the classes can serve, {_rate(capacity)} req/s"
            f" ({arithmetic}): short by {_rate(shortfall)} req/s"
        )
    else:
        carried = f"{_rate(demand)} req/s" + (f" + {_rate(burst)} req/s of burst capacity" if burst > 0 else "")
        if not carries_all and burst > 0:
            spare = float(capacity - demanded)
            carried += f", of which the classes carry {_rate(spare)} req/s at most, with as many replicas as can serve"
        if priced:
            reason = LEAST_COST
            if kept:
                how = f" as it runs, {float(cost):g}/h, within {keep_within:.0%} of the least cost, {float(least):g}/h"
            elif carries_all:
                how = f" at the least cost, {float(cost):g}/h"
            else:  # the most capacity, short of the burst capacity
                how = f", at {float(cost):g}/h"
            message = f"{carried}{how}: {arithmetic} = {_rate(capacity)} req/s"
        else:
            reason = FEWEST_REPLICAS
            message = (
                f"no price for {', '.join(unpriced)}: the fewest replicas meeting {carried}, "
                f"{sum(chosen)}: {arithmetic} = {_rate(capacity)} req/s"
            )
    if spills:
        message += "; " + "; ".join(spill.message for spill in spills)
    return Placement(
        replicas={cls.offer.hardware_class: n for cls, n in zip(classes, chosen)},
        reason=reason,
        message=message,
        slo_met=shortfall == 0,
        capacity=float(capacity),
        shortfall=float(shortfall),
        cost_per_hour=None if cost is None else float(cost),
        shares=shares,
        spills=spills,
    )


def _rate(requests_per_second: float | Fraction) -> str:
    """A request rate as messages give it: to a tenth of a request per second (a measured rate has more
    digits than it means), without trailing zeros; under 1, two significant digits (a replica of a large
    model may serve 0.04 req/s, which a tenth would read as 0)."""
    rate = float(requests_per_second)
    return f"{rate:.2g}" if 0 < rate < 1 else f"{rate:.1f}".rstrip("0").rstrip(".")


def _cost(classes: list[_Class], replicas: list[int]) -> Fraction:
    return sum((cls.p * n for cls, n in zip(classes, replicas)), Fraction(0))


def _kept(classes: list[_Class], chosen: list[int], demand: Fraction, keep_within: float) -> list[int] | None:
    """The replicas running now (within bounds), when they differ from `chosen` (the least-cost placement
    that meets the demand) but meet it too at no more than `keep_within` above its cost; else None."""
    current = [max(cls.low, min(cls.offer.running, cls.high)) for cls in classes]
    if not keep_within or current == chosen or _figures(classes, chosen)[0] < demand:
        return None
    meets = _figures(classes, current)[0] >= demand > 0
    return (
        current if meets and _cost(classes, current) <= _cost(classes, chosen) * (1 + Fraction(keep_within)) else None
    )


def _spills(
    offers: list[ClassOffer],
    classes: list[_Class],
    chosen: list[int],
    wanted: Fraction,
    priced: bool,
    running: dict[str, int],
) -> tuple[Spill, ...]:
    """Classes whose pool limit binds: without pool limits, the placement gives them more than fits."""
    if all(o.free is None for o in offers):
        return ()
    free = sorted(_prepare(offers, priced, pool_limits=False), key=_order)
    unlimited = _solve(free, wanted, running)
    if unlimited is None:
        unlimited = [cls.high for cls in free]
    unlimited_by_name = {cls.offer.hardware_class: n for cls, n in zip(free, unlimited)}
    chosen_by_name = {cls.offer.hardware_class: n for cls, n in zip(classes, chosen)}
    spills = []
    for o in sorted(offers, key=lambda o: o.hardware_class):
        want = unlimited_by_name[o.hardware_class]
        if o.free is None or want <= o.fits:
            continue
        gained = [
            name
            for name, n in sorted(chosen_by_name.items())
            if name != o.hardware_class and n > unlimited_by_name[name]
        ]
        to = f"; spilled to {', '.join(gained)}" if gained else "; no other class could take it"
        message = (
            f"{o.hardware_class} pool full: {o.fits} replicas fit ({o.running} running, {o.free} more fit),"
            f" the placement wants {want}{to}"
        )
        spills.append(Spill(o.hardware_class, want, int(o.fits), message))
    return tuple(spills)
