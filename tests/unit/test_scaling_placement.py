import itertools
import math
import random
import time
from dataclasses import replace

import pytest
from tensorkiln.scaling.placement import (
    FEWEST_REPLICAS,
    INSUFFICIENT_CAPACITY,
    LEAST_COST,
    ClassOffer,
    place,
)


def offer(name, capacity, price, min_replicas=0, max_replicas=10, running=0, free=None):
    return ClassOffer(name, capacity, price, min_replicas, max_replicas, running, free)


L4 = offer("l4", 100, 0.8)  # slow and cheap: 0.008 per req/s an hour
A100 = offer("a100", 200, 2.0)  # 0.010
H100 = offer("h100", 400, 4.0)  # 0.010


def test_the_cheap_class_alone_when_it_suffices():
    placement = place([H100, L4], 350)
    assert placement.replicas == {"l4": 4, "h100": 0}
    assert placement.reason == LEAST_COST and placement.slo_met
    assert placement.cost_per_hour == pytest.approx(3.2)
    assert (placement.capacity, placement.shortfall) == (400, 0)
    assert placement.shares == {"l4": 1.0, "h100": 0.0}
    assert (
        placement.message
        == "350 req/s at the least cost, 3.2/h: l4 4 x 100 req/s at 0.8/h each, h100 0 x 400 req/s at 4/h each = 400 req/s"
    )


def test_the_even_spread_counts_the_slowest_class_used():
    big, small = offer("big", 300, 3.0), offer("small", 200, 2.2)
    # one of each (5.2/h) sums to 500, but the Service gives each 250, over small's 200: not safe.
    # 3 x small = 6.6/h; 2 x big = 6.0/h
    placement = place([big, small], 500)
    assert placement.replicas == {"big": 2, "small": 0}
    assert placement.cost_per_hour == pytest.approx(6.0)
    assert (placement.capacity, placement.shares) == (600, {"big": 1.0, "small": 0.0})


def test_a_class_at_its_maximum_is_topped_up_by_the_next_cheapest():
    placement = place([offer("l4", 100, 0.8, max_replicas=3), offer("a100", 120, 1.3)], 450)
    # 5 replicas at 90 each: 3 x l4 + 2 x a100 = 5.0/h; a100 alone needs 4 = 5.2/h
    assert placement.replicas == {"l4": 3, "a100": 2}
    assert placement.cost_per_hour == pytest.approx(5.0)
    assert placement.capacity == 500  # 5 x the slowest's 100
    assert placement.shares == {"l4": 0.6, "a100": 0.4}  # by replicas: the spread is even


def test_min_replicas_are_respected_and_counted():
    h100 = offer("h100", 400, 4.0, min_replicas=1)
    assert place([h100, L4], 100).replicas == {"l4": 0, "h100": 1}
    placement = place([h100, L4], 450)
    # h100's replica takes 90 like each l4: 1 + 4 replicas = 7.2/h (2 x h100 alone: 8.0/h)
    assert placement.replicas == {"l4": 4, "h100": 1}
    assert placement.cost_per_hour == pytest.approx(7.2)
    assert place([h100, offer("l4", 100, 0.8, min_replicas=2)], 0).replicas == {"l4": 2, "h100": 1}


def test_a_full_pool_spills_to_the_next_cheapest_class():
    full = offer("l4", 100, 0.8, running=3, free=0)  # pods pending: the pool runs 3
    placement = place([H100, A100, full], 500)
    # without the limit: 5 x l4 = 4.0; with it: 3 x a100 = 6.0 (3 x l4 + 2 x a100, 100 each, = 6.4)
    assert placement.replicas == {"l4": 0, "a100": 3, "h100": 0}
    assert placement.reason == LEAST_COST and placement.slo_met
    assert placement.cost_per_hour == pytest.approx(6.0)
    (spill,) = placement.spills
    assert (spill.hardware_class, spill.wanted, spill.fits) == ("l4", 5, 3)
    assert (
        spill.message == "l4 pool full: 3 replicas fit (3 running, 0 more fit), the placement wants 5; spilled to a100"
    )
    assert placement.message.endswith(spill.message)


