"""Deployment = ModelSpec + Cluster + EngineLaunch: the one object that flows through."""

from __future__ import annotations

from dataclasses import dataclass, field

from servepilot.checkpoint.spec import ModelSpec
from servepilot.engines.launch import EngineLaunch
from servepilot.hardware.cluster import Cluster


@dataclass(frozen=True)
class Deployment:
    launch: EngineLaunch
    cluster: Cluster
    spec: ModelSpec | None  # None when the model path cannot be read here (ssh host, missing)
    notes: tuple[str, ...] = ()  # what could not be known, in words
    extra: dict = field(default_factory=dict)

    @property
    def engine(self) -> str:
        return self.launch.engine

    @property
    def engine_version(self) -> str | None:
        return self.launch.engine_version
