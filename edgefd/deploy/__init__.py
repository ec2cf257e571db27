"""edgefd.deploy: a run over MQTT, the server on a workstation and the clients on devices (the
broker, the wire's topics and messages, the transport, checkpoints, the server and client runtimes)."""
