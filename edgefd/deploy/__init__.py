"""edgefd.deploy: a run over MQTT, the server on a workstation and the clients on devices.

From the top (pyproject.toml's import-linter contracts keep it so): the commands ``local``
(`edgefd deploy-local`), ``server`` and ``client``; their shared broker ``flags``; the
``server_runtime`` and ``client_runtime``; the wire below them: ``mqtt_transport``, the
``messages`` on it, ``checkpoint`` and the ``broker``."""
