"""FedAvg (McMahan et al. 2017): sample-weighted averaging of full model states.

The deliverable is the global model, so a client's accuracy is the global model's accuracy on
that client's local test split (personalised test sets, global model).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from torch import nn

from edgefd.algorithms.base import ClientContext, ClientRole, ServerContext, ServerRole, register_method
from edgefd.algorithms.schema import DeclaredCounts, MessageSchema, model_state, samples
from edgefd.algorithms.toolkit import (
    RobustAggregation,
    average_states,
    bounded_updates,
    capped_metric,
    capped_weights,
    check_update_cap,
    one_architecture_model,
    robust_states,
    sent_back,
    sent_back_metric,
    too_few_to_combine,
    update_cap_setting,
)
from edgefd.protocol import Payload
from edgefd.training import LocalTraining, load_state_arrays, state_arrays


@dataclass
class FedAvgParams(RobustAggregation):
    """FedAvg's only choices are how the server combines the clients' weights, how far one
    client's declared sample count may weight it, and how far one client's update may move it."""

    update_cap: float = update_cap_setting()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_update_cap(self.update_cap)


class FedAvgClient(ClientRole):
    local_training = LocalTraining(optimizer_lifecycle="fresh")  # the weights are replaced every round

    def __init__(self, context: ClientContext, params: FedAvgParams) -> None:
        super().__init__(context, params)
        self.optimizer = self.round_optimizer()

    def train_round(self, round: int, downlink: Payload | None) -> Payload:
        if downlink is not None:
            load_state_arrays(self.model, downlink.arrays)
        y = self.data.train_y
        self.train_local(lambda logits, idx: nn.functional.cross_entropy(logits, y[idx]))
        return Payload("weights", state_arrays(self.model), {"samples": len(y)})


class FedAvgServer(ServerRole):
    def __init__(self, context: ServerContext, params: FedAvgParams) -> None:
        super().__init__(context, params)
        names = set(context.client_models.values())
        if len(names) != 1:
            raise ValueError(f"fedavg averages one architecture; clients have {sorted(names)} (use --models homo)")
        self.global_state = state_arrays(context.build_model(names.pop()))
        self.uplink_schema = MessageSchema("weights", model_state(self.global_state), {"samples": samples(1)})
        self.declared = DeclaredCounts()

    def uplink_schemas(self, client_id: str) -> Sequence[MessageSchema]:
        """The global model's state (same names, dtypes and shapes) and the client's sample count."""
        return (self.uplink_schema,)

    def check_uplink(self, round: int, client_id: str, payload: Payload) -> None:
        """The schema, and the sample count the client declared first (it weights its model), within
        what one client of the run can hold."""
        super().check_uplink(round, client_id, payload)
        self.context.check_declared(samples=int(payload.scalars["samples"]))
        self.declared.check(client_id, samples=payload.scalars["samples"])

    def downlink(self, round: int, client_id: str) -> Payload:
        return Payload("weights", self.global_state)

    def aggregate(self, round: int, uplinks: dict[str, Payload]) -> dict[str, float]:
        """Each client's update at most ``update_cap`` times the others' median norm
        (`bounded_updates`; ``updates_capped`` counts the clients held to it), then the mean weighted
        by the declared sample counts, each at most ``weight_cap`` times the others' median
        (`capped_weights`; ``weights_capped`` counts those) and 0 for a model sent back untrained
        (`sent_back`; ``updates_empty``), or the robust statistic; a robust server
        that received fewer than `ROBUST_MINIMUM` uplinks keeps the global model (``below_quorum`` 1
        in the round's metrics): it could not tell an honest model from a poisoned one."""
        if not uplinks:
            return {}
        ordered = [uplinks[c] for c in sorted(uplinks)]
        states, clipped = bounded_updates([p.arrays for p in ordered], self.global_state, self.params.update_cap)
        bounded = {"updates_capped": float(clipped)} if clipped else {}
        if self.params.aggregator == "mean":
            empty = sent_back(states, self.global_state) if self.params.weight_cap else np.zeros(len(states), bool)
            declared = np.array([0.0 if out else float(p.scalars["samples"]) for p, out in zip(ordered, empty)])
            weights = capped_weights(declared, self.params.weight_cap)
            self.global_state = average_states(states, weights.tolist())
            return {**capped_metric(declared, weights), **bounded, **sent_back_metric(empty)}
        if too_few_to_combine(round, len(ordered), self.params.aggregator):
            return {"below_quorum": 1.0, **bounded}
        self.global_state = robust_states(states, self.params.aggregator, self.params.trim)
        return {"below_quorum": 0.0, **bounded}

    def evaluation_state(self, client_id: str) -> Payload:
        return Payload("weights", self.global_state)

    def server_models(self) -> dict[str, nn.Module]:
        """The global model every client is measured with: the one figure of the run that the server
        can score itself (its test set in a simulation, `edgefd server --holdout-dir` deployed)."""
        return {"global_model": one_architecture_model(self.context, self.global_state)}


register_method(
    "fedavg",
    "sample-weighted averaging of model weights",
    FedAvgClient,
    FedAvgServer,
    FedAvgParams,
    paper="H. B. McMahan et al., Communication-Efficient Learning of Deep Networks from Decentralized Data, "
    "AISTATS 2017, arXiv:1602.05629",
    global_model=True,
)
