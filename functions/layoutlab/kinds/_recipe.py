"""What the kinds' recipes share: the library versions to install."""

from __future__ import annotations


def installed_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def pins(item: dict, names: tuple[str, ...]) -> str:
    """``pip install "virtualizarr==2.8.0" ...``: the versions the VARIANT item recorded, else those installed
    where this recipe is written (the summary step runs in the pipeline's own image, so they are the ones
    that made the variant there)."""
    recorded = item.get("versions") or (item.get("virtual") or {}).get("versions") or {}
    found, source = [], "recorded with the variant"
    for name in names:
        version = recorded.get(name)
        if version is None:
            version, source = installed_version(name), "as installed where this recipe was written"
        if version:
            found.append(f'"{name}=={version}"')
    return f"pip install {' '.join(found)}  # {source}" if found else ""
