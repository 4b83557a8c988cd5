"""An emulated multi-node cluster on one machine: K network namespaces ("machines") on a
private bridge made for this run, links shaped with `tc`, one Ray node per namespace.

    with NetCluster(2, bandwidth="100mbit") as cluster:
        cluster.run(0, ["python", "-m", "gnnsys.cli", "train", "--config", "run.yaml",
                        "--set", f"cluster.address={cluster.address}"])

Nothing outside the machine is ever addressed: the bridge has no address and no uplink,
so the namespaces reach each other and nothing else. Every name carries a per-run prefix
(`gns<pid><letter>`), and teardown (always run, also on Ctrl-C, SIGTERM and errors)
stops only the processes living in this run's namespaces (never `ray stop`), then
deletes the namespaces, their veths, the bridge and the run's temp directory.
Needs root and iproute2 (`ip`, `tc`); delay and loss need the kernel's netem qdisc.
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .errors import NetClusterError

RAY_PORT = 6379
DASHBOARD_PORT = 8265
TOOL_TIMEOUT_S = 20          # any single ip / tc call
RAY_START_TIMEOUT_S = 90     # one `ray start`
PREFIX_RE = re.compile(r"^gns(\d+)[a-z]$")
_runs = itertools.count()


def unavailable_reason() -> str | None:
    """None when this machine can build an emulated cluster, else one line saying why not."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the emulated cluster needs root (network namespaces, veths, tc): run as root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"the emulated cluster needs `{tool}` (Debian: apt-get install iproute2)"
    if shutil.which("ray") is None:
        return "the emulated cluster needs the `ray` command (pip install 'ray[default]')"
    return None


