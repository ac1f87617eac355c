"""The names users import from the package's top level (and ``sigprop.measurement.Recorder``) keep working, resolve
to the objects that do the work, and cost nothing until used."""

import subprocess
import sys

import sigprop


def test_the_public_names_resolve_to_their_defining_objects():
    from sigprop.analysis.comparison import compare
    from sigprop.analysis.diagnosis import diagnose
    from sigprop.core.moments import Moments
    from sigprop.measurement import Recorder
    from sigprop.measurement.hooks import Recorder as HooksRecorder
    from sigprop.measurement.hooks import measure
    from sigprop.model.config import TransformerConfig
    from sigprop.model.transformer import Transformer
    from sigprop.theory.predict import predict

    top = (sigprop.predict, sigprop.measure, sigprop.compare, sigprop.diagnose, sigprop.Moments,
           sigprop.TransformerConfig, sigprop.Transformer)
    assert top == (predict, measure, compare, diagnose, Moments, TransformerConfig, Transformer)
    assert Recorder is HooksRecorder
    assert set(sigprop.__all__) <= set(dir(sigprop))


def test_a_name_the_package_does_not_have_is_an_attribute_error():
    try:
        sigprop.no_such_name  # noqa: B018
    except AttributeError as err:
        assert "no_such_name" in str(err)
    else:
        raise AssertionError("sigprop.no_such_name resolved")


def test_importing_the_package_loads_no_heavy_module():
    code = "import sys, sigprop; print(sorted(m for m in ('torch', 'scipy', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