def test_a_pool_with_room_does_not_spill():
    placement = place([offer("l4", 100, 0.8, running=3, free=2), H100], 500)
    assert placement.replicas == {"l4": 5, "h100": 0}
    assert placement.spills == ()


def test_replicas_that_would_stay_pending_count_no_capacity():
    # min 4 on a pool that runs 2: the Deployment keeps asking for 4, but only 2 serve
    placement = place([offer("l4", 100, 0.8, min_replicas=4, running=2, free=0), A100], 300)
    assert placement.replicas == {"l4": 4, "a100": 1}
    assert placement.capacity == 300  # 3 serving replicas x the slowest's 100


def test_insufficient_capacity_uses_the_most_capacity_and_gives_the_shortfall():
    placement = place([offer("l4", 100, 0.8, max_replicas=3), offer("h100", 400, 4.0, max_replicas=2)], 1500)
    # even spread: all 5 sustain 5 x 100 = 500; the 2 h100 alone 800
    assert placement.replicas == {"l4": 0, "h100": 2}
    assert placement.reason == INSUFFICIENT_CAPACITY and not placement.slo_met
    assert (placement.capacity, placement.shortfall) == (800, 700)
    assert placement.message.startswith("demand 1500 req/s exceeds the most the classes can serve, 800 req/s")
    assert placement.message.endswith("short by 700 req/s")


def test_insufficient_capacity_with_a_full_pool_counts_only_what_runs():
    placement = place([offer("l4", 100, 0.8, running=2, free=0), offer("h100", 400, 4.0, max_replicas=1)], 1000)
    assert placement.replicas == {"l4": 0, "h100": 1}  # 1 x 400 sustains more than 3 x 100
    assert placement.shortfall == 600
    # without the pool limit 10 x l4 would meet it: the demand spilled to h100, and is still short
    assert [s.hardware_class for s in placement.spills] == ["l4"]
    assert placement.spills[0].message.endswith("the placement wants 10; spilled to h100")
    alone = place([offer("l4", 100, 0.8, running=2, free=0)], 500)
    assert alone.replicas == {"l4": 2} and alone.shortfall == 300
    assert alone.spills[0].message.endswith("the placement wants 5; no other class could take it")


def test_burst_capacity_is_carried_above_the_demand_at_the_least_cost():
    placement = place([H100, L4], 150, burst=200)
    # 350 req/s to carry: 4 x l4 (3.2/h) rather than the 2 that the demand alone needs
    assert placement.replicas == {"l4": 4, "h100": 0}
    assert placement.reason == LEAST_COST and placement.slo_met and placement.shortfall == 0
    assert placement.message.startswith("150 req/s + 200 req/s of burst capacity at the least cost, 3.2/h: ")
    assert place([H100, L4], 150).replicas == {"l4": 2, "h100": 0}
    # a measured rate, to a tenth of a request per second
    assert place([H100, L4], 78.9699, burst=100.04).message.startswith("79 req/s + 100 req/s of burst capacity at")
    # under 1 req/s, two significant digits: a large model's replica may serve a few hundredths
    slow = place([offer("big", 0.04, 1.0)], 0.1234)
    assert slow.message == "0.12 req/s at the least cost, 4/h: big 4 x 0.04 req/s at 1/h each = 0.16 req/s"


def test_a_burst_capacity_the_classes_cannot_carry_takes_the_most_and_the_slo_still_counts_the_demand():
    classes = [offer("l4", 100, 0.8, max_replicas=3), offer("h100", 400, 4.0, max_replicas=2)]
    placement = place(classes, 500, burst=1000)
    assert placement.replicas == {"l4": 0, "h100": 2}  # the most capacity: 800 req/s
    assert placement.reason == LEAST_COST and placement.slo_met
    assert placement.message.startswith(
        "500 req/s + 1000 req/s of burst capacity, of which the classes carry 300 req/s at most, with as many "
        "replicas as can serve, at 8/h: "
    )
    short = place(classes, 900, burst=1000)
    assert short.reason == INSUFFICIENT_CAPACITY and short.shortfall == 100  # the demand alone is short


