"""A fleet of three routers in throwaway namespaces, configured through Ansible over real SSH
(for tests/test_fleet_ansible.py and ``python -m bench fleet``).

Each router ``rN`` (namespace ``<prefix>rN``) sits between its clients (``<prefix>cN``,
hosts 198.18.N.2-198.18.N.5 on one veth) and one shared server namespace (``<prefix>srv``,
nginx on 198.19.N.2), as in the lab's wiring.  A controller namespace (``<prefix>ctl``)
reaches each router's own sshd (Debian's openssh-server, its own host key, address
198.18.10N.2 and state directory) over a management veth, and runs ansible-playbook there.
``Fleet.serve`` starts nginx in the server namespace (the lab's ``server.sh``), for traffic
through the routers.  ``Fleet.destroy`` kills every process in the namespaces and deletes them.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / "ansible"
PLAYBOOK = COLLECTIONS / "ansible_collections/ratelimit/fleet/playbooks/apply.yml"
ROUTERS = ("r1", "r2", "r3")
HOSTS_PER_ROUTER = 4


def sh(*argv, check=True, **kw):
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kw)


class Fleet:
    def __init__(self, prefix: str, work: Path):
        self.prefix, self.work = prefix, work
        self.namespaces: list[str] = []
        self.sshd: dict[str, subprocess.Popen] = {}

    def ns(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def state_dir(self, router: str) -> Path:
        return self.work / router / "state"

    # ------------------------------------------------------------------ building

    def build(self) -> "Fleet":
        sh("modprobe", "-a", "sch_htb", "sch_netem", "sch_ingress", "cls_u32", "act_mirred", "ifb", check=False)
        for name in ("ctl", "srv", *ROUTERS, *(f"c{r[1]}" for r in ROUTERS)):
            sh("ip", "netns", "add", self.ns(name))
            self.namespaces.append(self.ns(name))
            sh("ip", "-n", self.ns(name), "link", "set", "lo", "up")
        for r in ROUTERS:
            n = r[1]
            router, client = self.ns(r), self.ns(f"c{n}")
            self._veth(router, "r0", f"198.18.{n}.1/24", client, "c0", f"198.18.{n}.2/24")
            for k in range(3, HOSTS_PER_ROUTER + 2):
                sh("ip", "-n", client, "addr", "add", f"198.18.{n}.{k}/24", "dev", "c0")
            sh("ip", "-n", client, "route", "add", "default", "via", f"198.18.{n}.1")
            self._veth(router, "w0", f"198.19.{n}.1/24", self.ns("srv"), f"s{n}", f"198.19.{n}.2/24")
            sh("ip", "-n", self.ns("srv"), "route", "add", f"198.18.{n}.0/24", "via", f"198.19.{n}.1")
            self._veth(router, "m0", f"198.18.10{n}.2/24", self.ns("ctl"), f"m{n}", f"198.18.10{n}.1/24")
            sh("ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            # packets of one MTU, as a wire carries: the server's and clients' TCP sends no
            # bigger ones (the router would shape one, 45 KB say, as a single packet) and the
            # router hands its qdiscs none
            for ns, dev in ((router, "r0"), (router, "w0"), (client, "c0"), (self.ns("srv"), f"s{n}")):
                sh("ip", "-n", ns, "link", "set", dev, "gso_max_segs", "1")
        self._keys()
        for r in ROUTERS:
            self.start_sshd(r)
        self._inventory()
        return self

    def _veth(self, ns_a, dev_a, addr_a, ns_b, dev_b, addr_b):
        sh("ip", "-n", ns_a, "link", "add", dev_a, "type", "veth", "peer", "name", dev_b, "netns", ns_b)
        for ns, dev, addr in ((ns_a, dev_a, addr_a), (ns_b, dev_b, addr_b)):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")

    def _keys(self):
        self.key = self.work / "id_ed25519"
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        for r in ROUTERS:
            d = self.work / r
            d.mkdir(parents=True, exist_ok=True)
            self.state_dir(r).mkdir()
            sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key"))
            shutil.copy(self.key.with_suffix(".pub"), d / "authorized_keys")
            n = r[1]
            (d / "sshd_config").write_text(
                f"ListenAddress 198.18.10{n}.2\nPort 22\nHostKey {d / 'host_key'}\nPidFile {d / 'sshd.pid'}\n"
                f"AuthorizedKeysFile {d / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                f"SetEnv RATELIMIT_STATE_DIR={self.state_dir(r)}\nSubsystem sftp internal-sftp\n")
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory

    def start_sshd(self, router: str) -> None:
        d = self.work / router
        proc = subprocess.Popen(["ip", "netns", "exec", self.ns(router), "/usr/sbin/sshd", "-D", "-e", "-f",
                                 str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                                stderr=open(d / "sshd.log", "a"))
        self.sshd[router] = proc
        deadline = time.monotonic() + 10
        while sh("ip", "netns", "exec", self.ns(router), "ss", "-Htln", "sport", "= :22").stdout.strip() == "":
            assert proc.poll() is None and time.monotonic() < deadline, (d / "sshd.log").read_text()
            time.sleep(0.05)

    def stop_sshd(self, router: str) -> None:
        proc = self.sshd.pop(router)
        proc.terminate()
        proc.wait(10)

    def _inventory(self):
        hosts = {r: {"ansible_host": f"198.18.10{r[1]}.2",
                     "ratelimit": {"interface": "r0", "clients": [f"198.18.{r[1]}.0/24"]}} for r in ROUTERS}
        inventory = {"all": {"vars": {"ansible_user": "root", "ansible_python_interpreter": sys.executable,
                                      "ansible_ssh_private_key_file": str(self.key),
                                      "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                                                                 "-o UserKnownHostsFile=/dev/null -o ConnectTimeout=5"},
                             "children": {"routers": {"hosts": hosts}}}}
        self.inventory = self.work / "inventory.json"
        self.inventory.write_text(json.dumps(inventory))

    # ------------------------------------------------------------------ using

    def playbook(self, *extra: str, scenario: Path | None = None, options: dict | None = None,
                 persist: bool = False, playbook: Path = PLAYBOOK):
        """ansible-playbook ``playbook`` (apply.yml) from the controller namespace; the CompletedProcess.
        Each task opens its own SSH connection (so a stopped sshd is unreachable), unless
        ``persist``: Ansible's default, one connection a router kept open between tasks."""
        self.report = self.work / "report.json"
        self.report.unlink(missing_ok=True)
        variables = {"ratelimit_report": str(self.report)}
        if scenario is not None:
            variables["ratelimit_scenario"] = str(scenario)
        if options is not None:
            variables["ratelimit_options"] = options
        env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_HOST_KEY_CHECKING="False",
                   ANSIBLE_LOCAL_TEMP=str(self.work / "ansible-local"), ANSIBLE_REMOTE_TMP="/tmp/.rl-ansible",
                   ANSIBLE_NOCOLOR="1", ANSIBLE_SSH_CONTROL_PATH_DIR=str(self.work / "cp"),
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable, ANSIBLE_FORKS="5")
        env.pop("RATELIMIT_STATE_DIR", None)  # the controller's partition reads no state
        if not persist:
            env["ANSIBLE_SSH_ARGS"] = "-o ControlMaster=no"
        return sh("ip", "netns", "exec", self.ns("ctl"), "ansible-playbook", "-i", str(self.inventory),
                  str(playbook), "-e", json.dumps(variables), *extra, check=False, env=env, cwd=str(self.work),
                  timeout=300)

    def serve(self) -> None:
        """nginx in the server namespace on every 198.19.N.2, with the lab's files (``server.sh``);
        the URL of a file behind router ``rN`` is ``url(N, path)``."""
        from .common import listening, wait_until
        sh("ip", "netns", "exec", self.ns("srv"), "env", "RL_INSTALL=0", f"RL_LAB_DIR={self.work / 'srv'}",
           "RL_SERVER=nginx", "RL_NGINX_USER=root", "RL_WORKERS=2", f"RL_SRC={ROOT}",
           f"RL_PYTHON={sys.executable}", "sh", str(ROOT / "vagrant/provision/server.sh"))
        wait_until(lambda: listening(self.ns("srv"), 80), 10, "nginx in the fleet's server namespace")

    @staticmethod
    def url(n: int | str, path: str) -> str:
        return f"http://198.19.{n}.2{path}"

    def tc_dumps(self) -> dict:
        from .faults import dump
        return {r: dump(self.ns(r), ("r0", "rl-r0")) for r in ROUTERS}

    def records(self) -> dict:
        out = {}
        for r in ROUTERS:
            path = self.state_dir(r) / "-" / "r0.json"
            out[r] = json.loads(path.read_text()) if path.exists() else None
        return out

    def destroy(self) -> None:
        for proc in self.sshd.values():
            proc.kill()
        from ratelimit.kernel import netns
        netns.delete_namespaces(self.namespaces)


def report(fleet) -> dict:
    """{router: {"stage": ..., "end": ..., "putback": ...}} of the last playbook run (``outcome``)."""
    return json.loads(fleet.report.read_text())
