"""The pretraining progress display: a bar on a terminal, a plain line now and then in a log file.

With a time budget the bar measures time (elapsed / budget seconds): the step total is refitted to the
time left every few steps, so a bar over steps would keep changing its end. When stderr is not a terminal
(a log file, a pipe) there is no bar at all, whose redraws would fill the file, but one plain line every
`every_s` seconds; transformers' own bars (writing a checkpoint) are turned off too (electric.pretraining.data does the
same for datasets' tokenising bar).
"""

from __future__ import annotations

import sys
import time

from tqdm.auto import tqdm


class TrainProgress:
    def __init__(self, desc: str, total_steps: int, step: int, elapsed: float, budget_s: float, *,
                 enabled: bool = True, file=None, every_s: float = 60.0):
        self.desc, self.budget_s, self.every_s = desc, budget_s, every_s
        self.file = file if file is not None else sys.stderr
        self.enabled = enabled
        self.fields: dict = {}
        self.last_line = -float("inf")  # the first update prints a line, so a log shows the run started
        self.bar = None
        isatty = getattr(self.file, "isatty", None)
        if enabled and isatty is not None and isatty():
            if budget_s:
                self.bar = tqdm(total=budget_s, initial=min(elapsed, budget_s), desc=f"{desc} step {step}",
                                file=self.file, dynamic_ncols=True,
                                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} s of the time "
                                           "budget [{elapsed}<{remaining}{postfix}]")
            else:
                self.bar = tqdm(total=total_steps, initial=step, desc=desc, unit="step", file=self.file,
                                dynamic_ncols=True)
        else:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()

    def update(self, step: int, total_steps: int, elapsed: float) -> None:
        """After each optimizer step: `step` done of (currently) `total_steps`, `elapsed` seconds of training."""
        if self.bar is not None:
            if self.budget_s:
                self.bar.set_description(f"{self.desc} step {step}", refresh=False)
                self.bar.update(min(elapsed, self.budget_s) - self.bar.n)
            else:
                self.bar.update(step - self.bar.n)
        elif self.enabled and time.monotonic() - self.last_line >= self.every_s:
            self.last_line = time.monotonic()
            where = (f"{elapsed / 60:.1f} of {self.budget_s / 60:.1f} min" if self.budget_s
                     else f"{step / max(total_steps, 1):.0%}")
            fields = "".join(f", {k} {v}" for k, v in self.fields.items())
            print(f"{self.desc}: step {step}{'' if self.budget_s else f'/{total_steps}'} ({where}){fields}",
                  file=self.file, flush=True)

    def set_postfix(self, fields: dict) -> None:
        self.fields = dict(fields)
        if self.bar is not None:
            self.bar.set_postfix(fields)

    def write(self, msg: str, file=None) -> None:
        """A message that does not break the bar."""
        if self.bar is not None:
            self.bar.write(msg, file=file or self.file)
        else:
            print(msg, file=file or self.file, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
