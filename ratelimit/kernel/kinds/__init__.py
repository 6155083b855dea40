"""One module per traffic-control kind: how its options are packed for the kernel and read back.

``htb``, ``netem``, ``tbf``, ``fifo`` (bfifo, pfifo), ``mq``, ``ingress`` (and clsact),
``stab`` (size tables), ``u32`` (tables, filters, selectors), ``bpf`` (cls_bpf),
``actions`` (the action list of a filter, with ``police`` and ``mirred``).  A new kind,
or a new attribute of one, is added here and wired in ``encode.Encoder`` (packing) and
``decode`` (snapshots).

May import: errors, spec, plan.
"""
