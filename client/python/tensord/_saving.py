"""safetensors' own writers, re-exported by tensord.numpy and tensord.torch
(saving a file is local work: tensord has nothing to add to it), found
when first used so that importing tensord never needs safetensors."""
import importlib

_WRITERS = ("save", "save_file", "save_model")


def attribute(module, name, where):
    """The module-level __getattr__ of `where`: safetensors' `module`.name
    for its writers; ModuleNotFoundError naming safetensors when it is not
    installed; AttributeError for anything else."""
    if name not in _WRITERS or (name == "save_model" and not module.endswith("torch")):
        raise AttributeError(f"module {where!r} has no attribute {name!r}")
    try:
        source = importlib.import_module(module)
    except ImportError:
        raise ModuleNotFoundError(f"{where}.{name} is {module}.{name}: install safetensors "
                                  "(pip install safetensors)", name="safetensors") from None
    return getattr(source, name)
