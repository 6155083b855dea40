"""Links that change over time, pure: mahimahi traces and schedules as parsed values, what a
traced link can deliver in any window, each link's phase, and what a traced cohort follows as
the request keeps it (``tracespec``).

May import: errors, spec.
"""
