"""The kernel side: the only code that talks to Linux traffic control and nftables (the
executor, a reject's rules through ``nft``, netlink encoding and decoding per tc kind,
dumps and counters, devices, namespaces, bpf(2), the gates' kick frames), the probe of what the running kernel accepts, and a command run in a
VM booted from a stock kernel.

May import: errors, spec, plan.
"""
