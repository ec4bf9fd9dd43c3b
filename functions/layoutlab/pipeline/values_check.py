"""Every value read checked equal to the original's: the digests of a study of any file, compared.

A file whose values cannot be regenerated (any product but the two samples) gets the digest of what each
case read in its record (bench/patterns.check_values, after the timed region). Here, at the summary, each
case's digest is compared with the one read from the ``original`` variant for the same pattern and
parameters; the reference is h5py's read of the original (the library that wrote the file's format), else
the first original reader's. A case whose digest differs has ``checksum_ok`` False: it is never ranked
(report/decision.wrong_values) and the summary lists it. Original readers that disagree with the reference
are mismatches too (a reader that decodes the original wrongly is as visible as a wrong layout).

xarray applies the CF conventions its users rely on (scale_factor / add_offset, _FillValue as NaN): its
values are compared with xarray's own read of the original (the reference of the "cf" decoding), every
other reader's with the raw values' reference. The same packed integers decode to float32 from an HDF5
original (float32 attributes) and to float64 from a Zarr or Icechunk copy (JSON numbers): where the decoded
digests differ, the digests of the values packed back into the stored integers (``values_stored_sha256``)
decide, and the summary names those cases as equal stored values decoded at another precision.
"""

from __future__ import annotations

import json

DIGEST = "values_sha256"
STORED_DIGEST = "values_stored_sha256"


def decoding(reader: str | None) -> str:
    """"cf" for a reader that decodes values by the CF conventions (xarray), "raw" for the others."""
    return "cf" if str(reader or "").startswith("xarray") else "raw"


def _key(record: dict) -> tuple:
    return (record.get("platform"), record.get("pattern"), json.dumps(record.get("pattern_params") or {}, sort_keys=True),
            decoding(record.get("reader")))


def _digest(record: dict, which: str = DIGEST) -> str | None:
    return (record.get("result_summary") or {}).get(which)


def _dtypes(record: dict) -> str:
    return "/".join((record.get("result_summary") or {}).get("values_dtypes") or []) or "?"


def check_against_original(results: list[dict]) -> dict:
    """Sets ``checksum_ok`` on each RESULT carrying a digest (True/False; None left when the original has no
    read of that case) and returns the summary's ``values_check``: counts and every mismatch."""
    references: dict[tuple, dict] = {}
    for record in sorted((r for r in results if r.get("variant") == "original" and _digest(r)),
                         key=lambda r: (not str(r.get("reader", "")).startswith("h5py"), str(r.get("reader")),
                                        int(r.get("repetition") or 0))):
        references.setdefault(_key(record), record)
    checked = equal = unchecked = 0
    mismatches, precision = [], []
    for record in results:
        digest = _digest(record)
        if digest is None or record.get("checksum_ok") is not None:
            continue  # no digest (a listing) or already checked against regenerated values (the samples)
        reference = references.get(_key(record))
        if reference is None:
            unchecked += 1
            continue
        checked += 1
        ok = digest == _digest(reference)
        case = {"variant": record.get("variant"), "reader": record.get("reader"), "pattern": record.get("pattern"),
                "platform": record.get("platform"), "reference_reader": reference.get("reader")}
        if not ok and _digest(record, STORED_DIGEST) and _digest(record, STORED_DIGEST) == _digest(reference, STORED_DIGEST):
            ok = True  # the same stored integers, decoded at another precision
            precision.append({**case, "dtypes": _dtypes(record), "reference_dtypes": _dtypes(reference)})
        record["checksum_ok"] = ok
        if ok:
            equal += 1
        else:
            mismatches.append(case)
    if not checked and not unchecked:
        sentence = None
    elif mismatches:
        sentence = (f"{len(mismatches)} of {checked} cases read values different from the original's "
                    f"(not ranked): " + "; ".join(f"{m['pattern']} on {m['variant']} by {m['reader']}"
                                                  for m in mismatches[:5]))
    else:
        sentence = f"Every value read ({checked} cases) was checked equal to the original's."
    if sentence and precision:
        kinds = sorted({f"{p['reader']} on {p['variant']} ({p['dtypes']} where the original gives "
                        f"{p['reference_dtypes']})" for p in precision})
        sentence += (f" {len(precision)} of the equal cases decode the same stored integers at another precision: "
                     + "; ".join(kinds[:5]) + ".")
    if sentence and unchecked:
        sentence += f" {unchecked} cases had no read of the original to compare with."
    return {"checked": checked, "equal": equal, "unchecked": unchecked, "mismatches": mismatches[:50],
            "precision": precision[:50], "sentence": sentence}
