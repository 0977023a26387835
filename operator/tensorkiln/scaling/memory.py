"""What the SLO scaler remembers between two evaluations of a target or a LeastCost model (pure values).

A restart forgets it: the next scale-down then waits one stabilisation window longer. The time of the
last scale action lives in status too, so a restarted operator keeps its cooldown and repeats no action.
"""

from dataclasses import dataclass, replace

from tensorkiln.scaling.decision import Sample, Wish


@dataclass(frozen=True)
class TargetMemory:
    samples: tuple[Sample, ...] = ()  # the target's observations, oldest first
    wishes: tuple[Wish, ...] = ()  # LeastCost: what the placement wanted of it, oldest first
    last_scale: float | None = None  # when this process last scaled it
    warned_max: bool = False  # a MaxReplicasReached Warning stands for this stay at the maximum

    def with_sample(self, sample: Sample, keep_s: float) -> "TargetMemory":
        """With `sample` (at most one a second) and the samples of the last `keep_s` before it."""
        samples = [s for s in self.samples if s.at > sample.at - keep_s]
        if not samples or sample.at - samples[-1].at >= 1:
            samples.append(sample)
        return replace(self, samples=tuple(samples))

    def with_wish(self, wish: Wish, keep_s: float) -> "TargetMemory":
        """With `wish` and the wishes of the last `keep_s` before it."""
        return replace(self, wishes=(*(w for w in self.wishes if w.at > wish.at - keep_s), wish))


@dataclass(frozen=True)
class ModelMemory:
    """A LeastCost model's standing Warnings: one Event per new state, none while it lasts."""

    spilled: tuple[str, ...] = ()  # the classes whose load the last SpilledOver Warning named
    short: bool = False  # an InsufficientCapacity Warning stands
