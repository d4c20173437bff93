"""One base model, one LoRA adapter per (arm, seed index): creation, switching, checkpoints.

Every arm trains a LoRA adapter (``peft``) on the same frozen base policy. All adapters live on
one model and are switched by name, so a 7B base is loaded once however many arms run; the
adapters of seed index ``s`` start from the same weights in every arm (common random numbers):
``lora_A`` is drawn with Kaiming-uniform from the named stream ``arms/lora-init/seed-<s>`` (module
by module, in sorted order) and ``lora_B`` is zero, so every adapter starts as the base policy.

Checkpoints are written by this module, not by ``save_pretrained`` (which records the machine
path of the base model): ``adapter_model.safetensors`` and ``adapter_config.json`` in the layout
``peft.PeftModel.from_pretrained`` loads, with the base model path blanked, and
``optimizer.safetensors`` (with ``optimizer.json``) holding the AdamW moments, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from creditaudit.errors import InputError
from creditaudit.protocol.canonical import canonical_bytes, sha256_bytes
from creditaudit.protocol.seeds import SeedStreams

__all__ = ["LORA_DROPOUT", "TARGET_MODULES", "AdapterBank", "adapter_name", "save_checkpoint", "load_checkpoint"]

LORA_DROPOUT = 0.0
"""No dropout: an update's gradient must not depend on a hidden random draw."""
TARGET_MODULES = "all-linear"
"""Every linear layer of the decoder (attention and MLP projections; not the output head)."""
ADAPTER_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
OPTIMIZER_FILE = "optimizer.safetensors"
OPTIMIZER_GROUPS_FILE = "optimizer.json"


def adapter_name(arm: str, seed_index: int) -> str:
    """The adapter's name on the shared model (``implicit__s0``)."""
    return f"{arm}__s{seed_index}"


class AdapterBank:
    """LoRA adapters on one base policy (an ``HFPolicy`` whose model is wrapped in place).

    Parameters
    ----------
    policy : HFPolicy
        The base policy; its model gains LoRA layers (the policy keeps sampling and scoring
        through whichever adapter is active).
    rank, alpha : int, float
        LoRA rank and alpha.
    protocol_id : str
        Root of the named seed streams.
    """

    def __init__(self, policy: Any, *, rank: int, alpha: float, protocol_id: str):
        from peft import LoraConfig

        self.policy = policy
        self.streams = SeedStreams(protocol_id)
        self.config = LoraConfig(r=int(rank), lora_alpha=float(alpha), lora_dropout=LORA_DROPOUT,
                                 target_modules=TARGET_MODULES, bias="none", task_type="CAUSAL_LM")
        self.peft_model: Any = None
        self.names: list[str] = []

    # ------------------------------------------------------------------ adapters

    def add(self, name: str, seed_index: int) -> None:
        """Add adapter ``name`` initialised from the stream of ``seed_index`` (and activate it)."""
        from peft import get_peft_model

        if name in self.names:
            raise ValueError(f"adapter {name!r} already exists")
        if self.peft_model is None:
            self.peft_model = get_peft_model(self.policy.model, self.config, adapter_name=name)
        else:
            self.peft_model.add_adapter(name, self.config)
        self.names.append(name)
        self._initialise(name, seed_index)
        self.activate(name)

    def _initialise(self, name: str, seed_index: int) -> None:
        import torch

        generator = self.streams.torch_generator(f"arms/lora-init/seed-{seed_index}")
        with torch.no_grad():
            for key, param in self.named_parameters(name):
                if ".lora_A." in key:
                    # drawn on the CPU (the generator's device) in float32, then copied: the same
                    # initial adapter on any device and dtype
                    value = torch.empty(param.shape, dtype=torch.float32)
                    torch.nn.init.kaiming_uniform_(value, a=math.sqrt(5), generator=generator)
                    param.copy_(value.to(param.dtype))
                else:
                    param.zero_()

    def named_parameters(self, name: str) -> list[tuple[str, Any]]:
        """``(key, parameter)`` of adapter ``name`` in sorted key order; keys as peft saves them
        (``base_model.model.<module>.lora_A.weight``)."""
        marker = f".{name}."
        out = []
        for key, param in self.peft_model.named_parameters():
            if "lora_" in key and marker in key:
                out.append((key.replace(marker, "."), param))
        return sorted(out, key=lambda kv: kv[0])

    def activate(self, name: str) -> None:
        """Make ``name`` the adapter every forward pass goes through (only it is trainable)."""
        if name not in self.names:
            raise KeyError(f"no adapter {name!r}")
        self.peft_model.set_adapter(name)
        for key, param in self.peft_model.named_parameters():
            param.requires_grad_("lora_" in key and f".{name}." in key)

    @contextmanager
    def base(self) -> Iterator[None]:
        """Forward passes inside the block go through the base model (adapters disabled)."""
        with self.peft_model.disable_adapter():
            yield

    # ------------------------------------------------------------------ state

    def state(self, name: str) -> dict[str, Any]:
        """A copy of the adapter's tensors by key."""
        return {k: p.detach().cpu().clone() for k, p in self.named_parameters(name)}

    def load_state(self, name: str, state: dict[str, Any], *, source: str = "checkpoint") -> None:
        """Copy ``state`` into adapter ``name``; refuses missing, extra or misshapen tensors."""
        import torch

        params = dict(self.named_parameters(name))
        missing = sorted(set(params) - set(state))
        extra = sorted(set(state) - set(params))
        if missing or extra:
            raise InputError(
                f"{source}: the adapter does not fit the base model (missing {missing[:3]}, unexpected "
                f"{extra[:3]}); it was trained on another base or with another rank — delete it to retrain"
            )
        with torch.no_grad():
            for key, param in params.items():
                value = state[key]
                if tuple(value.shape) != tuple(param.shape):
                    raise InputError(
                        f"{source}: tensor {key} has shape {tuple(value.shape)}, the adapter expects "
                        f"{tuple(param.shape)}; delete the checkpoint to retrain"
                    )
                param.copy_(value.to(param.dtype))

    def digest(self, name: str) -> str:
        """SHA-256 of the adapter's tensors (keys, shapes and bytes): equal digests, equal policies."""
        parts = []
        for key, param in self.named_parameters(name):
            data = param.detach().cpu().contiguous().float().numpy().tobytes()
            parts.append({"key": key, "shape": list(param.shape), "sha256": sha256_bytes(data)})
        return sha256_bytes(canonical_bytes(parts))

    def displacement(self, name: str) -> float:
        """Frobenius norm of the adapter's weight update, ``sqrt(sum_m ||scale_m B_m A_m||^2)``."""
        import torch

        params = dict(self.named_parameters(name))
        scale = self.config.lora_alpha / self.config.r
        total = 0.0
        with torch.no_grad():
            for key, a in params.items():
                if ".lora_A." not in key:
                    continue
                b = params[key.replace(".lora_A.", ".lora_B.")]
                total += float(((b.double() @ a.double()) * scale).pow(2).sum())
        return math.sqrt(total)

    def adapter_config(self) -> dict[str, Any]:
        """The adapter config as peft writes it, without machine paths."""
        data = self.config.to_dict()
        data["base_model_name_or_path"] = None
        data["revision"] = None
        return json.loads(json.dumps(data, default=lambda v: sorted(v) if isinstance(v, set) else str(v)))


