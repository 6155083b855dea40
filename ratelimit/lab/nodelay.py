"""``no_delay`` of the fixtures (``emulated_link``, ``container_link``): ``"auto"`` leaves a
profile's delay and loss out, with a warning, on a kernel without netem."""

import warnings

import pytest


class EmulatedLinkWarning(UserWarning):
    """Part of the requested link could not be emulated on this kernel."""


def resolve_no_delay(no_delay, profile, delay, audience: bool = False) -> tuple[bool, bool]:
    """``(no_delay, left_out)``: ``"auto"`` leaves the delay out (with a warning) on a kernel
    without netem."""
    if no_delay in (True, False):
        return no_delay, False
    if no_delay != "auto":
        pytest.fail(f"emulated_link: no_delay={no_delay!r} is not True, False or 'auto'", pytrace=False)
    if profile is None and delay is None and not audience:
        return False, False
    # the pytest plugin imports this module: the probe (pyroute2) only when asked
    from ..kernel.probe import probe
    if probe(["netem"])["netem"]:
        return False, False
    warnings.warn(EmulatedLinkWarning(
        f"emulated_link: this kernel lacks netem (module sch_netem), so the delay and loss "
        f"of {profile or ('the cohorts' if audience else 'the link')} are left out; the rate is emulated"),
        stacklevel=4)
    return True, True
