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
    subject to sum_i c_i * min(n_i, s_i) >= D,   l_i <= n_i <= u_i,   n_i integer,

ties broken by fewer replicas in all, then by fewer replicas changed from those running (no churn
between equally good placements), then by more capacity, then by class name.

Replicas above s_i would stay Pending and serve nothing, so a full pool (free 0, pods pending) is
capped at what it runs, and the demand it cannot take goes to the next-cheapest classes: the
placement says which classes spilled (the least-cost placement without the pool limits wants
more replicas there than fit) and to which.

Prices missing: LeastCost needs a price on every class it places. When any class lacks one,
costs cannot be compared, so every replica counts as costing 1: the placement is then the
fewest replicas that meet the demand (reason FewestReplicas), with no cost figure, and it names
the classes without a price.

No combination meets the demand (sum_i c_i * min(u_i, s_i) < D): every class runs as many
replicas as can serve, max(l_i, min(u_i, s_i)) (a class of no capacity, c_i = 0, its minimum), and
the outcome is InsufficientCapacity with the shortfall in requests/s.

Zero demand with every minimum 0 would leave the model with no replica, which then never sees
the demand come back: the placement keeps one replica on the cheapest class that can run one.

The search is exhaustive over a bounded space, hence exact:

1. Bound. In an optimal placement (by the order above) n_i <= B_i = max(l_i, min(u_i, s_i,
   ceil(D / c_i))), and n_i = l_i when c_i = 0. Proof: if n_i > B_i then n_i > l_i, so one replica
   of class i may be removed within bounds. If n_i > s_i the removed replica served nothing; if
   n_i > ceil(D / c_i) (and n_i <= s_i), the n_i - 1 >= ceil(D / c_i) replicas left in class i
   alone carry D; if c_i = 0 it carried nothing. Either way the placement stays feasible, its cost
   does not grow (p_i >= 0) and it has one replica fewer: it was not optimal.
   The same argument, with the other classes fixed at any values >= their minimums, bounds n_i
   by the fewest replicas that, with every class after i in the search at its minimum, meet
   D (or l_i if more): the search stops increasing n_i there.
2. Enumeration. Classes are taken in order of price per capacity (p_i / c_i). Every class but
   the last enumerates n_i in [l_i, B_i]; the last takes the fewest replicas that meet what is
   left (its cost grows with n, so no larger n is better). The space is at most
   prod_{i < k} (B_i - l_i + 1) placements: with B_i <= min(u_i, s_i, ceil(D / c_i)) that is
   the product of each class's replicas that could serve, e.g. 3 classes of at most 20 useful
   replicas each: 441.
3. Pruning never drops an optimum: a partial placement is abandoned only when a lower bound of
   every completion (its cost so far, plus each remaining class's minimum, plus the linear
   relaxation of the rest, solved exactly by filling classes in order of price per capacity)
   exceeds the best cost found, or when no completion can meet the demand. Each class's n runs
   from B_i down, so the first placement found is the greedy one; below B_i the bound does not
   fall as n falls (a replica of class i saves the relaxation at least its price p_i, the classes
   after it costing as much or more per capacity), so the first n whose bound is over the best
   cost, or infeasible, ends that class's loop. In practice a dozen classes of a hundred replicas
   each take milliseconds; the worst case is the product above.
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

    def capacity(self, n: int) -> Fraction:
        return self.c * int(min(n, self.serving))


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


def _fewest_meeting(cls: _Class, residual: Fraction, limit: int) -> int | None:
    """Fewest replicas of `cls` in [low, limit] whose capacity covers `residual`; None if none does."""
    if residual <= 0:
        return cls.low
    if not cls.c:
        return None
    need = math.ceil(residual / cls.c)
    return max(cls.low, need) if need <= min(limit, cls.serving) else None


def _relaxation(classes: list[_Class], residual: Fraction) -> Fraction | None:
    """Least cost of covering `residual` with fractional replicas above the minimums (classes in
    price-per-capacity order): a lower bound of every integer completion; None if none covers it."""
    cost = Fraction(0)
    for cls in classes:
        if residual <= 0:
            return cost
        room = cls.capacity(cls.high) - cls.capacity(cls.low)
        if room <= 0:
            continue
        take = min(room, residual)
        cost += cls.p * take / cls.c
        residual -= take
    return cost if residual <= 0 else None