# ---------------------------------------------------------------------- checkpoints


def _optimizer_tensors(optimizer: Any, keys: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    state = optimizer.state_dict()
    tensors = {}
    for index, entry in state["state"].items():
        for field, value in entry.items():
            tensors[f"{keys[index]}::{field}"] = value.detach().cpu().clone().contiguous()
    groups = [{k: v for k, v in g.items() if k != "params"} for g in state["param_groups"]]
    return tensors, {"param_groups": groups}


def save_checkpoint(directory: Path, bank: AdapterBank, name: str, optimizer: Any, *, record: dict[str, Any]) -> None:
    """Write adapter ``name``, its optimizer state and ``record`` (``state.json``, written last:
    its presence marks a complete checkpoint)."""
    from safetensors.torch import save

    from creditaudit.artifacts import write_bytes_atomic

    directory.mkdir(parents=True, exist_ok=True)
    keys = [k for k, _ in bank.named_parameters(name)]
    tensors = {k: v.contiguous() for k, v in bank.state(name).items()}
    write_bytes_atomic(directory / ADAPTER_FILE, save(tensors, metadata={"format": "pt"}))
    write_bytes_atomic(directory / CONFIG_FILE, json.dumps(bank.adapter_config(), indent=2, sort_keys=True).encode() + b"\n")
    opt_tensors, opt_meta = _optimizer_tensors(optimizer, keys)
    # safetensors writes its metadata map in hash order: one key only, so the bytes are stable;
    # the parameter groups go to a JSON file of their own
    write_bytes_atomic(directory / OPTIMIZER_FILE, save(opt_tensors, metadata={"format": "pt"}))
    write_bytes_atomic(directory / OPTIMIZER_GROUPS_FILE, canonical_bytes(opt_meta) + b"\n")
    write_bytes_atomic(directory / "state.json", canonical_bytes(record) + b"\n")


def load_checkpoint(directory: Path, bank: AdapterBank, name: str, optimizer: Any) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint` into adapter ``name`` and ``optimizer``;
    returns its record.

    Raises
    ------
    InputError
        Naming the file, when any part is missing, unreadable, or does not fit the base model.
    """
    from safetensors.torch import load_file

    record_path = directory / "state.json"
    try:
        record = json.loads(record_path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{record_path}: unreadable checkpoint record ({exc}); delete {directory} to retrain it") from None
    try:
        tensors = load_file(str(directory / ADAPTER_FILE))
    except Exception as exc:  # safetensors raises its own error types
        raise InputError(
            f"{directory / ADAPTER_FILE}: the checkpoint fails to load ({exc.__class__.__name__}: {exc}); delete "
            f"{directory} and rerun `creditaudit arms` to retrain this arm from its previous checkpoint"
        ) from None
    bank.load_state(name, tensors, source=str(directory / ADAPTER_FILE))
    keys = [k for k, _ in bank.named_parameters(name)]
    try:
        opt_tensors = load_file(str(directory / OPTIMIZER_FILE))
        meta = json.loads((directory / OPTIMIZER_GROUPS_FILE).read_text("utf-8"))
    except Exception as exc:
        raise InputError(
            f"{directory / OPTIMIZER_FILE}: the optimizer state fails to load ({exc.__class__.__name__}: {exc}); "
            f"delete {directory} to retrain this arm from its previous checkpoint"
        ) from None
    index = {k: i for i, k in enumerate(keys)}
    state: dict[int, dict[str, Any]] = {}
    for flat, value in opt_tensors.items():
        key, field = flat.rsplit("::", 1)
        if key not in index:
            raise InputError(f"{directory / OPTIMIZER_FILE}: state of unknown parameter {key}; delete {directory}")
        state.setdefault(index[key], {})[field] = value
    groups = meta["param_groups"]
    if len(groups) != 1:
        raise InputError(f"{directory / OPTIMIZER_FILE}: expected one parameter group, found {len(groups)}")
    optimizer.load_state_dict({"state": state, "param_groups": [{**groups[0], "params": list(range(len(keys)))}]})
    return record
