"""Products: granules of one collection, studied once and then converted with the layout chosen.

``signature``: which product a granule is (its structure, or the name its uploader gave);
``state``: the PRODUCT item in the results table (studying -> decided -> production) and one
GRANULE item per granule admitted; ``decision``: the product's decision from its studied
granules' SUMMARY items; ``production``: what the plan step does for a granule of a decided product.
"""
