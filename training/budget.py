"""A stage's clock under --time-budget: the run's elapsed training time, where the budget ends the stage, and the
schedule's length refitted to the time left as the steps go."""

from __future__ import annotations

import time
from dataclasses import dataclass

from electric.pretraining.config import RunConfig
from training.distributed import Dist
from training.run_dir import TrainerState

REFIT_EVERY = 5  # a --time-budget run refits its schedule length every this many steps


@dataclass(frozen=True)
class StageClock:
    """The time of one stage's steps in this invocation. Without --time-budget (`budget_s` 0) it only keeps the
    elapsed time; with it the stage ends at `end_s` of elapsed time (the warm start's share of the budget, or all
    of it), and at step `end_step` at the latest."""

    budget_s: float  # the run's --time-budget in seconds; 0: none
    end_s: float  # the run's elapsed time at which this stage ends
    end_step: int  # the step at which this stage ends at the latest
    start_time: float  # time.time() at this invocation's first step of the stage
    start_elapsed: float  # the run's elapsed time then
    start_step: int  # the run's step then

    @classmethod
    def start(cls, run: RunConfig, trainer: TrainerState) -> StageClock:
        budget_s = run.pretrain.time_budget_minutes * 60
        if trainer.warm:
            return cls(budget_s, budget_s * run.pretrain.warm_start, trainer.total_steps, time.time(),
                       trainer.elapsed, trainer.step)
        return cls(budget_s, budget_s, trainer.run_steps, time.time(), trainer.elapsed, trainer.step)

    def elapsed(self) -> float:
        """The run's elapsed training time now, over every invocation."""
        return self.start_elapsed + time.time() - self.start_time

    def over(self, elapsed: float) -> bool:
        """Whether the budget has ended this stage by `elapsed`."""
        return bool(self.budget_s) and elapsed >= self.end_s

    def refit(self, trainer: TrainerState, d: Dist) -> None:
        """Every REFIT_EVERY steps under a budget, fit the schedule's length (`trainer.total_steps`) to the time
        left, from the mean step time of this invocation so far: refitted as the machine's speed changes, so that the
        decay ends where the budget does. Every process takes rank 0's length."""
        step, done = trainer.step, trainer.step - self.start_step
        if not self.budget_s or done < REFIT_EVERY or step % REFIT_EVERY:
            return
        per_step = (time.time() - self.start_time) / done
        fitted = min(self.end_step, step + int(max(0.0, self.end_s - trainer.elapsed) / per_step))
        trainer.total_steps = d.broadcast_int(min(self.end_step, max(fitted, step + 1)))
