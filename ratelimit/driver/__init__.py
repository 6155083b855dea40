"""Traced links and cells over time: each step's class rates and gates, pure (``steps``,
``vector``; a traced cell's, ``cells``), the driver process that sends them (``loop``:
``ratelimit follow``), its files, status and control for other processes (``follow``), and
each traced link's and cell's capacity over a window of the clock, for the read-outs
(``tracerates``).

May import: errors, spec, traces, profiles, plan, kernel, state.
"""
