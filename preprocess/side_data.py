"""Registry of side-data producers run by ``mdsfair-preprocess --side-data``.

A producer computes one array per cluster from its structure and its encoded
token stream, e.g. a paragraph similarity graph (``paragraph_matrix``) or
dependency arcs (``token`` / ``token_pointer``); see
:mod:`mdsfair.data.side_data` for the kinds and how the task truncates them.

A model issue adds a producer by writing a module in ``preprocess/producers/``::

    @register_side_data_producer("graph_similarity")
    class SimilarityGraph(SideDataProducer):
        spec = SideDataSpec("graph_similarity", "paragraph_matrix", "float64")

        @staticmethod
        def add_args(parser): ...

        def __call__(self, cluster, encoded): return np.ndarray

Producers are built once per worker process from the parsed arguments.
"""

import abc
import argparse
import importlib
import os
from typing import Any, Callable, Dict, Iterable, Sequence, Type

import numpy as np

from mdsfair.data.side_data import SideDataSpec

SIDE_DATA_PRODUCERS: Dict[str, Type["SideDataProducer"]] = {}


class SideDataProducer(abc.ABC):
    """Computes one side-data array per cluster."""

    spec: SideDataSpec

    def __init__(self, args: argparse.Namespace):
        self.args = args

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        """Add the producer's own command-line flags (to a group of their own:
        :func:`producer_argument_group`)."""

    def expect(self, clusters: Sequence) -> None:
        """The clusters (:class:`mdsfair.preprocess.structure.ClusterStructure`)
        this producer is called on next, in order: a producer that works
        faster in batches may prepare them (it must still give every cluster
        the same array as without this call). Default: nothing."""

    @abc.abstractmethod
    def __call__(self, cluster, encoded) -> np.ndarray:
        """Return the array for one cluster (``encoded`` is an
        :class:`mdsfair.preprocess.pipeline.EncodedCluster`)."""


def register_side_data_producer(name: str) -> Callable:
    def wrapper(cls):
        if name in SIDE_DATA_PRODUCERS:
            raise ValueError(f"side-data producer {name!r} registered twice")
        if cls.spec.name != name:
            raise ValueError(f"producer {name!r} declares spec name {cls.spec.name!r}")
        SIDE_DATA_PRODUCERS[name] = cls
        return cls

    return wrapper


def import_producers() -> None:
    """Import every module of :mod:`mdsfair.preprocess.producers` (registration)."""
    directory = os.path.join(os.path.dirname(__file__), "producers")
    for entry in sorted(os.listdir(directory)):
        if entry.endswith(".py") and not entry.startswith("_"):
            importlib.import_module(f"mdsfair.preprocess.producers.{entry[:-3]}")


def producer_argument_group(parser, title: str):
    """Where a producer's ``add_args`` puts its flags: a new group titled
    ``title`` of an :class:`argparse.ArgumentParser`, or ``parser`` itself
    when it is already an argument group (``mdsfair-preprocess`` hands the
    producers its "side data" group; argparse deprecates nested groups since
    Python 3.11)."""
    return parser.add_argument_group(title) if isinstance(parser, argparse.ArgumentParser) else parser


def add_producer_args(parser, producers: Iterable[Type[SideDataProducer]]) -> None:
    """The flags of ``producers`` on ``parser`` (a parser or an argument
    group), each ``add_args`` once (producers of one family share it)."""
    for add_args in dict.fromkeys(producer.add_args for producer in producers):
        add_args(parser)


def producer_defaults(names: Sequence[str]) -> Dict[str, Any]:
    """``{dest: default}`` of the flags of the producers ``names`` (as their
    ``add_args`` declare them; producers of one family share their flags)."""
    parser = argparse.ArgumentParser(add_help=False, conflict_handler="resolve")
    add_producer_args(parser, [SIDE_DATA_PRODUCERS[name] for name in names])
    return vars(parser.parse_args([]))