def _sh(*args: str, timeout: float = TOOL_TIMEOUT_S, check: bool = True) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise NetClusterError(f"`{' '.join(args)}` failed: "
                              f"{(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout


def _rate_bytes(rate: str) -> float:
    """tc's rate syntax ('100mbit', '1gbit', '500kbit') in bytes per second."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmg]?)bit", rate.strip().lower())
    if not match:
        raise NetClusterError(f"bandwidth {rate!r} is not a rate like 100mbit, 1gbit or 500kbit")
    return float(match[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[match[2]] / 8


def shape(netns: str | None, dev: str, bandwidth: str | None = None,
          delay: str | None = None, loss: str | None = None) -> None:
    """Shape one device's egress: tbf for bandwidth, netem (root) for delay / loss."""
    where = ["-n", netns] if netns else []
    _sh("tc", *where, "qdisc", "del", "dev", dev, "root", check=False)
    parent = ["root"]
    if delay or loss:
        netem = [*(["delay", delay] if delay else []), *(["loss", loss] if loss else [])]
        done = subprocess.run(["tc", *where, "qdisc", "add", "dev", dev, "root", "handle",
                               "1:", "netem", *netem], capture_output=True, text=True,
                              timeout=TOOL_TIMEOUT_S)
        if done.returncode != 0:
            unknown = "unknown" in done.stderr.lower()
            raise NetClusterError(
                "this kernel has no netem qdisc (sch_netem): --delay and --loss need it; "
                "use --bandwidth alone" if unknown else
                f"tc netem {' '.join(netem)} failed: {done.stderr.strip()[:300]}")
        parent = ["parent", "1:"]
    if bandwidth:
        rate = _rate_bytes(bandwidth)
        burst = max(int(rate / 100), 16 * 1024)          # >= one 10 ms tick of traffic
        _sh("tc", *where, "qdisc", "add", "dev", dev, *parent, "handle", "2:", "tbf",
            "rate", bandwidth, "burst", str(burst), "latency", "100ms")


class NetCluster:
    """K namespaces on a bridge, each running one Ray node; a context manager."""

    def __init__(self, nodes: int = 2, *, bandwidth: str | None = None,
                 delay: str | None = None, loss: str | None = None, cpus_per_node: int = 1,
                 prefix: str | None = None, dashboard: bool = False):
        if not 1 <= nodes <= 16:
            raise NetClusterError(f"nodes={nodes}: an emulated cluster has 1 to 16 nodes")
        self.nodes, self.cpus_per_node = nodes, cpus_per_node
        self.dashboard = dashboard          # the head's job server, for `ray job submit`
        self.bandwidth, self.delay, self.loss = bandwidth, delay, loss
        self.prefix = prefix or f"gns{os.getpid()}{chr(ord('a') + next(_runs) % 26)}"
        if not PREFIX_RE.match(self.prefix):
            raise NetClusterError(f"prefix {self.prefix!r} must look like gns<pid><letter>")
        subnet = (int(PREFIX_RE.match(self.prefix)[1]) * 26 + ord(self.prefix[-1])) % 254 + 1
        self.addresses = [f"10.213.{subnet}.{k + 1}" for k in range(nodes)]
        self.temp = Path(tempfile.gettempdir()) / self.prefix

    # names -----------------------------------------------------------------------------
    def netns(self, k: int) -> str:
        return f"{self.prefix}-{k}"

    def host_veth(self, k: int) -> str:
        """The bridge side of node k's link (`ip link set <it> down` cuts node k off)."""
        return f"{self.prefix}-{k}h"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    @property
    def address(self) -> str:
        """The Ray head's address, for `cluster.address`."""
        return f"{self.addresses[0]}:{RAY_PORT}"

    @property
    def dashboard_url(self) -> str:
        """The head's job-submission address: `ray job submit --address <it>` (node 0)."""
        return f"http://{self.addresses[0]}:{DASHBOARD_PORT}"

    def env(self, k: int = 0) -> dict:
        """The environment of a process in node k: no Ray auth, the node's own temp dir."""
        return {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                "RAY_TMPDIR": str(self.temp / f"n{k}")}

    # life cycle ------------------------------------------------------------------------
    def __enter__(self) -> "NetCluster":
        self._old_sigterm = None
        if sys.platform.startswith("linux") and _main_thread():
            self._old_sigterm = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            self.up()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.down()
        finally:
            if self._old_sigterm is not None:
                signal.signal(signal.SIGTERM, self._old_sigterm)

    def up(self) -> None:
        reason = unavailable_reason()
        if reason:
            raise NetClusterError(reason)
        if Path(f"/run/netns/{self.netns(0)}").exists() or self.temp.exists():
            raise NetClusterError(f"an emulated cluster named {self.prefix} exists already; "
                                  f"`scripts/netcluster.py down {self.prefix}` removes it")
        self.temp.mkdir(mode=0o700)
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _sh("ip", "link", "set", self.bridge, "up")
        for k in range(self.nodes):
            self._add_node(k)
        for k in range(self.nodes):
            self._start_ray(k)
        self.wait_for_nodes()

    def _add_node(self, k: int) -> None:
        ns, host, inner = self.netns(k), self.host_veth(k), f"{self.prefix}-{k}n"
        _sh("ip", "netns", "add", ns)
        _sh("ip", "link", "add", host, "type", "veth", "peer", "name", inner)
        _sh("ip", "link", "set", host, "master", self.bridge)
        _sh("ip", "link", "set", host, "up")
        _sh("ip", "link", "set", inner, "netns", ns)
        _sh("ip", "-n", ns, "link", "set", inner, "name", "eth0")
        _sh("ip", "-n", ns, "addr", "add", f"{self.addresses[k]}/24", "dev", "eth0")
        _sh("ip", "-n", ns, "link", "set", "eth0", "up")
        _sh("ip", "-n", ns, "link", "set", "lo", "up")
        # A default route onto the isolated bridge: address detection (Ray's, gloo's) picks
        # eth0's address; a packet for anywhere else reaches no one.
        _sh("ip", "-n", ns, "route", "add", "default", "dev", "eth0")
        if self.bandwidth or self.delay or self.loss:
            shape(ns, "eth0", self.bandwidth, self.delay, self.loss)      # node -> bridge
            shape(None, host, self.bandwidth, self.delay, self.loss)      # bridge -> node

    def _start_ray(self, k: int) -> None:
        (self.temp / f"n{k}").mkdir()
        args = ["ray", "start", f"--node-ip-address={self.addresses[k]}",
                f"--num-cpus={self.cpus_per_node}", "--num-gpus=0",
                f"--temp-dir={self.temp / f'n{k}' / 'ray'}", "--disable-usage-stats"]
        dashboard = [f"--include-dashboard={str(self.dashboard).lower()}"]
        if self.dashboard:
            dashboard += [f"--dashboard-host={self.addresses[0]}",
                          f"--dashboard-port={DASHBOARD_PORT}"]
        args += (["--head", f"--port={RAY_PORT}", *dashboard] if k == 0
                 else [f"--address={self.address}"])
        done = self.run(k, args, timeout=RAY_START_TIMEOUT_S)
        if done.returncode != 0:
            raise NetClusterError(f"`ray start` in {self.netns(k)} failed: "
                                  f"{(done.stderr or done.stdout).strip()[-400:]}")

    def wait_for_nodes(self, timeout: float = RAY_START_TIMEOUT_S) -> None:
        """Return once the head sees all K nodes alive."""
        probe = ("import ray,sys,time\nray.init(address=sys.argv[1],logging_level='ERROR')\n"
                 "end=time.time()+float(sys.argv[3])\n"
                 "while sum(n['Alive'] for n in ray.nodes())<int(sys.argv[2]) and "
                 "time.time()<end: time.sleep(0.5)\n"
                 "sys.exit(sum(n['Alive'] for n in ray.nodes())<int(sys.argv[2]))")
        done = self.run(0, [sys.executable, "-c", probe, self.address, str(self.nodes),
                            str(timeout)], timeout=timeout + 30)
        if done.returncode != 0:
            raise NetClusterError(f"the {self.nodes} Ray nodes did not all join within "
                                  f"{timeout:g}s: {done.stderr.strip()[-300:]}")

    def run(self, k: int, argv: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
        """Run a command inside node k (its network, its Ray temp dir); bounded in time."""
        kwargs.setdefault("capture_output", True)
        return subprocess.run(["ip", "netns", "exec", self.netns(k), *argv], text=True,
                              env=kwargs.pop("env", self.env(k)), timeout=timeout, **kwargs)

    def popen(self, k: int, argv: list[str], **kwargs) -> subprocess.Popen:
        """Start a command inside node k; teardown stops it if it still runs."""
        return subprocess.Popen(["ip", "netns", "exec", self.netns(k), *argv],
                                env=kwargs.pop("env", self.env(k)), **kwargs)

    def down(self) -> None:
        teardown(self.prefix)


def _main_thread() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)        # unwinds through __exit__, so teardown runs


def _our_namespaces(prefix: str) -> list[str]:
    out = _sh("ip", "netns", "list", check=False)
    return [line.split()[0] for line in out.splitlines()
            if line.split() and line.split()[0].startswith(prefix + "-")]


def _stop_processes(namespaces: list[str], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, every process living in these namespaces (ours alone: the
    namespaces were made by this run)."""
    def pids() -> set[int]:
        found = set()
        for ns in namespaces:
            found |= {int(p) for p in _sh("ip", "netns", "pids", ns, check=False).split()}
        return found - {os.getpid()}
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace_s
        while pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not pids():
            return


def teardown(prefix: str) -> None:
    """Remove everything of the emulated cluster `prefix`: its processes, namespaces (their
    veths go with them), bridge and temp dir. Safe to call twice or on a half-built one."""
    if not PREFIX_RE.match(prefix):
        raise NetClusterError(f"{prefix!r} is not an emulated cluster's name (gns<pid><letter>)")
    namespaces = _our_namespaces(prefix)
    _stop_processes(namespaces)
    for ns in namespaces:
        _sh("ip", "netns", "del", ns, check=False)
    links = _sh("ip", "-o", "link", "show", check=False)
    for name in re.findall(rf"^\d+: ({re.escape(prefix)}-[^:@\s]+)", links, re.M):
        _sh("ip", "link", "del", name, check=False)
    shutil.rmtree(Path(tempfile.gettempdir()) / prefix, ignore_errors=True)


def leftovers(prefix: str) -> list[str]:
    """What of cluster `prefix` still exists (namespaces, links, temp dir): [] after teardown."""
    found = _our_namespaces(prefix)
    links = _sh("ip", "-o", "link", "show", check=False)
    found += re.findall(rf"^\d+: ({re.escape(prefix)}-[^:@\s]+)", links, re.M)
    if (Path(tempfile.gettempdir()) / prefix).exists():
        found.append(str(Path(tempfile.gettempdir()) / prefix))
    return found


def stale_prefixes() -> list[str]:
    """Emulated clusters whose creating process is gone (e.g. `up` from the CLI)."""
    names = _sh("ip", "netns", "list", check=False).split()
    names += re.findall(r"^\d+: (gns\d+[a-z])-", _sh("ip", "-o", "link", "show", check=False),
                        re.M)
    prefixes = {n.split("-")[0] for n in names if PREFIX_RE.match(n.split("-")[0])}
    return sorted(p for p in prefixes
                  if not Path(f"/proc/{PREFIX_RE.match(p)[1]}").exists())