def test_prices_missing_fall_back_to_the_fewest_replicas():
    unpriced = offer("l4", 100, None)
    placement = place([H100, unpriced], 500)
    # two replicas either way (h100 + l4, or 2 x h100): the one with more capacity
    assert placement.replicas == {"h100": 2, "l4": 0}
    assert placement.reason == FEWEST_REPLICAS and placement.slo_met
    assert placement.cost_per_hour is None
    assert placement.message.startswith("no price for l4: the fewest replicas meeting 500 req/s, 2: ")
    refused = replace(unpriced, price_error="node l4-0: tensorkiln.dev/price-per-hour '1,5' is not a positive decimal")
    assert place([H100, refused], 500).message.startswith(
        "no price for l4 (node l4-0: tensorkiln.dev/price-per-hour '1,5' is not a positive decimal): the fewest"
    )  # a price set but refused is named where the placement says it has none
    assert place([offer("a", 100, None), offer("b", 150, None)], 250).replicas == {"a": 0, "b": 2}
    # b alone cannot (one at most); 3 replicas at 83 each are within a's 100: equal cost, the first by name
    assert place([offer("a", 100, None), offer("b", 150, None, max_replicas=1)], 250).replicas == {"a": 3, "b": 0}


def test_equal_placements_keep_what_runs():
    a, b = offer("a", 100, 1.0, running=1), offer("b", 100, 1.0, running=2)
    assert place([a, b], 250).replicas == {"a": 1, "b": 2}
    a, b = offer("a", 100, 1.0, running=2), offer("b", 100, 1.0, running=1)
    assert place([a, b], 250).replicas == {"a": 2, "b": 1}


def test_what_runs_is_kept_while_it_costs_little_more_than_the_least():
    fast, slow = offer("fast", 66, 0.4, running=1), offer("slow", 17, 0.1)  # 4 x slow: 0.40/h too, but 4 pods
    assert place([fast, slow], 64).replicas == {"fast": 1, "slow": 0}
    # 4 slow run; a capacity figure moved and 1 fast is now 2.5% cheaper: no turn of the placement
    fast, slow = offer("fast", 66, 0.39, running=0), offer("slow", 17, 0.1, running=4)
    assert place([fast, slow], 64).replicas == {"fast": 1, "slow": 0}
    kept = place([fast, slow], 64, keep_within=0.1)
    assert kept.replicas == {"fast": 0, "slow": 4} and kept.cost_per_hour == pytest.approx(0.4)
    assert kept.message.startswith("64 req/s as it runs, 0.4/h, within 10% of the least cost, 0.39/h: ")
    # what runs no longer meets the demand, or costs too much more: the least-cost placement
    assert place([fast, slow], 70, keep_within=0.1).replicas == {"fast": 0, "slow": 5}  # 4 x 17 < 70
    assert place([fast, offer("slow", 17, 0.1, running=6)], 64, keep_within=0.1).replicas == {"fast": 1, "slow": 0}


def test_no_demand_and_no_minimum_keeps_one_replica_on_the_cheapest_class():
    assert place([H100, L4], 0).replicas == {"l4": 1, "h100": 0}
    assert place([H100, offer("l4", 100, 0.8, running=0, free=0)], 0).replicas == {"l4": 0, "h100": 1}


def test_a_class_of_unknown_capacity_gets_only_its_minimum():
    unknown = offer("new", 0, 0.1, min_replicas=1)
    assert place([unknown, L4], 250).replicas == {"l4": 3, "new": 1}
    short = place([unknown, offer("l4", 100, 0.8, max_replicas=2)], 250)  # even when the demand is not met
    assert short.replicas == {"l4": 2, "new": 1} and short.shortfall == 50


def test_the_demand_edge_is_decided_exactly():
    assert place([offer("a", 0.1, 1.0)], 0.3).replicas == {"a": 3}
    assert place([offer("a", 100, 1.0)], 300).replicas == {"a": 3}
    assert place([offer("a", 100, 1.0)], 300.0001).replicas == {"a": 4}


