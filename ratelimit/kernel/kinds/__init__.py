"""One module per traffic-control kind: how its options are packed for the kernel and read back.

``htb``, ``netem``, ``u32`` (tables, filters, selectors), ``actions`` (the action
list of a filter, with ``police`` and ``mirred``), ``ingress``.  A new kind, or a
new attribute of one, is added here and wired in ``encode.Encoder`` (packing)
and ``decode`` (snapshots).
"""
