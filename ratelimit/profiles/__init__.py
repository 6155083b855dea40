"""The files a user names, read at the edge: link profiles on their search path, scenarios
(and ``--mix``) as cohorts asked for, and the traces and schedules they name (``traced``).

May import: errors, spec, traces.
"""
