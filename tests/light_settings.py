"""The models and lighter settings some methods need to run on digits in a test, per method (the
others run with their defaults). Tests add their own choice for FedCache's exchange."""

LIGHT_SETTINGS = {
    "fedict": dict(models="fedict_c1"),
    "fedgkt": dict(models="fedict_c1"),
    "fedmd": dict(params={"public_dataset": "digits", "alignment_size": 50}),
    "fedd2s": dict(models="fedd2s_m1", params={"phase_epochs": 1}),
    "fedzkt": dict(
        models="zkt_tiny_a,zkt_tiny_e",
        epochs=1,
        params=dict(global_model="zkt_tiny_global", generator="zkt_generator_mlp", iterations=2, server_batch_size=16),
    ),
}
