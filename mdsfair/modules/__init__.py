"""Reusable attention, pooling and positional-encoding modules. Every module
here is imported so its registrations run: a component module
(``*_components.py``, :func:`mdsfair.modules.components.register_component`)
is a choice of its role's flag as soon as any module of this package is
imported, with no import of it kept by hand elsewhere."""

from mdsfair._autoimport import import_all_submodules

import_all_submodules(__name__, __file__)
