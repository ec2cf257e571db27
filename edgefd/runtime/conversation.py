"""A client's work that asks the server during it (a verb that ``asks``: FedCache's ``steps``),
carried as ordinary messages.

A client's code asks and waits for the answer (`ClientApp.handle` with an ``ask``), while a channel
only moves messages and the loop answers them. A `Conversation` runs the client's work in a thread
of its own: each request comes out as a message (`Event` "ask"), the loop's answer goes in as one
(`resume`), and the work's last message is its answer ("done"). Only one side runs at a time, so
the client computes exactly what it would computing in one thread. The in-process and the Ray
channels use it; a device asks over the broker, the same messages on the wire.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from edgefd.protocol.errors import ProtocolError
from edgefd.protocol.message import Message
from edgefd.runtime.verbs import ClientApp, StepRefused

EventKind = Literal["ask", "done", "missed", "failed"]


@dataclass(frozen=True)
class Event:
    """What the client's work came to next."""

    kind: EventKind
    """"ask": a request for the server (``message``); "done": the work's answer (``message``);
    "missed": the client ends its work unanswered (``error``: a message that does not encode, or a
    refused step), as a device misses the round; "failed": an error in the client's code (``error``)."""
    message: Message | None = None
    error: BaseException | None = None


class Conversation:
    """One client's work on one message, in a thread of its own, stepped by the caller."""

    def __init__(self, app: ClientApp, message: Message, prepare: Callable[[], None] | None = None) -> None:
        """``prepare``: run first in the work's thread (a thread's own settings, e.g. OpenMP's)."""
        self._events: queue.Queue[Event] = queue.Queue()
        self._replies: queue.Queue[Message] = queue.Queue()
        self.open = True
        """The client waits for an answer to its last request."""
        self._asked: Message
        """The request the client waits on while ``open``."""
        self._thread = threading.Thread(
            target=self._work, args=(app, message, prepare), name=f"edgefd-{message.receiver}", daemon=True
        )

    def start(self) -> Event:
        """Start the work: its first request, or its answer."""
        self._thread.start()
        return self._next()

    def resume(self, reply: Message) -> Event:
        """Give the client the server's answer to its request: its next request, or its answer."""
        if not self.open:
            raise RuntimeError("resume: the client asks nothing (its work is over)")
        self._replies.put(reply)
        return self._next()

    def abandon(self) -> Event:
        """End the work by refusing the request it waits on (an answer without content): what it
        came to."""
        event = self.resume(self._asked.answer(None))
        while event.kind == "ask":  # a client that asks on regardless
            event = self.resume(self._asked.answer(None))
        return event

    def _next(self) -> Event:
        event = self._events.get()
        self.open = event.kind == "ask"
        if not self.open:
            self._thread.join()
        return event

    def _ask(self, request: Message) -> Message:
        self._asked = request
        self._events.put(Event("ask", request))
        return self._replies.get()

    def _work(self, app: ClientApp, message: Message, prepare: Callable[[], None] | None) -> None:
        try:
            if prepare is not None:
                prepare()
            self._events.put(Event("done", app.handle(message, self._ask)))
        except (ProtocolError, StepRefused) as error:
            self._events.put(Event("missed", error=error))
        except BaseException as error:  # the caller raises it in its own thread
            self._events.put(Event("failed", error=error))
