"""mdsfair criterions; every module here is imported so its registrations run."""

from mdsfair._autoimport import import_all_submodules

import_all_submodules(__name__, __file__)
