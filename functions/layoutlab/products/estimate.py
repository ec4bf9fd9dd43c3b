"""What a product costs at archive scale, from what its granules measured.

For ``granules`` granules of ``granule_bytes`` each:

* **the study**: what the product's study granules cost, as measured — their variants' conversions
  (``report/cost.conversion_usd``) and every benchmark case's wall time priced as one Lambda access of
  its platform's memory (``cost.lambda_access_usd``); it is paid once per study round;
* **the conversion of the archive**: the seconds per input byte and the output / input ratio of the
  product's converted production granules (else of the chosen variant in its study), scaled to the archive,
  priced as one invocation per granule on the platform they were converted on; plus one granule in
  ``check_every`` benchmarked again (the study's cases of the original and the chosen variant, per granule);
* **storage** a month: the originals, the converted copies, both.

Figures measured on the local cloud are priced as if on the AWS platform of the same memory: an
extrapolation, said in ``basis``.
"""

from __future__ import annotations

from layoutlab.errors import UserError


def product_estimate(product: dict, granules: list[dict], study_items: dict[str, list[dict]], *, count: int,
                     granule_bytes: int, prices: dict) -> dict:
    """The estimate (see the module docstring). ``granules``: the product's GRANULE items; ``study_items``:
    dataset id -> its items (RUN, VARIANT, RESULT) for each studied granule."""
    from layoutlab.report import cost

    if count < 1 or granule_bytes < 1:
        raise UserError("an archive of at least one granule of at least one byte")
    decision = product.get("decision") or {}
    variant = decision.get("variant")
    if not variant:
        raise UserError(f"product {product['product']!r} has no decision yet: nothing to estimate the conversion of")
    converted = [g for g in granules if g.get("status") in ("CONVERTED", "CHECKED") and g.get("bytes_in")
                 and g.get("convert_s") is not None]
    basis, platform = [], None
    if converted:
        bytes_in = sum(int(g["bytes_in"]) for g in converted)
        seconds_per_byte = sum(float(g["convert_s"]) for g in converted) / bytes_in
        out_ratio = sum(int(g.get("bytes_out") or 0) for g in converted) / bytes_in
        basis.append(f"conversion: {len(converted)} production granules ({bytes_in} bytes in)")
    else:
        made = [i for items in study_items.values() for i in items
                if i.get("kind") == "VARIANT" and i.get("variant") == variant and i.get("status") == "READY"
                and i.get("convert_s") is not None and i.get("source_bytes")]
        if not made and variant != "original":
            raise UserError(f"product {product['product']!r}: no measured conversion of {variant} (no production "
                            f"granule converted, no study variant recorded its time)")
        bytes_in = sum(int(i["source_bytes"]) for i in made) or 1
        seconds_per_byte = sum(float(i["convert_s"]) for i in made) / bytes_in if made else 0.0
        out_ratio = sum(int(i.get("size_bytes") or 0) for i in made) / bytes_in if made else 1.0
        basis.append(f"conversion: {variant} in {len(made)} study granules")
    platform = next((g.get("platform") for g in converted if g.get("platform")), None) or next(
        (i.get("platform") for items in study_items.values() for i in items
         if i.get("kind") == "VARIANT" and i.get("variant") == variant and i.get("platform")), None)

    study_usd, study_cases = 0.0, 0
    check_usd_per_granule = 0.0
    for dataset, items in study_items.items():
        variants = [i for i in items if i.get("kind") == "VARIANT"]
        results = [i for i in items if i.get("kind") == "RESULT"]
        study_usd += sum(cost.conversion_usd(v, prices).get("usd") or 0.0 for v in variants)
        study_usd += cost.cases_usd(results, prices)
        study_cases += len(results)
        check_usd_per_granule += cost.cases_usd([r for r in results if r.get("variant") in ("original", variant)], prices)
    if study_items:
        check_usd_per_granule /= len(study_items)
        basis.append(f"study: {len(study_items)} granules, {study_cases} cases")
    per_granule_s = seconds_per_byte * granule_bytes
    convert_usd = count * cost.one_run_usd(per_granule_s, platform or "lambda-3008", prices) if per_granule_s else 0.0
    checks = count // int(product.get("check_every") or 1)
    archive_bytes = count * granule_bytes
    after_bytes = archive_bytes * out_ratio
    if platform and "local" in platform:
        basis.append(f"measured on {platform}: priced as the AWS platform of the same memory")
    return {
        "product": product["product"], "variant": variant, "granules": count, "granule_bytes": granule_bytes,
        "archive_bytes": archive_bytes,
        "study_usd": study_usd,
        "conversion": {"seconds_per_granule": per_granule_s, "seconds": per_granule_s * count,
                       "usd": convert_usd, "platform": platform, "output_ratio": out_ratio},
        "drift_checks": {"granules": checks, "usd": checks * check_usd_per_granule},
        "storage_usd_per_month": {"originals": cost.storage_usd_per_month(archive_bytes, prices),
                                  "converted": cost.storage_usd_per_month(after_bytes, prices),
                                  "both": cost.storage_usd_per_month(archive_bytes + after_bytes, prices)},
        "total_once_usd": study_usd + convert_usd + checks * check_usd_per_granule,
        "basis": basis, "prices": prices.get("name"),
    }


def render(estimate: dict) -> str:
    c, s = estimate["conversion"], estimate["storage_usd_per_month"]
    return "\n".join([
        f"product {estimate['product']}: {estimate['granules']} granules x {estimate['granule_bytes']} bytes "
        f"= {estimate['archive_bytes'] / 2**30:.3g} GiB, converted to {estimate['variant']}",
        f"  study (once):        ${estimate['study_usd']:.4g}",
        f"  conversion:          ${c['usd']:.4g} ({c['seconds_per_granule']:.3g} s per granule on {c['platform']}, "
        f"{c['seconds'] / 3600:.3g} h of compute; output {c['output_ratio']:.3g}x the input)",
        f"  drift checks:        ${estimate['drift_checks']['usd']:.4g} ({estimate['drift_checks']['granules']} granules)",
        f"  total once:          ${estimate['total_once_usd']:.4g}",
        f"  storage a month:     originals ${s['originals']:.4g}, converted ${s['converted']:.4g}, both ${s['both']:.4g}",
        f"  from: {'; '.join(estimate['basis'])}; prices {estimate['prices']}",
    ])
