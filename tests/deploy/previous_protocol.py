"""``python previous_protocol.py VERSIONS ARGS...``: ``edgefd ARGS...`` whose MQTT endpoints read and
write only the protocol ``VERSIONS`` (comma-separated).

``2`` is the previous release's wire: its bytes are held to a recording of that release
(tests/protocol/test_protocol_versions.py), so a device or server run through this speaks to the
others as that release did."""

import sys

from edgefd import cli
from edgefd.deploy import mqtt_transport

versions = tuple(int(v) for v in sys.argv[1].split(","))
built = mqtt_transport.MqttEndpoint.__init__


def endpoint_of_those_versions(self, *args, **kwargs):
    built(self, *args, **kwargs)
    self.versions = versions


mqtt_transport.MqttEndpoint.__init__ = endpoint_of_those_versions  # type: ignore[method-assign]
sys.exit(cli.main(sys.argv[2:]))
