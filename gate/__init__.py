"""The Budgeted Read Gate: pure admission and budget logic (paper §4.3, App. A).

No I/O and no parsing: the Gate sees sizes and counts only.
"""

from gate.budget import (
    Admission,
    Budget,
    Decision,
    GateConfig,
    admit_batch,
    choose_mode,
    deliver_full_view,
    total_exposure,
)

__all__ = [
    "Admission",
    "Budget",
    "Decision",
    "GateConfig",
    "admit_batch",
    "choose_mode",
    "deliver_full_view",
    "total_exposure",
]
