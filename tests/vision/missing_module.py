"""`block_import(monkeypatch, package)`: makes `import package...` fail for one test, as if the
optional package were not installed."""

import builtins


def block_import(monkeypatch, package: str) -> None:
    real_import = builtins.__import__

    def blocked(name, *args, **kwargs):
        if name.split(".")[0] == package:
            raise ImportError(f"No module named {package!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", blocked)
