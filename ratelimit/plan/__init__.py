"""The compiler, pure: a request becomes a plan of tc operations (no netlink, no clock).  It
knows the operations, a reject's nftables rules, where links go on a device, the u32 tree,
the eBPF program that pins flows to tx queues, the gates of traced links, the diff of two
plans and how a new plan goes over an installed one, and a plan as a script.

May import: errors, spec, traces.
"""
