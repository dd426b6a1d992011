"""The relearning job: what each step of the relearning workflow (statemachine/relearning.asl.json)
does for one policy. The workflow hands each step to the relearning function (relearning/app.py)
through its queue with a task token; the function answers with the step's output.

`Relearning` is the one object the function drives; its steps are written by concern:

- `count` and `collect` (relearning/collecting.py): the labels accrued since the last run, and
  every labelled example with the model's signals, asked of the endpoint only where none are kept.
- `fit` (relearning/candidates.py): each question's candidate head fitted and judged by the gate,
  kept under `runs/<run>/` in the head store.
- `shadow` and `judge_shadow` (relearning/shadowing.py): the passing candidates served in shadow
  beside the heads in service, then judged on the live items they answered.
- `promote` (relearning/promotion.py): what the gate and the shadow passed named in service.

What the steps share (the settings, the head in service, the head's signature) is
relearning/base.py; a run's names and keys in the head store, relearning/runs.py; the labelled
rows and their reviewers' identities, relearning/labelled_rows.py.
"""

from __future__ import annotations

from .candidates import Fitting
from .collecting import EndpointSignals
from .labelled_rows import read_labels
from .promotion import Promoting
from .runs import MAX_SHADOW_LOOKS, MAX_SHADOW_SECONDS, shadow_start_key, shadow_wait_seconds

# What callers import from here besides the job: its runner (relearning/app.py), how the labelled
# rows are read, and the shadow loop's bounds and keys. A setting a test patches is patched where
# it is read (relearning/collecting.py's COLLECT_MARGIN_SECONDS, relearning/shadowing.py's names).
__all__ = ["MAX_SHADOW_LOOKS", "MAX_SHADOW_SECONDS", "EndpointSignals", "Relearning", "read_labels",
           "shadow_start_key", "shadow_wait_seconds"]


class Relearning(Fitting, Promoting):
    """The steps of one policy's relearning run (count, collect, fit, shadow, judge_shadow,
    promote), made with the settings relearning/base.py `RelearningBase` checks."""
