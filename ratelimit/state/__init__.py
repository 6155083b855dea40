"""What ratelimit installed where, and putting it back: versioned records, what a plan owns in
the kernel (fingerprints), the record checked against the kernel, rollback of a failed
change, repair after a killed run, and signals during a change.

May import: errors, spec, traces, plan, kernel.
"""
