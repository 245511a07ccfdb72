"""Typed access to the data files' facts: a number where a formula needs one, a text where a name is needed."""

import pytest

from distlab.core.facts import fact


def test_number_and_text_return_the_data_files_values_unchanged():
    """Would catch an accessor that converts (an int turned float changes a table's "132" into "132.0")."""
    sms = fact("gpus.H100-SXM.sms").number()
    assert sms == 132 and type(sms) is int
    assert fact("gpus.H100-SXM.hbm_tbps").number() == 3.35
    assert fact("gpus.H100-SXM.name").text() == "NVIDIA H100 SXM5 80 GB"


def test_a_fact_of_the_wrong_kind_fails_naming_it():
    """Would catch a text or a yes/no in a data file reaching a formula (a TypeError deep inside it, or True
    counted as 1): the error names the fact and its value."""
    with pytest.raises(TypeError, match=r"gpus\.H100-SXM\.name is 'NVIDIA H100 SXM5 80 GB', not a number"):
        fact("gpus.H100-SXM.name").number()
    with pytest.raises(TypeError, match="not a number"):
        fact("flash_attention.FA2-fig-a100-fwdbwd-hdim64-noncausal.causal").number()
    with pytest.raises(TypeError, match=r"gpus\.H100-SXM\.sms is 132, not a text"):
        fact("gpus.H100-SXM.sms").text()
