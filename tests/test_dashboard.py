"""The placeholder dashboard: Proposition 1 table and clear errors."""

import gradio as gr
import pytest

from rlcd_lab.dashboard import build_demo, proposition1_table


def test_proposition1_table_hand_worked():
    # u rows (0.9,0.1), (0.2,0.8), (0.6,0.4) -> p = (17/30, 13/30); q = (0.7, 0.3)
    # J(p,q) = 2 p.q - ||p||^2 = 2 * 15.8/30 - 458/900 = 0.544444...
    # E_r J(u_r,q) = mean(2*0.66 - 0.82, 2*0.38 - 0.68, 2*0.54 - 0.52) = 0.38
    rows = proposition1_table("0.9,0.1\n0.2,0.8\n0.6,0.4", "0.7,0.3")
    values = [float(v) for _, v in rows]
    assert values[0] == pytest.approx(0.544444, abs=1e-6)
    assert values[1] == pytest.approx(0.38, abs=1e-6)
    assert values[0] == pytest.approx(values[1] + values[2], abs=2e-6)


@pytest.mark.parametrize(
    "readouts,q,msg",
    [
        ("0.5,x", "0.5,0.5", "could not read"),
        ("0.5,0.5", "1,0,0", "same number"),
        ("-1,2", "1,0", "non-negative"),
    ],
)
def test_proposition1_table_errors(readouts, q, msg):
    with pytest.raises(gr.Error, match=msg):
        proposition1_table(readouts, q)


def test_build_demo():
    assert isinstance(build_demo(), gr.Blocks)
