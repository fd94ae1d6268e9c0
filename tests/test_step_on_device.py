"""A training step a GPU need never wait for: no value read back to the host, shapes fixed by the batch's (B, T).

Checked on the CPU by watching every operator the step dispatches: reading a tensor's value on the host
(`.item()`, `float(t)`, `if t:`) dispatches `_local_scalar_dense`, and an operator whose output size depends on
values (a boolean index, `nonzero`, `masked_select`) must read a count back; on CUDA each of these blocks the host
until the GPU catches up.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from electric.modeling import corruption
from electric.pretraining import objectives as obj
from electric.pretraining.config import resolve_config
from electric.pretraining.modeling import PretrainingModel, SpecialIds
from training.schedule import build_optimizer

SPECIAL = SpecialIds(pad=0, mask=4, cls=2, sep=3, vocab_size=300, all_special=(0, 1, 2, 3, 4))
aten = torch.ops.aten
READS_BACK = {aten._local_scalar_dense.default, aten.nonzero.default, aten.masked_select.default,
              aten.is_nonzero.default, aten.unique_consecutive.default, aten._unique2.default}


class HostReads(TorchDispatchMode):
    """Records the operators that read a value back to the host, and boolean indexing (a hidden nonzero)."""

    def __init__(self):
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in READS_BACK:
            self.seen.append(str(func))
        elif func.overloadpacket in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_):
            indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
            if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
                self.seen.append(f"{func} with a boolean index")
        return func(*args, **kwargs)


def config(objective: str):
    """The debug preset at T = 20, without dropout (whose draws come from torch's global generator)."""
    return resolve_config("debug", objective, {"max_seq_length": 20, "hidden_dropout_prob": 0.0,
                                               "attention_probs_dropout_prob": 0.0})


def batch(lengths=(20, 20, 13, 3), T=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, SPECIAL.vocab_size, (len(lengths), T), generator=g)
    am = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        ids[row, 0], ids[row, n - 1], ids[row, n:] = SPECIAL.cls, SPECIAL.sep, SPECIAL.pad
        am[row, :n] = 1
    return ids, am


def test_the_detector_sees_a_boolean_index_and_an_item():
    x = torch.arange(6.0)
    with HostReads() as reads:
        _ = x[x > 2]
        _ = float(x.sum())
    assert any("boolean index" in r for r in reads.seen) and any("_local_scalar_dense" in r for r in reads.seen)


@pytest.mark.parametrize("objective", ["mlm", "electra", "electric"])
def test_a_training_step_reads_nothing_back_to_the_host(objective):
    torch.manual_seed(0)
    model = PretrainingModel(config(objective), SPECIAL).train()
    optimizer = build_optimizer(model, model.cfg)
    ids, am = batch()
    with HostReads() as reads:
        out = model(ids, am, model.draw_noise(ids, torch.Generator().manual_seed(1)))
        out["loss"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    assert reads.seen == []
    assert all(v.dim() == 0 for v in out.values())  # every metric stays a tensor on the device


@pytest.mark.parametrize("objective", ["mlm", "electra", "electric"])
def test_a_steps_shapes_do_not_depend_on_what_it_chose(objective, monkeypatch):
    """Two batches of one (B, T) that choose different numbers of positions run operators of the same shapes, so
    a compiled step or a captured CUDA graph serves every batch."""
    torch.manual_seed(0)
    model = PretrainingModel(config(objective), SPECIAL).train()

    def shapes(lengths):
        seen = []
        model.zero_grad(set_to_none=True)  # each pass creates its gradients rather than adding to the last one's

        class Shapes(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                seen.append((str(func), tuple(o.shape for o in (out if isinstance(out, (tuple, list)) else [out])
                                              if isinstance(o, torch.Tensor))))
                return out

        ids, am = batch(lengths)
        noise = model.draw_noise(ids, torch.Generator().manual_seed(1))
        with Shapes():
            model(ids, am, noise)["loss"].backward()
        return seen

    assert shapes((20, 20, 13, 3)) == shapes((20, 4, 20, 9))


def test_chosen_slots_lists_the_chosen_in_boolean_index_order_then_distinct_fillers():
    chosen = torch.tensor([[False, True, False, True, False],
                           [False, False, False, False, False],
                           [True, False, False, False, True]])
    index, valid = corruption.chosen_slots(chosen, max_predictions=2)
    # rows of 5: the chosen flat positions 1, 3 (row 0) and 10, 14 (row 2) first, as x[chosen] orders them
    assert index[valid].tolist() == [1, 3, 10, 14] == chosen.flatten().nonzero().squeeze(-1).tolist()
    assert valid.tolist() == [True] * 4 + [False] * 2
    assert index[~valid].tolist() == [5, 6]  # row 1's first two positions, unchosen
    assert len(set(index.tolist())) == len(index)
    x = torch.arange(15).view(3, 5) * 10
    assert torch.equal(x.flatten()[index][valid], x[chosen])


def test_replace_at_writes_only_the_valid_slots():
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    index, valid = torch.tensor([2, 0, 4]), torch.tensor([True, False, False])
    out = corruption.replace_at(ids, index, valid, torch.tensor([99, 98, 97]))
    assert out.tolist() == [[2, 10, 99, 12, 3]] and ids.tolist() == [[2, 10, 11, 12, 3]]


def test_mlm_loss_and_accuracy_skip_unused_slots():
    logits = torch.tensor([[0.0, 0.0], [2.0, 0.0], [9.0, -9.0]])
    targets, valid = torch.tensor([0, 0, 1]), torch.tensor([True, True, False])  # the last slot: wrong, unused
    assert obj.mlm_loss(logits, targets, valid).item() == pytest.approx(
        (torch.log(torch.tensor(2.0)) + torch.log1p(torch.exp(torch.tensor(-2.0)))).item() / 2, abs=1e-6)
    assert obj.accuracy(logits, targets, valid).item() == pytest.approx(1.0)  # row 0 ties: argmax takes index 0
    none = torch.zeros(3, dtype=torch.bool)
    assert obj.mlm_loss(logits, targets, none).item() == 0.0 and obj.accuracy(logits, targets, none).item() == 0.0


def test_the_cloze_log_q_takes_a_few_large_blocks_on_a_gpu_and_cache_sized_ones_on_a_cpu():
    cpu = list(obj._blocks(1000, 30522, torch.device("cpu")))
    gpu = list(obj._blocks(16384, 30522, torch.device("meta")))  # any device but the CPU
    assert len(cpu) == 8 and cpu[0] == slice(0, obj.ROW_BLOCK)
    assert len(gpu) == 4 and (gpu[0].stop - gpu[0].start) * 30522 <= obj.GPU_BLOCK_ELEMENTS


@pytest.mark.parametrize("objective", ["mlm", "electra", "electric"])
def test_the_step_compiles_to_one_graph_that_a_new_temperature_never_recompiles(objective):
    """The step is a function of its batch and its draws alone (`draw_noise`, made outside any graph, the sampling
    temperature among them as a 0-d tensor): compiled whole (fullgraph, forward and backward; aot_eager is
    torch.compile's tracing without generating kernels), it runs steps whose temperature changes every time, as a
    --temperature-start schedule's does, on one graph, with eager's losses and gradients."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    cfg = resolve_config("debug", objective, {"max_seq_length": 20, "hidden_dropout_prob": 0.0,
                                              "attention_probs_dropout_prob": 0.0, "temperature_start": 4.0})
    model = PretrainingModel(cfg, SPECIAL).train()
    ids, am = batch()
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)  # fails on a graph break
    for step, temperature in enumerate((4.0, 3.25, 2.5, 1.0)):
        noise = model.draw_noise(ids, torch.Generator().manual_seed(step), temperature)
        eager = model(ids, am, noise)
        eager["loss"].backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        model.zero_grad(set_to_none=True)
        out = compiled(ids, am, noise)
        out["loss"].backward()
        assert out.keys() == eager.keys() and len(grads) > 0
        assert all(out[k].item() == pytest.approx(eager[k].item(), rel=1e-5, abs=1e-6) for k in eager), step
        assert all(torch.allclose(p.grad, grads[n], rtol=1e-4, atol=1e-6) for n, p in model.named_parameters()
                   if p.grad is not None), step
        model.zero_grad(set_to_none=True)
    # compiled once, on the first step: a Python float read inside the step (as the temperature once was) would
    # make a second graph when it changed
    assert counters["stats"]["unique_graphs"] == 1 and counters["aot_autograd"]["total"] == 1


def test_the_temperature_reaches_the_step_as_a_tensor_and_only_through_its_draws():
    torch.manual_seed(0)
    model = PretrainingModel(resolve_config("debug", "electric", {"temperature_start": 2.0}), SPECIAL)
    noise = model.draw_noise(torch.zeros(2, 8, dtype=torch.long), torch.Generator(), 1.75)
    assert noise.temperature.shape == () and noise.temperature.item() == 1.75
    assert not any(isinstance(v, float) for v in vars(model).values())  # no number the loop could set between steps
    fixed = PretrainingModel(resolve_config("debug", "electric"), SPECIAL)  # temperature 1 throughout
    with pytest.raises(ValueError, match="samples at 1 throughout"):
        fixed.draw_noise(torch.zeros(2, 8, dtype=torch.long), torch.Generator(), 2.0)


def test_compile_says_in_one_line_why_it_cannot_or_what_it_costs(monkeypatch, capsys):
    from training.pretrain import compile_refused

    assert not compile_refused(torch.device("cpu"))
    assert capsys.readouterr().err.count("\n") == 1  # on a CPU: it compiles, and says what that costs
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    assert compile_refused(torch.device("cpu"))
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot compile" in err and "uncompiled" in err
