#!/bin/sh
set -e
tc -batch - <<'EOF'
qdisc add dev eth0 root handle 52: mq
qdisc add dev eth0 parent 52:1 handle 54: stab overhead -46 linklayer ethernet htb default 0
class add dev eth0 parent 54: classid 54:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
qdisc add dev eth0 parent 52:2 handle 55: stab overhead -46 linklayer ethernet htb default 0
class add dev eth0 parent 55: classid 55:1 htb rate 8bit ceil 8bit burst 125000b cburst 125000b quantum 1468
class add dev eth0 parent 54:1 classid 54:10 htb rate 53728bit ceil 100mbit burst 125000b cburst 125000b quantum 1468
qdisc add dev eth0 parent 54:10 handle fffe: htb default 0
class add dev eth0 parent fffe: classid fffe:1 htb rate 100mbit ceil 100mbit burst 125000b cburst 125000b quantum 1468
class add dev eth0 parent fffe:1 classid fffe:100 htb rate 26864bit ceil 100mbit burst 4b cburst 4b quantum 1468
qdisc add dev eth0 parent fffe:100 handle 100: netem limit 13 delay 50ms rate 26864bit
class add dev eth0 parent fffe:1 classid fffe:101 htb rate 26864bit ceil 100mbit burst 4b cburst 4b quantum 1468
qdisc add dev eth0 parent fffe:101 handle 101: netem limit 13 delay 50ms rate 26864bit
filter add dev eth0 parent fffe: prio 1 handle 1: protocol ip u32 divisor 256
filter add dev eth0 parent fffe: prio 1 handle 1:0:1 protocol ip u32 ht 1:0: match u32 0xc6120102 0xffffffff at 16 match u32 0x00000400 0x0000ffff at 20 classid fffe:100
filter add dev eth0 parent fffe: prio 1 handle 1:1:1 protocol ip u32 ht 1:1: match u32 0xc6120102 0xffffffff at 16 match u32 0x00000401 0x0000ffff at 20 classid fffe:101
filter add dev eth0 parent fffe: prio 1 handle ::1 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00060000 0x00ff0000 at 8 hashkey mask 0x000000ff at 20 link 1:
filter add dev eth0 parent fffe: prio 1 handle ::2 protocol ip u32 match u32 0x05000000 0x0f000000 at 0 match u32 0x00000000 0x00001fff at 4 match u32 0x00110000 0x00ff0000 at 8 hashkey mask 0x000000ff at 20 link 1:
qdisc add dev eth0 clsact
EOF
# bpf: map on dev eth0: hash, key (family, kind, port, address) 20 bytes, value (queue_mapping, priority) 8 bytes, 2 entries
# bpf: map on dev eth0: ip 198.18.1.2 port 1024 -> tx queue 0 (queue_mapping 1), class 54:10
# bpf: map on dev eth0: ip 198.18.1.2 port 1025 -> tx queue 0 (queue_mapping 1), class 54:10
# bpf: program ratelimit_q (sched_cls), loaded with the map of dev eth0 and attached as: filter add dev eth0 egress prio 1 handle 1 bpf direct-action
#      0: r6 = r1
#      1: *(u64 *)(r10 -24) = 0
#      2: *(u64 *)(r10 -16) = 0
#      3: *(u64 *)(r10 -8) = 0
#      4: r7 = *(u32 *)(r6 +16)
#      5: if r7 == 8 goto ipv4
#      6: if r7 == 0xdd86 goto ipv6
#      7: if r7 == 0xb588 goto kick
#      8: goto miss
#   kick:
#      9: r1 = r6
#     10: r2 = 0
#     11: r3 = r10
#     12: r3 += -64
#     13: r4 = 1
#     14: r5 = 1
#     15: call bpf_skb_load_bytes_relative
#     16: if r0 == 0 goto kick_read_done
#     17: r2 = *(u32 *)(r6 +0)
#     18: if r2 <= 128 goto kick_read_pull
#     19: r2 = 128
#   kick_read_pull:
#     20: r1 = r6
#     21: call bpf_skb_pull_data
#     22: r1 = r6
#     23: r2 = 0
#     24: r3 = r10
#     25: r3 += -64
#     26: r4 = 1
#     27: r5 = 1
#     28: call bpf_skb_load_bytes_relative
#     29: if r0 != 0 goto miss
#   kick_read_done:
#     30: r1 = *(u8 *)(r10 -64)
#     31: if r1 == 0 goto miss
#     32: if r1 > 128 goto miss
#     33: *(u32 *)(r6 +12) = r1
#     34: r1 = 0
#     35: *(u32 *)(r6 +32) = r1
#     36: goto out
#   ipv4:
#     37: r1 = r6
#     38: r2 = 0
#     39: r3 = r10
#     40: r3 += -64
#     41: r4 = 20
#     42: r5 = 1
#     43: call bpf_skb_load_bytes_relative
#     44: if r0 == 0 goto ipv4_header_done
#     45: r2 = *(u32 *)(r6 +0)
#     46: if r2 <= 128 goto ipv4_header_pull
#     47: r2 = 128
#   ipv4_header_pull:
#     48: r1 = r6
#     49: call bpf_skb_pull_data
#     50: r1 = r6
#     51: r2 = 0
#     52: r3 = r10
#     53: r3 += -64
#     54: r4 = 20
#     55: r5 = 1
#     56: call bpf_skb_load_bytes_relative
#     57: if r0 != 0 goto others
#   ipv4_header_done:
#     58: r1 = *(u32 *)(r10 -48)
#     59: *(u32 *)(r10 -20) = r1
#     60: *(u8 *)(r10 -24) = 4
#     61: r1 = *(u8 *)(r10 -64)
#     62: r1 &= 15
#     63: if r1 != 5 goto host
#     64: r1 = *(u16 *)(r10 -58)
#     65: r1 &= 0xff1f
#     66: if r1 != 0 goto host
#     67: r1 = *(u8 *)(r10 -55)
#     68: r8 = 20
#     69: if r1 == 6 goto ports
#     70: if r1 == 17 goto ports
#     71: goto host
#   ipv6:
#     72: r1 = r6
#     73: r2 = 0
#     74: r3 = r10
#     75: r3 += -64
#     76: r4 = 40
#     77: r5 = 1
#     78: call bpf_skb_load_bytes_relative
#     79: if r0 == 0 goto ipv6_header_done
#     80: r2 = *(u32 *)(r6 +0)
#     81: if r2 <= 128 goto ipv6_header_pull
#     82: r2 = 128
#   ipv6_header_pull:
#     83: r1 = r6
#     84: call bpf_skb_pull_data
#     85: r1 = r6
#     86: r2 = 0
#     87: r3 = r10
#     88: r3 += -64
#     89: r4 = 40
#     90: r5 = 1
#     91: call bpf_skb_load_bytes_relative
#     92: if r0 != 0 goto others
#   ipv6_header_done:
#     93: r1 = *(u32 *)(r10 -40)
#     94: *(u32 *)(r10 -20) = r1
#     95: r1 = *(u32 *)(r10 -36)
#     96: *(u32 *)(r10 -16) = r1
#     97: r1 = *(u32 *)(r10 -32)
#     98: *(u32 *)(r10 -12) = r1
#     99: r1 = *(u32 *)(r10 -28)
#    100: *(u32 *)(r10 -8) = r1
#    101: *(u8 *)(r10 -24) = 6
#    102: r1 = *(u8 *)(r10 -58)
#    103: r8 = 40
#    104: if r1 == 6 goto ports
#    105: if r1 == 17 goto ports
#    106: goto host
#   ports:
#    107: r1 = r6
#    108: r2 = r8
#    109: r3 = r10
#    110: r3 += -72
#    111: r4 = 4
#    112: r5 = 1
#    113: call bpf_skb_load_bytes_relative
#    114: if r0 == 0 goto ports_read_done
#    115: r2 = *(u32 *)(r6 +0)
#    116: if r2 <= 128 goto ports_read_pull
#    117: r2 = 128
#   ports_read_pull:
#    118: r1 = r6
#    119: call bpf_skb_pull_data
#    120: r1 = r6
#    121: r2 = r8
#    122: r3 = r10
#    123: r3 += -72
#    124: r4 = 4
#    125: r5 = 1
#    126: call bpf_skb_load_bytes_relative
#    127: if r0 != 0 goto host
#   ports_read_done:
#    128: r1 = *(u16 *)(r10 -70)
#    129: *(u16 *)(r10 -22) = r1
#    130: r1 = map[queues] ll
#    132: r2 = r10
#    133: r2 += -24
#    134: call bpf_map_lookup_elem
#    135: if r0 != 0 goto hit
#    136: *(u16 *)(r10 -22) = 0
#   host:
#    137: *(u8 *)(r10 -23) = 1
#    138: r1 = map[queues] ll
#    140: r2 = r10
#    141: r2 += -24
#    142: call bpf_map_lookup_elem
#    143: if r0 != 0 goto hit
#   others:
#    144: *(u64 *)(r10 -24) = 0
#    145: *(u64 *)(r10 -16) = 0
#    146: *(u64 *)(r10 -8) = 0
#    147: *(u8 *)(r10 -23) = 2
#    148: r1 = map[queues] ll
#    150: r2 = r10
#    151: r2 += -24
#    152: call bpf_map_lookup_elem
#    153: if r0 != 0 goto hit
#   miss:
#    154: r1 = *(u32 *)(r6 +32)
#    155: r1 >>= 16
#    156: r1 -= 84
#    157: if r1 >= 128 goto out
#    158: r1 = 0
#    159: *(u32 *)(r6 +32) = r1
#   out:
#    160: r0 = 0
#    161: exit
#   hit:
#    162: r1 = *(u32 *)(r0 +0)
#    163: *(u32 *)(r6 +12) = r1
#    164: r1 = *(u32 *)(r0 +4)
#    165: *(u32 *)(r6 +32) = r1
#    166: r0 = 0
#    167: exit
