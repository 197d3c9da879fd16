"""What a batch test supplies: its name, the settings it reads, and the batch it asks for.

A batch test is a :class:`BatchTest` registered in :mod:`adloco.algo.batch_tests`;
the engine, the schema's ``batch_test`` enum and the report ask the registry,
so a new test is one module and one line there. A test declares

- ``name``: its value of ``train.batch_test``;
- ``settings_type``: a frozen dataclass of the run settings it reads, each
  field named as in :class:`adloco.config.RunSettings` (built by
  :meth:`BatchTest.settings_from`);
- ``adaptive``: whether it reads gradient statistics at all (only ``none`` does not);
- ``needs_reference``: whether its statistics need the previous round's
  reference direction (the inner-product parts σ_d², σ_⊥²);
- ``ratio(estimate, settings)``: the global batch B it asks for, or None when
  its statistics are missing.

:meth:`BatchTest.requested_global_batch` wraps ``ratio`` with the guards every
test shares: no answer when ‖ḡ‖² is not finite or below
``MIN_BATCH_GRAD_SQNORM``, or when B is not finite.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from adloco.algo.estimators import VarianceEstimate

# Below this ‖ḡ‖² the ratio is dominated by rounding; the batch is left alone.
MIN_BATCH_GRAD_SQNORM = 1e-12


def check_positive(settings: Any) -> None:
    """Every field of a test's settings dataclass must be > 0 (ValueError otherwise)."""
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if not value > 0:
            raise ValueError(f"{f.name} must be > 0, got {value}")


@dataclasses.dataclass(frozen=True)
class NoSettings:
    """The settings of a test that reads none."""


class BatchTest:
    """One batch test (see the module's docstring); subclasses set the class attributes."""

    name: ClassVar[str]
    settings_type: ClassVar[type] = NoSettings
    adaptive: ClassVar[bool] = True
    needs_reference: ClassVar[bool] = False

    def settings_from(self, source: Any) -> Any:
        """The test's settings from a RunSettings (or any object with those attributes, or a
        mapping); fields the test does not read are ignored."""
        get = source.__getitem__ if isinstance(source, Mapping) else source.__getattribute__
        names = [f.name for f in dataclasses.fields(self.settings_type)]
        return self.settings_type(**{n: get(n) for n in names})

    def ratio(self, est: VarianceEstimate, settings: Any) -> float | None:
        """The global batch B the test asks for; None when its statistics are missing."""
        raise NotImplementedError

    def requested_global_batch(self, est: VarianceEstimate, settings: Any) -> float | None:
        """The global batch B the test asks for (real number), or None when it cannot say."""
        if not isinstance(settings, self.settings_type):
            raise TypeError(f"the {self.name} test reads {self.settings_type.__name__}")
        if not self.adaptive:
            return None
        g2 = est.batch_grad_sqnorm
        if not math.isfinite(g2) or g2 < MIN_BATCH_GRAD_SQNORM:
            return None
        b = self.ratio(est, settings)
        return b if b is not None and math.isfinite(b) else None
