"""attnzoo's converters of Keras's classes, one file per family, each converter beside the node it builds.

Importing this package imports every module in it, and each module's ``@keras_layer`` decorators fill the
registry (:mod:`attnzoo.keras.registry`): adding a Keras class is adding (or extending) one file here.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