def _solve(classes: list[_Class], demand: Fraction, running: dict[str, int]) -> list[int] | None:
    """The optimal replicas (in the order of `classes`, sorted by price per capacity), or None
    when the demand cannot be met."""
    k = len(classes)
    if k == 0:
        return [] if demand <= 0 else None
    best: list = [None, None]  # [key, replicas]
    min_capacity_after = [Fraction(0)] * (k + 1)
    min_cost_after = [Fraction(0)] * (k + 1)
    for i in range(k - 1, -1, -1):
        min_capacity_after[i] = min_capacity_after[i + 1] + classes[i].capacity(classes[i].low)
        min_cost_after[i] = min_cost_after[i + 1] + classes[i].p * classes[i].low
    names = [cls.offer.hardware_class for cls in classes]
    by_name = sorted(range(k), key=lambda i: names[i])

    def consider(chosen: list[int], cost: Fraction) -> None:
        changes = sum(abs(n - running.get(names[i], 0)) for i, n in enumerate(chosen))
        capacity = sum((cls.capacity(n) for cls, n in zip(classes, chosen)), Fraction(0))
        key = (cost, sum(chosen), changes, -capacity, tuple(chosen[i] for i in by_name))
        if best[0] is None or key < best[0]:
            best[0], best[1] = key, list(chosen)

    def search(i: int, chosen: list[int], cost: Fraction, covered: Fraction) -> None:
        cls = classes[i]
        if i == k - 1:
            n = _fewest_meeting(cls, demand - covered, cls.high)
            if n is not None:
                consider([*chosen, n], cost + cls.p * n)
            return
        residual_after_minimums = demand - covered - min_capacity_after[i + 1]
        limit = cls.high
        if cls.c:
            limit = min(limit, max(cls.low, math.ceil(max(residual_after_minimums, 0) / cls.c)))
        else:
            limit = cls.low
        # Most replicas first: the first placement found is the greedy one, a close bound. Below
        # `limit` the bound only grows as n falls (what a replica of this class saves the
        # relaxation is at least its price: the classes after it cost as much or more per
        # capacity), so once it is over the best cost, or infeasible, no smaller n can do better.
        for n in range(limit, cls.low - 1, -1):
            cost_n, covered_n = cost + cls.p * n, covered + cls.capacity(n)
            rest = _relaxation(classes[i + 1 :], demand - covered_n - min_capacity_after[i + 1])
            if rest is None or (best[0] is not None and cost_n + min_cost_after[i + 1] + rest > best[0][0]):
                if n < limit:
                    break
                continue
            search(i + 1, [*chosen, n], cost_n, covered_n)

    search(0, [], Fraction(0), Fraction(0))
    return best[1]


def _one_replica(classes: list[_Class]) -> list[int]:
    """No demand and no minimum: one replica on the cheapest class that runs one (then the most
    capacity, then by name), so that the model can still take the demand when it comes back."""
    room = [i for i, cls in enumerate(classes) if cls.high >= 1 and cls.serving >= 1]
    chosen = [0] * len(classes)
    if room:
        chosen[min(room, key=lambda i: (classes[i].p, -classes[i].c, classes[i].offer.hardware_class))] = 1
    return chosen


def _figures(classes: list[_Class], replicas: list[int]) -> tuple[Fraction, dict[str, float]]:
    capacities = [cls.capacity(n) for cls, n in zip(classes, replicas)]
    total = sum(capacities, Fraction(0))
    shares = {cls.offer.hardware_class: float(c / total) if total else 0.0 for cls, c in zip(classes, capacities)}
    return total, shares


def _describe(classes: list[_Class], replicas: list[int], priced: bool) -> str:
    parts = []
    for cls, n in zip(classes, replicas):
        o = cls.offer
        text = f"{o.hardware_class} {n} x {o.capacity:.4g} req/s"
        if priced:
            text += f" at {o.price:g}/h each"
        parts.append(text)
    return ", ".join(parts)


def place(offers: list[ClassOffer], demand: float) -> Placement:
    """Replicas per class meeting `demand` (requests/s) at the least cost per hour; see the module doc."""
    unpriced = sorted(o.hardware_class for o in offers if o.price is None)
    priced = not unpriced
    classes = sorted(_prepare(offers, priced, pool_limits=True), key=_order)
    running = {o.hardware_class: o.running for o in offers}
    wanted = Fraction(max(demand, 0.0))
    if wanted <= 0 and all(cls.low == 0 for cls in classes):
        chosen = _one_replica(classes)
    else:
        chosen = _solve(classes, wanted, running)
    if chosen is None:  # the most capacity there is; a class of no capacity adds none: its minimum
        chosen = [max(cls.low, int(min(cls.high, cls.serving))) if cls.c else cls.low for cls in classes]
    capacity, shares = _figures(classes, chosen)
    shortfall = max(Fraction(max(demand, 0.0)) - capacity, Fraction(0))
    cost = sum((cls.p * n for cls, n in zip(classes, chosen)), Fraction(0)) if priced else None
    spills = _spills(offers, classes, chosen, wanted, priced, running)
    arithmetic = _describe(classes, chosen, priced)
    if shortfall > 0:
        reason = INSUFFICIENT_CAPACITY
        message = (
            f"demand {demand:g} req/s exceeds the most the classes can serve, {float(capacity):.4g} req/s"
            f" ({arithmetic}): short by {float(shortfall):g} req/s"
        )
    elif priced:
        reason = LEAST_COST
        message = f"{demand:g} req/s at the least cost, {float(cost):g}/h: {arithmetic} = {float(capacity):.4g} req/s"
    else:
        reason = FEWEST_REPLICAS
        message = (
            f"no price for {', '.join(unpriced)}: the fewest replicas meeting {demand:g} req/s, "
            f"{sum(chosen)}: {arithmetic} = {float(capacity):.4g} req/s"
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