def even_spread_capacity(offers, replicas):
    """What replicas sustain when the Service gives each serving pod the same share."""
    serving = [min(n, o.fits) for o, n in zip(offers, replicas)]
    used = [o.capacity for o, n in zip(offers, serving) if n]
    return min(used) * sum(serving) if used else 0


def brute_force(offers, demand):
    """Least cost over every combination within bounds (replicas above fits serve nothing)."""
    best = None
    ranges = [range(o.min_replicas, max(o.min_replicas, o.max_replicas) + 1) for o in offers]
    for replicas in itertools.product(*ranges):
        if even_spread_capacity(offers, replicas) >= demand - 1e-9:
            cost = sum(o.price * n for o, n in zip(offers, replicas))
            best = cost if best is None else min(best, cost)
    return best


def most_under_even_spread(offers):
    return max(even_spread_capacity(offers, [o.max_replicas if o.capacity >= f else o.min_replicas for o in offers])
               for f in {o.capacity for o in offers})  # fmt: skip


def random_offers(rng, k, max_replicas, pools):
    offers = []
    for i in range(k):
        low = rng.choice([0, 0, 1, 2])
        running = rng.randint(0, max_replicas)
        offers.append(
            offer(
                f"c{i}",
                rng.choice([25, 50, 75, 100, 150, 200, 400, 800]) * rng.choice([0.5, 1, 1.3]),
                rng.choice([0.3, 0.8, 1.1, 2.0, 2.5, 4.0, 7.5]),
                low,
                rng.randint(max(low, 1), max_replicas),
                running,
                rng.choice([None, 0, 1, 3]) if pools else None,
            )
        )
    return offers


@pytest.mark.parametrize("seed", range(400))
def test_least_cost_agrees_with_brute_force(seed):
    rng = random.Random(seed)
    offers = random_offers(rng, rng.randint(1, 4), 6, pools=True)
    demand = rng.uniform(0, 1.2 * sum(o.capacity * min(o.max_replicas, o.fits) for o in offers) / len(offers))
    placement = place(offers, demand)
    expected = brute_force(offers, demand)
    if expected is None:
        assert placement.reason == INSUFFICIENT_CAPACITY and placement.shortfall > 0
    else:
        assert placement.slo_met and placement.cost_per_hour == pytest.approx(expected)
        if demand > 0 or any(o.min_replicas for o in offers):
            assert placement.capacity >= demand - 1e-9


@pytest.mark.parametrize("seed", range(100))
def test_least_cost_agrees_with_scipy_milp(seed):
    scipy_optimize = pytest.importorskip("scipy.optimize")
    np = pytest.importorskip("numpy")
    rng = random.Random(1000 + seed)
    offers = random_offers(rng, rng.randint(2, 6), 40, pools=False)
    demand = rng.uniform(0.2, 1.0) * most_under_even_spread(offers)
    placement = place(offers, demand)
    # One integer program per capacity floor f: only classes at least as fast run replicas, each
    # counted at f (the even spread gives every replica the same share); the cheapest of them.
    costs = []
    for f in sorted({o.capacity for o in offers}):
        if any(o.min_replicas and o.capacity < f for o in offers):
            continue
        result = scipy_optimize.milp(
            c=np.array([o.price for o in offers]),
            constraints=scipy_optimize.LinearConstraint(np.array([[f] * len(offers)]), lb=demand),
            integrality=np.ones(len(offers)),
            bounds=scipy_optimize.Bounds(
                [o.min_replicas for o in offers], [o.max_replicas if o.capacity >= f else 0 for o in offers]
            ),
        )
        if result.success:
            costs.append(result.fun)
    assert costs
    assert placement.cost_per_hour == pytest.approx(min(costs), abs=1e-6)


def test_twelve_classes_of_a_hundred_replicas_are_solved_quickly():
    rng = random.Random(7)
    for _ in range(10):
        offers = random_offers(rng, 12, 100, pools=False)
        demand = rng.uniform(0.3, 0.9) * most_under_even_spread(offers)
        start = time.perf_counter()
        placement = place(offers, demand)
        assert time.perf_counter() - start < 1.0
        assert placement.slo_met
        assert math.isfinite(placement.cost_per_hour)
