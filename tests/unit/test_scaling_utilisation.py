from tensorkiln_local.load.utilisation import UtilisationPolicy


def _policy(**overrides):
    return UtilisationPolicy(**{"target": 0.7, "min_replicas": 1, "max_replicas": 8, **overrides})


def test_ratio_rule_with_tolerance():
    policy = _policy()
    assert policy.decide(2, [1.4, 1.4], now=0) == 4  # 200% of target
    assert policy.decide(2, [0.75, 0.72], now=1) == 2  # within 10%


def test_scale_up_is_limited_and_bounded():
    assert _policy().decide(1, [7.0], now=0) == 5  # wants 10; one period allows max(2x, +4 pods)
    assert _policy(max_replicas=3).decide(2, [3.0, 3.0], now=0) == 3


def test_no_data_keeps_replicas():
    assert _policy().decide(3, [], now=0) == 3


def test_scale_down_follows_the_highest_recommendation_of_the_window():
    policy = _policy(scale_down_stabilization_s=60)
    assert policy.decide(4, [0.7] * 4, now=0) == 4
    assert policy.decide(4, [0.1] * 4, now=30) == 4  # 4 recommended 30 s ago
    assert policy.decide(4, [0.1] * 4, now=61) == 1  # that recommendation left the window
