"""Property-based: whatever a user types as overrides, the answer is a config or one clear line."""
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cl_bench import config
from cl_bench.errors import UserError

pytestmark = pytest.mark.slow  # whole runs: `make test-fast` leaves them out

config.register()
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])

OUT_OF_RANGE = st.one_of(
    st.tuples(st.just("method.lr"), st.floats(max_value=0, allow_nan=False)),
    st.tuples(st.just("method.batch_size"), st.integers(max_value=0)),
    st.tuples(st.just("method.epochs"), st.integers(max_value=0)),
    st.tuples(st.just("method.weight_decay"), st.floats(max_value=-1e-9, allow_nan=False)),
    st.tuples(st.just("data.val_fraction"), st.one_of(st.floats(min_value=1.0, allow_nan=False, allow_infinity=False),
                                                      st.floats(max_value=-1e-9, allow_nan=False))),
    st.tuples(st.just("dataset.num_tasks"), st.integers(max_value=0)),
    st.tuples(st.just("hardware.threads"), st.integers(max_value=0)),
)
WRONG_TYPE = st.tuples(st.sampled_from(["method.lr", "method.batch_size", "method.epochs", "seed",
                                        "data.download", "dataset.num_tasks"]),
                       st.text(alphabet=string.ascii_letters, min_size=1, max_size=8))
NAME = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12)


def outcome(overrides):
    """Compose and validate as `cl-bench train` does before any work; return the error line, if any."""
    try:
        config.validate(config.compose(overrides))
    except UserError as e:
        return str(e)
    return None


def one_clear_line(message):
    assert message and "\n" not in message and "Traceback" not in message
    return message


@SETTINGS
@given(OUT_OF_RANGE)
def test_out_of_range_values_are_refused(pair):
    key, value = pair
    message = one_clear_line(outcome([f"{key}={value}"]))
    assert key in message


@SETTINGS
@given(WRONG_TYPE)
def test_values_of_the_wrong_type_are_refused(pair):
    key, value = pair
    if value.lower() in ("true", "false", "yes", "no", "y", "n", "on", "off", "null", "none", "nan", "inf", "infinity"):
        return  # OmegaConf reads these as booleans (y and n too), null or floats: not the wrong type for every key
    one_clear_line(outcome([f"{key}={value}"]))


@SETTINGS
@given(st.sampled_from(["method", "dataset", "backbone", "hardware", "logger", "data"]), NAME)
def test_unknown_keys_are_refused(group, name):
    known = {"method": ["name", "lr", "epochs", "batch_size", "optimizer", "momentum", "nesterov",
                        "weight_decay", "lr_milestones", "lr_gamma", "skip_nonfinite"]}
    composed = config.compose([])
    if name in composed[group]:
        return
    message = one_clear_line(outcome([f"{group}.{name}=1"]))
    assert f"{group}.{name}" in message and all(k in message for k in known.get(group, []))


@SETTINGS
@given(st.sampled_from(["method", "dataset", "backbone", "hardware", "logger"]), NAME)
def test_unknown_names_are_refused(group, name):
    if (config.CONF / group / f"{name}.yaml").exists():
        return
    message = one_clear_line(outcome([f"{group}={name}"]))
    assert f"unknown {group} '{name}'" in message


@pytest.mark.parametrize("method", ["er", "nccl"])
def test_a_memory_smaller_than_the_classes_is_refused(tmp_path, method):
    from conftest import cl_bench
    proc = cl_bench("train", f"method={method}", "method.memory_size=5", "scenario=class",
                    f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "method.memory_size=5" in proc.stderr and "10 classes" in proc.stderr


def test_a_multirun_over_methods_with_a_key_the_default_lacks_says_to_split_it(tmp_path):
    from conftest import cl_bench
    proc = cl_bench("train", "-m", "method=er,icarl", "method.memory_size=200", f"hydra.sweep.dir={tmp_path}")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "a multirun over method=er,icarl" in proc.stderr and "command of its own" in proc.stderr


@pytest.mark.parametrize("override", ["method=true", "dataset=null", "backbone=nan", "logger=3"])
def test_a_choice_that_reads_as_another_type_is_an_unknown_name(override):
    """Hydra hands YAML's reading of these (a boolean, null, a number) to the group as a bare ValueError."""
    group, name = override.split("=")
    assert f"unknown {group} '{name}': choose one of" in one_clear_line(outcome([override]))
