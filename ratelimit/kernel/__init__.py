"""The kernel side: everything that talks to Linux traffic control or boots a kernel.

  executor   Executor: carries out plan operations (the only code that changes tc)
  readback   Reader: root/ingress qdiscs, snapshots, u32 read-back, counters
  transport  one rtnetlink socket in a namespace: batches, acks, dumps
  links      devices (IFB, lookups) through pyroute2
  encode     plan operations -> netlink messages, as tc sends them
  decode     dumped messages -> snapshot items, plan operations, counters
  kinds/     one module per tc kind (htb, netem, u32, actions, police, mirred, ingress)
  nl         netlink framing: constants, structs, attribute packing and parsing
  rates      tc's tick, rate-spec and rate-table arithmetic
  probe      which qdiscs, classifiers, actions and links the running kernel accepts
  vm         a command in a VM booted from a stock kernel (virtme-ng)
"""
