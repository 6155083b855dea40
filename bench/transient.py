"""python bench/transient.py OUT.json (as root; in the full-kernel VM for the delay stage:
``ratelimit vm -- python bench/transient.py /dev/stdout``).

The start-up transient of one modem-28k8 connection: 8 calls of the 10,000-byte file on one
keep-alive connection, each call's time against the link model, with and without the delay
stage, with the server's RTO floor at Linux's 200 ms and at RFC 6298's 1 s."""
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("RATELIMIT_STATE_DIR", "/tmp/trstate")
from ratelimit.lab.core import Lab
from ratelimit.lab.link import LinkSpec
CALLS, SIZE = 8, 10_000
out = []
for delay in (True, False):
    for tcp in ("linux", "rfc6298"):
        lab = Lab.up("tr", clients=1, ports="10000-10009",
                     link=LinkSpec(profile="modem-28k8", per="port", no_delay=not delay), server_tcp=tcp)
        try:
            model = lab.link_model()
            lab.download("/1000.bin")  # ARP and the server's first contact out of the way
            url = lab.url(f"/{SIZE}.bin")
            r = lab.client(1).run(["curl", "-sS", "-w", "%{size_header} %{size_request} %{time_total}\\n",
                                   *sum((["-o", "/dev/null", url] for _ in range(CALLS)), [])], timeout=600)
            rows = [l.split() for l in r.stdout.splitlines() if l.strip()]
            calls = []
            for i, (h, q, t) in enumerate(rows):
                m = (model.fetch_seconds(SIZE, header=int(h), request=int(q)) if i == 0
                     else model.call_seconds(SIZE, header=int(h), request=int(q)))
                calls.append({"call": i + 1, "seconds": float(t), "model_s": m})
            rec = {"delay_stage": delay, "server_tcp": tcp, "calls": calls}
            out.append(rec)
            print(json.dumps(rec), flush=True)
        finally:
            lab.down()
json.dump(out, open(sys.argv[1], "w"), indent=1)
