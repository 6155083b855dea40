"""Traced links over time: each step's class rates and gates, pure (``steps``), the driver
process that sends them (``ratelimit follow``), its status, and each traced link's capacity
over a window of the clock, for the read-outs.

May import: errors, spec, traces, profiles, plan, kernel, state.
"""
