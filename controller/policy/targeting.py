"""What a policy is for: the target it tunes, and the space overrides that apply to some targets only."""

from __future__ import annotations

import fnmatch

from pydantic import BaseModel, Field

from controller.policy.space import _STRICT, GpuFamily, SearchSpace


class Target(BaseModel):
    """What is being tuned. Names match the simulator's profiles when they exist; traits drive constraints
    (unknown traits disable the constraints that need them)."""

    model_config = _STRICT

    model: str | None = Field(default=None, description="model (profile) name")
    gpu: str | None = Field(default=None, description="GPU (profile) name")
    gpu_family: GpuFamily | None = None
    gpu_memory_gib: float | None = Field(default=None, gt=0, description="memory of one GPU")
    gpus: int = Field(default=1, ge=1, le=64, description="GPUs available to one replica")
    hybrid: bool | None = Field(default=None, description="has Mamba layers (hybrid Mamba + attention)")
    has_mtp: bool | None = Field(default=None, description="ships a multi-token-prediction head")


class OverrideWhen(BaseModel):
    """An override applies when every field given matches the target (globs for names)."""

    model_config = _STRICT

    model: list[str] | None = None
    gpu: list[str] | None = None
    gpu_family: list[GpuFamily] | None = None
    hybrid: bool | None = None
    has_mtp: bool | None = None

    def matches(self, t: Target) -> bool:
        if self.model is not None and (t.model is None or not any(fnmatch.fnmatch(t.model, p) for p in self.model)):
            return False
        if self.gpu is not None and (t.gpu is None or not any(fnmatch.fnmatch(t.gpu, p) for p in self.gpu)):
            return False
        if self.gpu_family is not None and t.gpu_family not in self.gpu_family:
            return False
        if self.hybrid is not None and t.hybrid is not self.hybrid:
            return False
        return self.has_mtp is None or t.has_mtp is self.has_mtp


class Override(BaseModel):
    model_config = _STRICT

    when: OverrideWhen
    space: SearchSpace
