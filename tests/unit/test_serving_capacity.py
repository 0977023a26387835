"""The capacity measurement's pure parts: the ramp's rates and where it says one replica stops."""

import pytest
from tensorkiln_local.load.capacity import (
    RAMP_FACTOR,
    RAMP_LIMIT,
    RAMP_START,
    Capacity,
    RampStep,
    calibrated_target,
    ramp_rates,
    sustainable,
)


def test_the_ramp_climbs_geometrically_from_below_to_past_the_service_time_bound():
    rates = ramp_rates(service_ms=50.0)  # bound: 20 req/s
    assert rates[0] == pytest.approx(RAMP_START * 20)
    assert all(b == pytest.approx(a * RAMP_FACTOR) for a, b in zip(rates, rates[1:]))
    assert rates[-1] <= RAMP_LIMIT * 20 < rates[-1] * RAMP_FACTOR
    assert any(rate > 20 for rate in rates)  # past the bound the queue must grow: the crossing is certain


def test_the_sustainable_rate_is_the_last_step_under_the_target():
    steps = [RampStep(8, 60), RampStep(9.2, None), RampStep(10.6, 150), RampStep(12.2, 420)]
    assert sustainable(steps, target_ms=200) == (10.6, True)


def test_a_ramp_that_never_crossed_gives_a_lower_bound():
    assert sustainable([RampStep(8, 60), RampStep(9.2, 90)], target_ms=200) == (9.2, False)


def test_a_first_step_over_the_target_leaves_no_sustainable_rate():
    assert sustainable([RampStep(8, 260)], target_ms=200) == (None, True)


def test_the_description_names_the_rate_the_bound_and_every_step():
    measured = Capacity(10.6, 50.0, 200, (RampStep(8, 60), RampStep(10.6, 150), RampStep(12.2, 420)), True)
    text = measured.describe()
    assert "10.6 req/s under 200 ms" in text and "bound 20.0 req/s" in text and "12.2/s: 420 ms" in text


def test_the_target_is_at_least_twice_the_latency_of_the_lightest_load():
    # CI: 184 ms at 0.4x the bound against a 200 ms target; half the capacity then crossed it by noise.
    noisy = [RampStep(10.3, 184.0), RampStep(11.8, 147.0), RampStep(13.6, 300.0), RampStep(15.7, 857.0)]
    assert calibrated_target(200, noisy) == 368
    assert sustainable(noisy, calibrated_target(200, noisy)) == (13.6, True)
    quiet = [RampStep(13.5, None), RampStep(15.5, 60.0), RampStep(17.8, 124.0)]  # first step not read
    assert calibrated_target(200, quiet) == 200
