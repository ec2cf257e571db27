"""scripts/gpu_check.py's judgements, which its CPU mode in CI never reaches: the kernel goals (only
judged on a GPU's full shapes) and the summary it writes from a GPU run's records."""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    sys.path.insert(0, str(SCRIPT.parent))  # it imports scripts/same_results.py, as when run as a script
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(SCRIPT.parent))
    yield module
    del sys.modules[spec.name]


def record(kernel, shape, cpp_ms, gbps, fraction, moved_fraction, compiled_speedup):
    return dict(
        kernel=kernel, shape=shape, cpp_ms=cpp_ms, torch_ms=2 * cpp_ms, speedup=2.0, gbps=gbps,
        bandwidth_fraction=fraction, moved_gbps=gbps, moved_fraction=moved_fraction,
        compiled_ms=cpp_ms * compiled_speedup, compiled_speedup=compiled_speedup,
    )  # fmt: skip


RECORDS = [
    # the small shape is fast and far from the copy bandwidth; only the largest is judged
    record("weighted_kl fwd+bwd", "B=256 C=10", 0.01, 1.0, 0.001, 0.001, 0.5),
    record("weighted_kl fwd+bwd", "B=1048576 C=100", 0.5, 2400.0, 0.8, 0.8, 1.6),
    record("sl_loss fwd+bwd", "K=10 B=262144 C=100", 1.0, 1000.0, 0.3, 0.3, 0.9),
    # gather_mean: judged by the bytes it must move, not the single-pass count
    record("gather_mean", "n=1000000 R=16 C=100", 5.0, 100.0, 0.05, 0.7, 3.0),
]


def test_goals_judge_each_kernel_at_its_largest_shape(gpu_check):
    goals = {g["goal"]: g for g in gpu_check.kernel_goals(RECORDS)}
    assert goals["weighted_kl fwd+bwd B=1048576 C=100: faster than torch.compile"]["met"]
    assert goals["weighted_kl fwd+bwd B=1048576 C=100: >= 60% of copy bandwidth"]["met"]
    assert not any("B=256" in goal for goal in goals)
    assert not goals["sl_loss fwd+bwd K=10 B=262144 C=100: faster than torch.compile"]["met"]
    assert not any(goal.startswith("sl_loss") and "bandwidth" in goal for goal in goals)  # compute-bound
    assert goals["gather_mean n=1000000 R=16 C=100: >= 60% of copy bandwidth"] == dict(
        goal="gather_mean n=1000000 R=16 C=100: >= 60% of copy bandwidth", value="70%", met=True
    )


def test_summary_of_a_gpu_run_names_the_card_and_every_failure(gpu_check, tmp_path):
    check = gpu_check.Check(tmp_path, tmp_path, "cuda", 1, 10)
    steps = [
        gpu_check.Step("environment", True, 0.1, dict(gpu="NVIDIA H100 80GB HBM3", torch="2.11.0", python="3.12.3")),
        gpu_check.Step(
            "kernel_bench",
            True,
            30.0,
            dict(
                device="NVIDIA H100 80GB HBM3", copy_gbps=3000.0, records=RECORDS, goals=gpu_check.kernel_goals(RECORDS)
            ),
        ),
        gpu_check.Step(
            "methods",
            False,
            60.0,
            dict(
                runs=[
                    dict(
                        method="fd",
                        ok=True,
                        bytes_identical=True,
                        device_accuracy=80.0,
                        cpu_accuracy=80.5,
                        device_seconds=3.0,
                        cpu_seconds=5.0,
                        peak_gpu_mb=20.0,
                    ),
                    dict(method="fedcache", ok=False, error="exit 1 / 0: Traceback"),
                ]
            ),  # fmt: skip
            error="differ or failed: fedcache",
        ),
    ]
    text = gpu_check.summary_markdown(check, steps, 91.0)
    assert text.startswith("# edgefd GPU check: NVIDIA H100 80GB HBM3")
    assert "| methods | **no** | 60 | differ or failed: fedcache |" in text
    assert "| fedcache | **no** | exit 1 / 0: Traceback |" in text
    assert "| sl_loss fwd+bwd K=10 B=262144 C=100: faster than torch.compile | 0.9x | **no** |" in text
    assert "copy bandwidth 3000.0 GB/s" in text
