"""The broker ACL of a run, generated from the verb table: a client may write only the topics of
the verbs it answers or asks on (and its status), and read only its own downlinks.

The shipped template, server/mosquitto/acl, is this module's output (a test holds them equal);
after adding a verb, write it again:

    python3 -m edgefd.deploy.acl > server/mosquitto/acl             # the template (@RUN@)
    python3 -m edgefd.deploy.acl --run demo > /etc/mosquitto/edgefd/acl   # one run's ACL
"""

from __future__ import annotations

import argparse
import sys

from edgefd.deploy.mqtt_transport import PREFIX, check_name, up_verbs

RUN_PLACEHOLDER = "@RUN@"

_HEAD = """\
# edgefd ACL (Mosquitto acl_file), scoped to ONE run, generated from the verb table by
# `python3 -m edgefd.deploy.acl` (edgefd/deploy/acl.py): do not edit, generate it again.
# Before installing it, replace every @RUN@ by the run's name (the server's --run, each device's
# `run =`), e.g.
#   sed 's/@RUN@/demo/g' server/mosquitto/acl | sudo tee /etc/mosquitto/edgefd/acl >/dev/null
# or generate one run's file: python3 -m edgefd.deploy.acl --run demo
# A file whose @RUN@ is left in matches no run: everybody is refused everything (it fails closed).
# Several runs on one broker: one copy of the rules below per run name (server/README.md).
#
# Topics (edgefd/deploy/mqtt_transport.py, Topics): edgefd/<run>/down/<client>/<verb> server ->
# device, edgefd/<run>/up/<client>/<verb> device -> server, edgefd/<run>/status/<client> retained
# online/offline. Logins: the server is the user edgefd-server; a device's username is its client
# id (client-0, client-1, ...: %u below), and edgefd.conf's use_username_as_clientid makes it the
# MQTT client id too. Anything not granted here is refused ($SYS, other runs, other clients).

# The server: reads every client's uplinks and statuses of the run, writes their downlinks. It
# writes the uplink and status topics only to clear the retained messages it finds there when it
# subscribes (an empty retained payload): it takes live messages only, and what a device that is
# gone (revoked, say) left retained there goes.
user edgefd-server
topic read {root}/up/#
topic read {root}/status/#
topic write {root}/down/#
topic write {root}/up/#
topic write {root}/status/#

# Every device, in this run only: writes its own uplinks (the verbs edgefd sends, nothing deeper,
# so a device cannot fill the broker with retained messages on topics of its own invention) and
# its status; reads only its own downlinks.
"""


def render(run: str = RUN_PLACEHOLDER) -> str:
    """The ACL for ``run`` (the template with ``@RUN@`` by default)."""
    if run != RUN_PLACEHOLDER:
        check_name("run name", run)
    root = f"{PREFIX}/{run}"
    device = [f"pattern write {root}/up/%u/{verb}" for verb in sorted(up_verbs())]
    device += [f"pattern write {root}/status/%u", f"pattern read {root}/down/%u/+"]
    return _HEAD.format(root=root) + "\n".join(device) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m edgefd.deploy.acl", description=__doc__.splitlines()[0])
    parser.add_argument("--run", default=RUN_PLACEHOLDER, help="the run's name (default: the @RUN@ template)")
    args = parser.parse_args(argv)
    sys.stdout.write(render(args.run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
