#!/usr/bin/env python
"""An emulated K-node cluster on this machine (network namespaces, shaped links, one Ray
node each); see gnnsys/netcluster.py. Needs root and iproute2.

    scripts/netcluster.py run 2 --bandwidth 100mbit -- python -m gnnsys.cli train \\
        --config run.yaml --set cluster.address={address}
    scripts/netcluster.py up 2 --bandwidth 100mbit     # prints the prefix and head address
    scripts/netcluster.py down [PREFIX]                 # default: every orphaned cluster

`run` sets up, runs the command inside the head's namespace ({address} is replaced by the
Ray head's address), and tears down whatever happens; its exit code is the command's.
"""
import subprocess
import sys

import harness
from gnnsys.errors import NetClusterError
from gnnsys.netcluster import NetCluster, stale_prefixes, teardown


def main(argv=None) -> int:
    parser = harness.parser(__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "run"):
        p = sub.add_parser(name)
        p.add_argument("nodes", type=int)
        p.add_argument("--bandwidth", help="per-link rate in tc syntax, e.g. 100mbit")
        p.add_argument("--delay", help="one-way latency, e.g. 1ms (needs netem)")
        p.add_argument("--loss", help="packet loss, e.g. 0.1%% (needs netem)")
        p.add_argument("--cpus-per-node", type=int, default=1)
        p.add_argument("--dashboard", action="store_true",
                       help="start the head's job server ({dashboard} in the command: "
                            "ray job submit --address {dashboard} -- ...)")
    sub.add_parser("down").add_argument("prefix", nargs="?")
    argv = sys.argv[1:] if argv is None else argv
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    try:
        if args.command == "down":
            for prefix in [args.prefix] if args.prefix else stale_prefixes():
                teardown(prefix)
                print(f"removed {prefix}")
            return 0
        cluster = NetCluster(args.nodes, bandwidth=args.bandwidth, delay=args.delay,
                             loss=args.loss, cpus_per_node=args.cpus_per_node,
                             dashboard=args.dashboard)
        if args.command == "up":
            try:
                cluster.up()
            except BaseException:
                cluster.down()
                raise
            print(f"{cluster.prefix}: head {cluster.address}; nodes "
                  + " ".join(f"{cluster.netns(k)}={a}" for k, a in enumerate(cluster.addresses))
                  + f"\n  ip netns exec {cluster.netns(0)} <command>   # a driver on the head"
                  + f"\n  scripts/netcluster.py down {cluster.prefix}")
            return 0
        if not command:
            parser.error("run needs a command after --")
        with cluster:
            command = [a.replace("{address}", cluster.address)
                       .replace("{dashboard}", cluster.dashboard_url) for a in command]
            return subprocess.call(["ip", "netns", "exec", cluster.netns(0), *command],
                                   env=cluster.env(0))
    except NetClusterError as err:
        print(f"netcluster: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
